"""A break inside a loop: the graph before the loop runs compiled, CPython runs the loop itself,
and each iteration calls a generated *loop-body function* that the hook captures like a resume
function: a break inside it is an ordinary break of that function (with its own resume
functions), so the body's torch ops still run compiled. Locals the body assigns flow back to the
loop; `break`, `continue` and `return` leave it as in eager.

Graph and break counts follow explain(): one graph before the loop, then per iteration that
needed its own version (a range loop's int item is a guarded constant) the body's graph before
the break and its resume function's graph after it, and one for the code after the loop (a
resume function too)."""

import contextlib
import sys
import warnings

import pytest
import torch
from helpers import clone_args, counters
from resume_check import check_resume, inputs, loop_body_frames

import torchlite


def _range_loop(x):
    y = x + 1
    for i in range(3):
        y = y * 2
        print("step", i)
        y = y - 1
    return y - 1


def _list_loop(x, ws):
    y = x.sin()
    for w in ws:
        y = y + w
        print("w")
        y = y * 2
    return y


def helper(y):
    return y.cos() * 2 + 1


def _loop_calls_helper(x):
    y = x * 2
    for _ in range(2):
        y = helper(y)
        print("iter")
    return y


def _while_loop(x):
    y = x * 1
    n = 0
    while n < 3:
        y = y + 1
        print("n", n)
        y = y * 2
        n += 1
    return y


def _break_and_continue(x, ws, kinds):
    y = x * 2
    for w, kind in zip(ws, kinds):
        if kind == "skip":
            continue
        y = y + w
        print("w", kind)
        if kind == "stop":
            break
        y = y * 3
    return y + 1


def _return_inside(x, ws):
    y = x + 1
    for w in ws:
        y = y * w
        print("w")
        if w.sum() > 100:
            return y - 1
        y = y + 2
    return y


def _data_dependent_branch(x, ws):
    y = x * 1
    for w in ws:
        if (y * w).sum() > 0:
            y = y + w
        else:
            y = y - w
        y = y * 0.5
    return y


def _loop_in_no_grad(x, ws):
    y = x * 2
    with torch.no_grad():
        for w in ws:
            y = y * w
            print("grad", torch.is_grad_enabled())
            y = y + 1
    return y + x


def _nested_loops(x, ws):
    y = x + 1
    for i in range(2):
        y = y * 2
        for w in ws:
            y = y + w
            print("inner", i)
            y = y.cos()
        y = y - 1
    return y


def _assigned_in_loop(x, ws):
    for w in ws:
        last = x * w
        print("w")
        doubled = last * 2
    return last + doubled


def _zero_iterations(x, ws):
    y = x * 2
    for w in ws:
        y = y + w
        print("never")
    return y - 1


def _raises_inside(x, ws):
    y = x * 2
    for w in ws:
        print("w")
        y = y @ w  # the second matrix does not fit
    return y


def _del_in_body(x, ws):
    y = x * 2
    for w in ws:
        t = y + w
        print("w")
        y = t * 2
        del t
    return y


def _loop_in_suppress(x, ws):
    with contextlib.suppress(ValueError):
        for w in ws:
            last = x * w
            print("w")
            if last.sum() > 100:
                raise ValueError("big")
    return last + 1


def _first_only(x, ws):
    for w in ws:
        y = x + w
        print("first")
        return y * 2
    return x


class _Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        x = x * 2
        for layer in self.layers:
            x = layer(x).relu()
            print("layer")
            x = x + 1
        return x.sum(-1)


def _after_loop_compiled(report, fn, offset):
    """True when the code at `offset` lines into `fn` ran as a resume function with ops."""
    line = fn.__code__.co_firstlineno + offset
    return any(
        f["code_name"].endswith(f"(resumed at line {line})") and f["ops"] > 0 for f in report.frames
    )


