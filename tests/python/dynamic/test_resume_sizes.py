"""Dynamic shapes across a graph break (docs/internals/dynamic-shapes.md): once a frame is
dynamic, the graph before a break serves every size from one entry (size-generic, like a frame
without a break) and the resume function, a frame of its own, does the same: a sweep of sizes
captures each of them twice, not once per size. A size value handed to CPython at the break is
a plain number computed from this call's sizes (never the trace's number at another size), and
the resume function takes an int argument equal to a size of one of its tensor arguments as that
size (guarded `n == y.size(d)`), so views, slices and arithmetic after the break by `b, t =
x.shape` stay size-generic. Every size is checked against eager."""

import warnings

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


def test_a_size_handed_to_the_resume_function_is_this_calls():
    # t reaches CPython as a number computed from this call's x: the graph before the break
    # serves every length, and the resume function takes t as y.size(1).
    sizes = [5, 9, 17, 9, 5, 12]
    frames = _sweep(_size_local_crosses_the_break, lambda n: (torch.randn(3, n),), sizes)
    assert frames == [2, 2, 0, 0, 0, 0], frames


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


def test_sizes_read_before_a_break_and_used_after_capture_a_bounded_number_of_times():
    # The transformers pattern (`b, t = x.shape` at the top, a break, then views by b and t).
    # Before: 2 captures per length (the graph before the break relied on `t == 5`, the resume
    # function guarded its int arguments by value), so past cache_size_limit it ran eagerly.
    frames = _sweep(
        _shape_read_before_the_break_used_after,
        lambda n: (torch.randn(2, n, 8),),
        [5, 9, 17, 33, 12, 21],
    )
    assert frames == [2, 2, 0, 0, 0, 0], frames


def _break_in_a_loop(x):
    b, t = x.shape
    y = x
    for i in range(3):
        y = y * 2 + t
        print(end="")  # a graph break inside the loop's body
    return y.view(b, t, 1)[:, : t - 1] + i


def test_a_break_inside_a_loop_keeps_the_sizes_symbolic():
    # The loop's body is a function of its own (called per iteration), broken again at the
    # print: its entries serve every length from the second on, with new sizes compiled as size
    # instances (before: 8 captures at each length, then cache_size_limit: eager).
    torchlite.reset()
    before = torchlite.counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # cache_size_limit: "running eagerly"
        frames = _sweep(_break_in_a_loop, lambda n: (torch.randn(2, n),), [5, 9, 17, 33, 12, 21])
    after = torchlite.counters()
    assert frames[1] <= 4 and sum(frames[2:]) == 0, frames
    assert after["size_instances"] - before["size_instances"] >= 4


def _two_breaks(x):
    b, t = x.shape[:2]
    y = x.view(b, t, -1).exp()
    print(end="")  # a graph break
    z = y.reshape(b * t, -1) * t
    print(end="")  # and another
    return z.view(b, t, -1)[:, : t // 2] + b


def test_two_breaks_capture_each_part_twice():
    frames = _sweep(_two_breaks, lambda n: (torch.randn(3, n, 4),), [5, 9, 17, 33, 12, 21])
    assert frames[:2] == [3, 3], frames
    assert sum(frames[2:]) == 0, frames


def _slice_by_sizes_after_the_break(x):
    t = x.size(-1)
    h = t // 2
    y = x.softmax(-1)
    print(end="")  # a graph break
    return y[..., :h] * y[..., h : t - (t % 2)] + t


def test_a_slice_by_sizes_computed_before_the_break():
    frames = _sweep(
        _slice_by_sizes_after_the_break, lambda n: (torch.randn(4, n),), [6, 10, 7, 18, 31, 4]
    )
    assert sum(frames[2:]) == 0, frames


def test_dynamic_true_keeps_sizes_across_the_break_from_the_first_call():
    frames = _sweep(
        _shape_read_before_the_break_used_after,
        lambda n: (torch.randn(2, n, 8),),
        [5, 9, 17, 33],
        dynamic=True,
    )
    assert frames == [2, 0, 0, 0], frames


def _marked(n):
    x = torch.randn(2, n, 8)
    torchlite.mark_dynamic(x, 1)
    return (x,)


def test_mark_dynamic_keeps_sizes_across_the_break():
    frames = _sweep(_shape_read_before_the_break_used_after, _marked, [5, 9, 17, 33, 12])
    assert sum(frames[2:]) == 0, frames
    assert frames[0] == 2, frames


def _sum_of_sizes_then_break(x):
    n = x.size(0) * x.size(1) + 1  # an expression of the sizes, not a size itself
    y = x.flatten()
    print(end="")  # a graph break
    return y[: n - 1] * n


def test_an_expression_of_sizes_reaches_the_resume_function_as_this_calls_number():
    # n equals no size of the resume function's tensors: it is guarded by value there (one
    # capture of the resume function per value), and always this call's number.
    compiled = torchlite.compile(_sum_of_sizes_then_break)
    for shape in [(2, 3), (3, 5), (2, 3), (4, 4), (3, 5)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), _sum_of_sizes_then_break(x))


