"""A Llama-style block (RMSNorm, fused qkv projection unbound into rotary q/k and v, SDPA,
SwiGLU) trains compiled with its gradients equal eager's, and its backward's cat parts compute
what they share in the cat's kernel (csrc/passes/fuse.cpp `recomputable`): rotary's
`g * sin`, read by both halves of rotate_half's gradient, and SwiGLU's float copy of the
gate, read by both halves of the gate/up gradient, are no kernels of their own."""

import pytest
import torch
import torch.nn.functional as F
from train_check import compiled_backward_used

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.1 + 1)

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-5)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, inter: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.gate_up = torch.nn.Linear(d, 2 * inter, bias=False)
        self.down = torch.nn.Linear(inter, d, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, -1).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def rotary(seq: int, head_dim: int, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=inv.dtype), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def step(block, x, cos, sin):
    x = x.detach().clone().requires_grad_()
    out = block(x, cos, sin)
    out.float().square().mean().backward()
    return out, [x.grad] + [p.grad for p in block.parameters()]


@pytest.mark.parametrize(
    "dtype,d,heads,inter,seq",
    [
        (torch.float32, 32, 2, 48, 8),
        (torch.float32, 64, 4, 40, 5),
        (torch.bfloat16, 32, 4, 24, 6),
    ],
)
def test_llama_block_trains_as_eager_with_shared_cat_producers_fused(dtype, d, heads, inter, seq):
    torch.manual_seed(0)
    block = Block(d, heads, inter).to(dtype)
    cos, sin = rotary(seq, d // heads, dtype)
    x = torch.randn(2, seq, d, dtype=dtype)
    out_e, grads_e = step(block, x, cos, sin)
    block.zero_grad(set_to_none=True)
    torchlite.reset()
    torchlite.reset_counters()
    compiled = torchlite.compile(block)
    out_c, grads_c = step(compiled, x, cos, sin)
    assert compiled_backward_used(out_c)
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out_c, out_e, **tol)
    for got, want in zip(grads_c, grads_e):
        torch.testing.assert_close(got, want, **tol)
    # forward 5 (q's and k's rotary in one kernel: both read the projection's storage, which
    # the training graph's examples now say), backward 6 (RMSNorms' row and weight-gradient
    # kernels, SwiGLU's gradient cat, the q/k/v gradients' stack). Before: 6 + 9, the gate's
    # float copy and both rotary `g * sin` products stored by kernels of their own.
    assert torchlite.counters()["kernels"] == 11
