"""The one check of the conformance suite: a program run eagerly and compiled, compared whole.

An outcome is ("ok", return value) or ("raise", type, message, the traceback's last line in the
program's file). Compiled and eager must agree on the outcome, on the inputs after the call
(in-place updates, appended lists, changed dicts) and on whatever else `observe` reads (globals,
objects), for every call: the second call follows a `mutate`, so the compiled code's guards must
notice what changed.

PYTEST_DONT_REWRITE: plain asserts keep their messages.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import traceback

import pytest
import torch

import torchlite


@torchlite.disable
def opaque(*args):
    """A call the trace cannot see into: a graph break where the program calls it."""


def t43():
    """One fresh 4x3 input, the arguments of most programs."""
    return (torch.randn(4, 3),)


def _last_line(tb, filename: str | None) -> int | None:
    frames = traceback.extract_tb(tb)
    lines = [f.lineno for f in frames if filename is None or f.filename == filename]
    return lines[-1] if lines else None


def run_one(fn, args, filename: str | None, kwargs=None):
    """("ok", value) or ("raise", type, message, last traceback line in `filename`)."""
    try:
        return ("ok", fn(*args, **(kwargs or {})))
    except Exception as e:  # noqa: BLE001 - every exception of the program is compared
        return ("raise", type(e), str(e), _last_line(e.__traceback__, filename))


def assert_same_value(actual, expected, path: str = "out"):
    """Deep equality: same types, tensors close (same dtype, shape, requires_grad), floats close."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: {type(actual).__name__}, eager Tensor"
        torch.testing.assert_close(
            actual.detach(), expected.detach(), equal_nan=True, msg=lambda m: f"{path}: {m}"
        )
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        return
    if isinstance(expected, torch.Generator):
        assert isinstance(actual, torch.Generator), (
            f"{path}: {type(actual).__name__}, eager Generator"
        )
        assert torch.equal(actual.get_state(), expected.get_state()), f"{path}: generator state"
        return
    assert type(actual) is type(expected), (
        f"{path}: {type(actual).__name__} {actual!r}, eager {type(expected).__name__} {expected!r}"
    )
    if dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_same_value(
                getattr(actual, f.name), getattr(expected, f.name), f"{path}.{f.name}"
            )
        return
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same_value(actual[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, (list, tuple, collections.deque)):
        assert len(actual) == len(expected), f"{path}: {actual!r} != eager {expected!r}"
        if isinstance(expected, collections.deque):
            assert actual.maxlen == expected.maxlen, f"{path}: maxlen {actual.maxlen}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_value(a, e, f"{path}[{i}]")
    elif isinstance(expected, float):
        ok = math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-6) or (
            math.isnan(actual) and math.isnan(expected)
        )
        assert ok, f"{path}: {actual!r} != eager {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != eager {expected!r}"


def assert_same_outcome(actual, expected, what: str = "call"):
    """Outcomes of `run_one`: the same value, or the same exception at the same line."""
    if actual[0] == "ok" and expected[0] == "ok":
        return assert_same_value(actual[1], expected[1], f"{what} return value")
    assert actual[0] == expected[0], (
        f"{what}: compiled {_describe(actual)}, eager {_describe(expected)}"
    )
    assert actual[1:3] == expected[1:3], (
        f"{what}: compiled raised {_describe(actual)}, eager {_describe(expected)}"
    )
    assert actual[3] == expected[3], (
        f"{what}: traceback ends at line {actual[3]}, eager at line {expected[3]}"
    )


def _describe(outcome) -> str:
    if outcome[0] == "ok":
        return f"returned {outcome[1]!r}"
    return f"raised {outcome[1].__name__}({outcome[2]!r}) at line {outcome[3]}"


def check_program(
    fn,
    make_args=lambda: (),
    mutate=None,
    *,
    setup=None,
    observe=None,
    calls: int = 2,
    fullgraph: bool = False,
    backend="torchlite",
):
    """Runs `fn(*make_args())` eagerly and compiled `calls` times and compares everything.

    `make_args` is called once per run under the same torch seed, so both runs get equal, fresh
    inputs. `setup()` runs before every run (eager and compiled) to put shared state back, and
    `observe()` after it reads the state to compare. `mutate(call)` runs before every call after
    the first: it changes what the compiled code must not have baked in. Returns the compiled fn.
    """
    compiled = torchlite.compile(fn, fullgraph=fullgraph, backend=backend)
    filename = fn.__code__.co_filename
    for call in range(calls):
        if call and mutate is not None:
            mutate(call)
        results = []
        for runner in (fn, compiled):
            if setup is not None:
                setup()
            torch.manual_seed(1000 + call)
            args = make_args()
            outcome = run_one(runner, args, filename)
            results.append((outcome, args, observe() if observe is not None else None))
        (expected, eager_args, eager_state), (actual, comp_args, comp_state) = results
        assert_same_outcome(actual, expected, f"call {call}")
        assert_same_value(comp_args, eager_args, f"call {call} inputs after the call")
        assert_same_value(comp_state, eager_state, f"call {call} observed state")
    return compiled


def check_captured_program(
    fn, make_args, *, breaks=0, setup=None, observe=None, mutate=None, stable=True, raises=None
):
    """Compiled equals eager (two calls, fresh inputs), `breaks` graph breaks (None: not
    counted), and a second call with identical inputs captures nothing new (unless the program
    changes what it guards on). `raises`: the exception type the program raises (as eager)."""
    check_program(fn, make_args, mutate, setup=setup, observe=observe, calls=2)
    if setup is not None:
        setup()
    torch.manual_seed(0)
    if raises is not None:
        with pytest.raises(raises):
            torchlite.explain(fn)(*make_args())
        return None
    report = torchlite.explain(fn)(*make_args())
    assert breaks is None or report.graph_break_count == breaks, str(report)
    if not stable:
        return report
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for call in range(2):
        if setup is not None:
            setup()
        torch.manual_seed(0)
        args = make_args()
        compiled(*args)
        if call == 0:
            before = dict(torchlite.counters())
    after = dict(torchlite.counters())
    for key in ("frames", "graphs", "recompiles"):
        assert after[key] == before[key], f"second identical call: {key} {before} -> {after}"
    return report
