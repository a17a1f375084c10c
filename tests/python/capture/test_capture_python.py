"""Python language features evaluated at trace time: builtins, math, control flow, inlining,
closures, globals, containers and return values."""

import functools
import math

import torch
from helpers import check

SCALE = 0.25
OFFSETS = (1.0, 2.0)
TABLE = {"a": 2.0, "b": -1.0}
GLOBAL_TENSOR = torch.arange(4.0)


# --- builtins ---------------------------------------------------------------------------------


def test_len_range_enumerate_zip_match_eager():
    def fn(xs):
        out = []
        for i, (a, b) in enumerate(zip(xs, xs[1:])):  # noqa: RUF007 - zip under test
            out.append(a * i + b)
        return out, len(xs), [j * 2 for j in range(len(xs))]

    check(fn, [torch.randn(3) for _ in range(4)])


def test_isinstance_getattr_hasattr_match_eager():
    def fn(x, y, attr="ndim"):
        r = x
        if isinstance(y, torch.Tensor):
            r = r + y
        if isinstance(2, (int, float)) and not isinstance(x, list):
            r = r * 2
        if hasattr(x, "shape") and not hasattr(x, "no_such_attribute"):
            r = r + getattr(x, attr)
        return getattr(torch, attr.replace("ndim", "relu"))(r), getattr(x, "missing", 7)

    check(fn, torch.randn(3), torch.randn(3))


def test_min_max_abs_int_float_round_match_eager():
    def fn(x):
        n = max(x.shape[0], 3, 2)
        m = min(x.shape)
        k = int(x.shape[1] / 2)
        f = float(x.shape[0]) + abs(-1.5)
        return x * n - m + k * f, round(2.567, 1), divmod(7, 2), pow(2, 3), bool(x.shape)

    check(fn, torch.randn(4, 5))


def test_sum_all_any_sorted_reversed_on_python_values_match_eager():
    def fn(x):
        dims = sorted([2, 0, 1], reverse=True)
        flags = [d > 0 for d in dims]
        return x.permute(*reversed(dims)), sum(dims), all(flags), any(flags), tuple(dims)

    check(fn, torch.randn(2, 3, 4))


def test_sum_builtin_over_tensors_matches_eager():
    def fn(a, b, c):
        return sum([a, b, c]), sum((a, b), c), max(1, 2) * a

    check(fn, torch.randn(3), torch.randn(3), torch.randn(3))


def test_str_formatting_of_constants_is_trace_time():
    def fn(x):
        key = f"layer_{x.ndim}"
        names = "_".join(["a", "b"])  # noqa: FLY002 - str.join under test
        return {key: x, names: x + 1}, key.upper(), "a" in names

    check(fn, torch.randn(3))


# --- math ------------------------------------------------------------------------------------


def test_math_on_constants_matches_eager():
    def fn(x):
        root, log8 = math.sqrt(x.shape[-1]), math.log(8, 2)  # noqa: FURB163
        return x * root + math.pi, x / log8, math.cos(0.0) * x.exp()

    check(fn, torch.randn(2, 16))


def test_math_floor_ceil_inf_match_eager():
    def fn(x):
        n = math.ceil(x.shape[0] / 3) + math.floor(2.7)
        return x[:n].clamp(max=math.inf), n, math.isfinite(1.0), math.e * x

    check(fn, torch.randn(7))


# --- control flow ----------------------------------------------------------------------------


def test_if_on_trace_time_values_matches_eager():
    def fn(x, flag, mode="sum"):
        if flag:
            x = x + 1
        else:
            x = x - 1
        if mode == "sum":
            return x.sum()
        elif mode == "max":
            return x.max()
        return x

    check(fn, torch.randn(3), True)
    check(fn, torch.randn(3), False, mode="max")
    check(fn, torch.randn(3), False, mode="none")
    check(fn, torch.randn(3), None)


def test_if_on_shape_matches_eager():
    def fn(x):
        if x.shape[0] > 2 and x.dim() == 2:
            return x[:2]
        return x * 2

    check(fn, torch.randn(4, 3))
    check(fn, torch.randn(2, 3))


def test_for_over_range_matches_eager():
    def fn(x, n):
        for i in range(n):
            x = x * 0.5 + i
        for i in range(1, 6, 2):
            x = x - i
        return x

    check(fn, torch.randn(3), 4)


def test_for_over_list_of_tensors_matches_eager():
    def fn(xs):
        acc = torch.zeros_like(xs[0])
        for t in xs:
            acc = acc + t.relu()
        return acc

    check(fn, [torch.randn(2, 3) for _ in range(3)])


def test_for_over_tuple_dict_items_and_zip_matches_eager():
    def fn(x, weights):
        out = x
        for name, w in weights.items():
            out = out + w if name.startswith("add") else out * w
        for a, b in zip((1, 2, 3), (x, x * 2, x * 3)):
            out = out + a * b
        return out

    check(fn, torch.randn(4), {"add_1": torch.randn(4), "mul_1": torch.randn(4)})


def test_while_on_trace_time_counter_matches_eager():
    def fn(x):
        i = 0
        while i < 3:
            x = x.sin()
            i += 1
        while True:
            x = x + 1
            if i == 0:
                break
            i -= 1
        return x, i

    check(fn, torch.randn(3))


def test_break_continue_and_for_else_match_eager():
    def fn(x):
        for i in range(10):
            if i % 2:
                continue
            if i > 6:
                break
            x = x + i
        else:
            x = x * 0
        return x

    check(fn, torch.randn(3))


