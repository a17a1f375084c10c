"""A float16/bfloat16 op inside a fused kernel rounds its result to its dtype, as eager stores
it: exp of a half overflows to inf, a square past 65504 too, and small differences vanish
where eager's rounding makes them vanish. Compiled results equal eager bit for bit here."""

import pytest
import torch
from helpers import counters

import torchlite

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _exp_times(x, y):
    return torch.exp(x) * y  # half exp, then float32 math: inf where exp overflowed


def _square_plus(x, y):
    return (x * x).float() + y  # 300 * 300 overflows float16


def _difference(x, y):
    return ((x + 1) - x).float() * y  # 1 vanishes next to large bf16 values


def _softmax_scale(x, y):
    return torch.softmax(x * 3, -1).float() * y  # a reduction's half result is rounded too


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [_exp_times, _square_plus, _difference, _softmax_scale])
def test_fused_half_intermediates_round_as_eager(device, dtype, fn):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    torch.manual_seed(0)
    x = (torch.randn(64, 33, device=device) * 300).to(dtype)
    x[0, :4] = torch.tensor([12.0, 89.0, 300.0, 1000.0])  # exp / square overflows in float16
    y = torch.randn(64, 33, device=device)
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    before = counters()["kernels"]
    expected = fn(x, y)
    actual = compiled(x, y)
    assert counters()["kernels"] > before
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
