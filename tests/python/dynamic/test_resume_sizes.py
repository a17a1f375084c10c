"""Dynamic shapes across a graph break (docs/internals/dynamic-shapes.md): once a frame is
dynamic, the graph before a break serves every size from one entry (size-generic, like a frame
without a break) and the resume function, a frame of its own, does the same: a sweep of sizes
captures each of them twice, not once per size. A size value handed to CPython at the break is
a plain number, guarded: a size where it differs captures again. Every size is checked against
eager."""

import pytest
import torch

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

SIZES = [5, 9, 17, 3, 40, 11, 64, 7, 33, 2]


def _sweep(fn, make_args, sizes, **kw):
    """Runs `fn` compiled at each size against eager; returns the captures per call."""
    compiled = torchlite.compile(fn, **kw)
    frames = []
    for n in sizes:
        args = make_args(n)
        before = torchlite.counters()["frames"]
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
        frames.append(torchlite.counters()["frames"] - before)
    return frames


def _break_between_graphs(x):
    y = (x * 2 + 1).relu()
    print(end="")  # a graph break
    return y.softmax(-1) + x.sum(-1, keepdim=True)


def _print_between_graphs(x, w):
    h = torch.tanh(x @ w)
    print(end="")
    return (h * h).sum(-1)


def _size_read_before_the_break(x):
    y = x.view(x.size(0), x.size(1), 1).exp()
    print(end="")  # a graph break
    return y.sum(1) * 2


def _size_local_crosses_the_break(x):
    t = x.size(1)
    y = x * 2
    print(end="")  # a graph break
    return y + t  # t must be this call's length


def test_a_break_in_a_dynamic_frame_captures_each_side_twice():
    frames = _sweep(_break_between_graphs, lambda n: (torch.randn(3, n),), SIZES)
    # The frame, then its resume function: each at the first size, and once more at the second.
    assert frames[:2] == [2, 2], frames
    assert frames[2:] == [0] * (len(SIZES) - 2), frames


def test_a_print_between_two_graphs_captures_each_side_twice():
    w = torch.randn(8, 6)
    frames = _sweep(_print_between_graphs, lambda n: (torch.randn(n, 8), w), SIZES)
    assert sum(frames) == 4, frames


def test_sizes_read_before_the_break_stay_symbolic():
    frames = _sweep(_size_read_before_the_break, lambda n: (torch.randn(2, n),), SIZES)
    assert sum(frames) == 4, frames


def test_a_size_handed_to_the_resume_function_is_guarded():
    # t reaches CPython as a number: the graph before the break holds only where t is the same,
    # so every new length captures again (never this call's t at another length).
    sizes = [5, 9, 17, 9, 5]
    frames = _sweep(_size_local_crosses_the_break, lambda n: (torch.randn(3, n),), sizes)
    assert frames[3:] == [0, 0], frames


def test_dynamic_false_captures_every_size():
    frames = _sweep(
        _break_between_graphs, lambda n: (torch.randn(3, n),), [4, 8, 13], dynamic=False
    )
    assert frames == [2, 2, 2], frames


def test_dynamic_true_captures_each_side_once():
    frames = _sweep(_break_between_graphs, lambda n: (torch.randn(3, n),), [4, 8, 13], dynamic=True)
    assert frames == [2, 0, 0], frames


def _size_only_then_break(x):
    t = x.size(1)
    print(end="")
    return t


def test_a_size_read_by_a_frame_without_ops_reaches_the_resume_function_as_this_calls():
    # No op before the break: the entry serves every size once the frame is dynamic, and the
    # size it hands on must be each call's own.
    compiled = torchlite.compile(_size_only_then_break)
    for n in [3, 5, 7, 9, 11, 5]:
        assert compiled(torch.randn(2, n)) == n


def _shape_read_before_the_break_used_after(x):
    b, t = x.shape[:2]
    y = x.view(b, t, 2, -1).exp()
    print(end="")  # a graph break
    return y.reshape(b, t, -1) * t


@pytest.mark.xfail(
    strict=True,
    reason="issue 24: sizes handed to a resume function are specialised at the break (both "
    "sides capture per length); needs int arguments as size symbols in the resume frame",
)
def test_sizes_read_before_a_break_and_used_after_capture_a_bounded_number_of_times():
    # The transformers pattern (`b, t = x.shape` at the top, a break, then views by b and t).
    # Today: 2 captures per length (the graph before the break relies on `t == 5`, the resume
    # function guards its int arguments by value), so past cache_size_limit it runs eagerly.
    frames = _sweep(
        _shape_read_before_the_break_used_after,
        lambda n: (torch.randn(2, n, 8),),
        [5, 9, 17, 33, 12, 21],
    )
    assert sum(frames[2:]) == 0, frames
