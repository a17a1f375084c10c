"""Python semantics the interpreter must model exactly or break on (issue 20 items 6 and 8):
exception attributes, truth and len protocols, builtin argument checks, object identity and
types. Each program is compared with eager by `same_as_eager` (values, exceptions, mutations).

Try statements are put in helpers: the compiled frame itself hands a try body to CPython, an
inlined call runs its handlers at trace time, which is where these semantics matter.
"""

import collections

import pytest
import torch
from semantics_check import randn, same_as_eager

# --------------------------------------------------------------------------- exceptions


def _context_of_raise_in_handler(x):
    try:
        try:
            {}["missing"]
        except KeyError:
            raise ValueError("b")
    except ValueError as e:
        return x + 1, type(e.__context__).__name__, str(e.__context__), e.__suppress_context__


def test_exception_raised_in_handler_has_the_handled_one_as_context():
    same_as_eager(lambda x: _context_of_raise_in_handler(x), randn(3))


def _cause_of_raise_from(x, none):
    try:
        try:
            raise KeyError("a")
        except KeyError as k:
            raise ValueError("b", 2) from (None if none else k)
    except ValueError as e:
        cause = type(e.__cause__).__name__
        return x * 2, e.args, cause, type(e.__context__).__name__, e.__suppress_context__


def test_raise_from_sets_cause_and_suppresses_context():
    same_as_eager(lambda x: _cause_of_raise_from(x, False), randn(3))


def test_raise_from_none_keeps_context_and_suppresses_it():
    same_as_eager(lambda x: _cause_of_raise_from(x, True), randn(3))


def _traceback_of_caught(x):
    try:
        raise ValueError("v")
    except ValueError as e:
        return x + 1, e.__traceback__ is None


def test_caught_exception_has_a_traceback():
    same_as_eager(lambda x: _traceback_of_caught(x), randn(3))


def _raise_value_error():
    raise ValueError("v")


def _traceback_entries_of_caught(x):
    try:
        _raise_value_error()
    except ValueError as e:
        tb = e.__traceback__
        inner = tb.tb_next
        return (
            x + 1,
            tb.tb_lineno - _traceback_entries_of_caught.__code__.co_firstlineno,
            inner.tb_lineno - _raise_value_error.__code__.co_firstlineno,
            inner.tb_next is None,
            tb.tb_lasti >= 0,
        )


def test_caught_exception_traceback_has_its_lines_and_next_entries():
    same_as_eager(lambda x: _traceback_entries_of_caught(x), randn(3))


def _traceback_replaced(x, how):
    try:
        try:
            _raise_value_error()
        except ValueError as e:
            if how == "assign":
                e.__traceback__ = None
                return x + 1, e.__traceback__ is None
            if how == "with_traceback":
                return x + 2, e.with_traceback(None) is e, e.__traceback__ is None
            raise e.with_traceback(None)
    except ValueError as e2:
        depth, tb = 0, e2.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        return x + 3, depth


@pytest.mark.parametrize("how", ["assign", "with_traceback", "reraise_with_traceback"])
def test_traceback_assigned_or_replaced_is_honoured(how):
    same_as_eager(lambda x: _traceback_replaced(x, how), randn(3))


def _stop_iteration_from_generator(x):
    def gen():
        yield 1
        raise StopIteration("early")  # noqa: PLR1708 - PEP 479 is what is tested

    try:
        return x + sum(gen())
    except StopIteration:
        return x - 1, "StopIteration escaped"
    except RuntimeError as e:
        return x + 100, str(e), type(e.__cause__).__name__


def test_stop_iteration_leaving_a_generator_is_a_runtime_error():
    same_as_eager(lambda x: _stop_iteration_from_generator(x), randn(3))
    same_as_eager(lambda x: _stop_iteration_from_generator(x), randn(3), fullgraph=True)


class IntBool:
    def __bool__(self):
        return 1  # noqa: PLE0304 - the TypeError is what is tested


class NegativeLen:
    def __len__(self):
        return -1  # noqa: PLE0303 - the ValueError is what is tested


def _truth_of(x, obj):
    try:
        return x + 1 if obj else x - 1
    except (TypeError, ValueError) as e:
        return x * 0, type(e).__name__, str(e)


def test_bool_returning_an_int_raises_type_error():
    same_as_eager(lambda x: _truth_of(x, IntBool()), randn(3), fullgraph=True)


def test_len_returning_a_negative_raises_value_error():
    same_as_eager(lambda x: _truth_of(x, NegativeLen()), randn(3), fullgraph=True)


