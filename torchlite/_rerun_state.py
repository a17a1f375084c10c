"""The state a graph's random draws and grad-mode switches change, saved before the graph runs
and put back when it raises, so the frame runs eagerly from its start as if the graph had not
run (csrc/frame/captured_frame.cpp, ir::undoable_effect)."""

import torch


def _generators(devices: tuple) -> list:
    gens = [torch.default_generator]
    for d in devices:
        d = torch.device(d)
        if d.type == "cuda":
            index = d.index if d.index is not None else torch.cuda.current_device()
            gens.append(torch.cuda.default_generators[index])
    return gens


def save(devices: tuple) -> list:
    """The states of the CPU generator and of the default generators of `devices`' CUDA
    devices, and the grad mode."""
    return [torch.is_grad_enabled(), *((g, g.get_state()) for g in _generators(devices))]


def restore(saved: list) -> None:
    torch._C._set_grad_enabled(saved[0])
    for g, state in saved[1:]:
        g.set_state(state)
