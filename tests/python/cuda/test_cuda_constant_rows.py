"""Runtime-size CUDA kernels whose rows keep a constant length (a layer norm's, an RMSNorm's:
tests/python/passes/test_cuda_runtime_rows.py checks their text) against eager, over row counts
that change alignment (odd ones included), widths that are whole packs and lanes (768) and not
(1000), float32 and bfloat16, under dynamic=True; one CUDA program serves every row count of a
row strategy (few rows take a block a row, many a warp a row: two programs in all). Broadcast
pointwise kernels divide by runtime widths through magic numbers: checked at many shapes."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import config

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


def _add_layer_norm(x, r, w, b):
    h = x + r
    return h, F.layer_norm(h, (x.shape[-1],), w, b)


def _rms_norm(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True).to(x.dtype) + 1e-6) * w


@pytest.mark.parametrize("width", [768, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [_add_layer_norm, _rms_norm], ids=["add_layer_norm", "rms_norm"])
def test_rows_of_a_constant_length_match_eager_at_every_row_count(fn, dtype, width):
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    w = torch.randn(width, device="cuda", dtype=dtype)
    b = torch.randn(width, device="cuda", dtype=dtype)
    compiled = torchlite.compile(fn, dynamic=True)
    compiles = []
    for rows in [2, 7, 64, 129, 333, 1000, 4096] * 2:
        x = torch.randn(rows, width, device="cuda", dtype=dtype)
        args = (x, torch.randn_like(x), w, b) if fn is _add_layer_norm else (x, w)
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            out = compiled(*args)
            torch.testing.assert_close(out, fn(*args), **tol)
        compiles.append(torchlite.counters()["nvrtc_compiles"] - before)
    assert sum(compiles) <= 2 and sum(compiles[7:]) == 0, compiles


def _bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh") * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_runtime_divisors_match_eager_at_every_shape(dtype):
    # the linear index splits into (row, column) by a runtime width through a magic
    # multiplier and shift (passes/test_cuda_runtime_rows.py): widths prime, powers of two,
    # whole packs or not, rows odd
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    compiled = torchlite.compile(_bias_gelu, dynamic=True)
    for rows, width in [
        (4, 3072),
        (7, 768),
        (129, 1000),
        (3, 1024),
        (33, 997),
        (1000, 7),
        (2, 65536),
    ]:
        x = torch.randn(rows, width, device="cuda", dtype=dtype)
        b = torch.randn(width, device="cuda", dtype=dtype)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, b), _bias_gelu(x, b), **tol)
