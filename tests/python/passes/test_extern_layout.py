"""Kernels bake in the strides meta tensors predict; when a torch op picks another layout on
real data (CPU convolutions on channels-last-strided inputs), its result is copied into the
predicted layout before a kernel reads it."""

import pytest
import torch
import torch.nn.functional as F

import torchlite


@pytest.mark.parametrize("groups", [1, 8])
def test_kernel_after_channels_last_conv_matches_eager(groups):
    w = torch.randn(8, 8 // groups, 3, 3)

    def f(y):
        return torch.relu(F.conv2d(y, w, padding=1, groups=groups)) * 2 + 1

    for shape in [(2, 8, 4, 4), (1, 8, 7, 5)]:
        y = torch.randn(shape).to(memory_format=torch.channels_last)
        torchlite.reset()
        torch.testing.assert_close(torchlite.compile(f)(y), f(y))
