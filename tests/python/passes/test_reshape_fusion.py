"""Pointwise ops fuse across reshapes that split or merge axes (csrc/passes/move_reshapes.h):
the reshape moves above the pointwise ops before it, so `logits.float().view(-1, V)` is read by
log_softmax's kernel instead of written out first. Values equal eager's at odd sizes in float32
and bfloat16, and the kernel counts show what fused."""

import pytest
import torch
import torch.nn.functional as F
from helpers import close_for_dtype as close
from helpers import one_graph_kernels as run

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def cast_then_log_softmax(x):
    return torch.log_softmax(x.float().view(-1, x.shape[-1]), -1)


def merged_rows_sum(x, b):
    return ((x * 2 + b).reshape(-1, x.shape[-1]).exp()).sum(-1)


def split_rows_softmax(x):
    return (x.exp() + 1).view(2, -1, x.shape[-1]).softmax(-1)


def flatten_then_scale(x, y):
    return (torch.sigmoid(x) * y).flatten(1).sum(1) * 3


def back_and_forth(x, y):
    return x.exp().view(-1, x.shape[-1]).view(x.shape) * y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 3, 7), (3, 5, 33), (1, 4, 9)])
def test_a_cast_before_a_merging_view_computes_in_log_softmax(shape, dtype):
    x = torch.randn(shape, dtype=dtype)
    out, kernels = run(cast_then_log_softmax, x)
    torch.testing.assert_close(out, cast_then_log_softmax(x))
    assert kernels == 1  # before: the float32 cast was a kernel of its own, written out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 3, 7), (5, 3, 11)])
def test_a_broadcast_operand_stays_broadcast_across_the_merge(shape, dtype):
    x, b = torch.randn(shape, dtype=dtype), torch.randn(shape[-1], dtype=dtype)
    out, kernels = run(merged_rows_sum, x, b)
    close(out, merged_rows_sum(x, b))
    assert kernels == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [6, 10])
def test_producers_fuse_across_a_splitting_view(rows, dtype):
    x = torch.randn(rows, 13, dtype=dtype)
    out, kernels = run(split_rows_softmax, x)
    close(out, split_rows_softmax(x))
    assert kernels == 1


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 7, 3, 3)])
def test_flatten_of_a_product_fuses_into_the_sum(shape):
    x, y = torch.randn(shape), torch.randn(shape)
    out, kernels = run(flatten_then_scale, x, y)
    close(out, flatten_then_scale(x, y))
    assert kernels == 1


def test_a_reshape_back_to_the_base_sizes_is_the_base():
    x, y = torch.randn(3, 5, 7), torch.randn(3, 5, 7)
    out, kernels = run(back_and_forth, x, y)
    close(out, back_and_forth(x, y))
    assert kernels == 1


def partly_broadcast(x, c):
    return (x + c).reshape(-1, x.shape[-1]).sum(-1)


def test_an_operand_broadcast_across_part_of_the_merge_stays_correct():
    # NOTE: c varies along axis 1 only, so its merged (axis 0, axis 1) run is neither whole nor
    # broadcast: the reshape stays where it is and the values are eager's.
    x, c = torch.randn(2, 3, 7), torch.randn(3, 1)
    out, _ = run(partly_broadcast, x, c)
    close(out, partly_broadcast(x, c))


def transposed_then_flat(x):
    return x.t().float().reshape(-1).cumsum(0)


def test_a_non_contiguous_operand_is_not_reshaped_and_values_match():
    x = torch.randn(5, 6, dtype=torch.bfloat16)
    out, _ = run(transposed_then_flat, x)
    close(out, transposed_then_flat(x))


def dtype_view(x):
    return (x * 2).view(torch.int32).view(x.shape[0], -1) + 1


def test_a_dtype_view_is_not_moved():
    x = torch.randn(4, 6)
    out, _ = run(dtype_view, x)
    torch.testing.assert_close(out, dtype_view(x))


def zero_dim_promotion(x, s):
    return (x * s).view(-1, x.shape[-1])


def test_a_zero_dim_operand_keeps_its_type_promotion():
    x, s = torch.randn(2, 3, 5, dtype=torch.bfloat16), torch.tensor(1.5)
    out, _ = run(zero_dim_promotion, x, s)
    assert out.dtype == torch.bfloat16
    close(out, zero_dim_promotion(x, s))


def returned_view(x):
    y = x.exp()
    return y.view(-1), y.view(-1).view(y.shape)


def test_a_view_the_graph_returns_stays_a_view():
    x = torch.randn(3, 4)
    (a, b), _ = run(returned_view, x)
    ea, eb = returned_view(x)
    close(a, ea)
    close(b, eb)


def cross_entropy_head(h, w, t):
    logits = h @ w
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), t.view(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_over_viewed_logits_matches_eager_gradients(dtype):
    h = torch.randn(2, 5, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(8, 11, dtype=dtype, requires_grad=True)
    t = torch.randint(0, 11, (2, 5))
    torchlite.reset()
    loss = torchlite.compile(cross_entropy_head)(h, w, t)
    grads = torch.autograd.grad(loss, (h, w))
    expected = cross_entropy_head(h, w, t)
    expected_grads = torch.autograd.grad(expected, (h, w))
    close(loss, expected)
    for g, e in zip(grads, expected_grads, strict=True):
        close(g, e)


def gelu_chain_then_merge(x, w, b):
    # A chain of pointwise ops (tanh GELU of a linear's output, as GPT-2's MLP; an operand read
    # twice) under a merging view: the whole chain moves below the view in one step.
    h = F.linear(x, w, b)
    g = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
    return (g * g).view(-1, g.shape[-1]).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 3, 7), (3, 5, 33)])
def test_a_chain_of_pointwise_ops_moves_below_the_view_whole(shape, dtype):
    x = torch.randn(shape, dtype=dtype)
    w, b = torch.randn(9, shape[-1], dtype=dtype), torch.randn(9, dtype=dtype)
    out, kernels = run(gelu_chain_then_merge, x, w, b)
    close(out, gelu_chain_then_merge(x, w, b))
    assert kernels == 1
