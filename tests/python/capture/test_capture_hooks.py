"""Forward pre-hooks and forward hooks on modules are captured (inlined, no graph break) with
nn.Module._call_impl's semantics, and adding or removing a hook recompiles.

Each test compares compiled against eager on deep copies of the same module, and checks the
number of graphs and breaks through torchlite.counters().
"""

import copy

import pytest
import torch
from helpers import assert_counters_delta, assert_same, at_least, counters
from torch import nn

import torchlite


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)

    def forward(self, x, scale=1.0):
        return self.lin(x).relu() * scale


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Net()

    def forward(self, x):
        return self.inner(x) + 1


def _pair(module):
    """(eager copy, compiled module) with the same weights."""
    torchlite.reset()
    return copy.deepcopy(module), torchlite.compile(module, fullgraph=True)


def _run(eager, compiled, *args, **kwargs):
    before = counters()
    for _ in range(2):
        assert_same(compiled(*args, **kwargs), eager(*args, **kwargs))
    return before


def scale_input(module, args):
    return (args[0] * 2,)


def scale_input_not_tuple(module, args):
    return args[0] - 3  # a non-tuple result is wrapped in a 1-tuple


def replace_output(module, args, output):
    return output.sigmoid() + args[0].sum()


def observe_only(module, args, output):
    return None


@pytest.mark.parametrize("pre", [scale_input, scale_input_not_tuple])
def test_pre_hook_changing_input_is_captured_in_one_graph(pre):
    torch.manual_seed(0)
    m = Outer()
    m.inner.register_forward_pre_hook(pre)
    eager, compiled = _pair(m)  # the copy has the same hook
    before = _run(eager, compiled, torch.randn(3, 6))
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)


def test_post_hook_replacing_output_matches_eager():
    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    for mod in (m, eager):
        mod.inner.register_forward_hook(replace_output)
        mod.inner.register_forward_hook(observe_only)
    torchlite.reset()
    compiled = torchlite.compile(m, fullgraph=True)
    before = _run(eager, compiled, torch.randn(4, 6))
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)


def test_hooks_with_kwargs_see_and_replace_kwargs():
    def pre(module, args, kwargs):
        return (args[0] + 1,), {**kwargs, "scale": kwargs["scale"] * 3}

    def post(module, args, kwargs, output):
        return output * kwargs["scale"] + args[0].mean()

    def fn_for(net):
        return lambda x: net(x, scale=2.0)

    torch.manual_seed(0)
    net = Net()
    eager = copy.deepcopy(net)
    for mod in (net, eager):
        mod.register_forward_pre_hook(pre, with_kwargs=True)
        mod.register_forward_hook(post, with_kwargs=True)
    torchlite.reset()
    compiled = torchlite.compile(fn_for(net), fullgraph=True)
    before = _run(fn_for(eager), compiled, torch.randn(2, 6))
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)


def test_pre_hook_with_kwargs_mutating_kwargs_in_place():
    def pre(module, args, kwargs):
        kwargs["scale"] = 0.5

    torch.manual_seed(0)
    net = Net()
    net.register_forward_pre_hook(pre, with_kwargs=True)
    eager = copy.deepcopy(net)
    torchlite.reset()
    compiled = torchlite.compile(lambda x: net(x, scale=4.0), fullgraph=True)
    x = torch.randn(2, 6)
    assert_same(compiled(x), eager(x, scale=4.0))


def test_always_call_hook_runs_like_eager():
    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    for mod in (m, eager):
        mod.inner.register_forward_hook(replace_output, always_call=True)
    torchlite.reset()
    compiled = torchlite.compile(m, fullgraph=True)
    _run(eager, compiled, torch.randn(3, 6))


