"""Side effects of compiled calls leave the same state as eager (graph breaks allowed).

Each test runs eager and compiled from the same initial state and compares the state after
every call; the second compiled call exercises the cached path, which must replay the effects.
"""

import torch
from helpers import assert_same, clone_args
from torch import nn

import torchlite

LOG = []
STEP = 0
STATE = {"calls": 0}


class _Box:
    def __init__(self):
        self.value = None
        self.count = 0


BOX = _Box()


def _append_global(x):
    y = x * 2
    LOG.append(y)
    LOG.append(x.sum())
    return y + 1


def _write_global(x):
    global STEP
    STEP = STEP + 1
    return x * STEP


def _mutate_global_dict(x):
    STATE["calls"] += 1
    STATE["last"] = x + 1
    return x - STATE["calls"]


def _set_attribute(x):
    BOX.value = x.relu()
    BOX.count += 1
    return BOX.value * BOX.count


def _run_both(fn, x, reset_state, read_state, calls=2):
    """Runs eager then compiled from the same initial state, comparing state after each call."""
    compiled = torchlite.compile(fn, fullgraph=False)
    states = {}
    for name, runner in (("eager", fn), ("compiled", compiled)):
        reset_state()
        outs, snaps = [], []
        for _ in range(calls):
            outs.append(runner(clone_args(x)))
            snaps.append(read_state())
        states[name] = (outs, snaps)
    assert_same(states["compiled"][0], states["eager"][0], path="outputs")
    assert_same(states["compiled"][1], states["eager"][1], path="state")


def test_append_to_global_list_leaves_same_state():
    def reset():
        LOG.clear()

    _run_both(_append_global, torch.randn(3), reset, lambda: list(LOG))


def test_global_statement_write_leaves_same_state():
    def reset():
        global STEP
        STEP = 0

    _run_both(_write_global, torch.randn(3), reset, lambda: STEP)


def test_global_dict_mutation_leaves_same_state():
    def reset():
        STATE.clear()
        STATE["calls"] = 0

    _run_both(_mutate_global_dict, torch.randn(3), reset, lambda: dict(STATE))


def test_attribute_set_on_object_leaves_same_state():
    def reset():
        BOX.value, BOX.count = None, 0

    _run_both(_set_attribute, torch.randn(3), reset, lambda: (BOX.value, BOX.count))


def test_mutating_list_and_dict_arguments_matches_eager():
    def fn(x, acc, cache):
        acc.append(x * 3)
        cache["k"] = x.sum()
        cache.pop("drop", None)
        return len(acc)

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    for _ in range(2):
        acc_e, cache_e = [torch.ones(1)], {"drop": 1}
        acc_c, cache_c = [torch.ones(1)], {"drop": 1}
        assert_same(compiled(x, acc_c, cache_c), fn(x, acc_e, cache_e))
        assert_same(acc_c, acc_e)
        assert_same(cache_c, cache_e)


class _Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        self.last = y.detach()
        return y * self.calls


def test_module_attribute_mutation_in_forward_matches_eager():
    m = _Counting()
    e = _Counting()
    e.load_state_dict(m.state_dict())
    compiled = torchlite.compile(m)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert_same(compiled(x), e(x))
        assert m.calls == e.calls
        assert_same(m.last, e.last)


def test_inplace_update_of_module_buffer_matches_eager():
    class Ema(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("avg", torch.zeros(3))

        def forward(self, x):
            self.avg.mul_(0.9).add_(x.mean(0), alpha=0.1)
            return x - self.avg

    m, e = Ema(), Ema()
    compiled = torchlite.compile(m, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4, 3)
        assert_same(compiled(x), e(x))
        assert_same(m.avg, e.avg)
