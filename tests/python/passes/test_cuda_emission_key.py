"""The CUDA emission key (codegen/cuda/emission_key.h) without a GPU: kernels with equal keys
get the same CUDA text up to their own names, the same launch and the same dims, so the runtime
(runtime/cuda/compile.cpp) gives a kernel whose key it has seen the code and launch emitted
before without emitting it (tests/python/cuda/test_cuda_kernel_reuse.py runs that). A model's
repeated layers share keys; a size the text depends on is in the key."""

import re

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def _kernels(fn, *args, runtime_sizes=True, static_sizes=(), arch="compute_90"):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return _C.cuda_kernel_sources(
        graph, arch, False, runtime_sizes=runtime_sizes, static_sizes=list(static_sizes)
    )


def _blank(name, source):
    return re.sub(re.escape(name), "@", source)


def _launch(name, launch):
    out = {k: v for k, v in launch.items() if k != "emission_key"}
    for k in ("vector_name", "vector_fallback_name", "group_name"):
        out[k] = _blank(name, out[k])
    return out


def _layers(x, ws, bs):
    for w, b in zip(ws, bs):
        h = F.layer_norm(x, (x.shape[-1],))
        h = F.gelu(h @ w + b)
        x = x + h * torch.softmax(h, dim=1)
    return x.sum(-1)


def _args(n, dtype, layers=4, width=48):
    x = torch.randn(3, n, width, dtype=dtype)
    ws = [torch.randn(width, width, dtype=dtype) for _ in range(layers)]
    bs = [torch.randn(width, dtype=dtype) for _ in range(layers)]
    return x, ws, bs


def _check_equal_keys_equal_code(kernels):
    by_key = {}
    for name, source, _, launch in kernels:
        by_key.setdefault(launch["emission_key"], []).append((name, source, launch))
    for group in by_key.values():
        name0, source0, launch0 = group[0]
        for name, source, launch in group[1:]:
            assert _blank(name, source) == _blank(name0, source0)
            assert _launch(name, launch) == _launch(name0, launch0)
    return by_key


@pytest.mark.parametrize("runtime_sizes", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_repeated_layers_share_keys_and_equal_keys_give_the_same_code(dtype, runtime_sizes):
    for n in [5, 16, 37]:  # odd, a multiple of 8, prime: alignment changes
        kernels = _kernels(_layers, *_args(n, dtype), runtime_sizes=runtime_sizes)
        by_key = _check_equal_keys_equal_code(kernels)
        # four layers of the same kernels: at most the first layer's and the ones around them
        assert len(by_key) <= len(kernels) // 2, (len(by_key), len(kernels))


def test_keys_of_one_kernel_at_other_sizes_differ_and_name_no_kernel_twice():
    keys = {}
    for n in [5, 6, 7, 16, 37]:
        for name, source, _, launch in _kernels(_layers, *_args(n, torch.float32)):
            keys.setdefault(launch["emission_key"], set()).add(_blank(name, source))
    # a key never names two texts (keys hold every number, so sizes do not share keys)
    assert all(len(texts) == 1 for texts in keys.values())


def test_the_key_holds_the_target_and_the_static_sizes():
    args = _args(9, torch.float32, layers=1)
    k90 = {launch["emission_key"] for *_, launch in _kernels(_layers, *args)}
    k80 = {launch["emission_key"] for *_, launch in _kernels(_layers, *args, arch="compute_80")}
    fixed = {launch["emission_key"] for *_, launch in _kernels(_layers, *args, static_sizes=[48])}
    assert not k90 & k80 and not k90 & fixed
