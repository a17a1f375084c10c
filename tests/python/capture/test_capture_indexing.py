"""Indexing, tensor attributes and torch.Size arithmetic at trace time."""

import pytest
import torch
from helpers import check

DTYPES = [torch.float32, torch.float64]

INDEXING = {
    "int": lambda x: x[1],
    "negative_int": lambda x: x[-1],
    "int_int": lambda x: x[0, 2],
    "slice": lambda x: x[1:3],
    "slice_step": lambda x: x[::2],
    "slice_negative_bounds": lambda x: x[-3:-1],
    "slice_2d": lambda x: x[:, 1:4:2],
    "none": lambda x: x[None],
    "none_middle": lambda x: x[:, None, 1:],
    "ellipsis": lambda x: x[..., 0],
    "ellipsis_none": lambda x: x[..., None, :2],
    "where_mask": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "index_tensor": lambda x: x[torch.tensor([0, 2])],
    "index_tensor_2d": lambda x: x[:, torch.tensor([3, 0, 1])],
    "select_then_op": lambda x: x[0] + x[-1] * x[1:2],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(INDEXING))
def test_indexing_matches_eager(name, dtype):
    check(INDEXING[name], torch.randn(4, 5, 3, dtype=dtype))


def test_setitem_on_clone_matches_eager():
    def fn(x, v):
        z = x.clone()
        z[0] = v
        z[1:, 2] = 0.5
        z[..., -1] += 1
        return z

    check(fn, torch.randn(3, 4), torch.randn(4))


def test_index_with_trace_time_int_arg_matches_eager():
    def fn(x, i):
        return x[i], x[: i + 1], x[i:, None]

    check(fn, torch.randn(5, 2), 2)


def test_tensor_attributes_are_trace_time_values():
    def fn(x):
        return (
            x.shape,
            x.dtype,
            x.device,
            x.ndim,
            x.size(),
            x.size(-1),
            x.size(0),
            x.dim(),
            x.numel(),
            x.is_floating_point(),
            x.requires_grad,
            x.is_contiguous(),
            len(x),
        )

    check(fn, torch.randn(2, 3, 4))


def test_tensor_attributes_feed_computation():
    def fn(x):
        scale = x.shape[-1] ** -0.5
        return x * scale + x.numel() - x.ndim, x.to(x.dtype), torch.ones(x.size(), device=x.device)

    check(fn, torch.randn(2, 3, 4))


def test_dtype_attribute_comparison_selects_branch():
    def fn(x):
        if x.dtype == torch.float64:
            return x * 2
        return x + 1

    check(fn, torch.randn(3, dtype=torch.float64))
    check(fn, torch.randn(3, dtype=torch.float32))


def test_shape_unpacking_matches_eager():
    def fn(x):
        b, c = x.shape[:2]
        n, *rest = x.shape
        return x.reshape(b * c, -1), n, rest, x.view(*x.shape[:-1], -1, 2)

    check(fn, torch.randn(2, 3, 4))


def test_size_arithmetic_matches_eager():
    def fn(x):
        s = x.shape
        new = s[:-1] + (s[-1] // 2, 2)
        t = torch.Size([s[0] * 2]) + s[1:]
        return x.reshape(new), torch.zeros(t), s == (2, 6), s[-1] * s[0], tuple(s), list(s)

    check(fn, torch.randn(2, 6))


def test_size_indexing_and_iteration_match_eager():
    def fn(x):
        total = 1
        for d in x.shape:
            total *= d
        return x.flatten() * total, x.shape[-2:], x.size()[1], max(x.shape), sum(x.shape)

    check(fn, torch.randn(2, 3, 4))


def test_view_with_shape_splat_matches_eager():
    def fn(x, y):
        return x.view(*y.shape), x.expand(2, *x.shape), y.new_empty(y.shape).fill_(1)

    check(fn, torch.randn(6), torch.randn(2, 3))
