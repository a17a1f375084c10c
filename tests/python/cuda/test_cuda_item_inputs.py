"""A number from `.item()` past a break on the GPU (capture/scalar_inputs.h): the resume
function takes it as a 0-d tensor made on the GPU at each call, one capture for every value,
eager's values in float32 and bfloat16, and with CUDA graphs (a replay reads each call's
number, never the recorded one)."""

import pytest
import torch
from helpers import assert_same, counters

import torchlite

pytestmark = pytest.mark.cuda


def _scaled(x):
    s = x.abs().max().item()
    return (x / s) * (1 - s) + torch.where(x > 0, x, s) + x.masked_fill(x < 0, -s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_number_from_item_is_a_gpu_input_for_every_value(dtype, mode):
    torchlite.reset()
    compiled = torchlite.compile(_scaled, mode=mode)
    frames = None
    for i in range(6):
        x = (torch.randn(4, 33, device="cuda") * (i + 1)).to(dtype)
        assert_same(compiled(x), _scaled(x))
        if i == 1:
            frames = counters()["frames"]
    assert counters()["frames"] == frames
