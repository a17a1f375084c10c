"""Guards: what triggers a recompile, what hits the cache, and that results stay correct."""

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_counters_delta, assert_same, at_least, counters
from torch import nn

import torchlite

SCALE = 2.0


def _scaled(x):
    return x * SCALE + 1


def _compiled_pointwise(**kwargs):
    return torchlite.compile(lambda x: (x * 2).sin() + 1, **kwargs)


# --- tensor guards ---------------------------------------------------------------------------


def test_same_inputs_hit_cache_without_capturing_again():
    fn = torchlite.compile(lambda x: x.cos() * 3)
    x = torch.randn(4)
    before = counters()
    assert_same(fn(x), x.cos() * 3)
    after_first = counters()
    assert_counters_delta(before, after_first, frames=1, graphs=1, recompiles=0)
    for _ in range(2):
        y = torch.randn(4)
        assert_same(fn(y), y.cos() * 3)
    assert_counters_delta(
        after_first, counters(), frames=0, graphs=0, recompiles=0, cache_hits=at_least(2)
    )


def _same_or_not(a, b):
    if a is b:
        return a * 2
    return b * 3 - a


def test_identity_of_two_tensor_arguments_is_guarded():
    fn = torchlite.compile(_same_or_not)
    t, u = torch.randn(4), torch.randn(4)
    assert_same(fn(t, t), t * 2)
    assert_same(fn(t, u), u * 3 - t)  # the `is` guard fails: a second entry
    before = counters()
    assert_same(fn(u, u), u * 2)
    assert_same(fn(u, t), t * 3 - u)
    assert_counters_delta(before, counters(), graphs=0, recompiles=0, cache_hits=2)


def test_identity_of_an_argument_and_a_parameter_is_guarded():
    lin = nn.Linear(3, 3)

    def pick(w):
        return w * 2 if w is lin.weight else w - 1

    fn = torchlite.compile(pick)
    with torch.no_grad():
        assert_same(fn(lin.weight), lin.weight * 2)
        other = torch.randn(3, 3)
        assert_same(fn(other), other - 1)
        assert_same(fn(lin.weight), lin.weight * 2)


def test_shape_change_recompiles_and_is_correct():
    fn = _compiled_pointwise()
    fn(torch.randn(4))
    before = counters()
    x = torch.randn(2, 3)
    assert_same(fn(x), (x * 2).sin() + 1)
    assert_counters_delta(before, counters(), graphs=1, recompiles=1)
    # Both entries stay cached: going back to the first shape captures nothing.
    before = counters()
    fn(torch.randn(4))
    fn(torch.randn(2, 3))
    assert_counters_delta(before, counters(), graphs=0, recompiles=0, cache_hits=2)


def test_dtype_change_recompiles_and_is_correct():
    fn = _compiled_pointwise()
    fn(torch.randn(4))
    before = counters()
    x = torch.randn(4, dtype=torch.float64)
    out = fn(x)
    assert out.dtype == torch.float64
    assert_same(out, (x * 2).sin() + 1)
    assert_counters_delta(before, counters(), graphs=1, recompiles=1)


def test_requires_grad_change_recompiles_and_is_correct():
    fn = _compiled_pointwise()
    fn(torch.randn(4))
    before = counters()
    x = torch.randn(4, requires_grad=True)
    out = fn(x)
    assert out.requires_grad
    assert_same(out, (x * 2).sin() + 1)
    assert_counters_delta(before, counters(), recompiles=1)


def test_non_contiguous_input_is_correct():
    fn = _compiled_pointwise()
    x = torch.randn(4, 6)
    fn(x)
    xt = x.t()
    assert_same(fn(xt), (xt * 2).sin() + 1)
    xs = x[:, ::2]
    assert_same(fn(xs), (xs * 2).sin() + 1)


@pytest.mark.cuda
def test_device_change_recompiles_and_is_correct():
    fn = _compiled_pointwise()
    fn(torch.randn(4))
    before = counters()
    x = torch.randn(4, device="cuda")
    out = fn(x)
    assert out.device.type == "cuda"
    assert_same(out.cpu(), (x.cpu() * 2).sin() + 1)
    assert_counters_delta(before, counters(), recompiles=1)


