"""The state a graph's random draws and grad-mode switches change, saved before the graph runs
and put back when it raises, so the frame runs eagerly from its start as if the graph had not
run (csrc/frame/captured_frame.cpp, ir::undoable_effect).

NOTE: `save` runs before every call of such a graph: the CPU generator's state is a 5 KB copy
(about 1 us); CUDA generators are read only for graphs that draw on CUDA."""

import torch

_CPU = torch.default_generator
_is_grad_enabled = torch.is_grad_enabled


def _cuda_generators(devices: tuple) -> list:
    gens = []
    for d in devices:
        index = d.index if d.index is not None else torch.cuda.current_device()
        gens.append(torch.cuda.default_generators[index])
    return gens


def save(devices: tuple) -> tuple:
    """The grad mode and the states of the CPU generator and of the default generators of
    `devices` (CUDA devices): (grad mode, generator, state, generator, state, ...)."""
    if not devices:
        return (_is_grad_enabled(), _CPU, _CPU.get_state())
    saved = [_is_grad_enabled(), _CPU, _CPU.get_state()]
    for g in _cuda_generators(devices):
        saved += [g, g.get_state()]
    return tuple(saved)


def restore(saved: tuple) -> None:
    torch._C._set_grad_enabled(saved[0])
    for k in range(1, len(saved), 2):
        saved[k].set_state(saved[k + 1])
