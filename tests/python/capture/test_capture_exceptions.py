"""Exceptions raised and caught inside traced code run their handlers at trace time.

Real model code relies on this: `getattr(config, name, default)` over a Python
`__getattribute__` that raises AttributeError (transformers' PretrainedConfig),
`os.environ.get` (a KeyError caught inside `Mapping.get`), helpers with
try/except. Each case must be one graph (fullgraph=True) and equal eager.

PYTEST_DONT_REWRITE: the helpers' own `assert` statements must stay plain.
"""

import os
from typing import ClassVar

import pytest
import torch
from helpers import assert_counters_delta, at_least, check, counters, lineno_of

import torchlite


class AttrMapConfig:
    """Like transformers' PretrainedConfig: attribute reads go through Python code."""

    attribute_map: ClassVar[dict] = {"hidden": "hidden_size"}

    def __init__(self):
        self.hidden_size = 3

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


CONFIG = AttrMapConfig()


def test_getattr_default_over_python_getattribute_that_raises():
    def fn(x):
        a = getattr(CONFIG, "not_there", 5)
        b = getattr(CONFIG, "hidden", 7)
        return x * a + b + (1 if hasattr(CONFIG, "missing_too") else 2)

    check(fn, torch.randn(4, 3))


class RaisingProperty:
    @property
    def value(self):
        raise AttributeError("computed lazily")


def test_hasattr_false_when_property_raises_attribute_error():
    obj = RaisingProperty()

    def fn(x):
        return x + 1 if hasattr(obj, "value") else x - 1

    check(fn, torch.randn(5))


def _lookup(table, key):
    try:
        return table[key]
    except KeyError:
        return -1


def test_key_error_caught_in_inlined_helper():
    def fn(x):
        table = {"a": 2}
        return x * _lookup(table, "a") + _lookup(table, "b")

    check(fn, torch.randn(3, 2))


def test_environ_get_of_unset_variable_then_set_recompiles(monkeypatch):
    name = "TORCHLITE_TEST_SURELY_UNSET"
    monkeypatch.delenv(name, raising=False)

    def fn(x):
        return x * len(os.environ.get(name, "ab"))

    compiled = check(fn, torch.randn(4))
    monkeypatch.setenv(name, "abcde")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))  # the missing key was guarded


def _raise_value_error(n):
    if n > 2:
        raise ValueError(f"n={n} too big")
    return n


def _middle(n):
    return _raise_value_error(n) + 1  # no handler here: the exception passes through


def test_exception_caught_two_frames_up_with_message():
    def outer(n):
        try:
            return _middle(n)
        except (KeyError, ValueError) as e:
            return len(str(e))

    def fn(x):
        return x * outer(1) + outer(5)

    check(fn, torch.randn(2))


def _with_finally(log, n):
    try:
        return [1, 2][n]
    finally:
        log.append(n)


def test_finally_runs_on_the_exception_path_and_reraises():
    def fn(x, log):
        try:
            _with_finally(log, 7)
        except IndexError:
            log.append("caught")
        return x + len(log)

    check(fn, torch.randn(3), [])


def _checked(n):
    assert n > 0, "needs a positive n"
    return n


def test_failed_assert_caught_as_assertion_error():
    def fn(x):
        try:
            k = _checked(-1)
        except AssertionError as e:
            k = len(e.args[0])
        return x * k

    check(fn, torch.randn(3))


def _reraise_as_key_error(d):
    try:
        return d["k"]
    except KeyError:
        raise KeyError("k is required") from None


def test_raise_from_none_inside_handler_propagates_to_caller_handler():
    def fn(x):
        try:
            v = _reraise_as_key_error({})
        except KeyError as e:
            v = len(e.args[0])
        return x + v

    check(fn, torch.randn(3))


def test_top_level_try_except_and_finally_are_captured():
    def fn(x, d):
        try:
            y = x * d["scale"]
        except KeyError:
            y = x - 1
        finally:
            y = y + 1
        return y

    check(fn, torch.randn(3), {"scale": 2.0})
    check(fn, torch.randn(3), {})


def test_uncaught_exception_reaches_the_user_with_their_line():
    def fn(x):
        y = x + 1
        return y * _raise_value_error(9)  # RAISES

    compiled = torchlite.compile(fn)
    with pytest.raises(ValueError, match="n=9 too big") as info:
        compiled(torch.randn(3))
    frames = [(str(entry.path), entry.lineno + 1) for entry in info.traceback]
    assert (__file__, lineno_of(fn, "# RAISES")) in frames, frames


def test_break_inside_a_top_level_try_body_still_matches_eager():
    def fn(x):
        y = x * 2
        try:
            y = y + os.getpid() * 0  # not capturable: the try runs in CPython
        except ValueError:
            y = y - 1
        return y + 1

    compiled = torchlite.compile(fn)
    before = counters()
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    assert_counters_delta(before, counters(), graph_breaks=at_least(1))


def test_exception_out_of_an_inlined_with_block_is_a_break_not_a_catch():
    def helper(x):
        with torch.no_grad():
            raise KeyError("inside with")

    def fn(x):
        try:
            helper(x)
        except KeyError:
            x = x + 1
        return x * 2

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    assert torch.is_grad_enabled()