def _counter_beside_a_size(x, k):
    y = x * 2
    print(end="")  # a graph break
    return y + k  # k (a plain argument) may equal a size of y by chance


def test_an_int_equal_to_a_size_by_chance_is_this_calls_number():
    # k equals y.size(1) at the first calls, so the resume function takes it as that size:
    # when it no longer does, the guard refuses the entry (captures again), never a wrong k.
    compiled = torchlite.compile(_counter_beside_a_size)
    for n, k in [(5, 5), (9, 9), (17, 17), (17, 3), (9, 4), (12, 12), (12, 5)]:
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x, k), _counter_beside_a_size(x, k))


class _Attention(torch.nn.Module):
    """A GPT-2 style block with a graph break between attention and the MLP (a print, a
    logging call, an unsupported op)."""

    def __init__(self, c=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(c, 3 * c)
        self.proj = torch.nn.Linear(c, c)
        self.ln = torch.nn.LayerNorm(c)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(c, 4 * c), torch.nn.GELU(), torch.nn.Linear(4 * c, c)
        )

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous()
        print(end="")  # a graph break in the middle of the block
        y = x + self.proj(y.view(b, t, c))
        return y + self.mlp(self.ln(y)).view(b, t, c)


def test_a_block_with_a_break_in_the_middle_captures_a_bounded_number_of_times():
    torch.manual_seed(0)
    model = _Attention().eval()
    torchlite.reset()
    before = torchlite.counters()
    frames = _sweep(model, lambda n: (torch.randn(2, n, 32),), [5, 9, 17, 33, 12, 21, 40])
    after = torchlite.counters()
    # forward and its resume function: each at the first length and once more at the second.
    assert frames == [2, 2, 0, 0, 0, 0, 0], frames
    assert after["graphs"] - before["graphs"] == 4
    assert after["size_instances"] - before["size_instances"] >= 2 * 4


def _returns_a_size(x):
    return (x * 2).sum(-1), x.size(1) * 2 + 1


def test_a_size_in_a_frames_result_is_this_calls():
    # The result is rebuilt after the graph: 2 * t + 1 is read from this call's x, so the
    # size-generic entry serves every length (before: a relation `2*s1 + 1 == 11` per length).
    frames = _sweep(_returns_a_size, lambda n: (torch.randn(3, n),), [5, 9, 17, 33, 12])
    assert frames == [1, 1, 0, 0, 0], frames


def test_explain_names_the_size_an_int_argument_is_taken_as():
    out = torchlite.explain(_slice_by_sizes_after_the_break)(torch.randn(4, 10))
    guards = "\n".join(out.guards)
    # h = t // 2 and t, handed on by the break, taken as sizes of the resume function's x.
    assert "SIZE_EQUALS L['h'] == s0//2; s0 = L['x'].size(1)" in guards, guards
    assert "SIZE_EQUALS L['t'] == s0; s0 = L['x'].size(1)" in guards, guards
    assert "EQUALS_MATCH L['h']" not in guards, guards


def _embedding_after_the_break(ids, w):
    t = ids.size(0)
    print(end="")  # a graph break
    return torch.nn.functional.embedding(ids, w), t


def test_a_graph_with_nothing_to_fuse_after_the_break_serves_every_size():
    # The resume function's graph (an embedding alone) runs op by op; t is a symbol there
    # (ids.size(0)) that reaches no op: the graph as captured serves every length (before: exact
    # sizes, a capture per length, as soon as the trace held a symbol).
    w = torch.randn(10, 4)
    frames = _sweep(
        _embedding_after_the_break, lambda n: (torch.randint(0, 10, (n,)), w), [5, 9, 17, 33, 12]
    )
    assert frames == [2, 2, 0, 0, 0], frames