def test_python_scalar_argument_change_is_correct():
    fn = torchlite.compile(lambda x, k: x * k)
    x = torch.randn(3)
    for k in (2, 3, 2.5, -1):
        assert_same(fn(x, k), x * k)


def test_bool_flag_argument_change_is_correct():
    def f(x, flag):
        return x + 1 if flag else x - 1

    fn = torchlite.compile(f)
    x = torch.randn(3)
    for flag in (True, False, True):
        assert_same(fn(x, flag), f(x, flag))


# --- globals and module attributes -----------------------------------------------------------


def test_global_constant_change_gives_new_correct_result():
    global SCALE
    fn = torchlite.compile(_scaled)
    x = torch.randn(3)
    try:
        assert_same(fn(x), x * 2.0 + 1)
        SCALE = 3.0
        assert_same(fn(x), x * 3.0 + 1)
        SCALE = 2.0
        assert_same(fn(x), x * 2.0 + 1)
    finally:
        SCALE = 2.0


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attribute_change_gives_new_correct_result():
    m = _Scaled()
    fn = torchlite.compile(m)
    x = torch.randn(2, 3)
    assert_same(fn(x), m.lin(x) * 2.0)
    m.scale = 3.0
    assert_same(fn(x), m.lin(x) * 3.0)


def test_submodule_swap_gives_new_correct_result():
    m = _Scaled()
    fn = torchlite.compile(m)
    x = torch.randn(2, 3)
    fn(x)
    m.lin = nn.Linear(3, 3)
    assert_same(fn(x), m.lin(x) * 2.0)


def test_train_eval_switch_dropout_behaves_like_eager():
    m = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5))
    fn = torchlite.compile(m)
    x = torch.randn(4, 8)
    m.eval()
    assert_same(fn(x), m(x))
    m.train()
    out, dense = fn(x), m[0](x)
    # NOTE: dropout masks need not match eager's RNG stream: check the train-mode contract.
    zeroed = out == 0
    assert 0 < zeroed.float().mean().item() < 1
    torch.testing.assert_close(out[~zeroed], dense[~zeroed] * 2)
    m.eval()
    assert_same(fn(x), m(x))


def test_train_eval_switch_batchnorm_behaves_like_eager():
    m = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3))
    e = copy.deepcopy(m)
    fn = torchlite.compile(m)
    for mode in ("train", "eval", "train", "eval"):
        getattr(m, mode)()
        getattr(e, mode)()
        x = torch.randn(2, 2, 4, 4)
        assert_same(fn(x), e(x))
        torch.testing.assert_close(m[1].running_mean, e[1].running_mean)
        torch.testing.assert_close(m[1].running_var, e[1].running_var)


def test_functional_training_flag_from_module_is_respected():
    class M(nn.Module):
        def forward(self, x):
            return F.dropout(x, 0.5, self.training)

    m = M().eval()
    fn = torchlite.compile(m)
    x = torch.randn(64)
    assert_same(fn(x), x)
    m.train()
    assert (fn(x) == 0).any()


# --- parameters are read on every call -------------------------------------------------------


def test_inplace_parameter_update_changes_compiled_result_like_eager():
    m = nn.Linear(3, 2)
    fn = torchlite.compile(m)
    x = torch.randn(4, 3)
    assert_same(fn(x), m(x))
    with torch.no_grad():
        m.weight.add_(1)
        m.bias.zero_()
    assert_same(fn(x), m(x))


