"""Runtime-size CUDA kernels with the model's constant sizes as literals (softmax, sum, amax,
var rows over a parameter's width; pointwise kernels without a scalar tail:
tests/python/passes/test_cuda_static_axes.py checks their text) against eager under
dynamic=True, over row counts that change alignment (1, odd, not whole packs), float32 and
bfloat16; the programs compiled at the second size serve every later one."""

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


class _Rows(torch.nn.Module):
    """Reductions and pointwise ops over the width of a parameter (768 or 1000)."""

    def __init__(self, width, dtype):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(width, dtype=dtype), requires_grad=False)

    def forward(self, x):
        h = x * self.w
        p = torch.softmax(h, -1)
        s = h.float().sum(-1, keepdim=True)
        m = h.amax(-1, keepdim=True)
        v = h.float().var(-1, keepdim=True)
        g = F.gelu(h, approximate="tanh")
        return p, s, m, v, g


@pytest.mark.parametrize("width", [768, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_over_a_parameter_width_match_eager_at_every_row_count(dtype, width):
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    model = _Rows(width, dtype).cuda()
    compiled = torchlite.compile(model, dynamic=True)
    compiles = []
    for rows in [2, 1, 7, 64, 129, 333, 4096, 3, 2049]:
        x = torch.randn(rows, width, device="cuda", dtype=dtype)
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), **tol)
        compiles.append(torchlite.counters()["nvrtc_compiles"] - before)
    # few rows take other row strategies (block rows) than many (warp rows): a few programs,
    # none once both were seen
    assert sum(compiles[-2:]) == 0, compiles


class _Heads(torch.nn.Module):
    """Attention-style views: [b, t, 12, 64] from a linear, sums over heads x dims."""

    def __init__(self, dtype):
        super().__init__()
        self.proj = torch.nn.Linear(64, 768, dtype=dtype)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.proj(x).view(b, t, 12, 64)
        return h.sum((-2, -1)), torch.softmax(h, -1), F.gelu(h).transpose(1, 2).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_views_match_eager_over_sequence_lengths(dtype):
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    model = _Heads(dtype).cuda()
    compiled = torchlite.compile(model)
    compiles = []
    for t in [5, 7, 1, 37, 61, 64, 211, 3, 511]:
        x = torch.randn(3, t, 64, device="cuda", dtype=dtype)
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), **tol)
        compiles.append(torchlite.counters()["nvrtc_compiles"] - before)
    assert sum(compiles[-2:]) == 0, compiles
