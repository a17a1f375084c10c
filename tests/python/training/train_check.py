"""One helper for training parity: run the same model eagerly and compiled for a few optimizer
steps and compare losses, parameters, gradients and buffers."""

from __future__ import annotations

import contextlib
import copy

import torch

import torchlite


def _named(what: str):
    return lambda message: f"{what}: {message}"


def _autocast(device: str, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=dtype)


def _tensors(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "logits"):
        return [out.logits]
    return [o for o in out if isinstance(o, torch.Tensor)] if isinstance(out, tuple) else []


def allocation_events(prof) -> list:
    """A CPU profile's allocation events (frees carry negative sizes), in time order."""
    from torch._C._profiler import _EventType

    def walk(nodes):
        for n in nodes:
            yield n
            yield from walk(n.children)

    tree = prof.profiler.kineto_results.experimental_event_tree()
    events = [n for n in walk(tree) if n.tag == _EventType.Allocation]
    events.sort(key=lambda n: n.start_time_ns)
    return events


def in_compiled_backward(event) -> bool:
    """Whether a profiler event ran inside torchlite's compiled backward."""
    while event is not None:
        if event.name == "CompiledTrainingBackward":
            return True
        event = event.parent
    return False


def compiled_backward_used(out: torch.Tensor) -> bool:
    """True when `out` came from torchlite's compiled forward (its grad_fn is the link)."""
    return out.grad_fn is not None and "CompiledTraining" in type(out.grad_fn).__name__


def train_parity(
    model: torch.nn.Module,
    make_inputs,
    loss_fn=lambda out: out.float().square().mean(),
    *,
    optimizer: str = "sgd",
    steps: int = 3,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    autocast: torch.dtype | None = None,
    seed_each_step: bool = False,
) -> torch.Tensor:
    """Trains a copy of `model` eagerly and another compiled for `steps` steps on the same
    inputs, checking each loss, then every gradient, parameter and buffer. Returns the last
    compiled output (so callers can check the compiled path ran).

    NOTE: AdamW divides each gradient by its running RMS, so a gradient that is zero in exact
    arithmetic (a bias before batch norm, a key bias before softmax) turns rounding noise into
    full-size steps; compare AdamW runs in float64, where that noise stays far below eps.
    """
    model = model.to(device=device, dtype=dtype)
    eager = copy.deepcopy(model)
    compiled_model = copy.deepcopy(model)
    compiled = torchlite.compile(compiled_model)

    def opt(m):
        if optimizer == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        return torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)

    opt_e, opt_c = opt(eager), opt(compiled_model)
    out_c = None
    for step in range(steps):
        inputs = [
            i.to(device=device, dtype=dtype) if i.is_floating_point() else i.to(device)
            for i in make_inputs()
        ]
        with _autocast(device, autocast):
            if seed_each_step:  # NOTE: random ops (dropout) then draw the same in both runs
                torch.manual_seed(1000 + step)
            out_e = eager(*inputs)
            if seed_each_step:
                torch.manual_seed(1000 + step)
            out_c = compiled(*inputs)
        for e, c in zip(_tensors(out_e), _tensors(out_c), strict=True):
            assert c.dtype == e.dtype, f"output dtype, step {step}: {c.dtype} != {e.dtype}"
        loss_e, loss_c = loss_fn(out_e), loss_fn(out_c)
        torch.testing.assert_close(
            loss_c, loss_e, rtol=rtol, atol=atol, msg=_named(f"loss, step {step}")
        )
        opt_e.zero_grad()
        opt_c.zero_grad()
        loss_e.backward()
        loss_c.backward()
        named_c = dict(compiled_model.named_parameters())
        for name, p in eager.named_parameters():
            q = named_c[name]
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                torch.testing.assert_close(
                    q.grad, p.grad, rtol=rtol, atol=atol, msg=_named(f"grad of {name}, step {step}")
                )
        opt_e.step()
        opt_c.step()
    named_c = dict(compiled_model.named_parameters())
    for name, p in eager.named_parameters():
        torch.testing.assert_close(named_c[name], p, rtol=rtol, atol=atol, msg=_named(name))
    buffers_c = dict(compiled_model.named_buffers())
    for name, b in eager.named_buffers():
        torch.testing.assert_close(buffers_c[name], b, rtol=rtol, atol=atol, msg=_named(name))
    return out_c