def test_optimizer_step_changes_compiled_result_like_eager():
    m = nn.Linear(3, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    fn = torchlite.compile(m)
    x = torch.randn(4, 3)
    first = fn(x)
    m(x).pow(2).sum().backward()
    opt.step()
    second = fn(x)
    assert_same(second, m(x))
    assert not torch.allclose(first, second)


def test_replaced_parameter_object_is_used():
    m = nn.Linear(3, 2)
    fn = torchlite.compile(m)
    x = torch.randn(4, 3)
    fn(x)
    m.weight = nn.Parameter(torch.ones(2, 3))
    assert_same(fn(x), m(x))


def test_global_tensor_mutated_in_place_is_read_every_call():
    table = torch.zeros(3)
    fn = torchlite.compile(lambda x: x + table)
    x = torch.randn(3)
    assert_same(fn(x), x)
    table.add_(5)
    assert_same(fn(x), x + 5)


# --- cache size limit ------------------------------------------------------------------------


def test_cache_limit_warns_once_naming_the_guard_and_stays_correct(monkeypatch):
    monkeypatch.setattr(torchlite.config, "cache_size_limit", 8)

    def f(x):
        return x * 2 + 1

    # NOTE: dynamic=False: with the default, a size-only miss past the limit replaces the oldest
    # runtime-sizes entry instead (tests/python/dynamic).
    fn = torchlite.compile(f, dynamic=False)
    before = counters()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 11):
            x = torch.randn(n)
            assert_same(fn(x), f(x))
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1, [str(w.message) for w in runtime]
    msg = str(runtime[0].message)
    # The failing guard is the size of argument x (its source and what changed).
    assert re.search(r"\bx\b", msg), msg
    assert re.search(r"size|shape", msg, re.IGNORECASE), msg
    graphs = counters()["graphs"] - before["graphs"]
    assert 8 <= graphs <= 9, graphs
    # Past the limit the function still runs (eagerly) and gives correct results.
    x = torch.randn(12)
    assert_same(fn(x), f(x))


def test_cache_limit_is_configurable(monkeypatch):
    monkeypatch.setattr(torchlite.config, "cache_size_limit", 2)
    fn = _compiled_pointwise(dynamic=False)
    before = counters()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):
            x = torch.randn(n)
            assert_same(fn(x), (x * 2).sin() + 1)
    assert sum(issubclass(w.category, RuntimeWarning) for w in caught) == 1
    assert counters()["graphs"] - before["graphs"] <= 3


def test_reset_forgets_cached_entries():
    fn = _compiled_pointwise()
    x = torch.randn(3)
    fn(x)
    torchlite.reset()
    before = counters()
    fn(x)
    assert_counters_delta(before, counters(), graphs=1)


class _SharedLayer(torch.nn.Module):
    """One forward (and feed_forward) code object shared by many layer instances."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def feed_forward(self, x):
        return torch.relu(self.lin(x))

    def forward(self, x):
        return self.feed_forward(x) * 2


def test_one_forward_shared_by_many_instances_is_not_a_recompile_loop():
    # Each layer instance is ID-matched, so it gets its own entry; the cache-size limit
    # counts entries per ID-matched object set (as Dynamo does), so none falls back to eager.
    import warnings

    layers = [_SharedLayer() for _ in range(12)]
    compiled = [torchlite.compile(layer) for layer in layers]
    torchlite.reset()
    torchlite.reset_counters()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cache_size_limit warning would fail the test
        for _ in range(2):
            for layer, c in zip(layers, compiled):
                torch.testing.assert_close(c(x), layer(x))
    counters = torchlite.counters()
    assert counters["eager_fallbacks"] == 0
    assert counters["graphs"] == 12


def test_helper_called_with_the_bound_forward_of_many_instances_is_not_a_recompile_loop():
    # transformers' apply_chunking_to_forward(self.feed_forward, x) gets a bound method of
    # each layer: its __self__ is ID-matched, and counts per object like a local would.
    import warnings

    def apply(forward_fn, x):
        return forward_fn(x) * 2

    layers = [_SharedLayer() for _ in range(12)]
    compiled = torchlite.compile(apply)
    torchlite.reset()
    torchlite.reset_counters()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cache_size_limit warning would fail the test
        for _ in range(2):
            for layer in layers:
                torch.testing.assert_close(
                    compiled(layer.feed_forward, x), apply(layer.feed_forward, x)
                )
    assert torchlite.counters()["eager_fallbacks"] == 0
