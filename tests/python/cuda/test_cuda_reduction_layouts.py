"""Reductions in every layout on the GPU against eager: the tiled schedule (rows across lanes,
split between warps) for channels-last spatial means and squeeze-excitation pooling, column
sums and argmax, multi-axis reductions, short rows, odd sizes; and batch-norm statistics whose
epilogue the fusion cost model keeps apart."""

import pytest
import torch
import torch.nn.functional as F
from helpers import compiled_on_cuda

pytestmark = pytest.mark.cuda

BF16 = torch.bfloat16


def _check(fn, *args, atol=None, rtol=None, kernels=None):
    """Compiled equals eager on two calls; `kernels`: the CUDA kernels the graph compiles."""
    _, made = compiled_on_cuda(fn, *args, atol=atol, rtol=rtol)
    assert made >= 1, "no fused kernel was compiled"
    if kernels is not None:
        assert made == kernels


def _cl(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)


def spatial_mean(x):
    return F.silu(x).mean((2, 3), keepdim=True)


def bn_train_silu(x):
    v, m = torch.var_mean(x, (0, 2, 3), keepdim=True, correction=0)
    return F.silu((x - m) * torch.rsqrt(v + 1e-5))


@pytest.mark.parametrize(
    "shape", [(64, 32, 112, 112), (8, 32, 28, 28), (3, 40, 9, 5), (2, 7, 33, 3), (64, 96, 7, 7)]
)
def test_channels_last_spatial_mean(shape):
    _check(spatial_mean, _cl(*shape, dtype=BF16), atol=2e-2, rtol=2e-2)
    _check(spatial_mean, _cl(*shape), atol=1e-4, rtol=1e-4)


def test_squeeze_excitation_block():
    x = _cl(16, 64, 28, 28, dtype=BF16)
    w1 = torch.randn(64, 16, device="cuda", dtype=BF16) * 0.1
    w2 = torch.randn(16, 64, device="cuda", dtype=BF16) * 0.1

    def se(x):
        s = F.silu(x).mean((2, 3))
        return x * torch.sigmoid(F.relu(s @ w1) @ w2)[:, :, None, None]

    _check(se, x, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("shape", [(64, 32, 56, 56), (4, 8, 6, 6), (3, 5, 7, 11)])
def test_batch_norm_statistics_channels_last(shape):
    _check(bn_train_silu, _cl(*shape), atol=1e-4, rtol=1e-4)


def test_long_batch_norm_rows_split_and_keep_their_epilogue_apart():
    # f32 rows of 50176 points do not stay on chip: partials, one fold of both statistics
    # (sibling reductions), then the epilogue.
    _check(bn_train_silu, _cl(16, 32, 56, 56), atol=1e-4, rtol=1e-4, kernels=3)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_split_reductions(dtype):
    x = torch.randn(1 << 20, 64, device="cuda", dtype=dtype)
    tol = {"atol": 5e-2, "rtol": 2e-2} if dtype == BF16 else {"atol": 1e-2, "rtol": 1e-4}
    _check(lambda x: (x.sum(0), x.mean(0)), x, **tol)
    _check(lambda x: x.sum(), x, **tol)
    y = _cl(64, 32, 56, 56, dtype=dtype) * 2 + 3
    _check(lambda y: torch.var_mean(y, (0, 2, 3), keepdim=True), y, **tol)


@pytest.mark.parametrize("shape", [(100000, 64), (1000, 37), (257, 3), (5, 1), (4096, 1000)])
def test_column_sums(shape):
    x = torch.randn(*shape, device="cuda")
    _check(lambda x: x.sum(0), x, atol=1e-3, rtol=1e-4)
    _check(lambda x: (x.amax(0), x.argmax(0)), x)


def test_column_argmin_ties_take_the_first_index():
    x = torch.randint(0, 3, (5000, 70), device="cuda").float()
    _check(lambda x: x.argmin(0), x)


@pytest.mark.parametrize("dims,shape", [((0, 2), (64, 50, 33)), ((0, 2, 3), (8, 64, 15, 15))])
def test_multi_axis(dims, shape):
    x = torch.randn(*shape, device="cuda")
    _check(lambda x: x.sum(dims) * 2, x, atol=1e-3, rtol=1e-4)
    if len(shape) == 4:
        _check(lambda x: x.amax(dims), _cl(*shape))


@pytest.mark.parametrize("shape", [(65536, 3), (3, 65536), (17, 16)])
def test_short_rows(shape):
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    _check(lambda x: (x.sum(-1), x.float().sum(0)), x, atol=5e-2, rtol=2e-2)
