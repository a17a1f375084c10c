"""Runtime-size CUDA kernels read the integer constants of their index math from the dims
parameter (checked without a GPU; tests/python/cuda/test_cuda_kernel_reuse.py runs a decode
loop against eager). Lowering writes sizes into constants: a cat's part bound and clamp, the
first position a slice or an embedding reads (`wpe[past + arange(1)]`). Written as literals,
a decode loop's cache cat got a new text at every length (an NVRTC compile a token); now the
text is the same at every length. Divisors and moduli are dims numbers too, divided by with their
magic multiplier and shift (tl_idiv_magic), unless they equal a model constant: Llama's repeat_kv
divides by n_rep x length x head size, one text per length as a literal."""

import hashlib
import re

import torch

import torchlite
from torchlite import _C


def _texts(fn, *args, static_sizes=(4, 16, 64)):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return [
        (source.replace(name, "@"), launch)
        for name, source, _, launch in _C.cuda_kernel_sources(
            graph, "compute_90", False, runtime_sizes=True, static_sizes=list(static_sizes)
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


def _repeat_kv(x):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, 3, s, d).reshape(b, h * 3, s, d) * 2


def test_a_repeat_kv_copy_has_one_text_for_every_length():
    # before: the copy's divisors (3 x n x 16, n x 16) and modulus (n) were literals
    digests = [_digest(_texts(_repeat_kv, torch.randn(2, 2, n, 16))) for n in [5, 7, 9, 23, 33]]
    assert all(d == digests[0] for d in digests), digests
    texts = _texts(_repeat_kv, torch.randn(2, 2, 23, 16))
    assert any("tl_idiv_magic" in t for t, _ in texts)
    if _C.nvrtc_available():
        for text, _ in texts:
            assert _C.nvrtc_compile(text.replace("@", "k"), "k", "compute_90")


def _division_calls(texts, fn):
    # calls in the kernels' bodies (the prelude defines both helpers, with comments naming them)
    return sum(len(re.findall(r"= " + fn + r"<", text)) for text, _ in texts)


def test_divisors_equal_to_a_model_constant_stay_literals():
    # the head size (16) and n_rep (3) are model constants: dividing by them is the compiler's
    # multiply and shift; with no model constant every divisor is a dims number
    x = torch.randn(2, 2, 23, 16)
    literal = _texts(_repeat_kv, x, static_sizes=(3, 16))
    runtime = _texts(_repeat_kv, x, static_sizes=())
    assert _division_calls(literal, "tl_idiv") > _division_calls(runtime, "tl_idiv")
    assert _division_calls(literal, "tl_idiv_magic") > 0  # n x 16 and 3 x n x 16

    def calls(texts):
        return _division_calls(texts, "tl_idiv") + _division_calls(texts, "tl_idiv_magic")

    assert calls(literal) == calls(runtime)
