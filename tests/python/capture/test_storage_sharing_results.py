"""Results that are not views yet share their operand's memory (`y.detach()`, `y.data`), or
are the operand itself (`y.to(y.dtype)`, `y.float()` of a float tensor, `y.type_as(y)`): an
in-place op through them writes the operand, in eager and compiled alike. No-op casts were
lowered as copies. The meta cache
rebuilt such results as fresh tensors, so the write became an out-of-place op and the operand
kept its old values. Each program makes the same call once before, so the second one is a
cache hit."""

import pytest
import torch
from helpers import check


def detach_then_add(x):
    (x * 3).detach()
    y = x * 2
    z = y.detach()
    z.add_(1)
    return y, z


def data_then_mul(x):
    (x - 1).data.mul_(3)
    y = x + 1
    y.data.mul_(3)
    return y * 1, y


def detach_twice_then_setitem(x):
    torch.relu(x - 1).detach().detach()
    y = torch.relu(x)
    z = y.detach().detach()
    z[0] = 7.0
    return y.sum(), z


def detach_of_input_written(x):
    (x + 1).detach().sub_(1)
    x.detach().sub_(1)
    return x * 2


def no_op_casts_then_write(x):
    y = x * 1
    z = y.to(torch.float32)
    z.add_(1)
    w = y.float()
    w.mul_(2)
    y.type_as(x)[1:].sub_(3)
    return y, z


def no_op_cast_of_input_written(x):
    x.to(x.dtype).add_(1)
    x.double().add_(1)  # a real cast: a copy, x does not change
    return x * 2


@pytest.mark.parametrize(
    "fn",
    [
        detach_then_add,
        data_then_mul,
        detach_twice_then_setitem,
        detach_of_input_written,
        no_op_casts_then_write,
        no_op_cast_of_input_written,
    ],
)
def test_in_place_write_through_a_storage_sharing_result_reaches_its_operand(fn):
    check(fn, torch.randn(5))
