"""Operands of batched products (bmm, matmul of 3+-d values) that torch would copy inside the
call (its reshape to [batch, rows, cols] is no view, or a matrix is neither row- nor
column-major) are copied by a generated kernel before the product, fused into the kernel that
produces them (passes/matmul_operands.h): XCiT's normalized q and k and Swin's `q * scale`
come out of their kernels in a layout bmm reads, and no torch copy runs inside the product.
Values are eager's; so are the products' result layouts."""

import pytest
import torch
import torch.nn.functional as F
from helpers import aten_ops

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def copies(fn, *args):
    return aten_ops(fn, *args)["aten::copy_"]  # clone and contiguous copy through copy_


def summary(fn, *args):
    torchlite.reset()
    return _C.partition_summary(torchlite.explain(fn)(*args).graphs[0])


def compiled_matches(fn, *args, rtol=None, atol=None):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=rtol, atol=atol)
    return compiled


# XCiT's cross-covariance attention (timm xcit.py, XCA.forward): q and k normalized over the
# tokens, attention over channels.
def xca(x, w, temperature, heads=4):
    b, n, c = x.shape
    qkv = F.linear(x, w).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 4, 1)
    q, k, v = qkv.unbind(0)
    q = F.normalize(q, dim=-1)
    k = F.normalize(k, dim=-1)
    attn = (q @ k.transpose(-2, -1)) * temperature
    attn = attn.softmax(dim=-1)
    return (attn @ v).permute(0, 3, 1, 2).reshape(b, n, c)


# Swin's window attention (timm swin_transformer.py, WindowAttention without fused attention).
def window_attention(x, w, bias, heads=4):
    b, n, _ = x.shape
    qkv = F.linear(x, w).reshape(b, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q = q * 0.25
    attn = q @ k.transpose(-2, -1)
    attn = (attn + bias).softmax(-1)
    return (attn @ v).transpose(1, 2).reshape(b, n, -1)


@needs_cpu_kernels
@pytest.mark.parametrize("b,n,c", [(2, 16, 32), (3, 7, 12)])
def test_xcit_attention_runs_no_torch_copies_and_equals_eager(b, n, c):
    x, w = torch.randn(b, n, c), torch.randn(3 * c, c) / c**0.5
    t = torch.rand(4, 1, 1) + 0.5
    compiled = compiled_matches(xca, x, w, t)
    assert copies(compiled, x, w, t) == 0, aten_ops(compiled, x, w, t)
    assert copies(xca, x, w, t) == 3  # eager: q, k.T and v copied inside the matmuls
    s = summary(xca, x, w, t)
    # q and k: one kernel normalizing both (each written in the layout bmm reads: sibling
    # reductions over the one product), the softmax, v's copy
    assert s["kernel_count"] == 3, s["kernels"]
    assert s["extern_ops"].count("operator.matmul") == 2


@needs_cpu_kernels
@pytest.mark.parametrize("b,n,c", [(4, 16, 32), (2, 9, 8)])
def test_window_attention_runs_no_torch_copies_and_equals_eager(b, n, c):
    x, w = torch.randn(b, n, c), torch.randn(3 * c, c) / c**0.5
    bias = torch.randn(4, n, n)
    compiled = compiled_matches(window_attention, x, w, bias)
    assert copies(compiled, x, w, bias) == 0, aten_ops(compiled, x, w, bias)
    # q * scale writes q for bmm (no copy of its own), k.T and v copies, all three in one kernel
    # (they read one product: passes/fuse.cpp); the softmax, the result's transpose-reshape
    assert summary(window_attention, x, w, bias)["kernel_count"] == 3


def scaled_bmm(a, b):
    # a kernel result transposed per matrix (column-major: bmm reads it) and one whose inner
    # dim is the batch (no unit stride in its matrices: torch would copy it)
    return torch.bmm((a * 2).transpose(1, 2), (b + 1).permute(2, 0, 1)) + 1


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bmm_of_permuted_kernel_results_equals_eager(dtype):
    a, b = torch.randn(3, 5, 4, dtype=dtype), torch.randn(5, 6, 3, dtype=dtype)
    compiled = compiled_matches(scaled_bmm, a, b)
    out = compiled(a, b)
    assert out.stride() == scaled_bmm(a, b).stride()
    assert copies(compiled, a, b) == 0, aten_ops(compiled, a, b)
    # `b + 1` is written as the dense [3, 5, 6] bmm reads (captured: [1, 18, 3], no unit stride)
    kernels = summary(scaled_bmm, a, b)["kernels"]
    assert any("strides=[1,18,3]" in k and "strides=[30,6,1] = " in k for k in kernels), kernels


def products_read_as_they_are(q, k, mask):
    s = (q * 2) @ k.transpose(-2, -1)  # q dense, k.T column-major: nothing to copy
    return (s + mask) @ k  # a batch broadcast mask: its sum is dense


@needs_cpu_kernels
def test_operands_bmm_reads_as_they_are_get_no_copy():
    q, k, mask = torch.randn(2, 3, 8, 4), torch.randn(2, 3, 8, 4), torch.randn(1, 3, 8, 8)
    compiled_matches(products_read_as_they_are, q, k, mask)
    s = summary(products_read_as_they_are, q, k, mask)
    assert s["kernel_count"] == 2, s["kernels"]
    assert not any("contiguous" in op for op in s["extern_ops"])


def broadcast_operand(x, w):
    # (1, 3, 4, 6), batch-innermost: broadcast over x's batch, torch expands and copies it
    # whatever its layout, so a copy before the product would be one more
    return x @ (w * 3).permute(0, 3, 1, 2)


@needs_cpu_kernels
def test_a_broadcast_operand_is_left_to_torch_and_equals_eager():
    x, w = torch.randn(2, 3, 5, 4), torch.randn(1, 4, 6, 3)
    compiled_matches(broadcast_operand, x, w)
    assert summary(broadcast_operand, x, w)["kernel_count"] == 1


@needs_cpu_kernels
def test_setting_off_leaves_the_copies_to_torch(monkeypatch):
    x, w = torch.randn(2, 16, 32), torch.randn(96, 32) / 32**0.5
    t = torch.rand(4, 1, 1) + 0.5
    monkeypatch.setattr(config, "matmul_layouts", False)
    compiled = compiled_matches(xca, x, w, t)
    assert copies(compiled, x, w, t) == 3


def self_product(x):
    y = (x * 2).permute(1, 0, 2)
    return y @ y.transpose(1, 2)


@needs_cpu_kernels
def test_one_value_read_twice_is_copied_once_and_gradients_match():
    x = torch.randn(4, 3, 5)
    compiled_matches(self_product, x)
    xg = x.clone().requires_grad_()
    torchlite.reset()
    out = torchlite.compile(self_product)(xg)
    out.sum().backward()
    xe = x.clone().requires_grad_()
    self_product(xe).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)


