"""Meta results inferred in C++ (capture/fast_meta.cpp) for CUDA inputs: the traced values keep
the operands' device, and every fast answer matches torch's meta kernel (TORCHLITE_CHECK_META)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_fast_meta_ops_on_cuda_keep_device_and_match_eager(monkeypatch, dtype):
    monkeypatch.setattr(torchlite.config, "check_meta", True)
    w = torch.randn(32, 16, device="cuda", dtype=dtype)
    b = torch.randn(32, device="cuda", dtype=dtype)

    def fn(x, mask):
        h = F.gelu(F.linear(F.layer_norm(x, (16,)), w, b))
        h = torch.where(mask, h.softmax(-1), 0.0) + h.sum(-1, keepdim=True)
        y = torch.cat([h, h.tril()], 0) * 2 + 1
        return y, str(y.device), str((x > 0).device), y.amax().device.type

    x = torch.randn(4, 8, 16, device="cuda", dtype=dtype)
    check(fn, x, torch.rand(4, 8, 32, device="cuda") > 0.5)


def test_fast_meta_channels_last_cuda_activations_match_eager(monkeypatch):
    monkeypatch.setattr(torchlite.config, "check_meta", True)
    conv = torch.nn.Conv2d(3, 8, 3).cuda().to(memory_format=torch.channels_last)

    def fn(x):
        y = F.silu(conv(x))
        return y * torch.sigmoid(y.mean((2, 3), keepdim=True)), y.stride()

    x = torch.randn(2, 3, 16, 16, device="cuda").to(memory_format=torch.channels_last)
    with torch.no_grad():
        check(fn, x)
