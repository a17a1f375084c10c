"""The CUDA emitter's index width: 32-bit unless an offset can reach 2^31 or a gather reads at a
computed offset (roll, flip, cat of two tensors). A gather by a constant (a cat whose other operand is empty, as transformers'
first KV-cache update) stays 32-bit: 64-bit division made that copy compute-bound."""

import torch

import torchlite
from torchlite import _C


def _sources(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    sources = _C.cuda_kernel_sources(graph, "compute_90", compile=False)
    return [src[src.index('extern "C"') :] for _, src, _, _ in sources]  # past the helpers


def test_cat_with_an_empty_operand_uses_32_bit_indices():
    def fn(cache, k):
        return torch.cat([cache, k.transpose(1, 2)], dim=-2) * 1

    cache = torch.empty(2, 4, 0, 16, dtype=torch.bfloat16)
    k = torch.randn(2, 32, 4, 16, dtype=torch.bfloat16)
    (src,) = _sources(fn, cache, k)
    assert "unsigned long long" not in src
    torchlite.reset()
    torch.testing.assert_close(torchlite.compile(fn)(cache, k), fn(cache, k))


def test_gather_by_a_computed_offset_uses_64_bit_indices():
    def fn(x):
        return torch.roll(x, 3, 1) + 1

    sources = _sources(fn, torch.randn(8, 16))
    assert any("unsigned long long" in s for s in sources), sources
