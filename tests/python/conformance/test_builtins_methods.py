# ruff: noqa: B009, B010, C406, C408, C417, FLY002 - the constructs under test are written the way users write them
"""Conformance: the builtins (csrc/capture/builtins.cpp), the methods of lists, dicts, sets,
tuples and strings (methods.cpp, objects.cpp) and the `operator`/`math` functions the capture
interpreter models, each compared with eager by `check_program` (value, exception, side effects,
a second call after a mutation).
"""

import math
import operator

import pytest
import torch
from conformance_check import check_program


def t4():
    return (torch.randn(4),)


# --- builtins -----------------------------------------------------------------------------------


def test_len_of_containers_tensor_and_zero_dim_error():
    def fn(x, xs, d, s):
        return len(xs), len(d), len(s), len(x), len((1, 2)), len("abc"), len(range(5))

    check_program(fn, lambda: (torch.randn(3, 2), [1, 2], {"a": 1}, {1, 2, 3}))

    def zero_dim(x):
        return len(x.sum())

    check_program(zero_dim, t4)


def test_callable_isinstance_type_checks():
    def fn(x, n, xs):
        return (
            callable(fn),
            callable(n),
            isinstance(x, torch.Tensor),
            isinstance(n, (float, str)),
            isinstance(xs, list),
            type(n) is int,
            type(x).__name__,
            issubclass(bool, int),
        )

    check_program(fn, lambda: (torch.randn(4), 3, [1]))


def test_isinstance_with_non_type_raises_type_error():
    def fn(x):
        return isinstance(x, 3)

    check_program(fn, t4)


def test_getattr_hasattr_setattr_on_object():
    class Obj:
        a = 1

    obj = Obj()

    def fn(x):
        setattr(obj, "b", 2)
        return x * getattr(obj, "a") + getattr(obj, "c", 5), hasattr(obj, "b"), hasattr(obj, "d")

    def setup():
        obj.__dict__.clear()

    check_program(fn, t4, setup=setup, observe=lambda: dict(obj.__dict__))


def test_getattr_missing_without_default_raises():
    def fn(x):
        return getattr(x, "no_such_attribute")

    check_program(fn, t4)


def test_enumerate_zip_reversed_iter_next():
    def fn(x, xs):
        out = [i * v for i, v in enumerate(xs, start=1)]
        pairs = list(zip(xs, xs[1:], "abc"))
        it = iter(xs)
        first = next(it)
        second = next(it)
        rest = list(it)
        return out, pairs, list(reversed(xs)), first, second, rest, next(iter([]), "dflt"), x

    check_program(fn, lambda: (torch.randn(4), [3, 1, 2, 5]))


def test_next_on_exhausted_iterator_raises_stop_iteration():
    def fn(x):
        it = iter([x])
        next(it)
        return next(it)

    check_program(fn, t4)


def test_zip_strict_length_mismatch_raises():
    def fn(xs):
        return list(zip(xs, [1], strict=True))

    check_program(fn, lambda: ([1, 2],))


def test_list_tuple_set_dict_constructors():
    def fn(x, xs, d):
        return (
            list(xs),
            tuple(xs),
            sorted(set(xs)),
            dict(d),
            dict(a=1, b=x),
            dict([("k", 1), ("j", 2)]),
            list(range(2, 8, 3)),
            list("ab"),
        )

    check_program(fn, lambda: (torch.randn(4), [3, 1, 3], {"a": 1}))


def test_map_filter_sum_all_any():
    def fn(x, xs):
        return (
            list(map(lambda v: v * 2, xs)),
            list(map(operator.add, xs, xs)),
            list(filter(None, xs)),
            sum(xs),
            sum(xs, 10),
            sum([x, x]),
            all(xs),
            any(v > 2 for v in xs),
        )

    check_program(fn, lambda: (torch.randn(4), [0, 1, 3]))


def test_min_max_abs_round_divmod_pow():
    def fn(x, n, f):
        return (
            min(n, 2),
            max([n, 5, 1]),
            max((), default=-1),
            min("ba"),
            abs(-n),
            abs(x),
            round(f),
            round(f, 1),
            divmod(n, 3),
            pow(n, 2),
            pow(n, 2, 5),
        )

    check_program(fn, lambda: (torch.randn(4), 7, 2.675))


def test_min_of_empty_raises_value_error():
    def fn(xs):
        return min(xs)

    check_program(fn, lambda: ([],))


def test_int_float_bool_str_conversions():
    def fn(x, n, s):
        return int(s), float(n), bool(n), str(n), repr(s), int(3.9), int("-7"), float("1.5")

    check_program(fn, lambda: (torch.randn(4), 0, "12"))


def test_int_of_bad_string_raises_value_error():
    def fn(x, s):
        return x * int(s)

    check_program(fn, lambda: (torch.randn(4), "x1"))


def test_int_float_bool_of_tensor_match_eager():
    def fn(x):
        s = x.sum()
        return int(s), float(s), bool(s > 0), x * float(s)

    check_program(fn, t4)


