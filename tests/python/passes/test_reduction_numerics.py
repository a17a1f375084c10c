"""Reductions and the row ops built on them (softmax, log_softmax, layer_norm, centring) match
eager over odd layouts (stride 0 along the reduced axis, transposed, sliced with a step, size-1
dims with odd strides, empty), dtypes (integers, bool, float16/bfloat16 on the CPU) and values
(squares that overflow, 1e30s, -inf rows, constant rows): csrc/passes/lower_reduction.cpp and
lower_statistics.cpp. Sizes stay small so the suite is fast."""

import pytest
import torch
import torch.nn.functional as F
from helpers import nvrtc_missing

import torchlite
from torchlite import _C

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)


def _make(dtype):
    def make(*shape):
        if dtype == torch.bool:
            return torch.rand(shape) > 0.5
        if dtype.is_floating_point:
            return torch.randn(shape).to(dtype)
        return torch.randint(-5, 6, shape, dtype=dtype)

    return make


# Each builds a tensor whose last axis has 8 elements (or an empty one) from `make(*shape)`.
LAYOUTS = {
    "contiguous": lambda make: make(6, 8),
    "expand_reduced_axis": lambda make: make(6, 1).expand(6, 8),
    "as_strided_zero_stride": lambda make: make(6).as_strided((6, 8), (1, 0)),
    "expand_outer_axis": lambda make: make(1, 8).expand(6, 8),
    "transposed": lambda make: make(8, 6).t(),
    "step_slice": lambda make: make(6, 16)[:, ::2],
    "size1_odd_stride": lambda make: make(6, 8).as_strided((6, 1, 8), (8, 99, 1)),
    "permuted_3d": lambda make: make(8, 2, 3).permute(1, 2, 0),
    "empty_rows": lambda make: make(0, 8),
    "empty_reduced_axis": lambda make: make(6, 0),
}

ROW_OPS = {
    "sum": lambda x: x.sum(-1),
    "sum_all": lambda x: x.sum(),
    "mean": lambda x: x.mean(-1),
    "prod": lambda x: x.prod(-1),
    "amax": lambda x: x.amax(-1),
    "amin_keepdim": lambda x: x.amin(-1, keepdim=True),
    "max_all": lambda x: x.max(),
    "argmax": lambda x: x.argmax(-1),
    "argmin_all": lambda x: x.argmin(),
    "var": lambda x: x.var(-1),
    "std_biased": lambda x: x.std(-1, correction=0),
    "var_mean": lambda x: torch.var_mean(x, -1),
    "norm": lambda x: x.norm(dim=-1),
    "norm_1": lambda x: x.norm(p=1, dim=-1),
    "logsumexp": lambda x: x.logsumexp(-1),
    "cumsum": lambda x: x.cumsum(-1),
    "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: x.log_softmax(-1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: F.rms_norm(x, x.shape[-1:]),
    "center": lambda x: x - x.mean(-1, keepdim=True),
    "softmax_outer_axis": lambda x: x.softmax(0),
    "sum_first_and_last": lambda x: x.sum((0, -1)),
    "mean_outer_axis": lambda x: x.mean(0),
    "var_all": lambda x: x.var(),
    "argmax_outer_axis": lambda x: x.argmax(0),
    "all": lambda x: x.all(-1),
    "any": lambda x: x.any(-1),
}
FLOAT_ONLY = {
    "mean",
    "var",
    "std_biased",
    "var_mean",
    "norm",
    "norm_1",
    "logsumexp",
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "center",
    "softmax_outer_axis",
    "mean_outer_axis",
    "var_all",
}
NO_BOOL = {
    "argmax",
    "argmin_all",
    "argmax_outer_axis",
    "cumsum",
    "prod",
    "amax",
    "amin_keepdim",
    "max_all",
}


def _tolerance(dtype):
    # NOTE: 16-bit results are rounded once from float32 math; eager rounds some intermediates.
    if dtype == torch.bfloat16:
        return {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    return {}


def check_eager(fn, x, **tol):
    """Compiled fn(x) equals eager fn(x) (values, dtype, shape), or raises the same error type."""
    try:
        expected = fn(x.clone() if x.is_contiguous() else x)
    except (RuntimeError, IndexError, ValueError) as e:
        torchlite.reset()
        with pytest.raises(type(e)):
            torchlite.compile(fn)(x)
        return
    torchlite.reset()
    actual = torchlite.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)


# Every layout in float32; in the other dtypes the one that broke (stride 0 along the reduced
# axis) or, for integers and bool, a transposed one (their plain layouts: test_opinfo_parity.py).
def _cases():
    for op in ROW_OPS:
        for dtype in (*FLOATS, *INTS, torch.bool):
            if op in FLOAT_ONLY and not dtype.is_floating_point:
                continue
            if op in NO_BOOL and dtype == torch.bool:
                continue
            if dtype == torch.float32:
                layouts = LAYOUTS
            else:
                layouts = ["expand_reduced_axis" if dtype.is_floating_point else "transposed"]
            for layout in layouts:
                yield pytest.param(op, dtype, layout, id=f"{op}-{str(dtype)[6:]}-{layout}")


