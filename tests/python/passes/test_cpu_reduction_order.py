"""CPU reductions run their reduction axes in the order that reads memory contiguously
(codegen/common/loop_space.h, reduction_order): GroupNorm(1, C) over a channels-last activation
(PoolFormer's norm) walked C, then H*W with a stride of C in its innermost loop -- a cache line
per element and no vector loads, ~8x slower than eager; now its C*H*W points are one contiguous
loop. Each case: values against eager in several layouts, shapes and dtypes, and the loops the
CPU emitter runs (`_C.partition_summary(graph)["cpu_loops"]`). argmax/argmin keep row-major
order (their first-index rule)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

SHAPES = [(2, 32, 7, 7), (3, 40, 9, 5), (1, 3, 17, 1), (2, 5, 1, 6)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _tol(dtype):
    return {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {}


def _layout(x, layout):
    if layout == "channels_last":
        return x.to(memory_format=torch.channels_last)
    if layout == "nhcw":  # a permuted view: W outermost in memory but one
        return x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    return x


def cpu_loops(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)["cpu_loops"]


def group_norm_1(x, w, b):
    return F.group_norm(x, 1, w, b, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "nhcw"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_group_norm_over_all_channels_matches_eager(shape, layout, dtype):
    x = _layout(torch.randn(shape, dtype=dtype) * 3 + 1, layout)
    w, b = torch.randn(shape[1], dtype=dtype), torch.randn(shape[1], dtype=dtype)
    check(group_norm_1, x, w, b, fresh=False, **_tol(dtype))


def test_group_norm_module_channels_last_matches_eager():
    gn = torch.nn.GroupNorm(1, 24)
    torch.nn.init.normal_(gn.weight), torch.nn.init.normal_(gn.bias)
    x = torch.randn(2, 24, 9, 11).to(memory_format=torch.channels_last)
    compiled = torchlite.compile(gn)
    torch.testing.assert_close(compiled(x), gn(x))


@pytest.mark.parametrize(
    "layout,red",
    [("contiguous", [16, 30]), ("channels_last", [30, 16]), ("nhcw", [16, 6, 5])],
)
def test_group_norm_reads_its_input_contiguously_innermost(layout, red):
    """The norm's innermost reduction loop reads the input and writes the output with stride
    1 (before, channels-last ran [C, H*W], the inner loop strided by C). The per-channel weight
    and bias keep the axes apart."""
    n, c, h, w = 2, 16, 6, 5
    x = _layout(torch.randn(n, c, h, w), layout)
    (loops,) = [
        lp for lp in cpu_loops(group_norm_1, x, torch.randn(c), torch.randn(c)) if lp["red"]
    ]
    assert loops["red"] == red
    assert loops["strides"][0][-1] == 1  # the input
    assert loops["strides"][-1][-1] == 1  # the output


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_statistics_passes_run_one_loop(layout):
    """The mean and variance passes read only the input, which walks all of C*H*W
    contiguously: they run it as one loop (codegen/common/pass_loops.h), not a loop per axis
    with a horizontal vector sum every C elements. The last pass reads the per-channel weight
    and bias, so it keeps the kernel's axes."""
    n, c, h, w = 2, 16, 6, 5
    x = _layout(torch.randn(n, c, h, w), layout)
    (loops,) = [
        lp for lp in cpu_loops(group_norm_1, x, torch.randn(c), torch.randn(c)) if lp["red"]
    ]
    assert loops["pass_red"] == [[c * h * w], [c * h * w], loops["red"]]


def test_sum_then_softmax_keeps_per_axis_loops_where_a_buffer_is_strided():
    # A pass reading a buffer whose strides do not join keeps its axes apart.
    x = torch.randn(2, 8, 3, 4).permute(0, 2, 1, 3)  # H outermost: (C, W) do not join
    (loops,) = [lp for lp in cpu_loops(lambda t: t.sum((2, 3)) * 2, x) if lp["red"]]
    assert len(loops["red"]) == 2 and loops["pass_red"] == [loops["red"]]
    check(lambda t: t.sum((2, 3)) * 2, x, fresh=False)


def sum_over(dims):
    return lambda x: x.sum(dims) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dims", [(1, 2, 3), (1, 2), (1, 3), (0, 2, 3), (0, 1, 2, 3)], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "nhcw"])
def test_multi_axis_sums_in_every_layout_match_eager(dims, layout, dtype):
    x = _layout(torch.randn(3, 10, 7, 6, dtype=dtype), layout)
    check(sum_over(dims), x, fresh=False, **_tol(dtype))


@pytest.mark.parametrize("dims", [(1, 2, 3), (1, 3), (0, 1, 2, 3)], ids=str)
def test_multi_axis_sums_walk_the_input_contiguously_innermost(dims):
    """Over channels-last, the innermost reduction loop reads the input with the smallest
    stride among the reduced axes (C, stride 1, when C is reduced)."""
    x = _layout(torch.randn(3, 10, 7, 6), "channels_last")
    (loops,) = [lp for lp in cpu_loops(sum_over(dims), x) if lp["red"]]
    reduced = [x.stride(d) for d in dims if x.shape[d] > 1]
    assert abs(loops["strides"][0][-1]) == min(reduced)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "nhcw"])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_over_all_axes_keeps_the_first_index_in_every_layout(op, layout):
    """Ties everywhere (values 0..2): the answer is the first in row-major order, whatever
    the memory order; the kernel keeps row-major loops."""
    x = _layout(torch.randint(0, 3, (2, 6, 5, 4)).float(), layout)
    fn = getattr(torch, op)
    check(lambda t: fn(t) + 0, x, fresh=False)
    check(lambda t: fn(t.flatten(1), 1) + 0, x, fresh=False)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "nhcw"])
def test_layer_norm_over_permuted_trailing_axes_matches_eager(layout):
    """A norm over (C, H, W) given as normalized_shape of a permuted tensor (three reduction
    axes in some memory order; three passes, each in the chosen order)."""
    x = _layout(torch.randn(2, 6, 5, 7), layout)
    check(lambda t: F.layer_norm(t, t.shape[1:]) * 2, x, fresh=False)


def test_softmax_over_two_axes_of_channels_last_matches_eager():
    x = _layout(torch.randn(2, 8, 5, 6), "channels_last")
    check(lambda t: torch.softmax(t.flatten(1), -1).sum(-1), x, fresh=False)
    check(lambda t: (t - torch.logsumexp(t, (1, 2))[:, None, None]) * 2, x, fresh=False)
