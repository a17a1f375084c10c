"""Values the guards cannot compare by value break cleanly instead of raising (issue 22 item 1):
slices with tensor bounds, frozensets of non-constants, and namedtuple constructors reached
from a frame that runs eagerly. Each result matches eager, and later calls hit the cache."""

import collections

import torch
from helpers import assert_counters_delta, assert_same, check, counters
from torch import nn

import torchlite


def _slice_with_tensor_bounds(x):
    # NOTE: DeBERTa's relative-position code slices with 0-d tensor bounds.
    return x[5 - torch.tensor(3) : 5 + torch.tensor(3), :] * 2


def test_slice_with_0d_tensor_bounds_breaks_instead_of_raising():
    check(_slice_with_tensor_bounds, torch.randn(10, 4), fullgraph=False)


def _slice_bounds_from_argument(x, n):
    lo, hi = n - 1, n + 2
    return x[lo:hi].cos() + 1


def test_slice_with_tensor_argument_bounds_matches_eager_for_new_bounds():
    fn = torchlite.compile(_slice_bounds_from_argument)
    x = torch.randn(12, 3)
    for n in (3, 3, 6):
        t = torch.tensor(n)
        assert_same(fn(x, t), _slice_bounds_from_argument(x, t))


def test_slice_with_tensor_bounds_is_reported_by_explain():
    # NOTE: bounds computed from constants alone are folded (test_capture_constant_fold.py);
    # bounds from an argument tensor are data.
    report = torchlite.explain(_slice_bounds_from_argument)(torch.randn(10, 4), torch.tensor(3))
    reasons = [b.reason for b in report.break_reasons]
    assert any("slice bounds must be known while tracing" in r for r in reasons), reasons


_ACTIVATIONS = frozenset({nn.ReLU, nn.GELU})


def _apply_if_known_activation(x, act):
    if type(act) in _ACTIVATIONS:
        return act(x) * 2
    return x - 1


def test_frozenset_of_classes_is_guarded_by_identity_not_value():
    check(_apply_if_known_activation, torch.randn(5), nn.GELU())
    check(_apply_if_known_activation, torch.randn(5), nn.Tanh())


_NT = collections.namedtuple("_NT", ["a", "b"])


class _ReturnsMethodAndNamedTuple(nn.Module):
    def helper(self):
        return 1

    def forward(self, x):
        y = x * 2
        return self.helper, _NT(a=y, b=None)


def test_namedtuple_built_in_eager_frame_after_returning_method_runs_like_eager():
    model = _ReturnsMethodAndNamedTuple()
    compiled = torchlite.compile(model)
    x = torch.randn(3)
    method, out = compiled(x)
    assert method == model.helper
    assert type(out) is _NT
    assert_same(out.a, x * 2)
    assert out.b is None
    before = counters()
    y = torch.randn(3)
    method, out = compiled(y)
    assert_same(out.a, y * 2)
    assert_counters_delta(before, counters(), graphs=0, recompiles=0)