def test_ternary_and_boolean_short_circuit_match_eager():
    def fn(x, y=None):
        y = y if y is not None else x
        z = x * 2 if (y is x and x.dim() == 1) or x.dim() > 5 else x * 3
        return z, y is None, x is not None

    check(fn, torch.randn(3))
    check(fn, torch.randn(3), y=torch.randn(3))


def test_comprehensions_match_eager():
    def fn(x):
        sq = [x * i for i in range(3)]
        d = {i: t.sum() for i, t in enumerate(sq)}
        s = tuple(t + 1 for t in sq if t is not sq[0])
        return sq, d, s

    check(fn, torch.randn(3))


# --- user functions --------------------------------------------------------------------------


def _helper_defaults(x, scale=2.0, *, shift=1.0):
    return x * scale + shift


def _helper_varargs(*args, **kwargs):
    out = sum(args)
    for k in sorted(kwargs):
        out = out * kwargs[k]
    return out


def _helper_nested(x):
    def inner(y, k=3):
        return y * k

    return inner(x) + inner(x, k=-1)


def test_inlined_function_with_defaults_and_keyword_only_matches_eager():
    def fn(x):
        return _helper_defaults(x), _helper_defaults(x, 3.0), _helper_defaults(x, shift=-2.0)

    check(fn, torch.randn(3))


def test_inlined_function_with_star_args_and_kwargs_matches_eager():
    def fn(x, y):
        args = (x, y)
        kw = {"b": 2.0, "a": y}
        return _helper_varargs(*args, **kw), _helper_varargs(x, x, x), _helper_varargs(x, c=0.5)

    check(fn, torch.randn(3), torch.randn(3))


def test_nested_function_definition_matches_eager():
    check(_helper_nested, torch.randn(3))


def test_closure_over_tensor_and_constant_matches_eager():
    w = torch.randn(3)
    k = 4

    def fn(x):
        return x * w + k

    check(fn, torch.randn(3))


def test_closure_created_inside_traced_function_matches_eager():
    def fn(x):
        bias = x.mean()
        factor = 3

        def apply(t):
            return t * factor - bias

        return apply(x), apply(x * 2)

    check(fn, torch.randn(4))


def test_nonlocal_counter_in_closure_matches_eager():
    def fn(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t + count

        return bump(bump(x)), count

    check(fn, torch.randn(3))


def test_lambda_and_functools_partial_match_eager():
    def fn(x):
        f = lambda t, s=2: t * s  # lambdas are the construct under test
        g = functools.partial(torch.clamp, min=-0.5)
        return f(x), f(x, 3), g(x), list(map(lambda t: t + 1, [x, x]))  # noqa: C417

    check(fn, torch.randn(3))


def test_recursion_with_trace_time_depth_matches_eager():
    def fn(x, depth=3):
        if depth == 0:
            return x
        return fn(x * 2 + 1, depth - 1)

    check(fn, torch.randn(3))


def test_method_of_plain_python_object_matches_eager():
    class Affine:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __call__(self, x):
            return x * self.a + self.b

        def twice(self, x):
            return self(self(x))

    aff = Affine(2.0, torch.ones(3))

    def fn(x):
        return aff.twice(x), aff.a

    check(fn, torch.randn(3))


# --- globals ---------------------------------------------------------------------------------


def test_global_constants_and_tensor_match_eager():
    def fn(x):
        return x * SCALE + OFFSETS[1] - TABLE["a"] + GLOBAL_TENSOR, len(OFFSETS)

    check(fn, torch.randn(4))


def test_global_function_and_module_attribute_match_eager():
    def fn(x):
        return _helper_defaults(x), torch.nn.functional.relu(x) * math.tau

    check(fn, torch.randn(4))


# --- containers and return values ------------------------------------------------------------


def test_tuple_list_dict_built_and_returned_match_eager():
    def fn(x, y):
        t = (x, y, 3)
        lst = [x + 1]
        lst.append(y)
        lst.extend([x * y])
        lst.insert(0, x.sum())
        d = {"x": x, "pair": (x, y)}
        d["z"] = lst[-1]
        d.update(w=x - y)
        return t, lst, d, lst.pop(), d.get("missing", 5), list(d.keys())

    check(fn, torch.randn(3), torch.randn(3))


def test_container_inputs_are_flattened_like_eager():
    def fn(inputs):
        a, b = inputs["pair"]
        return inputs["x"] + a * b, [t * 2 for t in inputs["list"]]

    check(
        fn,
        {
            "x": torch.randn(2),
            "pair": (torch.randn(2), torch.randn(2)),
            "list": [torch.randn(1), torch.randn(3)],
        },
    )


def test_return_none_is_none():
    def fn(x):
        x * 2

    check(fn, torch.randn(3))


def test_return_constants_and_nested_structures_match_eager():
    def fn(x):
        return {
            "const": 1,
            "f": 2.5,
            "s": "text",
            "none": None,
            "nested": [(x, [x * 2, {"k": x}])],
            "dtype": x.dtype,
            "shape": x.shape,
            "bool": True,
        }

    check(fn, torch.randn(3))


def test_return_input_unchanged_is_same_values():
    def fn(x, y):
        return x, (y, x)

    check(fn, torch.randn(3), torch.randn(2))


def test_tuple_unpacking_and_swap_match_eager():
    def fn(x, y):
        x, y = y, x
        (a, b), c = (x, y), x * y
        first, *middle, last = [a, b, c, a + b]
        return first - last, middle

    check(fn, torch.randn(3), torch.randn(3))


def test_namedtuple_construction_and_access_match_eager():
    import collections

    Pair = collections.namedtuple("Pair", ["left", "right"])

    def fn(x):
        p = Pair(x, x * 2)
        return Pair(p.right, p[0] + 1), p.left.sum()

    check(fn, torch.randn(3))
