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


# ---- Reductions with two results (csrc/passes/lower_tuple.cpp) ----


def ties_and_nans(shape, dtype, seed):
    """Small integers (many ties), with NaNs in about one float element in seven."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g)
    if dtype == torch.bool:
        return x > 0
    x = x.to(dtype)
    if dtype.is_floating_point and x.numel() > 1:
        x = x + (torch.rand(shape, generator=g) * 0.5).to(dtype).round()
        nan = torch.rand(shape, generator=g) < 1 / 7
        x[nan] = float("nan")
    return x


MAX_MIN_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
MAX_MIN_DTYPES += [torch.int64, torch.int32, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", MAX_MIN_DTYPES, ids=str)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.max(1),
        lambda x: torch.max(x, dim=-1),
        lambda x: torch.min(x, 0, keepdim=True),
        lambda x: x.min(dim=2).values,
        lambda x: x.max(-1).indices,
        lambda x: torch.max(x, 1)[1],
        lambda x: tuple(torch.min(x, -2, True)),
    ],
)
def test_max_min_with_dim_give_values_and_first_indices_in_one_kernel(dtype, fn):
    for seed, shape in enumerate([(5, 6, 4), (3, 1, 7), (2, 9, 1)]):
        check_kernel(fn, ties_and_nans(shape, dtype, seed), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_max_of_a_vector_and_of_a_transposed_input_match_eager(dtype):
    check_kernel(lambda x: x.max(0), ties_and_nans((11,), dtype, 7), rtol=0, atol=0)
    check_kernel(lambda x: x.t().min(1), ties_and_nans((7, 5), dtype, 8), rtol=0, atol=0)
    check_kernel(lambda x: torch.max(x, 0), ties_and_nans((), dtype, 9), rtol=0, atol=0)


def test_max_values_and_indices_used_by_different_ops_stay_one_pass():
    def fn(x):
        v, i = x.max(1)
        return v * 2, i + 1

    check_kernel(fn, ties_and_nans((6, 8), torch.float32, 3), kernels=2)

    def both(x):
        v, i = torch.min(x, -1)
        return v + i

    check_kernel(both, ties_and_nans((6, 8), torch.float32, 4))


def test_max_over_an_empty_dim_raises_as_eager():
    x = torch.zeros(3, 0)
    with pytest.raises(IndexError, match="non-zero size") as eager:
        torch.max(x, 1)
    torchlite.reset()
    with pytest.raises(IndexError, match="non-zero size") as compiled:
        torchlite.compile(lambda x: torch.max(x, 1))(x)
    assert str(compiled.value) == str(eager.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.var_mean(x),
        lambda x: torch.var_mean(x, 1),
        lambda x: torch.var_mean(x, (0, 2), unbiased=False),
        lambda x: torch.var_mean(x, dim=-1, correction=0, keepdim=True),
        lambda x: torch.var_mean(x, False),
        lambda x: torch.std_mean(x, 1, True, True),
        lambda x: torch.std_mean(x, dim=[1, 2], correction=2)[0],
        lambda x: torch.std_mean(x, -2)[1] * 2,
    ],
)
def test_var_mean_and_std_mean_match_eager_in_one_kernel(dtype, fn):
    x = (torch.randn(6, 7, 5) * 3 + 10).to(dtype)  # |mean| >> std
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1.3e-6)
    check_kernel(fn, x, rtol=tol, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.aminmax(x),
        lambda x: torch.aminmax(x, dim=1),
        lambda x: x.aminmax(dim=-1, keepdim=True),
        lambda x: torch.aminmax(x, dim=0).max,
    ],
)
def test_aminmax_matches_eager_in_one_kernel(dtype, fn):
    check_kernel(fn, ties_and_nans((5, 6), dtype, 11), rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(4, 5, 3), (4, 1, 3)])
def test_a_pointwise_producer_fuses_into_the_max_with_indices_kernel(shape):
    x = ties_and_nans(shape, torch.float32, 12)
    check_kernel(lambda x: (x * 2 - 1).max(1), x, rtol=0, atol=0)
    check_kernel(lambda x: torch.var_mean(x.abs() + 1, 1), x)
