"""Column sums (a linear's bias gradient `grad.view(-1, C).sum(0)`) fuse as inductor's do:
- a sum over a reshape reduces the value before it (passes/move_reshapes.h), so it can take the
  pointwise math computing that value into its own kernel, or share a pass with other sums;
- sums of one iteration space over the same reduced axes that read what one kernel wrote (or
  one stored value) run as one kernel (passes/fuse.cpp, merge_sibling_reductions);
- a pointwise op between a reshape and a matmul (`ln(x).view(-1, C).to(bf16)` before a linear
  under autocast) moves above the reshape, into the kernel computing its operand.
Launch counts show what fused (each case's comment gives the count before); every result is
checked against eager at several sizes in float32 and bfloat16."""

import pytest
import torch
import torch.nn.functional as F
from helpers import nvrtc_missing

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def launches(fn, *args, **tol):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args), **tol)
    torchlite.reset_counters()
    compiled(*args)
    return torchlite.counters()["kernel_launches"]


def _tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}


SIZES = [(2, 8, 16), (3, 5, 24), (1, 7, 40)]


def two_column_sums(x):
    y = x.softmax(-1)
    return y.sum(0), (y * x).sum(0)


@pytest.mark.parametrize("b,t,c", SIZES)
def test_column_sums_of_one_kernels_values_share_a_kernel(b, t, c):
    x = torch.randn(b * t, c)
    assert launches(two_column_sums, x) == 2  # the softmax, both sums (before: 3)


def sums_over_a_reshape(x, w):
    y = x.softmax(-1)
    z = y.view(-1, y.shape[-1])
    # NOTE: as autograd's sum_to_size sums a bias gradient: keepdim, then a view
    return z @ w, z.sum(0, keepdim=True).view(-1), (y * x).sum((0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b,t,c", SIZES)
def test_a_sum_over_a_reshape_joins_the_sums_over_its_base(b, t, c, dtype):
    x, w = torch.randn(b, t, c, dtype=dtype), torch.randn(c, 8, dtype=dtype)
    assert launches(sums_over_a_reshape, x, w, **_tol(dtype)) == 2  # before: 3


def gelu_backward_like(g, w, x, w2):
    t = torch.tanh(x)
    d = (g @ w).view(x.shape) * (1 - t * t)
    dz = d.view(-1, x.shape[-1])
    return dz @ w2, dz.sum(0, keepdim=True).view(-1), t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b,t,c", [(2, 8, 16), (3, 5, 24), (4, 3, 8)])
def test_a_bias_gradient_fuses_with_the_math_computing_its_operand(b, t, c, dtype):
    g, w = torch.randn(b * t, 12, dtype=dtype), torch.randn(12, c, dtype=dtype)
    x, w2 = torch.randn(b, t, c, dtype=dtype), torch.randn(c, 6, dtype=dtype)
    # tanh, the product's epilogue and the column sum in one kernel (before: 2, the sum apart)
    assert launches(gelu_backward_like, g, w, x, w2, **_tol(dtype)) == 1


def sums_that_keep_their_reshape(x):
    y = x.softmax(-1)
    # sums over part of a merged axis, or over every axis at once, reduce the reshape as it is
    return y.view(-1, 2, y.shape[-1]).sum(1), y.view(-1).sum(0, keepdim=True)


def test_sums_over_partial_runs_of_merged_axes_stay_as_they_are():
    x = torch.randn(3, 4, 8)
    assert launches(sums_that_keep_their_reshape, x) >= 2


def layer_norm_cast_linear(x, w, b, m):
    y = F.layer_norm(x, x.shape[-1:], w, b).view(-1, x.shape[-1]).to(torch.bfloat16)
    return y @ m


@pytest.mark.parametrize("b,t,c", SIZES)
def test_a_cast_before_a_matmul_joins_the_kernel_before_its_reshape(b, t, c):
    x, w, bias = torch.randn(b, t, c), torch.randn(c), torch.randn(c)
    m = torch.randn(c, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        # the layer norm with its cast (before: the layer norm, then the cast)
        assert launches(layer_norm_cast_linear, x, w, bias, m, atol=2e-2, rtol=2e-2) == 1


def cast_returned(x):
    y = F.layer_norm(x, x.shape[-1:]).view(-1, x.shape[-1]).to(torch.bfloat16)
    return y


def test_a_returned_cast_stays_a_fresh_tensor():
    x = torch.randn(2, 4, 8)
    out = torchlite.compile(cast_returned)(x)
    torch.testing.assert_close(out, cast_returned(x))
    assert out._base is None


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
def test_fused_column_kernels_compile_for_cuda_and_fill_the_machine():
    # GPT-2's fc bias gradient: 4096 rows of 768 columns (a thin product keeps it cheap)
    args = (
        torch.randn(4096, 8),
        torch.randn(8, 768),
        torch.randn(8, 512, 768),
        torch.randn(768, 4),
    )
    torchlite.reset()
    (g,) = torchlite.explain(gelu_backward_like)(*args).graphs
    (kernel,) = _C.cuda_kernel_sources(g, "compute_90")
    name, _, ptx, launch = kernel
    assert f".entry {name}(".encode() in ptx
    # rows split between lanes: far more lanes than the 768 columns
    assert launch["grid"] * launch["block"] >= 64 * 768
