"""Guards and capture: one tensor passed under two names (f(t, t), tied weights)."""

import logging

import torch
from helpers import assert_counters_delta, assert_same, counters
from torch import nn

import torchlite
from torchlite import config


def _is_or_not(a, b):
    return a + 1 if a is b else a - 1


def test_is_between_aliased_inputs_is_true_as_in_eager():
    fn = torchlite.compile(_is_or_not)
    t = torch.zeros(3)
    assert_same(fn(t, t), _is_or_not(t, t))
    u = torch.zeros(3)
    assert_same(fn(t, u), _is_or_not(t, u))


def test_in_place_op_through_one_name_is_seen_through_the_other():
    def h(a, b):
        a.add_(1)
        return b * 2

    fn = torchlite.compile(h)
    t, ref = torch.zeros(3), torch.zeros(3)
    assert_same(fn(t, t), h(ref, ref))
    assert_same(t, ref)


def test_alias_pattern_change_recompiles_and_each_pattern_is_cached(monkeypatch, caplog):
    monkeypatch.setattr(config, "logs", "recompiles,guards")
    fn = torchlite.compile(_is_or_not)
    t, u = torch.zeros(3), torch.zeros(3)
    with caplog.at_level(logging.INFO, logger="torchlite"):
        before = counters()
        assert_same(fn(t, u), _is_or_not(t, u))
        assert_counters_delta(before, counters(), graphs=1, recompiles=0)
        before = counters()
        assert_same(fn(t, t), _is_or_not(t, t))
        assert_counters_delta(before, counters(), graphs=1, recompiles=1)
        before = counters()
        assert_same(fn(u, t), _is_or_not(u, t))
        assert_same(fn(u, u), _is_or_not(u, u))
        assert_counters_delta(before, counters(), graphs=0, recompiles=0, cache_hits=2)
    messages = [r.getMessage() for r in caplog.records]
    assert any("distinct: L['a'], L['b']" in m for m in messages), messages
    assert any("L['a'] is L['b']" in m and "[guards]" in m for m in messages), messages
    assert any(
        "[recompiles]" in m and "were distinct tensors at trace time, now the same" in m
        for m in messages
    ), messages


def test_list_items_that_are_one_tensor_are_one_input():
    def f(xs):
        xs[0].mul_(2)
        return xs[1] + 1

    fn = torchlite.compile(f)
    t, ref = torch.ones(4), torch.ones(4)
    assert_same(fn([t, t]), f([ref, ref]))
    assert_same(t, ref)
    a, b, ra, rb = torch.ones(4), torch.ones(4), torch.ones(4), torch.ones(4)
    assert_same(fn([a, b]), f([ra, rb]))
    assert_same(a, ra)


class _Tied(nn.Module):
    """GPT-2 style: the output projection shares the embedding's weight."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        h = self.wte(idx)
        return self.lm_head(h) + (self.wte.weight is self.lm_head.weight)


def test_tied_weights_are_one_input_and_one_graph():
    torch.manual_seed(0)
    m = _Tied()
    fn = torchlite.compile(m)
    idx = torch.tensor([1, 2, 3])
    with torch.no_grad():
        before = counters()
        assert_same(fn(idx), m(idx))
        assert_counters_delta(before, counters(), graphs=1, recompiles=0)
        m.wte.weight.add_(0.5)  # through one name, seen through the other
        before = counters()
        assert_same(fn(idx), m(idx))
        assert_counters_delta(before, counters(), graphs=0, recompiles=0)