def test_removing_a_hook_recompiles_and_matches_eager():
    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    handles = [mod.inner.register_forward_pre_hook(scale_input) for mod in (m, eager)]
    torchlite.reset()
    compiled = torchlite.compile(m, fullgraph=True)
    x = torch.randn(3, 6)
    assert_same(compiled(x), eager(x))
    before = counters()
    for h in handles:
        h.remove()
    assert_same(compiled(x), eager(x))
    assert_same(compiled(x), eager(x))
    assert_counters_delta(before, counters(), recompiles=1, graphs=1, graph_breaks=0)
    # Adding one back: the guards see the new hook too.
    for mod in (m, eager):
        mod.inner.register_forward_hook(replace_output)
    assert_same(compiled(x), eager(x))
    assert_counters_delta(before, counters(), recompiles=2)


def test_replacing_a_hook_by_another_function_recompiles():
    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    hs = [mod.inner.register_forward_hook(replace_output) for mod in (m, eager)]
    torchlite.reset()
    compiled = torchlite.compile(m, fullgraph=True)
    x = torch.randn(3, 6)
    assert_same(compiled(x), eager(x))
    for h in hs:
        h.remove()
    for mod in (m, eager):  # same number of hooks, another function
        mod.inner.register_forward_hook(lambda module, args, out: out * -1)
    before = counters()
    assert_same(compiled(x), eager(x))
    assert_counters_delta(before, counters(), recompiles=1)


def test_hook_side_effects_on_a_list_happen_in_order_like_eager():
    def make(log):
        def pre(module, args):
            log.append("pre")

        def post(module, args, output):
            log.append("post")
            log.append(output.shape[-1])

        return pre, post

    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    log_c, log_e = [], []
    for mod, log in ((m, log_c), (eager, log_e)):
        pre, post = make(log)
        mod.inner.register_forward_pre_hook(pre)
        mod.inner.register_forward_hook(post)
    torchlite.reset()
    compiled = torchlite.compile(m, fullgraph=True)
    before = counters()
    x = torch.randn(3, 6)
    for _ in range(3):
        # NOTE: emptied before each call: the trace guards the list's length.
        log_c.clear()
        log_e.clear()
        assert_same(compiled(x), eager(x))
        assert log_c == log_e == ["pre", "post", 5]
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)


def test_global_forward_hooks_are_applied_and_guarded():
    torch.manual_seed(0)
    net = Net()
    torchlite.reset()
    compiled = torchlite.compile(net, fullgraph=True)
    x = torch.randn(3, 6)
    assert_same(compiled(x), net(x))
    handle = nn.modules.module.register_module_forward_hook(replace_output)
    try:
        expected = net(x)
        assert_same(compiled(x), expected)
    finally:
        handle.remove()
    assert_same(compiled(x), net(x))


def test_backward_hook_still_breaks_and_names_the_reason():
    torch.manual_seed(0)
    m = Outer()
    m.inner.register_full_backward_hook(lambda module, gin, gout: None)

    def fn(x):
        return m(x) * 2

    x = torch.randn(3, 6)
    report = torchlite.explain(fn)(x)
    reasons = [b.reason for b in report.break_reasons]
    assert any("backward" in r and "BackwardHook" in r for r in reasons), reasons
    before = counters()
    assert_same(torchlite.compile(fn)(x), fn(x))
    assert_counters_delta(before, counters(), graph_breaks=at_least(1))


@pytest.mark.parametrize("register", ["register_forward_pre_hook", "register_forward_hook"])
def test_a_hook_added_after_compiling_a_module_without_hooks_recompiles(register):
    torch.manual_seed(0)
    m = Outer()
    eager = copy.deepcopy(m)
    torchlite.reset()
    guards = "\n".join(torchlite.explain(m)(torch.randn(3, 6)).guards)
    line = next(g for g in guards.splitlines() if g.startswith("EMPTY_DICT_ATTR L['self'].inner."))
    assert "'_forward_hooks'" in line and "'_forward_pre_hooks'" in line, guards
    compiled = torchlite.compile(m, fullgraph=True)
    x = torch.randn(3, 6)
    assert_same(compiled(x), eager(x))
    hook = scale_input if register == "register_forward_pre_hook" else replace_output
    for mod in (m, eager):
        getattr(mod.inner, register)(hook)
    before = counters()
    assert_same(compiled(x), eager(x))
    assert_counters_delta(before, counters(), recompiles=1)
