"""The STORAGE_ALIASING guard (guards/storage_aliasing.h) is made only for a graph that writes one
of the arguments it would check: a graph that writes none of them (no_grad(), a module buffer
updated in forward) gives the same answer however its arguments share memory, and must not pay
for the guard or recompile when they do. A graph that does write an argument still recompiles
for a new aliasing. Every call is checked against eager."""

import pytest
import torch
from helpers import assert_counters_delta, assert_same, counters
from torch import nn

import torchlite


def _distinct():
    return torch.randn(6), torch.randn(6)


def _same():
    t = torch.randn(6)
    return t, t


def _overlapping():
    t = torch.randn(7)
    return t[:6], t[1:]


_ALIASINGS = (_distinct, _same, _overlapping)


def _reads_under_no_grad(a, b):
    with torch.no_grad():
        return (a + 1) * b - a


class _CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, a, b):
        self.calls.add_(1)  # NOTE: reached through an attribute: not an argument the guard checks
        return a * b + self.calls


def _no_grad():
    return torchlite.compile(_reads_under_no_grad), _reads_under_no_grad, lambda: None


def _module_buffer():
    model, expected = _CountsCalls(), _CountsCalls()
    return torchlite.compile(model), expected, lambda: assert_same(model.calls, expected.calls)


@pytest.mark.parametrize("setup", [_no_grad, _module_buffer], ids=["no_grad", "module_buffer"])
def test_a_graph_writing_none_of_its_arguments_ignores_their_aliasing(setup):
    compiled, eager, check_state = setup()
    a, b = _distinct()
    assert_same(compiled(a, b), eager(a, b))
    before = counters()
    for make in _ALIASINGS:
        a, b = make()
        assert_same(compiled(a, b), eager(a, b), path=make.__name__)
    assert_counters_delta(before, counters(), frames=0, recompiles=0)
    check_state()


def _writes_through_views(a, b):
    a[1:3].add_(b[:2]).mul_(2)
    return a + b


def _writes_through_a_broadcast(a, b):
    # NOTE: the written tensor is a view of b reached through an op with two tensor operands
    torch.broadcast_tensors(a + 1, b)[1].add_(1)
    return a * b


def _outcome(fn, args):
    try:
        return fn(*args)
    except RuntimeError as e:  # NOTE: eager refuses a write whose operand overlaps it
        return str(e)


def test_a_graph_writing_an_argument_stays_right_for_every_aliasing():
    for fn in (_writes_through_views, _writes_through_a_broadcast):
        compiled = torchlite.compile(fn)
        for make in _ALIASINGS + _ALIASINGS[::-1]:
            torch.manual_seed(0)
            got = _outcome(compiled, make())
            torch.manual_seed(0)
            assert_same(got, _outcome(fn, make()), path=f"{fn.__name__} {make.__name__}")
