"""torch.nn.functional ops captured whole and equal to eager, and grad-mode blocks."""

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, check

DTYPES = [torch.float32, torch.float64]
SHAPES = [(4, 8), (2, 3, 8)]

ACTIVATIONS = {
    "relu": lambda x: F.relu(x),
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": lambda x: F.elu(x),
    "softplus": lambda x: F.softplus(x),
    "hardtanh": lambda x: F.hardtanh(x),
    "softmax": lambda x: F.softmax(x, dim=-1),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "softmax_dim0": lambda x: F.softmax(x, dim=0),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "normalize": lambda x: F.normalize(x, dim=-1),
    "dropout_eval": lambda x: F.dropout(x, p=0.5, training=False),
    "pad": lambda x: F.pad(x, (1, 2)),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_functional_matches_eager(name, dtype, shape):
    check(ACTIVATIONS[name], torch.randn(shape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_with_affine_matches_eager(dtype):
    def fn(x, w, b):
        return F.layer_norm(x, (8,), w, b, eps=1e-6)

    check(
        fn, torch.randn(3, 8, dtype=dtype), torch.randn(8, dtype=dtype), torch.randn(8, dtype=dtype)
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_matches_eager(dtype):
    def fn(x, w, b):
        return F.linear(x, w, b), F.linear(x, w)

    check(
        fn,
        torch.randn(2, 3, 8, dtype=dtype),
        torch.randn(5, 8, dtype=dtype),
        torch.randn(5, dtype=dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1)])
def test_conv2d_matches_eager(dtype, stride, padding):
    def fn(x, w, b):
        return F.relu(F.conv2d(x, w, b, stride=stride, padding=padding))

    check(
        fn,
        torch.randn(2, 3, 8, 8, dtype=dtype),
        torch.randn(4, 3, 3, 3, dtype=dtype),
        torch.randn(4, dtype=dtype),
    )


def test_pooling_matches_eager():
    def fn(x):
        return F.max_pool2d(x, 2), F.avg_pool2d(x, 2, stride=1), F.adaptive_avg_pool2d(x, 1)

    check(fn, torch.randn(1, 2, 6, 6))


def test_cross_entropy_matches_eager():
    def fn(logits, target):
        return F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="none")

    check(fn, torch.randn(4, 5), torch.tensor([0, 4, 2, 1]))


def test_losses_match_eager():
    def fn(a, b):
        return F.mse_loss(a, b), F.l1_loss(a, b), F.binary_cross_entropy_with_logits(a, b.sigmoid())

    check(fn, torch.randn(3, 4), torch.randn(3, 4))


def test_embedding_and_one_hot_match_eager():
    def fn(idx, table):
        return F.embedding(idx, table), F.one_hot(idx, num_classes=10)

    check(fn, torch.tensor([[1, 3], [9, 0]]), torch.randn(10, 4))


def test_scaled_dot_product_attention_matches_eager():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(
            q, k, v, is_causal=True
        )

    check(
        fn,
        torch.randn(1, 2, 5, 8),
        torch.randn(1, 2, 5, 8),
        torch.randn(1, 2, 5, 8),
        atol=1e-5,
        rtol=1e-4,
    )


def test_interpolate_matches_eager():
    def fn(x):
        return F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(
            x, size=(3, 3), mode="bilinear", align_corners=False
        )

    check(fn, torch.randn(1, 2, 4, 4))


# --- grad mode -------------------------------------------------------------------------------


def test_no_grad_block_outputs_do_not_require_grad():
    def fn(x, w):
        y = x * w
        with torch.no_grad():
            z = x * w + 1
        return y, z

    # check() compares requires_grad of every output with eager.
    check(fn, torch.randn(3), torch.randn(3, requires_grad=True))


def test_enable_grad_inside_no_grad_matches_eager():
    def fn(x, w):
        with torch.no_grad():
            a = x * w
            with torch.enable_grad():
                b = x * w
            c = a + b
        return a, b, c

    check(fn, torch.randn(3), torch.randn(3, requires_grad=True))


def test_compiled_call_under_outer_no_grad_matches_eager():
    def fn(x, w):
        return (x * w).sum(), torch.is_grad_enabled()

    w = torch.randn(3, requires_grad=True)
    compiled = check(fn, torch.randn(3), w)
    with torch.no_grad():
        assert_same(compiled(torch.ones(3), w), fn(torch.ones(3), w))


def test_grad_mode_restored_after_compiled_call():
    def fn(x):
        with torch.no_grad():
            return x * 2

    compiled = check(fn, torch.randn(3, requires_grad=True))
    compiled(torch.randn(3))
    assert torch.is_grad_enabled()


def test_set_grad_enabled_and_detach_match_eager():
    def fn(x, w):
        with torch.set_grad_enabled(False):
            a = x * w
        return a, (x * w).detach(), torch.is_grad_enabled()

    check(fn, torch.randn(3), torch.randn(3, requires_grad=True))
