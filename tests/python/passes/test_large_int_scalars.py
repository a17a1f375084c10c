"""A Python int past 2**53 beside an integer tensor: eager converts the exact value to the op's
dtype (wrapping to its low bits: `int32_tensor == 2**53 + 1` compares with 1), which a double
constant in a kernel would round first. Such ops are left to torch; smaller ints still fuse.
`where` and `masked_fill` check that the int fits the result type (eager raises; a kernel would
wrap): one that does not is left to torch too."""

import pytest
import torch
from helpers import check

import torchlite

BIG = [2**53 + 1, -(2**53) - 3, 2**62 + 5]


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int64])
@pytest.mark.parametrize("big", BIG)
def test_comparisons_and_arithmetic_with_a_large_int(dtype, big):
    if dtype == torch.uint8 and big < 0:
        pytest.skip("a negative scalar for uint8 raises in eager")

    def fn(x):
        return (x == big) | (x < big), (x != big).sum(), x * 2 + 1

    x = torch.tensor([0, 1, 2, 3, 5], dtype=dtype)
    check(fn, x, fresh=False)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
@pytest.mark.parametrize("value", [300, -129, 2**31 + 7, 2**40 + 3])
@pytest.mark.parametrize("op", ["where", "masked_fill"])
def test_an_int_that_overflows_the_result_raises_as_eager(dtype, value, op):
    # NOTE: torch checks the conversion here (add and mul wrap instead)
    def fn(x):
        if op == "where":
            return torch.where(x > 2, x, value)
        return x.masked_fill(x > 2, value)

    x = torch.tensor([0, 1, 2, 3, 5, 7], dtype=dtype)
    try:
        want = fn(x)
    except RuntimeError as e:
        torchlite.reset()
        with pytest.raises(RuntimeError) as got:
            torchlite.compile(fn)(x)
        assert str(got.value) == str(e)
        return
    check(fn, x, fresh=False)  # NOTE: a value that fits (300 in int16): fused as before
    assert want is not None
