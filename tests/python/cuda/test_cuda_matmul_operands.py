"""On CUDA: operands of batched products that torch would copy inside the product (attention's
q, k.T and v as XCiT and Swin compute them) come out of generated kernels in a layout bmm reads
(passes/matmul_operands.h): no torch copy kernel runs, values are eager's. A single patch
embedding convolution read channels innermost runs channels-last (passes/channels_last.h)."""

import os
import sys

import pytest
import torch
from torch import nn

import torchlite

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "passes"))
from helpers import aten_ops
from test_matmul_operands import window_attention, xca

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("which", ["xca", "window"])
def test_attention_operands_need_no_torch_copies(dtype, which):
    b, n, c = 4, 49, 64
    x = torch.randn(b, n, c, device="cuda", dtype=dtype)
    w = (torch.randn(3 * c, c, device="cuda") / c**0.5).to(dtype)
    if which == "xca":
        fn, extra = xca, torch.rand(4, 1, 1, device="cuda", dtype=dtype) + 0.5
    else:
        fn, extra = window_attention, torch.randn(4, n, n, device="cuda", dtype=dtype)
    torchlite.reset()
    compiled = torchlite.compile(fn)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(x, w, extra), fn(x, w, extra), **tol)
        ops = aten_ops(compiled, x, w, extra)
    assert ops["aten::copy_"] == 0, ops


class _PatchEmbed(nn.Module):
    def __init__(self, c=96):
        super().__init__()
        self.proj = nn.Conv2d(3, c, 4, stride=4)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


def test_half_patch_embedding_runs_channels_last_and_matches_eager():
    m = _PatchEmbed().eval().to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, 3, 64, 64, device="cuda", dtype=torch.bfloat16)
    torchlite.reset()
    before = torchlite.counters()["channels_last_convs"]
    with torch.no_grad():
        got, want = torchlite.compile(m)(x), m(x)
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
    assert got.stride() == want.stride()
    assert torchlite.counters()["channels_last_convs"] - before == 1
