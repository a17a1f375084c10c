"""Counters that change on every call (issue 22): `self.step += 1`, `self.calls += 1`, a float
accumulated per call. The first call captures them as constants; once a call finds another
number there, the next capture takes it per call (a scalar input of the graph, written back
after it), so 20 calls compile at most twice instead of recompiling until the cache limit. A
counter that steers control flow keeps its guard by value (each value its own entry)."""

import torch
from helpers import counters
from torch import nn

import torchlite


def _run(model, eager, calls=20, make=lambda: torch.randn(3, 3)):
    compiled = torchlite.compile(model)
    before = counters()
    for i in range(calls):
        x = make()
        torch.testing.assert_close(compiled(x), eager(x), msg=lambda m, i=i: f"call {i}: {m}")
    after = counters()
    return {k: after[k] - before[k] for k in ("frames", "graphs", "recompiles", "eager_fallbacks")}


class _Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.step += 1
        return self.lin(x) * self.step


def test_counter_used_in_tensor_math_compiles_at_most_twice():
    model, eager = _Step(), _Step()
    eager.load_state_dict(model.state_dict())
    d = _run(model, eager)
    assert d["frames"] <= 2 and d["eager_fallbacks"] == 0, d
    assert model.step == eager.step == 20 and type(model.step) is int


class _Calls(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x.relu() * 2


def test_counter_only_written_back_compiles_at_most_twice():
    model, eager = _Calls(), _Calls()
    d = _run(model, eager)
    assert d["frames"] <= 2 and d["eager_fallbacks"] == 0, d
    assert model.calls == eager.calls == 20 and type(model.calls) is int


class _Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0
        self.n = 3

    def forward(self, x):
        self.scale = self.scale * 0.5 + 0.25
        self.n = 2 * self.n - 1
        return x * self.scale - self.n


def test_float_and_int_arithmetic_written_back_matches_eager():
    model, eager = _Decay(), _Decay()
    d = _run(model, eager, calls=12)
    assert d["frames"] <= 2 and d["eager_fallbacks"] == 0, d
    assert model.scale == eager.scale and type(model.scale) is float
    assert model.n == eager.n and type(model.n) is int


class _Warmup(nn.Module):
    """The counter decides a branch: its value stays guarded (one entry per branch outcome)."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        self.step += 1
        if self.step < 3:
            return x * 0
        return x * self.step


def test_counter_steering_a_branch_keeps_its_guard_and_eagers_values():
    model, eager = _Warmup(), _Warmup()
    d = _run(model, eager, calls=6)
    assert model.step == eager.step == 6
    assert d["eager_fallbacks"] == 0 or d["recompiles"] >= 1, d


def test_a_counter_changed_by_the_user_between_calls_is_read_per_call():
    model, eager = _Step(), _Step()
    eager.load_state_dict(model.state_dict())
    compiled = torchlite.compile(model)
    for i in range(6):
        if i == 4:
            model.step = eager.step = 100
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x), eager(x))
    assert model.step == eager.step == 102


class _DividesByStep(nn.Module):
    """`1.0 / (1 + step)` reads the counter as a constant (a division by a per-call number is
    not taken per call: CPython raises for 0): a number computed from it earlier in the trace
    (the running average) becomes a constant too, never a graph input without a tensor."""

    def __init__(self):
        super().__init__()
        self.num_steps = 0
        self.ema = 0.0

    def forward(self, x):
        self.num_steps += 1
        self.ema = 0.9 * self.ema + 0.1 * self.num_steps
        return x * (1.0 / (1 + self.num_steps)) + self.ema


def test_counter_read_as_a_constant_after_a_number_computed_from_it_matches_eager():
    model, eager = _DividesByStep(), _DividesByStep()
    _run(model, eager, calls=5)
    assert model.num_steps == eager.num_steps == 5 and model.ema == eager.ema
