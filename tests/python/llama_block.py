"""The Llama-style decoder block of the tests and of bench/distributed.py's FSDP2 model (sized
by its caller): RMSNorm, a fused qkv projection unbound into rotary q/k and v, SDPA, SwiGLU."""

import torch
import torch.nn.functional as F


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


def rotate_half_backward(g, cos, sin):
    """rotary's gradient: both halves are slices of one product with sin."""
    h = g.shape[-1] // 2
    gs = g * sin
    return g * cos + torch.cat([gs[..., h:], -gs[..., :h]], -1)


def swiglu_backward(gu, g):
    """SwiGLU's gradient: the gate's float copy feeds both halves."""
    n = gu.shape[-1] // 2
    gate = gu[..., :n].float()
    s = gate.sigmoid()
    up = gu[..., n:].float()
    return torch.cat([g * up * s * (1 + gate * (1 - s)), g * gate * s], -1).to(gu.dtype)
