"""F.avg_pool2d is one generated kernel with its neighbours (passes/lower_data.cpp): PoolFormer's
token mixer `pool(x) - x` and Inception's 3x3 branch pools ran as torch's pooling kernel plus a
kernel after it. Values are eager's for every kernel size, stride, padding, ceil_mode,
count_include_pad and divisor_override, float32 and bfloat16, (N, C, H, W) and (C, H, W),
channels-last; no torch avg_pool2d runs."""

import pytest
import torch
import torch.nn.functional as F
from helpers import aten_ops

import torchlite
from torchlite import _C

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def compiled_matches(fn, *args, **tol):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args), **tol)
    return compiled


# timm poolformer.py Pooling.forward
def token_mixer(x):
    return F.avg_pool2d(x, 3, 1, 1, count_include_pad=False) - x


@needs_cpu_kernels
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False},
        {"kernel_size": 3, "stride": 1, "padding": 1},
        {"kernel_size": 2},
        {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": 1,
            "ceil_mode": True,
            "count_include_pad": False,
        },
        {"kernel_size": 3, "stride": 2, "divisor_override": 4},
        {"kernel_size": 5, "stride": 3, "ceil_mode": True},
    ],
    ids=str,
)
@pytest.mark.parametrize("shape", [(2, 3, 9, 10), (3, 7, 8)])
def test_avg_pool2d_matches_eager_in_one_kernel(kwargs, shape):
    fn = lambda x: F.avg_pool2d(x * 2, **kwargs) + 1
    x = torch.randn(shape)
    compiled = compiled_matches(fn, x)
    ops = aten_ops(compiled, x)
    assert ops["aten::avg_pool2d"] == 0, ops


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_poolformer_token_mixer(dtype, channels_last):
    x = torch.randn(2, 8, 14, 14, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {}
    compiled = compiled_matches(token_mixer, x, **tol)
    assert aten_ops(compiled, x)["aten::avg_pool2d"] == 0


def _nvrtc_missing():
    try:
        _C.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - the message says where NVRTC was searched
        return str(e)
    return ""


@pytest.mark.skipif(bool(_nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_token_mixer_kernel_compiles_for_cuda(dtype):
    g = torchlite.explain(token_mixer)(torch.randn(2, 8, 14, 14, dtype=dtype)).graphs[0]
    (kernel,) = _C.cuda_kernel_sources(g, "compute_90")
    name, _, ptx, _ = kernel
    assert f".entry {name}(".encode() in ptx


@pytest.mark.skipif(bool(_nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_pool_before_a_norm_is_stored_not_recomputed_in_the_reduction(channels_last):
    # PoolFormer's block: the mixer's window (9 gathered reads a point) fused into GroupNorm's
    # kernel was recomputed at every pass over the rows (H200: 3.16 -> 4.74 ms a forward);
    # stored by a kernel of its own, the norm reads one value a point.
    norm = torch.nn.GroupNorm(1, 8)

    def block(x):
        return norm(x + 0.5 * token_mixer(x)) * 2

    x = torch.randn(2, 8, 14, 14)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    g = torchlite.explain(block)(x).graphs[0]
    names = [k[0] for k in _C.cuda_kernel_sources(g, "compute_90")]
    assert len(names) == 2 and "avg_pool2d" in names[0], names
    if _C.has_llvm:
        with torch.no_grad():
            compiled_matches(block, x)
