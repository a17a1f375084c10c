"""var/std, argmax/argmin, max/min indices, all/any, norm and group_norm run as fused kernels
and match eager (csrc/passes/lower_statistics.cpp)."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def check_kernel(fn, *args, kernels=1, rtol=1.3e-6, atol=1e-5):
    """Compiled fn equals eager, ran through `kernels` fused kernels and no extern op."""
    with torch.no_grad():
        expected = fn(*args)
        torchlite.reset()
        torchlite.reset_counters()
        actual = torchlite.compile(fn)(*args)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if _C.has_llvm:  # builds without LLVM plan kernels but run the ops through torch
        assert torchlite.counters()["kernels"] >= 1
    graph = torchlite.explain(fn)(*args).graphs[0]
    s = _C.partition_summary(graph)
    assert s["externs"] == [] and s["kernel_count"] == kernels, s


X = torch.randn(6, 7, 5) * 3 + 10  # |mean| >> std: a one-pass variance would cancel


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.var(),
        lambda x: x.var(1),
        lambda x: x.var(1, keepdim=True),
        lambda x: torch.var(x, (0, 2), unbiased=False),
        lambda x: torch.var(x, dim=-1, correction=0),
        lambda x: torch.var(x, False),
        lambda x: x.std(dim=(1, 2), correction=2, keepdim=True),
        lambda x: torch.std(x),
    ],
)
def test_var_std_match_eager(fn):
    check_kernel(fn, X)


def test_var_of_one_element_is_nan_as_eager():
    check_kernel(lambda x: x.var(-1), torch.randn(4, 1, 3).transpose(1, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.argmax(),
        lambda x: x.argmin(1),
        lambda x: torch.argmax(x, dim=0, keepdim=True),
    ],
)
def test_arg_extremes_pick_the_first_index(dtype, fn):
    x = torch.randint(0, 3, (5, 6, 4)).to(dtype)  # many ties
    check_kernel(fn, x)


def test_argmax_of_transposed_input_indexes_logical_order():
    x = torch.randn(7, 5)
    x[2, 3] = float("nan")
    check_kernel(lambda x: x.t().argmax(), x)
    check_kernel(lambda x: x.t().argmin(0), torch.randn(7, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize(
    "fn", [lambda x: x.all(), lambda x: x.any(1), lambda x: torch.all(x, 0, keepdim=True)]
)
def test_all_any_match_eager(dtype, fn):
    x = (torch.rand(4, 5) > 0.2).to(dtype)
    x[1] = 1
    x[2] = 0
    check_kernel(fn, x)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.norm(),
        lambda x: torch.norm(x, p=1, dim=1),
        lambda x: torch.norm(x, p=float("inf"), dim=(0, 2)),
        lambda x: torch.norm(x, p=float("-inf")),
        lambda x: torch.norm(x, p="fro", dim=(1, 2), keepdim=True),
        lambda x: torch.norm(x, p=3.5, dim=-1),
        lambda x: torch.norm(x, p=0, dim=0),
    ],
)
def test_vector_norms_match_eager(fn):
    x = torch.randn(4, 6, 5)
    x[0, 0] = 0
    check_kernel(fn, x, rtol=1e-5)


@pytest.mark.parametrize("groups", [1, 6])
def test_group_norm_with_whole_or_single_channel_groups_is_one_kernel(groups):
    x, w, b = torch.randn(2, 6, 5, 4) + 3, torch.randn(6), torch.randn(6)
    check_kernel(lambda x, w, b: F.group_norm(x, groups, w, b, 1e-5), x, w, b)


def test_group_norm_with_other_group_counts_is_extern():
    x = torch.randn(2, 6, 5)
    with torch.no_grad():
        expected = F.group_norm(x, 3)
        torchlite.reset()
        actual = torchlite.compile(lambda x: F.group_norm(x, 3))(x)
    torch.testing.assert_close(actual, expected)


def test_sum_with_epilogue_after_var_fuses():
    check_kernel(lambda x: (x.var(-1) + 1).sqrt() * 2, X)