class _Enumerated(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i % 3 == 0:
                print("layer", i)
        return x


def _tensors(*shapes):
    return [inputs(*s) for s in shapes]


def test_range_loop_body_runs_compiled_after_the_break(capsys):
    # One body (and resume) version for every value of `i`: the loop counter reaches the body as
    # a number it takes per call (capture/scalar_inputs.h), only handed on to print().
    report = check_resume(_range_loop, inputs(3), graphs=4, breaks=2, loop_body=True)
    assert _after_loop_compiled(report, _range_loop, 6)
    assert capsys.readouterr().out.count("step 2") == 7  # explain(), three eager, three compiled


def test_list_loop_body_runs_compiled():
    check_resume(_list_loop, inputs(3), _tensors((3,), (3,)), graphs=4, breaks=2, loop_body=True)


def test_functions_called_in_the_loop_are_captured():
    # NOTE: one body for both values of the counter `_` (a number the body takes per call).
    report = check_resume(
        _loop_calls_helper, inputs(3), graphs=4, breaks=2, compiled_after=False, loop_body=True
    )
    assert any(f["code_name"].endswith("helper") and f["ops"] > 0 for f in report.frames)


def test_while_loop_body_runs_compiled():
    # NOTE: `n += 1` after the break reads n in Python (a version per value); the body before it
    # hands n to print() only: one version.
    check_resume(_while_loop, inputs(3), graphs=6, breaks=2, loop_body=True)


def test_module_list_loop_runs_each_layer_compiled(capsys):
    model = _Stack()
    report = check_resume(model, inputs(2, 4), graphs=8, breaks=4, loop_body=True)
    # One body version per layer (the layer is guarded by identity), each with its linear.
    assert len(loop_body_frames(report)) == 3
    assert capsys.readouterr().out.count("layer") == 21  # 7 calls of 3 layers


def test_break_and_continue_leave_the_body_as_in_eager(capsys):
    ws = _tensors((3,), (3,), (3,), (3,), (3,))
    kinds = ["a", "skip", "b", "stop", "never"]
    # NOTE: each kind string is a guarded constant: "a", "skip", "b" and "stop" get a body each.
    # Python 3.12 copies the short `return y + 1` into the `break` path, so the stop iteration
    # returns from its own resume function: one graph fewer than on 3.11.
    graphs = 9 if sys.version_info < (3, 12) else 8
    report = check_resume(
        _break_and_continue, inputs(3), ws, kinds, graphs=graphs, breaks=4, loop_body=True
    )
    # The code after the loop: its own resume function on 3.11; on 3.12 the `return y + 1`
    # copied into the break path runs compiled in the stop iteration's resume function.
    after = 10 if sys.version_info < (3, 12) else 6
    assert _after_loop_compiled(report, _break_and_continue, after)
    out = capsys.readouterr().out
    assert "w stop" in out and "never" not in out and "skip" not in out


def test_return_inside_the_body_returns_from_the_function():
    ws = [inputs(3), inputs(3), torch.full((3,), 100.0), inputs(3)]
    check_resume(_return_inside, inputs(3).abs() + 1, ws, graphs=5, breaks=3, loop_body=True)


def test_data_dependent_branch_in_the_loop_resumes_per_side():
    ones = torch.ones(3)
    # The sum is positive, negative, then positive again: both sides run, each resumed once.
    report = check_resume(
        _data_dependent_branch, ones, [ones, -3 * ones, ones], graphs=5, breaks=2, loop_body=True
    )
    sides = {f["code_name"] for f in report.frames if "(resumed at line" in f["code_name"]}
    assert len(sides) == 3, sides  # the two sides, and the code after the loop


def test_loop_inside_no_grad_keeps_grad_mode(capsys):
    x = inputs(3, requires_grad=True)
    report = check_resume(
        _loop_in_no_grad, x, _tensors((3,), (3,)), graphs=5, breaks=3, loop_body=True
    )
    # The code after the loop, still inside the block, and after it. It starts with the block's
    # exit, whose line 3.13 reports as the `with` line (3.11/3.12: the `for` line).
    assert _after_loop_compiled(report, _loop_in_no_grad, 3 if sys.version_info < (3, 13) else 2)
    assert "grad True" not in capsys.readouterr().out
    assert torch.is_grad_enabled()


def test_break_in_an_inner_loop_outlines_both_levels():
    # NOTE: the outer counter `i` is only handed to print(): one version of each body for both.
    report = check_resume(
        _nested_loops, inputs(3), _tensors((3,), (3,)), graphs=6, breaks=3, loop_body=True
    )
    lines = {f["code_name"] for f in loop_body_frames(report)}
    assert len(lines) == 2, lines  # the outer body, and the inner body inside it
    # The rest of the outer body after the inner loop is a resume function of the outer body.
    assert _after_loop_compiled(report, _nested_loops, 8)


def test_local_first_assigned_in_the_loop_is_seen_after_it():
    report = check_resume(
        _assigned_in_loop, inputs(3), _tensors((3,), (3,)), graphs=3, breaks=2, loop_body=True
    )
    assert _after_loop_compiled(report, _assigned_in_loop, 5)


def test_zero_iteration_loop_runs_like_eager():
    check_resume(_zero_iterations, inputs(3), [], graphs=1, breaks=0, compiled_after=False)


def test_exception_in_the_body_reaches_the_caller_at_its_line():
    ws = [inputs(3, 3), inputs(5, 5)]
    line = _raises_inside.__code__.co_firstlineno + 4

    def failure(fn):
        try:
            fn(inputs(2, 3), clone_args(ws))
        except RuntimeError as e:
            tb = e.__traceback__
            while tb.tb_next:
                tb = tb.tb_next
            return type(e), tb.tb_lineno
        raise AssertionError("expected a RuntimeError")

    torchlite.reset()
    compiled = torchlite.compile(_raises_inside)
    assert failure(_raises_inside) == (RuntimeError, line)
    for _ in range(2):
        assert failure(compiled) == (RuntimeError, line)


def test_del_in_the_body_falls_back_to_running_the_loop_in_cpython():
    report = check_resume(
        _del_in_body, inputs(3), _tensors((3,), (3,)), graphs=1, breaks=1, compiled_after=False
    )
    assert not loop_body_frames(report)


@pytest.mark.parametrize("sizes", [[1.0, 2.0], [1.0, 1000.0, 2.0], []])
def test_exception_swallowed_around_the_loop_leaves_locals_as_in_eager(sizes):
    # A with-block whose __exit__ may swallow the exception goes on after it in the bridge: the
    # code after the loop stays there, and a local no iteration assigned is unbound, as in eager.
    ws = [torch.full((3,), s) for s in sizes]

    def outcome(fn):
        try:
            return fn(torch.ones(3), clone_args(ws))
        except UnboundLocalError:
            return "unbound"

    torchlite.reset()
    compiled = torchlite.compile(_loop_in_suppress)
    for _ in range(2):
        expected, actual = outcome(_loop_in_suppress), outcome(compiled)
        if isinstance(expected, str):
            assert actual == expected
        else:
            assert torch.equal(actual, expected)


def test_enumerated_layers_past_the_cache_limit_all_run_compiled():
    # The loop's targets (i, layer) are parameters of the body: each layer gets a version,
    # guarded by identity, which does not count toward cache_size_limit.
    model = _Enumerated(torchlite.config.cache_size_limit + 2)
    torchlite.reset()
    compiled = torchlite.compile(model)
    x = inputs(2, 4)
    before = counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            assert torch.allclose(compiled(x), model(x), atol=1e-6)
    assert counters()["eager_fallbacks"] == before["eager_fallbacks"]
    report = torchlite.explain(model)(x)
    assert len(loop_body_frames(report)) == len(model.layers)


def test_loop_whose_body_always_returns_is_outlined_too():
    # No backward jump: the loop is still a loop (its iterator is on the stack at the break).
    check_resume(_first_only, inputs(3), _tensors((3,), (3,)), graphs=2, breaks=2, loop_body=True)


def _long_range_loop(x, n):
    y = x * 1
    for i in range(n):
        y = y * 0.5 + abs(i)  # NOTE: Python reads i (abs()): a body version per value
        print("step", i)
        y = y.relu() - 0.25
    return y


def _long_range_loop_counter_in_graph(x, n):
    y = x * 1
    for i in range(n):
        y = y * 0.5 + i  # NOTE: i is a graph input of the body (capture/scalar_inputs.h)
        print("step", i)
        y = y.relu() - 0.25
    return y


@pytest.mark.parametrize("in_graph", [False, True])
def test_range_loop_past_the_cache_limit_stays_compiled(capsys, in_graph):
    # A body specialised on i (one version per value) may keep up to 64 versions before the
    # rest of its iterations run eagerly, without a warning below that; a body that takes i as
    # a graph input has one version for all.
    fn = _long_range_loop_counter_in_graph if in_graph else _long_range_loop
    n = torchlite.config.cache_size_limit + 12
    torchlite.reset()
    compiled = torchlite.compile(fn)
    x = inputs(3, 5)
    before = counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            torch.testing.assert_close(compiled(x, n), fn(x, n))
    after = counters()
    assert after["eager_fallbacks"] == before["eager_fallbacks"]
    if in_graph:
        assert after["graphs"] - before["graphs"] <= 6
    else:
        assert after["graphs"] - before["graphs"] >= n
    capsys.readouterr()