def attention_then_projection(x, w, t, pw, pb):
    # XCiT's `(attn @ v).permute(0, 3, 1, 2).reshape(b, n, c)` is a view with tokens innermost:
    # torch's linear would run it as a batched matmul plus a bias add of its own
    return F.linear(xca(x, w, t), pw, pb)


@needs_cpu_kernels
def test_a_linear_reads_a_strided_input_copied_once_and_equals_eager():
    x, w = torch.randn(2, 16, 32), torch.randn(96, 32) / 32**0.5
    t, pw, pb = torch.rand(4, 1, 1) + 0.5, torch.randn(24, 32), torch.randn(24)
    args = (x, w, t, pw, pb)
    compiled = compiled_matches(attention_then_projection, *args)
    ops = aten_ops(compiled, *args)
    assert ops["aten::add_"] == 0 and ops["aten::addmm"] == 1 and ops["aten::bmm"] == 2, ops


def alibi_scores(q, k, alibi):
    # BLOOM's scores: baddbmm(alibi, q, k.T, beta=1, alpha=scale) over heads flattened into the
    # batch; here q comes from a kernel with its batch innermost (no unit stride in a matrix)
    return torch.baddbmm(alibi, (q * 2).permute(2, 0, 1), k.transpose(1, 2), alpha=0.5).softmax(-1)


@needs_cpu_kernels
def test_baddbmm_operand_is_copied_by_its_producer_and_equals_eager():
    q, k, alibi = torch.randn(7, 8, 6), torch.randn(6, 7, 8), torch.randn(6, 1, 7)
    compiled_matches(alibi_scores, q, k, alibi)
    # NOTE: no copy count here: the CPU baddbmm copies its (broadcast) input into the result
    kernels = summary(alibi_scores, q, k, alibi)["kernels"]
    assert any("strides=[1,48,6]" in k and "strides=[56,8,1] = " in k for k in kernels), kernels


def batch_major_by_matrix(x, w):
    # [B, N, K] with the batch inside the rows: no fold by a view, but torch runs it batched
    # over w expanded, reading it as it is: nothing to copy
    return (x * 2).transpose(0, 1) @ w


@needs_cpu_kernels
def test_a_folded_operand_torch_reads_batched_gets_no_copy():
    x, w = torch.randn(5, 3, 4), torch.randn(4, 6)
    compiled = compiled_matches(batch_major_by_matrix, x, w)
    assert copies(compiled, x, w) == 0
    assert summary(batch_major_by_matrix, x, w)["kernel_count"] == 1