@pytest.mark.parametrize("op, dtype, layout", list(_cases()))
def test_reduction_matches_eager(op, dtype, layout):
    x = LAYOUTS[layout](_make(dtype))
    check_eager(ROW_OPS[op], x, **_tolerance(dtype))


# ---------------------------------------------------------------------------------------------
# Values at the edges of float32
# ---------------------------------------------------------------------------------------------

SQUARES_OVERFLOW = torch.tensor([3e19, 1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "fn",
    [lambda x: x.var(), lambda x: x.std(), lambda x: x.var(-1), lambda x: x.std(0, correction=0)],
    ids=["var", "std", "var_dim", "std_biased"],
)
def test_variance_of_values_whose_squares_overflow_is_finite(fn):
    check_eager(fn, SQUARES_OVERFLOW)
    check_eager(fn, SQUARES_OVERFLOW.flip(0))


def test_variance_of_overflowing_squares_over_rows():
    x = SQUARES_OVERFLOW.repeat(3, 2) * torch.tensor([[1.0], [-1.0], [0.5]])
    check_eager(lambda x: x.var(-1), x)
    check_eager(lambda x: torch.std_mean(x, -1), x)


@pytest.mark.parametrize("value", [0.1, 1e6 + 0.1, -3.7, 1e-20])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.var(-1),
        lambda x: x.std(-1),
        lambda x: F.layer_norm(x, (7,)),
        lambda x: x - x.mean(-1, keepdim=True),
    ],
    ids=["var", "std", "layer_norm", "center"],
)
def test_statistics_of_a_constant_row_are_exact(fn, value):
    check_eager(fn, torch.full((3, 7), value))


@pytest.mark.parametrize("scale", [1e30, -1e30, 3e38])
def test_logsumexp_and_softmax_of_huge_values(scale):
    x = torch.randn(4, 6) * scale
    for fn in (lambda x: x.logsumexp(-1), lambda x: x.softmax(-1), lambda x: x.log_softmax(-1)):
        check_eager(fn, x)


@pytest.mark.parametrize(
    "row",
    [
        [float("-inf")] * 5,
        [float("-inf"), 0.0, 1.0, float("-inf"), 2.0],
        [float("inf"), 0.0, 1.0, 2.0, 3.0],
    ],
)
def test_softmax_and_logsumexp_of_infinite_rows(row):
    x = torch.tensor([row, [0.5, 1.0, -1.0, 2.0, 0.0]])
    for fn in (
        lambda x: x.softmax(-1),
        lambda x: x.log_softmax(-1),
        lambda x: x.logsumexp(-1),
        lambda x: x.amax(-1),
        lambda x: x.argmax(-1),
    ):
        check_eager(fn, x)


def test_norm_of_values_whose_squares_overflow():
    check_eager(lambda x: x.norm(dim=-1), SQUARES_OVERFLOW.repeat(2, 1))
    check_eager(lambda x: torch.linalg.vector_norm(x), torch.tensor([3e20, 4e20]))


def test_half_sums_past_the_half_range():
    x = torch.full((4, 64), 2000.0, dtype=torch.float16)
    check_eager(lambda x: x.sum(-1), x)
    check_eager(lambda x: x.mean(-1), x, atol=1e-3, rtol=1e-3)
    check_eager(lambda x: x.sum(-1, dtype=torch.float32), x)


# ---------------------------------------------------------------------------------------------
# The CUDA code generator on the same kernels (NVRTC to PTX; no GPU needed)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layout", ["expand_reduced_axis", "as_strided_zero_stride", "contiguous"])
@pytest.mark.parametrize(
    "op", ["softmax", "log_softmax", "layer_norm", "center", "var", "var_mean", "std_biased"]
)
def test_cuda_kernels_of_row_ops_compile_to_ptx(op, layout, dtype):
    x = LAYOUTS[layout](_make(dtype))
    torchlite.reset()
    graphs = torchlite.explain(ROW_OPS[op])(x).graphs
    kernels = [k for g in graphs for k in _C.cuda_kernel_sources(g, "compute_90", compile=True)]
    if op == "log_softmax" and dtype == torch.float16:
        assert not kernels  # NOTE: extern, see lower_reduction.cpp's softmax rule
        return
    assert kernels, "no fused kernel"
    for name, _source, ptx, _launch in kernels:
        assert f".entry {name}(" in ptx.decode()


def _softmax_fed_to_softmax(x, c):
    s = torch.softmax(x, -1)
    return torch.softmax(s * c, -1), s, (s * c).log_softmax(-1)


@pytest.mark.parametrize("outputs", [1, 2, 3])
def test_softmax_output_fed_to_a_second_softmax_in_one_kernel(outputs):
    # NOTE: the CPU emitter stores a softmax's exp into its output and scales it in place in
    # the next pass; a later pass of the same kernel (a second softmax over the scaled values)
    # must not read the scaled values back as the exp (it did: found by a training graph that
    # saves the first softmax for backward).
    def fn(x, c):
        return _softmax_fed_to_softmax(x, c)[:outputs]

    x, c = torch.randn(3, 8), torch.rand(8) + 0.5
    torchlite.reset()
    got = torchlite.compile(fn)(x, c)
    for g, e in zip(got, fn(x, c), strict=True):
        torch.testing.assert_close(g, e)
