"""The compiled backward with its CPU graphs run op by op through torch (`cpu_kernels=False`,
what a build without LLVM does: the GPU machine's CPU path), under layouts its trace on meta
tensors did not see: a channels-last convolution run by torch returns channels-last where its
meta value is contiguous, and some torch backward kernels then compute wrong values silently
(CPU native_group_norm_backward with a contiguous gradient and a channels-last input). Every
gradient must match eager's (torchlite/_training.py hands saved values back in their traced
layout)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from train_check import compiled_backward_used

import torchlite

CL = torch.channels_last


def _conv_group_norm():
    conv = nn.Conv2d(3, 8, 3, padding=1).to(memory_format=CL)
    norm = nn.GroupNorm(4, 8)
    return lambda x: F.relu(norm(conv(x))), [*conv.parameters(), *norm.parameters()]


def _conv_batch_norm():
    conv = nn.Conv2d(3, 8, 3, padding=1, bias=False).to(memory_format=CL)
    norm = nn.BatchNorm2d(8)
    conv2 = nn.Conv2d(8, 4, 1).to(memory_format=CL)
    return lambda x: conv2(F.relu(norm(conv(x)))), [
        *conv.parameters(),
        *norm.parameters(),
        *conv2.parameters(),
    ]


def _permuted_layer_norm():
    conv = nn.Conv2d(3, 8, 3, padding=1).to(memory_format=CL)
    norm = nn.LayerNorm(8)

    def fn(x):
        h = conv(x).permute(0, 2, 3, 1)  # NOTE: channels last as a permuted view, ConvNeXt's way
        return norm(h).permute(0, 3, 1, 2).square()

    return fn, [*conv.parameters(), *norm.parameters()]


def _conv_transpose_group_norm():
    up = nn.ConvTranspose2d(3, 8, 2, stride=2).to(memory_format=CL)
    norm = nn.GroupNorm(2, 8)
    return lambda x: torch.tanh(norm(up(x))), [*up.parameters(), *norm.parameters()]


def _resnet_block_group_norm():
    # NOTE: the program whose input gradient was wrong on the GPU machine (max error 19)
    block = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
    ).to(memory_format=CL)

    def fn(x):
        h = block(x)
        return h + F.group_norm(h, 4)

    return fn, list(block.parameters())


BLOCKS = {
    "resnet_block_group_norm": _resnet_block_group_norm,
    "conv_group_norm": _conv_group_norm,
    "conv_batch_norm": _conv_batch_norm,
    "permuted_layer_norm": _permuted_layer_norm,
    "conv_transpose_group_norm": _conv_transpose_group_norm,
}


@pytest.mark.parametrize("input_layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_op_by_op_backward_gradients_match_eager_under_channels_last(block, input_layout):
    torch.manual_seed(0)
    fn, params = BLOCKS[block]()
    compiled = torchlite.compile(fn, options={"cpu_kernels": False})
    for shape in [(2, 3, 8, 8), (3, 3, 6, 10)]:
        x = torch.randn(shape)
        if input_layout == "channels_last":
            x = x.contiguous(memory_format=CL)
        x.requires_grad_()
        expected = fn(x)
        eager_grads = torch.autograd.grad(expected.square().sum(), [x, *params])
        actual = compiled(x)
        assert compiled_backward_used(actual)
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
        grads = torch.autograd.grad(actual.square().sum(), [x, *params])
        for g, e in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(g, e, atol=1e-3, rtol=1e-3)


@pytest.mark.skipif(not torchlite._C.has_llvm, reason="no CPU kernels in this build")
def test_cpu_kernels_off_runs_cpu_graphs_op_by_op():
    def fn(x):
        return torch.tanh(x) * 2 + 1

    x = torch.randn(8)
    counted = []
    for cpu_kernels in (True, False):
        torchlite.reset()
        before = torchlite.counters()["kernels"]
        out = torchlite.compile(fn, options={"cpu_kernels": cpu_kernels})(x)
        torch.testing.assert_close(out, fn(x))
        counted.append(torchlite.counters()["kernels"] - before)
    assert counted[0] >= 1 and counted[1] == 0, counted
