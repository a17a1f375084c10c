"""Pointwise kernels of one iteration space that read the same value from memory (an extern's
result or an input) the same way are one kernel (passes/fuse.cpp, merge_readers_of_stored_values):
swin's q * scale, k and v, sliced from one qkv product and each copied into a layout bmm reads,
were three kernels. Never kernels a path joins (one needs the other's result first, here through a
product), kernels of other shapes or that read the value in another order. Every compiled result
is checked against eager."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def kernels(fn, *args):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args))
    torchlite.reset_counters()
    compiled(*args)
    return torchlite.counters()["kernel_launches"]


# timm's swin WindowAttention without fused attention.
def window_attention(x, w, bias, heads=4):
    b, n, _ = x.shape
    qkv = F.linear(x, w).reshape(b, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    attn = (q * 0.25) @ k.transpose(-2, -1)
    attn = (attn + bias).softmax(-1)
    return (attn @ v).transpose(1, 2).reshape(b, n, -1)


@pytest.mark.parametrize("b,n,c", [(4, 16, 32), (2, 9, 8)])
def test_q_k_and_v_of_one_product_are_laid_out_by_one_kernel(b, n, c):
    x, w = torch.randn(b, n, c), torch.randn(3 * c, c) / c**0.5
    bias = torch.randn(4, n, n)
    # q, k and v in one kernel, the softmax, the result's transpose-reshape
    assert kernels(window_attention, x, w, bias) == 3


def test_readers_joined_by_a_product_stay_apart():
    def f(x, w):
        y = F.linear(x, w)
        a = (y * 2) @ w  # the product reads the first kernel's result...
        return (y + a).relu()  # ...which this kernel, reading y too, needs

    x, w = torch.randn(8, 16), torch.randn(16, 16)
    assert kernels(f, x, w) == 2


def test_readers_of_other_shapes_or_orders_stay_apart():
    def f(x, w):
        y = F.linear(x, w)
        return y.sin(), y.sum(0).cos(), y.t().contiguous() * 3

    x, w = torch.randn(8, 16), torch.randn(24, 16)
    # sin and the transposed copy iterate one space in two orders; the sum reduces
    assert kernels(f, x, w) == 3


def test_readers_of_one_input_share_a_kernel():
    def f(x):
        return x.sum(1), x.sin(), x.cos() * 2

    x = torch.randn(32, 8)
    assert kernels(f, x) == 2  # the sum, and sin and cos together