def test_sorted_with_key_and_reverse():
    def fn(xs):
        return sorted(xs, key=lambda v: -v), sorted(xs, reverse=True), sorted("cab")

    check_program(fn, lambda: ([3, 1, 2],))


# --- operator and math ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lt"]
)
def test_operator_functions_on_ints_and_tensors(name):
    op = getattr(operator, name)

    def fn(x, n):
        r = op(n, 3)
        return r, op(x, 2) if name not in ("and_", "or_", "xor") else x

    check_program(fn, lambda: (torch.rand(4) + 0.5, 7))


def test_operator_getitem_setitem_contains_not_truth():
    def fn(xs, x):
        operator.setitem(xs, 0, 9)
        return operator.getitem(xs, 1), operator.contains(xs, 9), operator.not_(xs), x

    check_program(fn, lambda: ([1, 2], torch.randn(4)))


def test_math_functions_on_python_numbers():
    def fn(x, f):
        return x * math.sqrt(f) + math.log(f) - math.floor(f) + math.ceil(f) + math.pi

    check_program(fn, lambda: (torch.randn(4), 2.5))


def test_math_domain_error_matches_eager():
    def fn(x, f):
        return x * math.sqrt(f)

    check_program(fn, lambda: (torch.randn(4), -1.0))


# --- methods of Python containers -----------------------------------------------------------------


def test_list_methods():
    def fn(xs, x):
        xs.append(4)
        xs.extend([5, 6])
        xs.insert(0, -1)
        xs.insert(-1, 99)
        a = xs.pop()
        b = xs.pop(0)
        xs.remove(99)
        xs.reverse()
        ys = xs.copy()
        xs.sort()
        return a, b, ys, xs.index(5), xs.count(4), x

    check_program(fn, lambda: ([3, 1, 2], torch.randn(4)))


def test_list_pop_empty_and_remove_missing_raise():
    def pop(xs):
        return xs.pop()

    def remove(xs):
        xs.remove(7)
        return xs

    check_program(pop, lambda: ([],))
    check_program(remove, lambda: ([1],))


def test_list_of_tensors_methods_mutate_input():
    def fn(ts, x):
        ts.append(x * 2)
        ts[0] = ts[0] + 1
        last = ts.pop()
        ts.clear()
        return last

    check_program(fn, lambda: ([torch.randn(4), torch.randn(4)], torch.randn(4)))


def test_dict_methods():
    def fn(d, x):
        a = d.get("a")
        b = d.get("zz", 3)
        c = d.pop("a")
        e = d.pop("nope", None)
        f = d.setdefault("s", x)
        d.update({"u": 1}, v=2)
        ks, vs, its = list(d.keys()), list(d.values()), list(d.items())
        d2 = d.copy()
        d2["copy_only"] = 1
        return a, b, c, e, f, ks, vs, its, "u" in d, d2

    check_program(fn, lambda: ({"a": 1, "b": 2}, torch.randn(4)))


def test_dict_pop_missing_raises_key_error():
    def fn(d, x):
        return x + d.pop("missing")

    check_program(fn, lambda: ({"a": 1}, torch.randn(4)))


def test_set_methods():
    def fn(s, x):
        s.add(5)
        s.discard(1)
        u = s | {7}
        i = s & {5, 2}
        diff = s - {2}
        return sorted(s), sorted(u), sorted(i), sorted(diff), 5 in s, len(s), x

    check_program(fn, lambda: ({1, 2, 3}, torch.randn(4)))


def test_set_remove_missing_raises_key_error():
    def fn(x):
        s = {1}
        s.remove(2)
        return x

    check_program(fn, t4)


def test_tuple_and_str_methods():
    def fn(x, t, s):
        return (
            t.count(1),
            t.index(2),
            s.upper(),
            s.split(","),
            "-".join(["a", s]),
            s.startswith("a"),
        )

    check_program(fn, lambda: (torch.randn(4), (1, 2, 1), "a,b"))


def test_tuple_index_missing_raises_value_error():
    def fn(t):
        return t.index(9)

    check_program(fn, lambda: ((1, 2),))


# --- tensor methods and attributes --------------------------------------------------------------


def test_tensor_metadata_reads():
    def fn(x):
        return x.shape, x.size(1), x.dim(), x.ndim, x.dtype, x.numel(), x.is_floating_point(), x.T

    check_program(fn, lambda: (torch.randn(2, 3),))


def test_tensor_inplace_methods_mutate_input_and_alias():
    def fn(x, y):
        v = x[1:]
        v.mul_(2)
        x.add_(y)
        y.zero_()
        return x.sum(), v

    check_program(fn, lambda: (torch.randn(4), torch.randn(4)))


def test_tensor_item_tolist_are_eager_values():
    def fn(x):
        return x.sum().item(), x.tolist(), x.max().item() > 0

    check_program(fn, t4)


def test_shape_error_message_matches_eager():
    def fn(x, y):
        z = x * 2
        return z + y

    check_program(fn, lambda: (torch.randn(4), torch.randn(3)))
