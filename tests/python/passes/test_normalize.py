"""F.normalize (p=2) lowers to one fused reduction (it was torch's Python function: four torch
ops and launches; its name matched the random `normal` ops' barrier test), values equal eager's
over dims, layouts and dtypes; other p stay extern."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite
from torchlite import _C


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


def normalize_last(x):
    return F.normalize(x, dim=-1) * 2


def normalize_default(x):
    return F.normalize(x)


def normalize_transposed(q, k):
    # NOTE: XCiT's cross-covariance attention: q and k normalized along the tokens
    q = F.normalize(q.transpose(-2, -1), dim=-1)
    k = F.normalize(k.transpose(-2, -1), dim=-1, eps=1e-6)
    return (q @ k.transpose(-2, -1)).softmax(-1)


def normalize_p1(x):
    return F.normalize(x, p=1.0, dim=0)


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 5, 7), (3, 1, 16)])
def test_normalize_matches_eager(shape):
    check(normalize_last, torch.randn(*shape))
    check(normalize_default, torch.randn(*shape))


def test_normalize_of_zero_rows_uses_eps():
    x = torch.randn(4, 8)
    x[1] = 0
    check(normalize_last, x)


def test_normalize_transposed_and_bfloat16_match_eager():
    q, k = torch.randn(2, 3, 16, 8), torch.randn(2, 3, 16, 8)
    check(normalize_transposed, q, k, atol=1e-5, rtol=1e-5)
    x = torch.randn(4, 6, 32, dtype=torch.bfloat16)
    check(normalize_last, x, atol=2e-2, rtol=2e-2)


def test_normalize_with_other_p_matches_eager():
    check(normalize_p1, torch.randn(5, 3))


@pytest.mark.skipif(not _C.has_llvm, reason="no LLVM: CPU graphs run op by op")
def test_normalize_lowers_into_one_kernel_with_its_epilogue():
    s = summary(normalize_last, torch.randn(4, 8))
    assert s["extern_ops"] == [] and s["kernel_count"] == 1, s
    s = summary(normalize_p1, torch.randn(5, 3))
    assert s["extern_ops"] != [], s
