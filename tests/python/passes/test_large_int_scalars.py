"""A Python int past 2**53 beside an integer tensor: eager converts the exact value to the op's
dtype (wrapping to its low bits: `int32_tensor == 2**53 + 1` compares with 1), which a double
constant in a kernel would round first. Such ops are left to torch; smaller ints still fuse."""

import pytest
import torch
from helpers import check

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
