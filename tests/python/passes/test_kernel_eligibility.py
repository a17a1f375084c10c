"""Which graphs run as fused kernels: values autograd must track stay torch ops, but reading a
parameter (or a view of one, which reports requires_grad even under no_grad) does not stop
fusion."""

import pytest
import torch
from torch import nn

import torchlite

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class LayerScale(nn.Module):
    """timm's ConvNeXt block tail: a per-channel parameter reshaped to broadcast."""

    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        return torch.relu(x * self.gamma.reshape(1, -1, 1, 1) + 1).sigmoid()


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 8, 5, 5), (1, 8, 3, 7)])
def test_a_reshaped_parameter_under_no_grad_still_fuses(shape):
    m = LayerScale(shape[1])
    x = torch.randn(shape)
    torchlite.reset()
    before = torchlite.counters()["kernels"]
    compiled = torchlite.compile(m)
    with torch.no_grad():
        expected = m(x)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert not actual.requires_grad
    assert torchlite.counters()["kernels"] > before


def test_with_grad_enabled_the_graph_stays_differentiable():
    m = LayerScale(4)
    x = torch.randn(2, 4, 3, 3)
    torchlite.reset()
    compiled = torchlite.compile(m)
    out = compiled(x)
    assert out.requires_grad
    out.sum().backward()
    got = m.gamma.grad.clone()
    m.gamma.grad = None
    m(x).sum().backward()
    torch.testing.assert_close(got, m.gamma.grad)


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: a no-op cast of the weight (`weight.float()`) and `1 + weight`."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x):
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (out * (1.0 + self.weight.float())).type_as(x)


def _kernels_made(fn, *args, mode=torch.no_grad):
    torchlite.reset()
    before = torchlite.counters()["kernels"]
    with mode():
        out = fn(*args)
    return out, torchlite.counters()["kernels"] - before


@needs_cpu_kernels
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8)])
def test_a_no_op_cast_of_a_parameter_under_no_grad_gets_kernels(mode, shape):
    m = GemmaRMSNorm(shape[-1])
    x = torch.randn(shape)
    actual, kernels = _kernels_made(torchlite.compile(m), x, mode=mode)
    with mode():
        expected = m(x)
    torch.testing.assert_close(actual, expected)
    assert not actual.requires_grad
    assert kernels > 0


@needs_cpu_kernels
def test_with_grad_enabled_the_same_model_keeps_its_gradients():
    m = GemmaRMSNorm(8)
    x = torch.randn(3, 8)
    out = torchlite.compile(m)(x)
    assert out.requires_grad
    out.square().sum().backward()
    got = m.weight.grad.clone()
    m.weight.grad = None
    m(x).square().sum().backward()
    torch.testing.assert_close(got, m.weight.grad)


def _returns_the_weight_itself(w, x):
    return w.float(), (x * 2).relu()


def test_a_returned_no_op_cast_of_a_parameter_is_the_parameter_itself():
    w = torch.randn(5, requires_grad=True)
    x = torch.randn(5)
    with torch.no_grad():
        same, y = torchlite.compile(_returns_the_weight_itself)(w, x)
    assert same is w
    torch.testing.assert_close(y, (x * 2).relu())


def _update_in_place(w, x):
    w.mul_(0.5)
    return (w + x).relu()


@needs_cpu_kernels
def test_an_in_place_update_of_a_parameter_under_no_grad_matches_eager():
    w = torch.randn(6, requires_grad=True)
    w_eager = w.detach().clone().requires_grad_()
    x = torch.randn(6)
    out, kernels = _kernels_made(torchlite.compile(_update_in_place), w, x)
    with torch.no_grad():
        expected = _update_in_place(w_eager, x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.detach(), w_eager.detach())
    assert w._version == w_eager._version
    assert kernels > 0


def _fresh_leaf(x):
    return torch.ones(3, requires_grad=True), (x * 3).sin()


def test_a_fresh_leaf_that_requires_grad_keeps_the_flag_under_no_grad():
    x = torch.randn(3)
    with torch.no_grad():
        leaf, y = torchlite.compile(_fresh_leaf)(x)
    assert leaf.requires_grad and leaf.is_leaf
    torch.testing.assert_close(y, (x * 3).sin())


def _enable_grad_inside(w, x):
    with torch.enable_grad():
        y = w * x
    return y.relu() + 1


def test_enable_grad_inside_no_grad_still_records():
    w = torch.randn(4, requires_grad=True)
    x = torch.randn(4)
    with torch.no_grad():
        out = torchlite.compile(_enable_grad_inside)(w, x)
        expected = _enable_grad_inside(w, x)
    assert out.requires_grad == expected.requires_grad
    torch.testing.assert_close(out, expected)


def _with_a_meta_tensor(x):
    # A value on a device without kernels ("meta") next to CPU math.
    shape_only = torch.zeros(x.shape[0], 3, device="meta") + 1
    return torch.sigmoid(x * 2 + 1) * x - torch.tanh(x), shape_only


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 9)])
def test_a_value_on_another_device_leaves_the_cpu_math_compiled(shape, dtype):
    # The other device's ops stay torch calls; before, any second device ran the graph op by op.
    x = torch.randn(shape, dtype=dtype)
    actual, kernels = _kernels_made(torchlite.compile(_with_a_meta_tensor, fullgraph=True), x)
    expected = _with_a_meta_tensor(x)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1].device.type == "meta" and actual[1].shape == expected[1].shape
    assert kernels > 0
