"""The fusion cost model says no (csrc/passes/fusion_cost.cpp, docs/reductions.md section 3):
broadcast producers recomputed at every point of a reduction until it turns compute-bound, and
broadcast producers re-reading large inputs per row, get kernels of their own; full-size and
cheap producers stay fused. Values equal eager's either way; the kernel count shows which way
each case went."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _kernels(fn, *args):
    """Compiles `fn`, checks its values against eager's and returns its kernel count."""
    torchlite.reset()
    before = torchlite.counters()["kernels"]
    compiled = torchlite.compile(fn)
    torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-4, atol=1e-4)
    return torchlite.counters()["kernels"] - before


def _se_pool(x):
    return F.silu(x).mean((2, 3), keepdim=True)


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_silu_before_a_spatial_mean_stays_fused_in_either_layout(channels_last):
    x = torch.randn(8, 32, 56, 56)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    assert _kernels(_se_pool, x) == 1


def _heavy(w):
    return torch.exp(torch.sin(w)) * torch.tanh(w) * torch.erf(w)


def test_a_heavy_broadcast_producer_is_not_recomputed_for_every_row():
    x, w = torch.randn(2048, 2048), torch.randn(2048)
    assert _kernels(lambda x, w: (x * _heavy(w)).sum(-1), x, w) >= 2


def test_a_cheap_broadcast_producer_is_recomputed_in_the_reduction():
    x, w = torch.randn(2048, 2048), torch.randn(2048)
    assert _kernels(lambda x, w: (x * (w * 2 + 1)).sum(-1), x, w) == 1


def test_a_broadcast_producer_of_large_inputs_is_stored_once():
    # NOTE: a and b (8 MB each) are past the model's cache; each of x's 4 rows re-reads them.
    x, a, b = torch.randn(4, 1024, 2048), torch.randn(1024, 2048), torch.randn(1024, 2048)
    assert _kernels(lambda x, a, b: (x * (a * b)).sum(-1), x, a, b) == 2


def test_the_same_producer_of_small_inputs_fuses():
    x, a, b = torch.randn(8, 64, 256), torch.randn(64, 256), torch.randn(64, 256)
    assert _kernels(lambda x, a, b: (x * (a * b)).sum(-1), x, a, b) == 1
