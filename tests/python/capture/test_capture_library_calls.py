"""Library calls that real model code makes inside forward and Dynamo captures without a
break: functools.lru_cache helpers, typing generics as values, NumPy on constants, weakrefs,
OrderedDict, autograd.Function.apply without grad. Each case checks parity with eager and
the graph/break count."""

import functools
import math
import typing

import torch
from helpers import check

import torchlite


def _graphs_and_breaks(fn, *args):
    report = torchlite.explain(fn)(*args)
    return report.graph_count, report.graph_break_count


# --- functools.lru_cache -------------------------------------------------------------------------

CALLS = []


@functools.lru_cache
def _scale_for(n):
    CALLS.append(n)  # impure on purpose: it must run exactly when eager runs it (on a miss)
    return math.sqrt(n) * 2


@functools.cache
def _pattern(n, mode="even"):
    return tuple(i for i in range(n) if (i % 2 == 0) == (mode == "even"))


@functools.lru_cache(maxsize=4)
def _shared_list(n):
    return list(range(n))


@functools.cache
def _tensor_helper(x):
    return x.sin() + 1


def test_lru_cached_helper_on_constants_runs_the_cache_like_eager():
    def fn(x):
        return x * _scale_for(4) + len(_pattern(5, mode="odd"))

    _scale_for.cache_clear()
    CALLS.clear()
    check(fn, torch.randn(3))
    assert CALLS == [4]  # one miss in the trace, hits afterwards (eager ran 3 more hits)
    assert _scale_for.cache_info().misses == 1
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)


def test_lru_cached_helper_on_tensors_is_inlined():
    def fn(x):
        return _tensor_helper(x) * 2

    check(fn, torch.randn(4))
    assert _graphs_and_breaks(fn, torch.randn(4)) == (1, 0)


def test_lru_cached_result_that_is_mutable_is_the_cached_object():
    def fn(x):
        idx = _shared_list(3)
        return x[idx[-1]] + len(idx)

    _shared_list.cache_clear()
    check(fn, torch.randn(5))


class _Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @functools.lru_cache  # noqa: B019
    def _mask_len(self, n):
        return n * 2

    def forward(self, x):
        return self.lin(x)[:, : self._mask_len(1)]


def test_lru_cached_method_matches_eager():
    m = _Cached()
    check(m, torch.randn(3, 4))
    assert _graphs_and_breaks(m, torch.randn(3, 4)) == (1, 0)


# --- typing generics as values --------------------------------------------------------------------


def _apply(x, hint: torch.Tensor | None = None):
    return x if hint is None else x + hint


def test_typing_generics_as_values_and_passed_through():
    def fn(x):
        kinds = (typing.List[int], typing.Optional[torch.Tensor])  # noqa: UP006, UP045
        y = _apply(x * 2, None)
        return y, kinds[0], kinds[1]

    out = check(fn, torch.randn(3))(torch.randn(3))
    assert out[1] is typing.List[int] and out[2] == typing.Optional[torch.Tensor]  # noqa: UP006, UP045
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)
