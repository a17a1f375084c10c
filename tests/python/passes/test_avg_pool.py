"""F.avg_pool2d's kernels as CUDA source and next to a reduction (passes/lower_data.cpp,
passes/fuse.cpp); its values for every window form and its fusion on the CPU are in
test_lower_data.py."""

import pytest
import torch
import torch.nn.functional as F
from helpers import nvrtc_missing

import torchlite
from torchlite import _C


def compiled_matches(fn, *args, **tol):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args), **tol)
    return compiled


# timm poolformer.py Pooling.forward
def token_mixer(x):
    return F.avg_pool2d(x, 3, 1, 1, count_include_pad=False) - x


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_token_mixer_kernel_compiles_for_cuda(dtype):
    g = torchlite.explain(token_mixer)(torch.randn(2, 8, 14, 14, dtype=dtype)).graphs[0]
    (kernel,) = _C.cuda_kernel_sources(g, "compute_90")
    name, _, ptx, _ = kernel
    assert f".entry {name}(".encode() in ptx


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
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
