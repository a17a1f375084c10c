"""Linears of a few input and output features over many rows are multiply-adds in generated
kernels (passes/small_products.h): CaiT's talking-heads projections (a 4x4 linear over the heads of
a permuted [B, N, N, H] attention) ran as a dense copy and a cuBLAS/MKL product each. Now no
torch product runs for them, and the values are eager's (float32, bfloat16: rounded once, as the
product rounds). Wide linears, linears over few rows and linears that need grad keep torch's."""

import pytest
import torch
import torch.nn.functional as F
from helpers import aten_ops

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


# timm cait.py TalkingHeadAttn.forward (after the qkv split).
def talking_heads(q, k, v, wl, bl, ww, bw):
    attn = q @ k.transpose(-2, -1)
    attn = F.linear(attn.permute(0, 2, 3, 1), wl, bl).permute(0, 3, 1, 2)
    attn = attn.softmax(dim=-1)
    attn = F.linear(attn.permute(0, 2, 3, 1), ww, bw).permute(0, 3, 1, 2)
    return (attn @ v).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def heads_inputs(b, h, n, d, dtype=torch.float32):
    q, k, v = (torch.randn(b, h, n, d, dtype=dtype) for _ in range(3))
    wl, ww = (torch.randn(h, h, dtype=dtype) / h**0.5 for _ in range(2))
    bl, bw = (torch.randn(h, dtype=dtype) for _ in range(2))
    return q, k, v, wl, bl, ww, bw


def compiled_matches(fn, *args, **tol):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args), **tol)
    return compiled


@needs_cpu_kernels
@pytest.mark.parametrize("b,h,n,d", [(2, 4, 24, 8), (1, 3, 37, 5)])
def test_talking_heads_run_no_torch_linear(b, h, n, d, monkeypatch):
    args = heads_inputs(b, h, n, d)
    compiled = compiled_matches(talking_heads, *args)
    ops = aten_ops(compiled, *args)
    assert ops["aten::linear"] + ops["aten::addmm"] + ops["aten::mm"] == 0, ops
    monkeypatch.setattr(config, "small_products", False)
    compiled = compiled_matches(talking_heads, *args)
    assert aten_ops(compiled, *args)["aten::linear"] == 2


@needs_cpu_kernels
def test_talking_heads_in_bfloat16_are_as_close_as_eager():
    args = heads_inputs(2, 4, 32, 8, dtype=torch.bfloat16)
    exact = talking_heads(*(a.double() for a in args))
    torchlite.reset()
    compiled = torchlite.compile(talking_heads)
    for _ in range(2):
        out = compiled(*args).double()
        eager_err = (talking_heads(*args).double() - exact).abs().max()
        assert (out - exact).abs().max() <= 2 * eager_err


@needs_cpu_kernels
@pytest.mark.parametrize("bias", [True, False])
def test_small_linear_rounds_once_as_the_product(bias):
    x = torch.randn(64, 32, 6, dtype=torch.bfloat16)
    w = torch.randn(5, 6, dtype=torch.bfloat16)
    b = torch.randn(5, dtype=torch.bfloat16) if bias else None
    ref = F.linear(x.double(), w.double(), None if b is None else b.double())
    torchlite.reset()
    out = torchlite.compile(lambda x, w, b: F.linear(x, w, b))(x, w, b)
    assert out.dtype == torch.bfloat16 and out.shape == (64, 32, 5)
    # one rounding of the float32 sum: within half a bfloat16 step of the exact value
    assert ((out.double() - ref).abs() <= ref.abs() * 2**-8 + 1e-6).all()


@needs_cpu_kernels
def test_wide_short_or_training_linears_keep_torch_products():
    def f(x, w, s, ws):
        return F.linear(x, w).sum() + F.linear(s, ws).sum()

    x, w = torch.randn(2048, 16), torch.randn(4, 16)  # 16 input features: torch's
    s, ws = torch.randn(100, 4), torch.randn(4, 4)  # 100 rows: torch's
    compiled = compiled_matches(f, x, w, s, ws)
    assert aten_ops(compiled, x, w, s, ws)["aten::linear"] == 2
    wg, we = (torch.randn(4, 4).requires_grad_() for _ in range(2))
    with torch.no_grad():
        we.copy_(wg)
    xg = torch.randn(2048, 4)
    torchlite.reset()
    out = torchlite.compile(lambda x, w: F.linear(x, w))(xg, wg)
    out.sum().backward()
    F.linear(xg, we).sum().backward()
    torch.testing.assert_close(out, F.linear(xg, we))
    torch.testing.assert_close(wg.grad, we.grad)