def _isinstance_with_keyword(x):
    try:
        return x + isinstance(x, torch.Tensor, bogus=1)
    except TypeError as e:
        return x - 1, str(e)


def test_isinstance_with_a_keyword_argument_raises_type_error():
    same_as_eager(_isinstance_with_keyword, randn(3))
    same_as_eager(lambda x: _isinstance_with_keyword(x), randn(3), fullgraph=True)


def _keywords_seen(*args, **kwargs):
    return len(kwargs)


def _raises_with_keyword(x, flag):
    raise ValueError("no")


def _call_after_failed_keyword_call(x):
    try:
        _raises_with_keyword(x, flag=True)
    except ValueError:
        pass
    return x + _keywords_seen(x)


def test_call_after_a_keyword_call_that_raised_gets_no_stale_keywords():
    same_as_eager(lambda x: _call_after_failed_keyword_call(x), randn(3), fullgraph=True)


# --------------------------------------------------------------------------- identity and types


def test_in_place_methods_return_the_tensor_itself():
    def fn(x):
        a = x.add_(1)
        b = x.mul_(2)
        c = x.clamp_(0, 1)
        return x, a is x, b is x, c is x, a is b

    same_as_eager(fn, randn(3), fullgraph=True)


def test_out_argument_is_the_returned_tensor():
    def fn(x):
        o = torch.empty(3)
        r = torch.add(x, 1, out=o)
        return r, r is o

    same_as_eager(fn, randn(3), fullgraph=True)


Pair = collections.namedtuple("Pair", "a b")


class PairWithDefault(Pair):
    __slots__ = ()

    def __new__(cls, a, b=None):
        return super().__new__(cls, a, a + 1 if b is None else b)


def test_namedtuple_subclass_with_its_own_new_keeps_its_type_and_values():
    same_as_eager(lambda x: PairWithDefault(x * 2), randn(3))


class SumPair(Pair):
    def total(self):
        return self.a + self.b


def test_namedtuple_subclass_methods_and_type_survive():
    def fn(x):
        p = SumPair(x, x * 2)
        return p, p.total(), type(p).__name__, p._fields

    same_as_eager(fn, randn(3), fullgraph=True)


class AcceptsAll(type):
    def __instancecheck__(cls, obj):
        return True


class Anything(metaclass=AcceptsAll):
    pass


def test_metaclass_instancecheck_is_honoured():
    same_as_eager(lambda x: (x + 1, isinstance(x, Anything), isinstance(3, Anything)), randn(3))


class First:
    def value(self):
        return 1


class Second:
    def value(self):
        return 2


def test_assigning_class_changes_the_methods_found():
    def fn(x):
        o = First()
        o.__class__ = Second
        return x + o.value(), type(o).__name__

    same_as_eager(fn, randn(3))


def test_hasattr_on_builtin_containers_looks_on_their_type():
    def fn(x):
        return (
            x + 1,
            hasattr([], "foo"),
            hasattr([], "append"),
            hasattr({}, "nope"),
            hasattr({}, "keys"),
            hasattr((1,), "index"),
            hasattr((1,), "append"),
        )

    same_as_eager(fn, randn(3), fullgraph=True)


class TimesTen:
    def __get__(self, obj, objtype=None):
        return obj.__dict__.get("_v", 0)

    def __set__(self, obj, v):
        obj.__dict__["_v"] = v * 10


class HasDescriptor:
    d = TimesTen()


def test_data_descriptor_set_is_called():
    def fn(x):
        o = HasDescriptor()
        o.d = 2
        return x + o.d, o.__dict__

    same_as_eager(fn, randn(3))


def test_list_built_in_trace_and_returned_twice_is_one_list():
    def fn(x):
        items = [x + 1]
        return items, items

    out = same_as_eager(fn, randn(3))(randn(3))
    assert out[0] is out[1]


def test_tensor_data_attribute_unknown_at_trace_time_is_read_for_real():
    def fn(x):
        y = x * 2
        return y + 1 if y.retains_grad else y - 1

    same_as_eager(fn, randn(3).requires_grad_())


class _Tagged(torch.Tensor):
    """A tensor subclass made inside traced code (as_subclass): its type must survive."""


def _subclass_made_in_trace(x):
    s = (x * 2).as_subclass(_Tagged)
    y = s + 1
    return type(s).__name__, type(y).__name__, y.as_subclass(torch.Tensor) * 3


def test_tensor_subclass_made_by_as_subclass_keeps_its_type():
    same_as_eager(_subclass_made_in_trace, randn(4))
