"""The CUDA emitter's index width: 32-bit unless an offset can reach 2^31. A gather by a constant (a
cat whose other operand is empty, as transformers' first KV-cache update) stays 32-bit; one by a
computed offset (roll, flip, a pool window) adds that offset in 64 bits, and coordinate arithmetic
that provably fits in 32 bits is done in 32: 64-bit division and multiplies made those kernels
compute-bound."""

import re

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


def test_gather_by_a_computed_offset_adds_it_in_64_bits_and_computes_it_in_32():
    def fn(x):
        return torch.roll(x, 3, 1) + 1

    x = torch.randn(8, 16)
    (src,) = _sources(fn, x)
    assert "unsigned long long" not in src  # the loop index and the coordinate math
    assert "const long long" not in src
    assert re.search(r"in0\[\(long long\)o\d+_0 \+ \(long long\)v\d+\]", src), src
    assert "tl_idiv<int>" in src  # the wrap-around of the rolled coordinate
    torchlite.reset()
    torch.testing.assert_close(torchlite.compile(fn)(x), fn(x), rtol=0, atol=0)
