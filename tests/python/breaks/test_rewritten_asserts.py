"""Asserts as pytest rewrites them, and other branches that only raise, stay checks in one graph.

pytest rewrites every `assert` of a test module (this one included: its docstring has no opt-out)
into steps kept in locals and an `if not @py_assertN: raise AssertionError(<explanation>)`, so a
user's compiled function defined in a test file is not the plain `assert` statement that
test_data_dependent_asserts.py covers. The trace takes such a branch not to be taken, the graph
checks its condition, and a failing check runs the frame eagerly (which raises eager's error).
The same holds for a model's own `if (ids < 0).any(): raise ValueError(...)`."""

import re

import pytest
import torch
from helpers import assert_same, check, clone_args

import torchlite


def _all_positive(x):
    assert (x > 0).all(), "non-positive input"
    return x.log() * 2


def _max_item_below(x, n):
    assert x.max().item() <= n
    return x * 2


def _sum_item_above_zero(x):
    # NOTE: pytest keeps the constant in a local of its own between the number and the compare
    assert x.sum().item() > 0, "negative sum"
    return x * 3


def _lengths_in_range(ids, lengths):
    slen = ids.size(1)
    assert lengths.max().item() <= slen
    mask = torch.arange(slen)[None, :] < lengths[:, None]
    return ids.float() * mask


def _raises_value_error(ids):
    if (ids < 0).any():
        raise ValueError(f"negative ids in a batch of {ids.shape[0]}")
    return ids * 2 + 1


def _not_finite_raises(x):
    y = x.exp()
    if not torch.isfinite(y).all():
        raise RuntimeError("overflow")
    return y.sum(0)


def _branch_without_raise(x):
    if (x > 0).all():
        return x * 2
    return -x


def _number_read_after_the_check(x, n):
    # The same steps as a rewritten assert, but the number is used after it: the local holds
    # a Python float in CPython, so the trace must not leave a tensor there.
    v = x.max().item()
    ok = v <= n
    if not ok:
        raise AssertionError("too large")
    return x * v


def _rewritten(fn):
    if not any(name.startswith("@py_assert") for name in fn.__code__.co_varnames):
        pytest.skip("pytest did not rewrite this module's asserts (--assert=plain)")


def _one_graph(fn, *args):
    torchlite.reset()
    report = torchlite.explain(fn)(*args)
    assert report.graph_count == 1, str(report)
    assert report.graph_break_count == 0, str(report)


def _raises_like_eager(exc_type, fn, *args):
    with pytest.raises(exc_type) as want:
        fn(*clone_args(list(args)))
    torchlite.reset()
    compiled = torchlite.compile(fn)
    with pytest.raises(exc_type) as got:
        compiled(*clone_args(list(args)))
    # NOTE: pytest's explanation names the tensors' methods with their addresses.
    assert _without_addresses(got.value) == _without_addresses(want.value)


def _without_addresses(exc):
    return re.sub(r" at 0x[0-9a-f]+", "", str(exc))


def test_a_rewritten_assert_on_a_tensor_condition_is_one_graph():
    _rewritten(_all_positive)
    x = torch.rand(3, 5) + 1
    _one_graph(_all_positive, x)
    check(_all_positive, x)
    _raises_like_eager(AssertionError, _all_positive, -torch.rand(4))


@pytest.mark.parametrize("n", [3, 0.5, 2.0])
def test_a_rewritten_item_assert_is_one_graph(n):
    _rewritten(_max_item_below)
    x = torch.rand(8) * 0.4
    _one_graph(_max_item_below, x, n)
    check(_max_item_below, x, n, fresh=False)
    _raises_like_eager(AssertionError, _max_item_below, torch.rand(8) + 5, n)


def test_a_rewritten_item_assert_against_a_constant_is_one_graph():
    _rewritten(_sum_item_above_zero)
    x = torch.rand(6)
    _one_graph(_sum_item_above_zero, x)
    check(_sum_item_above_zero, x)
    _raises_like_eager(AssertionError, _sum_item_above_zero, -torch.rand(6))


def test_a_rewritten_item_assert_against_a_size_is_one_graph():
    _rewritten(_lengths_in_range)
    ids = torch.arange(12).reshape(2, 6)
    _one_graph(_lengths_in_range, ids, torch.tensor([4, 6]))
    check(_lengths_in_range, ids, torch.tensor([4, 6]), fresh=False)
    _raises_like_eager(AssertionError, _lengths_in_range, ids, torch.tensor([4, 7]))


def test_if_tensor_condition_raise_is_one_graph():
    ids = torch.arange(10).reshape(2, 5)
    _one_graph(_raises_value_error, ids)
    check(_raises_value_error, ids, fresh=False)
    _raises_like_eager(ValueError, _raises_value_error, ids - 3)


def test_if_not_finite_raise_is_one_graph():
    x = torch.randn(4, 3)
    _one_graph(_not_finite_raises, x)
    check(_not_finite_raises, x)
    _raises_like_eager(RuntimeError, _not_finite_raises, torch.tensor([[1.0], [1000.0]]))


def test_a_branch_that_does_not_raise_still_breaks():
    torchlite.reset()
    report = torchlite.explain(_branch_without_raise)(torch.rand(4))
    assert report.graph_break_count == 1, str(report)
    compiled = torchlite.compile(_branch_without_raise)
    for x in (torch.rand(4), -torch.rand(4)):
        assert_same(compiled(x), _branch_without_raise(x))


def test_a_number_read_after_the_check_is_the_number():
    compiled = torchlite.compile(_number_read_after_the_check)
    for _ in range(3):
        x = torch.rand(6)
        assert_same(compiled(x, 2.0), _number_read_after_the_check(x, 2.0))
    with pytest.raises(AssertionError, match="too large"):
        compiled(torch.rand(6) + 3, 2.0)
