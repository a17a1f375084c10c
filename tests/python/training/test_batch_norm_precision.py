"""A training batch norm's output is computed as ATen computes it (`x * alpha + beta` per
channel), so its rounding does not get amplified in backward: timm's hardcorenas_b (train mode,
random weights) had input gradients 4.0e-3 from float64 with torch._decomp's
`(x - mean) * rstd * weight + bias`, where eager float32 is 5.8e-7 (torchlite/_training.py,
_batch_norm_affine_output). Gradients are measured against a float64 eager run."""

import copy

import pytest
import torch
from torch import nn

import torchlite


def _input_grad(module, x, compiled=False):
    module = copy.deepcopy(module)
    x = x.clone().requires_grad_()
    y = (torchlite.compile(module) if compiled else module)(x)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype)
    (y * w).sum().backward()
    return y.detach(), x.grad, [p.grad for p in module.parameters()]


def _error(got, truth):
    return float((got.double() - truth).norm() / truth.norm())


def _assert_as_precise_as_eager(module, x):
    torchlite.reset()
    y64, gx64, gp64 = _input_grad(copy.deepcopy(module).double(), x.double())
    y32, gx32, gp32 = _input_grad(module, x)
    yc, gxc, gpc = _input_grad(module, x, compiled=True)
    assert _error(yc, y64) <= 4 * _error(y32, y64) + 1e-7
    assert _error(gxc, gx64) <= 4 * _error(gx32, gx64) + 1e-7, (
        _error(gxc, gx64),
        _error(gx32, gx64),
    )
    for c, e, t in zip(gpc, gp32, gp64, strict=True):
        assert _error(c, t) <= 4 * _error(e, t) + 1e-6


def test_hardcorenas_prefix_gradients_are_as_precise_as_eager():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("hardcorenas_b", pretrained=False).train()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        x = model.conv_stem(x)  # the prefix that showed it: bn1 (+ hardswish) and three stages
    _assert_as_precise_as_eager(nn.Sequential(model.bn1, *model.blocks[:3]), x)


@pytest.mark.parametrize("dims", [2, 3, 4])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_layers_match_eager_in_train_mode(dims, affine):
    torch.manual_seed(0)
    norm = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[dims](8, affine=affine)
    shape = {2: (16, 8), 3: (4, 8, 5), 4: (2, 8, 5, 3)}[dims]
    model = nn.Sequential(norm, nn.ReLU(), copy.deepcopy(norm)).train()
    x = torch.randn(shape) * 3 + 2
    _assert_as_precise_as_eager(model, x)
    eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
    eager(x)
    torchlite.compile(compiled)(x)
    for a, b in zip(compiled.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(a, b)  # running statistics as eager's


def test_bfloat16_batch_norm_is_as_precise_as_eager():
    # NOTE: the batch norm computes in float32 and rounds its output to bfloat16, as eager.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).train().bfloat16()
    _assert_as_precise_as_eager(model, torch.randn(2, 3, 9, 9, dtype=torch.bfloat16))


@pytest.mark.parametrize("shift", [30.0, 100.0])
@pytest.mark.parametrize("shape", [(8, 3, 32, 32), (4, 2, 64, 64)])
def test_batch_norm_far_from_zero_is_as_precise_as_eager(shape, shift):
    # NOTE: values far from zero (mean 200x the std): ATen's CPU kernel reduces the statistics
    # in double and rounds beta = bias - mean * alpha and x * alpha + beta once each (fmas);
    # float32 statistics and rounded products made the output up to 7x eager's error.
    torch.manual_seed(0)
    norm = nn.BatchNorm2d(shape[1]).train()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-1, 1)
    x = torch.randn(shape) * 0.5 + shift
    torchlite.reset()
    compiled, eager, exact = copy.deepcopy(norm), copy.deepcopy(norm), copy.deepcopy(norm).double()
    y = torchlite.compile(compiled)(x).detach()
    y32, y64 = eager(x).detach(), exact(x.double()).detach()
    assert _error(y, y64) <= 1.1 * _error(y32, y64), (_error(y, y64), _error(y32, y64))
    torch.testing.assert_close(y, y32)
    for a, b in zip(compiled.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(a, b)
    _assert_as_precise_as_eager(norm, x)
