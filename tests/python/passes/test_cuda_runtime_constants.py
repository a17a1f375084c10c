"""Runtime-size CUDA kernels read the integer constants of their index math from the dims
parameter (checked without a GPU; tests/python/cuda/test_cuda_kernel_reuse.py runs a decode
loop against eager). Lowering writes sizes into constants: a cat's part bound and clamp, the
first position a slice or an embedding reads (`wpe[past + arange(1)]`). Written as literals,
a decode loop's cache cat got a new text at every length (an NVRTC compile a token); now the
text is the same at every length. Divisors stay literals (multiply-and-shift division)."""

import hashlib
import re

import pytest
import torch

import torchlite
from torchlite import _C


def _texts(fn, *args):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return [
        (source.replace(name, "@"), launch)
        for name, source, _, launch in _C.cuda_kernel_sources(
            graph, "compute_90", False, runtime_sizes=True, static_sizes=[4, 16, 64]
        )
    ]


def _decode(past, new, wpe):
    kv = torch.cat([past, new], dim=2)
    pos = wpe[past.shape[2] + torch.arange(new.shape[2])]
    return kv * 2, pos + 1


def _decode_args(n):
    return torch.randn(2, 4, n, 16), torch.randn(2, 4, 1, 16), torch.randn(64, 16)


def _digest(texts):
    return [hashlib.sha256(t.encode()).hexdigest()[:12] for t, _ in texts]


def test_a_growing_cache_cat_has_one_text_for_every_length():
    # NOTE: not 16 or 17: lowering shares equal constants, so a bound (n) or clamp (n - 1) equal
    # to the head size (16) is one expr less, another text (a compile at that length)
    digests = [_digest(_texts(_decode, *_decode_args(n))) for n in [5, 6, 7, 8, 9, 12, 23, 33]]
    assert all(d == digests[0] for d in digests), digests


def test_the_constants_go_in_the_dims_and_the_text_compiles():
    texts = _texts(_decode, *_decode_args(7))
    dims = [launch["dims"] for _, launch in texts]
    # the cat's bound (7) and clamp (6), and the first position (7): numbers, not text
    assert any(7 in d and 6 in d for d in dims), dims
    assert any(7 in d for d in dims), dims
    assert not any(re.search(r"\(\((int|long long)\)[67]LL\)", t) for t, _ in texts)
    if _C.nvrtc_available():
        for text, _ in texts:
            assert _C.nvrtc_compile(text.replace("@", "k"), "k", "compute_90")


def _divides(x):
    b, t, c = x.shape
    return x.transpose(1, 2).reshape(b, c, t).sin()


@pytest.mark.parametrize("n", [5, 12])
def test_divisors_stay_literals(n):
    texts = _texts(_divides, torch.randn(2, n, 6))
    static = _texts(_divides, torch.randn(2, n, 6))
    assert texts == static
    for text, _ in texts:
        for m in re.finditer(r"tl_idiv<[^>]*>\(([^,]+), ([^,]+),", text):
            assert "tl_d" not in m.group(2), m.group(0)
