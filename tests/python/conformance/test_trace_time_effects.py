"""Calls torchlite used to run once, while tracing, instead of on every call.

A Python function of torch's own files is run at trace time on meta tensors and recorded as one
op; a builtin of constants is folded. Neither may run the user's code or change the user's
objects: a callback, a decorated helper, a key= function or a mutable object handed to them
would act once, during capture, and never again (and what they read would go unguarded). Each
test counts the effects per call against eager's, with a mutation between calls.
"""

import collections
import functools

import pytest
import torch
import torch.utils._pytree as pytree
from conformance_check import check_program

import torchlite


def t3():
    return (torch.randn(3),)


def _log_check(fn, log, make_args=t3, calls=3, mutate=None):
    """check_program with the log's length compared after every call of every run."""
    check_program(fn, make_args, mutate, setup=log.clear, observe=lambda: list(log), calls=calls)


# --- torch Python functions given the user's callables or objects ------------------------------


def test_pytree_tree_map_calls_user_callback_every_call():
    log = []

    def cb(v):
        log.append(v)
        return v + 1

    def fn(x):
        r = pytree.tree_map(cb, (1, 2))
        return x * r[0]

    _log_check(fn, log)


def test_pytree_tree_map_over_tensors_calls_callback_once_per_call():
    log = []

    def cb(t):
        log.append("cb")
        return t * 2

    def fn(x):
        a, b = pytree.tree_map(cb, (x, x + 1))
        return a + b

    _log_check(fn, log)


def test_pytree_tree_map_appends_to_a_deque_every_call():
    dq = collections.deque()

    def fn(x):
        pytree.tree_map(dq.append, (1, 2))
        return x * len(dq)

    check_program(fn, t3, setup=dq.clear, observe=lambda: list(dq), calls=3)


def test_no_grad_decorated_helper_runs_every_call():
    log = []

    @torch.no_grad()
    def helper(v):
        log.append(1)
        return v * 2

    def fn(x):
        return helper(x) + helper(3)

    _log_check(fn, log, make_args=lambda: (torch.randn(3, requires_grad=True),))


def test_inference_mode_decorated_helper_with_constant_runs_every_call():
    log = []

    @torch.inference_mode()
    def helper(v):
        log.append(v)
        return v + 1

    def fn(x):
        return x * helper(2)

    _log_check(fn, log)


def test_compiler_disable_helper_runs_eagerly_every_call():
    log = []

    @torch.compiler.disable
    def helper(v):
        log.append(1)
        return v * 2

    def fn(x):
        return x * helper(3)

    _log_check(fn, log)
    out = torchlite.explain(fn)(torch.randn(3))
    assert any("torch.compiler.disable" in str(b) for b in out.break_reasons), out


def test_checkpoint_runs_its_function_once_per_call_and_keeps_grads():
    log = []

    def block(v):
        log.append(1)
        return (v * 2).sin()

    def fn(x):
        return torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum()

    _log_check(fn, log, make_args=lambda: (torch.randn(3, requires_grad=True),))
    x = torch.randn(3, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn(x).backward()
    torchlite.compile(fn)(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)


def test_a_torch_file_function_writing_a_dict_argument_writes_it_every_call():
    # lr_scheduler's helper sets `param_group[key] = val`: run at trace time on a copy, the
    # caller's dict kept its old value (ReduceLROnPlateau's reduced lr was lost).
    update = getattr(torch.optim.lr_scheduler, "_update_param_group_val", None)
    if update is None:
        pytest.skip("no _update_param_group_val in this torch")
    groups = [{"lr": 1.0, "momentum": 0.9}]

    def fn(x):
        for g in groups:
            update(g, "lr", g["lr"] * 0.5)
        return x * groups[0]["lr"]

    def setup():
        groups[0]["lr"] = 1.0

    check_program(fn, t3, setup=setup, observe=lambda: dict(groups[0]), calls=3)


def test_a_scheduler_step_reducing_the_lr_matches_eager():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)

    def fn(x):
        sched.step(1.0)  # worse than `best`: the lr is halved
        return x * 2

    def state():
        return (opt.param_groups[0]["lr"], sched.last_epoch, sched.num_bad_epochs, sched._last_lr)

    def setup():
        opt.param_groups[0]["lr"] = 1.0
        sched.last_epoch = 0
        sched.best = 0.5
        sched.num_bad_epochs = 0

    check_program(fn, t3, setup=setup, observe=state, calls=3)


def test_bound_methods_of_a_scheduler_through_locals_containers_and_partials():
    # Regression pins (correct before): a torch-file method bound to a Python object is inlined
    # or breaks; it never runs at trace time.
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    step = sched.step
    steps = [sched.step]
    reset = functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau._reset, sched)

    def fn(x):
        step(1.0)
        steps[0](1.0)
        sched.step(1.0)
        sched.num_bad_epochs += 1
        reset()
        return x * 2

    def state():
        return (opt.param_groups[0]["lr"], sched.last_epoch, sched.num_bad_epochs)

    def setup():
        opt.param_groups[0]["lr"] = 1.0
        sched.last_epoch = 0
        sched.best = float("inf")

    check_program(fn, t3, setup=setup, observe=state, calls=3)


# --- builtins folded on constants with the user's key= -----------------------------------------


@pytest.mark.parametrize("builtin", [sorted, min, max])
def test_key_function_runs_every_call(builtin):
    log = []

    def key(v):
        log.append(v)
        return -v

    def fn(x):
        r = builtin([3, 1, 2], key=key)
        return x * (r[0] if isinstance(r, list) else r)

    _log_check(fn, log)


def test_sorted_key_reading_a_dict_follows_its_change():
    box = {"sign": 1}

    def key(v):
        return v * box["sign"]

    def fn(x):
        return x * sorted([3, 1, 2], key=key, reverse=True)[1] + min(4, 5, 6, key=key)

    def flip(call):
        box["sign"] = -box["sign"]

    check_program(fn, t3, flip, calls=3)


def test_key_function_edge_cases_match_eager():
    def fn(x):
        ts = [x, x * 2, x - 1]
        a = sorted(ts, key=lambda t: t.shape[0] * 0)  # ties: stable
        b = max([], key=lambda v: v, default=x)
        c = min(ts, key=lambda t: len(t.shape))
        return a[0] + a[2] + b + c

    check_program(fn, t3)

    def empty(x):
        return max([], key=lambda v: v)

    check_program(empty, t3)

    def mixed(x):
        return sorted([1, "a"], key=lambda v: v)

    check_program(mixed, t3)


_hook_log: list = []


def _pack(t):
    _hook_log.append("pack")
    return t


def _unpack(t):
    _hook_log.append("unpack")
    return t


def _under_saved_tensors_hooks(x):
    with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
        y = x.sin() * x
    return y


def test_saved_tensors_hooks_see_every_call_the_first_included():
    # NOTE: the with-block's __exit__ (torch._C._autograd._pop_saved_tensors_default_hooks) ran
    # at trace time: the user's hooks were popped before the first call's graph ran, which then
    # saved its tensors without calling them.
    torchlite.reset()
    compiled = torchlite.compile(_under_saved_tensors_hooks)
    for _ in range(3):
        x = torch.randn(4, requires_grad=True)
        _hook_log.clear()
        expected = _under_saved_tensors_hooks(x)
        eager_log = list(_hook_log)
        _hook_log.clear()
        out = compiled(x)
        assert _hook_log == eager_log
        torch.testing.assert_close(out, expected)
        _hook_log.clear()
        out.sum().backward()
        assert _hook_log.count("unpack") == eager_log.count("pack")
