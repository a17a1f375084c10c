"""Guards on constant arguments that capture treats as immutable values: slices, ranges,
Ellipsis and frozensets are compared by value (a different value recompiles)."""

import torch
from helpers import check

import torchlite


def _index(x, s):
    return x[s] * 2


def test_slice_argument_is_guarded_by_value():
    x = torch.randn(6, 3)
    compiled = torchlite.compile(_index)
    torch.testing.assert_close(compiled(x, slice(0, 2)), _index(x, slice(0, 2)))
    torch.testing.assert_close(compiled(x, slice(0, 2)), _index(x, slice(0, 2)))
    torch.testing.assert_close(compiled(x, slice(1, None, 2)), _index(x, slice(1, None, 2)))
    torch.testing.assert_close(compiled(x, slice(0, 2.0 and 3)), _index(x, slice(0, 3)))


def test_slice_argument_matches_eager():
    check(_index, torch.randn(6, 3), slice(1, 4))


def test_ellipsis_argument_matches_eager():
    check(_index, torch.randn(6, 3), Ellipsis)


def test_range_and_frozenset_arguments_match_eager():
    def f(x, r, names):
        return x * len(r) + (1 if "a" in names else 0)

    check(f, torch.randn(3), range(2, 5), frozenset({"a", "b"}))
