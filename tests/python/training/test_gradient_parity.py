"""Gradients of compiled functions equal eager's: for each lowered op with a derivative, the
compiled forward and the backward traced from torch's derivative formulas, in float32 and
float64, over several shapes."""

import pytest
import torch
import torch.nn.functional as F
from train_check import compiled_backward_used

import torchlite


def _pos(x):
    return x.abs() + 0.5


UNARY = {
    "relu": lambda x: torch.relu(x) * 2,
    "gelu": lambda x: F.gelu(x) + 1,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh") * x,
    "silu": lambda x: F.silu(x) - x,
    "tanh": lambda x: torch.tanh(x * 2),
    "sigmoid": lambda x: torch.sigmoid(x) * x,
    "exp": lambda x: torch.exp(x * 0.5),
    "log": lambda x: torch.log(_pos(x)),
    "sqrt_rsqrt": lambda x: torch.sqrt(_pos(x)) + torch.rsqrt(_pos(x)),
    "sin_cos": lambda x: torch.sin(x) * torch.cos(x),
    "pow": lambda x: x.pow(3) + x**2,
    "div": lambda x: x / _pos(x + 1),
    "clamp": lambda x: x.clamp(-0.5, 0.5) * 3,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1) + 1,
    "elu": lambda x: F.elu(x) * 2,
    "hardtanh": lambda x: F.hardtanh(x) + x,
    "softmax": lambda x: torch.softmax(x, -1) * x,
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "sum_dim": lambda x: (x * x).sum(-1),
    "mean_keepdim": lambda x: x - x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(-1) + x.sum(-1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]) * 2,
    "where": lambda x: torch.where(x > 0, x * 2, -x),
    "masked_fill": lambda x: x.masked_fill(x < 0, 0.0) * x,
    "permute_reshape": lambda x: (x.transpose(0, -1) * 2).reshape(-1).cumsum(0)[-1] + x.sum(),
    "expand": lambda x: x[..., :1].expand(x.shape) * x,
    "cat": lambda x: torch.cat([x, x * 2], -1).exp(),
}

SHAPES = [(3, 4), (2, 3, 6)]


def _check_grads(fn, inputs, dtype):
    inputs_e = [i.detach().clone().requires_grad_(i.requires_grad) for i in inputs]
    torchlite.reset()
    out = torchlite.compile(fn)(*inputs)
    expected = fn(*inputs_e)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(out, expected, **tol)
    grad = torch.randn_like(expected)
    out.backward(grad)
    expected.backward(grad)
    for a, b in zip(inputs, inputs_e, strict=True):
        if b.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, **tol)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_op_gradients_match_eager(name, shape, dtype):
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    out = _check_grads(UNARY[name], [x], dtype)
    assert compiled_backward_used(out)


def _binary(x, y):
    return (x * y + x / (y.abs() + 1) - torch.maximum(x, y)).sigmoid()


def _broadcast(x, b):
    return torch.tanh(x + b) * b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_binary_op_gradients_match_eager_for_both_inputs(shape, dtype):
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    y = torch.randn(shape, dtype=dtype, requires_grad=True)
    assert compiled_backward_used(_check_grads(_binary, [x, y], dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_broadcast_gradients_are_summed_like_eager(shape, dtype):
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    b = torch.randn(shape[-1], dtype=dtype, requires_grad=True)
    assert compiled_backward_used(_check_grads(_broadcast, [x, b], dtype))


def _losses(logits, target):
    return F.cross_entropy(logits, target) + F.mse_loss(logits.tanh(), logits.detach() * 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 4])
def test_loss_gradients_match_eager(batch, dtype):
    logits = torch.randn(batch, 7, dtype=dtype, requires_grad=True)
    target = torch.randint(0, 7, (batch,))
    assert compiled_backward_used(_check_grads(_losses, [logits, target], dtype))


def _embed(weight, idx):
    return F.embedding(idx, weight).sum(1).relu()


def test_embedding_gradient_accumulates_repeated_rows_like_eager():
    weight = torch.randn(10, 4, requires_grad=True)
    idx = torch.tensor([[1, 2, 1], [3, 1, 9]])
    assert compiled_backward_used(_check_grads(_embed, [weight, idx], torch.float32))
