"""A number from `.item()` that outlives its break (`s = x.abs().max().item(); return x / s`)
reaches the resume function as a Python int or float, which its capture guards by value: every
call with another number captures the resume function again. The values stay right (each
capture is checked against eager here); the recapture per value is open (issue 22, unstable
guards): the number would have to enter the graph as an input (a symbolic int, a float as a
0-d tensor with a Python scalar's type promotion), not as a constant."""

import pytest
import torch
from helpers import assert_same, counters

import torchlite


def _scaled_by_max(x):
    s = x.abs().max().item()
    return x / s


def _times_sum(x):
    n = int(x.sum().item())
    return x * n


@pytest.mark.parametrize("fn", [_scaled_by_max, _times_sum])
def test_numbers_from_item_past_a_break_give_eagers_values(fn):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(5):
        x = torch.rand(8) * 3 + 0.1
        assert_same(compiled(x), fn(x))


@pytest.mark.xfail(strict=True, reason="the resume function is guarded on the number's value")
@pytest.mark.parametrize("fn", [_scaled_by_max, _times_sum])
def test_numbers_from_item_past_a_break_do_not_recapture_per_value(fn):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    compiled(torch.rand(8) * 3 + 0.1)
    compiled(torch.rand(8) * 3 + 0.1)
    before = counters()
    for i in range(4):
        compiled(torch.full((8,), 1.5 + i))
    assert counters()["recompiles"] == before["recompiles"]
