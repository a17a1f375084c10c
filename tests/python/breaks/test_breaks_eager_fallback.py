"""A frame that breaks again and again with tiny graphs between the breaks runs eagerly
(issue 22 item 5): an RNN cell stepped in a Python loop with a break in every step would
otherwise run hundreds of one-op graphs through bridges and resume functions, slower than
eager. `explain` says so; a frame with few breaks or real graphs between them stays compiled."""

import torch
from helpers import assert_counters_delta, assert_same, at_least, counters

import torchlite


def _rnn_with_break_each_step(x, h):
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + h)
        print(end="")  # a graph break in every step
    return h


def test_many_breaks_with_tiny_graphs_run_the_frame_eagerly():
    compiled = torchlite.compile(_rnn_with_break_each_step)
    x, h = torch.randn(12, 4), torch.randn(4)
    assert_same(compiled(x, h), _rnn_with_break_each_step(x, h))
    before = counters()
    for _ in range(2):
        x, h = torch.randn(12, 4), torch.randn(4)
        assert_same(compiled(x, h), _rnn_with_break_each_step(x, h))
    # Eager from the second call: nothing captured, no graph run, no break taken.
    assert_counters_delta(before, counters(), frames=0, graphs=0, graph_breaks=0, cache_hits=0)


def test_explain_names_the_frame_that_runs_eagerly():
    report = torchlite.explain(_rnn_with_break_each_step)(torch.randn(12, 4), torch.randn(4))
    assert any(e.startswith("_rnn_with_break_each_step: ") for e in report.eager_frames), str(
        report
    )
    assert "Frames run eagerly:" in str(report)
    assert "graph breaks with" in str(report)


def _two_breaks(x):
    y = x.sin() * 2
    print(end="")
    z = y.cos() + 1
    print(end="")
    return z * y


def test_frame_with_few_breaks_stays_compiled():
    compiled = torchlite.compile(_two_breaks)
    x = torch.randn(4)
    compiled(x)
    before = counters()
    x = torch.randn(4)
    assert_same(compiled(x), _two_breaks(x))
    assert_counters_delta(before, counters(), frames=0, cache_hits=at_least(3))
    assert torchlite.explain(_two_breaks)(x).eager_frames == []


def _big_graphs_between_breaks(x):
    for _ in range(5):
        x = ((x.sin() * 2 + 1).cos() - x).relu() * 0.5 + x.tanh()
        print(end="")
    return x


def test_breaks_with_real_graphs_between_them_stay_compiled():
    report = torchlite.explain(_big_graphs_between_breaks)(torch.randn(4))
    assert report.eager_frames == [], str(report)
