"""Floats computed from symbolic sizes (ir/sym_float.h): the attention scale `d ** -0.5`,
`math.sqrt(d)`, `1 / math.sqrt(d)`, `t / 2` are recomputed at every new size by a size-generic
entry, as CPython computes them, instead of pinning the size (one capture per size). A float
used by Python (a branch, a return value) still specialises: a relation on its sizes."""

import math

import pytest
import torch

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _sweep(fn, make_args, sizes):
    """`fn` compiled at each size against eager; returns (captures, size instances)."""
    compiled = torchlite.compile(fn)
    before = dict(torchlite.counters())
    for s in sizes:
        args = make_args(s)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
    after = torchlite.counters()
    return after["frames"] - before["frames"], after["size_instances"] - before["size_instances"]


def _pow_scale(x):
    return x * x.size(-1) ** -0.5 + 1


def _sqrt_divisor(x):
    return x.softmax(-1) / math.sqrt(x.shape[-1])


def _inverse_sqrt(x):
    return (x * (1 / math.sqrt(x.shape[-1]))).sum(-1)


def _half_length(x):
    return x * (x.shape[1] / 2) - float(x.size(0))


def _attention(q, k):
    d = q.size(-1)
    scores = q @ k.transpose(-1, -2) * d**-0.5
    return scores.softmax(-1) @ k


_LAST_DIM = [8, 12, 16, 7, 20, 9, 33]


@pytest.mark.parametrize(
    "fn", [_pow_scale, _sqrt_divisor, _inverse_sqrt], ids=["pow", "sqrt", "inverse_sqrt"]
)
def test_a_scale_from_the_last_size_follows_new_sizes(fn):
    frames, instances = _sweep(fn, lambda d: (torch.randn(3, d),), _LAST_DIM)
    # NOTE: the first size exact, the second size-generic; every later size replays it with
    # its own scale (a pinned scale would be off by up to 2x and captured per size).
    assert frames <= 2, frames
    assert instances == len(_LAST_DIM) - 2, instances


def test_true_division_and_float_of_sizes_follow_new_sizes():
    sizes = [(2, 4), (3, 5), (4, 9), (2, 7), (5, 6)]
    frames, instances = _sweep(_half_length, lambda s: (torch.randn(*s),), sizes)
    assert frames <= 2 and instances == len(sizes) - 2, (frames, instances)


def test_attention_scale_at_several_head_sizes_and_lengths():
    sizes = [(5, 8), (7, 8), (6, 16), (9, 4), (3, 12)]
    frames, instances = _sweep(
        _attention, lambda s: (torch.randn(2, s[0], s[1]), torch.randn(2, s[0], s[1])), sizes
    )
    assert frames <= 2 and instances == len(sizes) - 2, (frames, instances)


def _branch_on_scale(x):
    if x.size(-1) ** -0.5 > 0.3:
        return x * 2
    return x - 1


def test_a_branch_on_a_float_of_a_size_specialises_it():
    # NOTE: the branch pins d (a relation `d == 8`): every d captures, and each answer is eager's.
    frames, instances = _sweep(_branch_on_scale, lambda d: (torch.randn(3, d),), [8, 9, 10, 16])
    assert instances == 0 and frames == 4, (frames, instances)


def _returns_scale(x):
    return x + 1, math.sqrt(x.shape[0])


def test_a_float_of_a_size_returned_to_python_is_the_new_sizes():
    compiled = torchlite.compile(_returns_scale)
    for n in (4, 5, 9, 5):
        x = torch.randn(n, 2)
        out, scale = compiled(x)
        assert scale == math.sqrt(n)
        torch.testing.assert_close(out, x + 1)


def _divides_by_size_minus_three(x):
    return x * (1 / (x.shape[0] - 3))


def test_a_float_that_raises_at_a_new_size_raises_as_eager():
    compiled = torchlite.compile(_divides_by_size_minus_three)
    for n in (5, 6, 7):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), _divides_by_size_minus_three(x))
    with pytest.raises(ZeroDivisionError):
        _divides_by_size_minus_three(torch.randn(3))
    with pytest.raises(ZeroDivisionError):
        compiled(torch.randn(3))
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), _divides_by_size_minus_three(x))
