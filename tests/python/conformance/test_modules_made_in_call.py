"""nn.Modules built inside the compiled call and live at a graph break (issue 22): `act =
nn.GELU()` before a print, a break inside the forward of a module built per call, a Sequential
of Linears built per call. The code after the break gets a new copy of the module the trace
built on every call (as eager builds a new one), guarded by type and the attributes it reads,
not by identity: a second identical call hits the cache. Modules holding parameters made in the
call keep their draws in eager code (never constants of a graph).

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import pytest
import torch
from conformance_check import check_captured_program, opaque, t43
from torch import nn

import torchlite


def run(fn, make_args=t43, **options):
    return check_captured_program(fn, make_args, **options)


def test_activation_built_in_forward_called_after_a_break():
    def fn(x):
        act = nn.GELU(approximate="tanh")
        y = act(x)
        opaque()
        return act(y) + 1

    run(fn, breaks=1)


def test_attributes_of_a_module_built_in_forward_read_and_written_after_a_break():
    def fn(x):
        sm = nn.Softmax(dim=-1)
        opaque()
        out = sm(x) * sm.dim
        sm.dim = 0
        return out + sm(x), sm.dim, type(sm).__name__

    run(fn, breaks=1)


class _Counts(nn.Module):
    """A module with a Python __init__ of its own, a submodule and a bound-method attribute."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.calls = 0
        self.act = nn.SiLU()
        self.impl = self._impl

    def _impl(self, x):
        return self.act(x) * self.scale

    def forward(self, x):
        self.calls += 1
        return self.impl(x)


def test_state_written_after_the_break_starts_afresh_on_every_call():
    # NOTE: eager's module is new on every call: calls is 1 after the break, never 2, 3...
    def fn(x):
        m = _Counts(2.0)
        opaque()
        y = m(x)
        return y + m.calls, m.calls, m.impl.__self__ is m, m.act is m.impl.__self__.act

    run(fn, breaks=1)


class _BreaksInside(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        x = x * self.p
        opaque()
        return x + 1


def test_break_inside_the_forward_of_a_module_built_per_call():
    def fn(x):
        return _BreaksInside(3)(x) * 2

    run(fn, breaks=1)


def test_break_inside_a_module_built_per_call_and_kept_in_a_local():
    def fn(x):
        m = _BreaksInside(0.5)
        y = m(x)
        return m(y) - m.p

    run(fn, breaks=2)


@pytest.mark.xfail(
    strict=True,
    reason="open: the per-call Linear's reset_parameters frame is captured again each call. "
    "Guarding it by structure once its modules die (the entry reaper setting fresh_objects) "
    "left entries of dropped models' compile() calls on the shared forward for good "
    "(test_jit_memory: 1, 2, 3, ... entries, up to the 256-entry cap, then eager)",
)
def test_sequential_of_linears_built_per_call_draws_its_parameters_each_call():
    # NOTE: eager draws new parameters on every call; the seed makes them equal to compiled's.
    def fn(x):
        seq = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
        y = seq(x)
        opaque()
        return seq(x) + y, seq[0].weight.sum()

    run(fn, breaks=None, stable=False)
    # NOTE: Linear.__init__ breaks (nn.Parameter) and runs eagerly, calling reset_parameters,
    # a frame of its own: first captured for the one Linear it saw; once that Linear is freed,
    # captured again guarding modules by structure. From the third call on, nothing new.
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for call in range(5):
        torch.manual_seed(call)
        x = torch.randn(4, 3)
        torch.manual_seed(7)
        expected = fn(x)
        torch.manual_seed(7)
        actual = compiled(x)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
        if call == 1:
            before = dict(torchlite.counters())
    after = dict(torchlite.counters())
    for key in ("frames", "graphs", "recompiles", "eager_fallbacks"):
        assert after[key] == before[key], f"{key}: {before[key]} -> {after[key]}"


def test_module_built_per_call_returned_is_a_new_one_each_call():
    compiled = torchlite.compile(lambda x: (nn.Tanh(), x * 2))
    first, _ = compiled(torch.randn(3))
    second, y = compiled(torch.randn(3))
    assert isinstance(second, nn.Tanh)
    assert first is not second
    torch.testing.assert_close(second(y), torch.tanh(y))


@pytest.mark.parametrize("cls", [nn.ReLU, nn.Hardswish, nn.Identity])
def test_activation_class_chosen_by_an_argument_live_at_a_break(cls):
    def fn(x):
        act = cls()
        opaque()
        return act(x) * 2

    run(fn, breaks=1)
