"""Small programs of the kind Dynamo's own tests run (issue 22), written for torchlite: closures
and nonlocal, functools, argument forwarding, container methods, dataclasses/NamedTuples, enums,
user classes (properties, super(), class/static methods, dunders), generators, builtins over
iterables, string formatting, exceptions, context managers, globals, module state, hooks,
in-place writes through views, Python values read off tensors, math/operator, slicing forms.

Each program runs eagerly and compiled on fresh inputs (conformance_check.check_program), then
`torchlite.explain` counts its graph breaks (zero unless the program needs a tensor's values,
as under Dynamo), and a second identical call must hit the cache.

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import collections
import contextlib
import dataclasses
import enum
import functools
import itertools
import math
import operator
import typing

import pytest
import torch
from conformance_check import check_captured_program, check_program

import torchlite


def t4():
    return (torch.randn(4),)


def t23():
    return (torch.randn(2, 3),)


def run(fn, make_args=t4, **options):
    """conformance_check.check_captured_program with one tensor of 4 as the default input."""
    return check_captured_program(fn, make_args, **options)


# ---- closures, nonlocal, functools -------------------------------------------------------------
def test_closure_factory_with_nonlocal_counter():
    def make_scaler(scale):
        calls = 0

        def apply(t):
            nonlocal calls
            calls += 1
            return t * scale + calls

        return apply

    def fn(x):
        f = make_scaler(3.0)
        return f(x), f(x + 1), f(x).sum()

    run(fn)


def test_nested_closure_two_levels_rebinds_outer_tensor():
    def fn(x):
        acc = x

        def outer(k):
            def inner():
                nonlocal acc
                acc = acc * k
                return acc

            return inner()

        outer(2)
        outer(0.5)
        return acc + 1

    run(fn)


def _twice(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs) * 2

    return wrapper


@_twice
def _scaled_add(a, b, *, alpha=1.0):
    """Adds."""
    return a + alpha * b


def test_user_decorator_with_wraps_forwards_args_and_kwargs():
    def fn(x):
        return _scaled_add(x, x.cos(), alpha=0.5), _scaled_add.__name__, _scaled_add.__doc__

    run(fn)


def test_partial_of_torch_function_and_of_user_function():
    clamp = functools.partial(torch.clamp, min=-0.5)

    def mix(a, b, w):
        return a * w + b * (1 - w)

    def fn(x):
        half = functools.partial(mix, w=0.25)
        return clamp(x, max=0.5), half(x, x.exp()), clamp.keywords["min"]

    run(fn)


def test_args_kwargs_forwarding_through_two_levels():
    def leaf(x, y=None, *rest, scale=1.0, **opts):
        out = x * scale
        if y is not None:
            out = out + y
        for r in rest:
            out = out - r
        return out + opts.get("bias", 0.0), sorted(opts)

    def middle(*args, **kwargs):
        kwargs.setdefault("scale", 2.0)
        extra = kwargs.pop("extra", 0)
        return leaf(*args, **kwargs), extra

    def fn(x):
        a = middle(x, x, x.sin(), bias=1.5, extra=3)
        b = middle(x, scale=0.5, **{"bias": -1.0})  # noqa: PIE804 - a dict display unpacked
        return a, b

    run(fn)


def test_keyword_only_defaults_and_lambda_defaults():
    def fn(x):
        def f(t, *, k=2, shift=lambda v: v + 1):
            return shift(t) ** k

        return f(x), f(x, k=3), f(x, shift=torch.tanh)

    run(fn)


def test_recursive_helper_over_python_ints():
    def power(t, n):
        if n == 0:
            return torch.ones_like(t)
        half = power(t, n // 2)
        return half * half * (t if n % 2 else 1)

    def fn(x):
        return power(x, 5), power(x, 2)

    run(fn)


# ---- containers ---------------------------------------------------------------------------------
def test_dict_methods_and_comprehensions():
    def fn(x):
        d = {"a": x, "b": x * 2}
        d.update(c=x + 3)
        e = {**d, "a": x - 1}
        squares = {k: v * v for k, v in e.items() if k != "b"}
        keys = list(reversed(list(squares.keys())))
        got = d.get("zzz", 5) + len(e)
        popped = e.pop("c")
        last = e.popitem()
        return squares, keys, got, popped, sorted(e), dict(zip(keys, range(3))), last

    run(fn)


def test_dict_with_tuple_keys_fromkeys_and_items_sorted_by_value():
    def fn(x):
        grid = {(i, j): x[i] * j for i in range(2) for j in range(2)}
        marks = dict.fromkeys(["p", "q"], 0)
        for k in grid:
            marks["p" if k[0] else "q"] += 1
        order = sorted(marks.items(), key=lambda kv: (-kv[1], kv[0]))
        return grid[(1, 1)] + grid[(0, 0)], order, (0, 1) in grid

    run(fn)


def test_set_comprehensions_and_operations_on_sizes():
    def fn(x):
        dims = {d for d in x.shape}
        more = dims | {7}
        both = sorted(more & {2, 3, 5})
        frozen = frozenset(both)
        y = x
        if 3 in dims and 9 not in frozen:
            y = y * 2
        return y, both, len(more - dims), frozen.issubset({2, 3})

    run(fn, t23)


def test_list_methods_slicing_assignment_and_delete():
    def fn(x):
        items = [x, x + 1, x + 2, x + 3, x + 4]
        items.insert(1, x * 10)
        items[2:4] = [x.neg()]
        del items[::3]
        items.extend(reversed(items[:1]))
        items.reverse()
        ints = [3, 1, 2, 3]
        ints.sort(key=lambda v: -v)
        return torch.stack(items), ints, ints.count(3), ints.index(2), items.copy()[0]

    run(fn)


def test_nested_list_comprehension_with_condition_and_zip_star():
    def fn(x):
        rows = [[x[i] * j for j in range(3) if j != 1] for i in range(2)]
        cols = list(zip(*rows))
        flat = [v for row in rows for v in row]
        return torch.stack(flat), len(cols), [len(c) for c in cols]

    run(fn, t23)


def test_chain_from_iterable_and_counter():
    def fn(x):
        parts = list(itertools.chain.from_iterable([[1, 2], (3,)]))
        c = collections.Counter("abca")
        return x * len(parts), parts, c.most_common(1), c.most_common(), len(c)

    # NOTE: most_common(n) breaks inside heapq.nlargest (its `object()` sentinel).
    run(fn, breaks=None)


def test_itertools_count_made_in_traced_code():
    def fn(x):
        ids = itertools.count(1)
        first = next(ids)
        named = {f"layer{i}": x * i for i, _ in zip(itertools.count(start=2, step=3), range(3))}
        for k in itertools.count(x.shape[0], -1):
            if k < 2:
                break
            x = x + k
        return x, first, next(ids), named

    run(fn, t23)


def test_itertools_chain_and_chain_from_iterable():
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)])
    head = torch.nn.Linear(3, 3)

    def fn(x):
        for layer in itertools.chain(blocks, [head]):
            x = layer(x)
        parts = list(itertools.chain.from_iterable([[1, 2], (3,), range(2)]))
        rows = itertools.chain(x.unbind(0), [x.sum(0)])
        first = next(rows)
        return x, parts, first, torch.stack(list(rows)), list(itertools.chain())

    run(fn, t23)


def test_itertools_count_live_across_a_break_and_returned():
    def across(x):
        ids = itertools.count(5, 2)
        a = next(ids)
        if x.sum() > 0:  # a graph break (the tensor's value) with the counter live
            a = a + next(ids)
        return x * a, next(ids), next(ids)

    def returned(x):
        ids = itertools.count(3)
        next(ids)
        return x + 1, ids

    run(across, breaks=1)
    eager_x = torch.randn(3)
    out, it = torchlite.compile(returned)(eager_x)
    assert next(it) == 4 and next(it) == 5
    torch.testing.assert_close(out, eager_x + 1)


# ---- dataclasses, NamedTuple, enum --------------------------------------------------------------
class Span(typing.NamedTuple):
    start: torch.Tensor
    stop: torch.Tensor
    label: str = "span"

    @property
    def width(self):
        return self.stop - self.start

    def shifted(self, by):
        return self._replace(start=self.start + by, stop=self.stop + by)


def test_namedtuple_input_with_property_method_and_replace():
    def fn(s):
        moved = s.shifted(2)
        a, b, label = moved
        return moved.width * 3, a + b, label.upper(), moved._fields, type(moved).__name__

    run(fn, lambda: (Span(torch.randn(3), torch.randn(3)),))


@dataclasses.dataclass
class Config:
    hidden: int
    scale: float = 1.0
    names: list = dataclasses.field(default_factory=lambda: ["a"])

    def scaled(self, t):
        return t * self.scale * self.hidden


@dataclasses.dataclass
class Result:
    value: torch.Tensor
    extras: dict


def test_dataclass_input_and_nested_dataclass_output():
    def fn(x, cfg):
        names = [f.name for f in dataclasses.fields(cfg)]
        y = cfg.scaled(x)
        return Result(value=y, extras={"names": names, "h": cfg.hidden}), {"r": Result(y + 1, {})}

    run(fn, lambda: (torch.randn(4), Config(hidden=3, scale=0.5)))


def test_dataclass_built_mutated_and_compared_inside():
    def fn(x):
        cfg = Config(hidden=x.shape[0])
        cfg.scale = 2.0
        cfg.names.append("b")
        other = dataclasses.replace(cfg, hidden=1)
        return cfg.scaled(x), cfg == other, other.hidden, cfg.names

    run(fn)


@dataclasses.dataclass
class Output:
    """A model output in the style of transformers' ModelOutput dataclasses."""

    logits: torch.Tensor
    hidden: torch.Tensor | None = None
    extras: dict = dataclasses.field(default_factory=dict)
    steps: int = 1


def test_dataclass_asdict_and_astuple_of_computed_tensors():
    def fn(x):
        h = x.sin()
        out = Output(h * 2, Span(h, h.cos()), {"names": ["a", 2.5], "n": None}, 3)
        d = dataclasses.asdict(out)
        d["logits"].add_(1)  # the copy, not out.logits
        t = dataclasses.astuple(Output(x.relu() + 1), tuple_factory=list)
        od = dataclasses.asdict(out, dict_factory=collections.OrderedDict)
        return d, out.logits, t, od

    run(fn)
    run(fn, lambda: (torch.randn(2, 3),))


def test_dataclass_asdict_of_inputs_and_views_copies_them():
    def fn(x, w):
        return dataclasses.asdict(Output(x, w.t() * 1, {"w": w}))

    # NOTE: copy.deepcopy of an input (its grad and Python attributes are copied too) or of a
    # tensor of another layout runs eagerly: a break inside copy.deepcopy.
    run(fn, lambda: (torch.randn(3), torch.randn(2, 3)), breaks=1)


def test_dataclass_asdict_raises_as_eager_on_a_tensor_needing_grad():
    def fn(x):
        return dataclasses.asdict(Output(x * 2))

    run(
        fn,
        lambda: (torch.randn(3, requires_grad=True),),
        raises=RuntimeError,
    )


class Mode(enum.Enum):
    ADD = "add"
    MUL = "mul"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


def test_enum_member_argument_name_value_and_iteration():
    def fn(x, mode):
        y = x + 1 if mode is Mode.ADD else x * 2
        names = [m.name for m in Mode]
        return y * Level.HIGH, mode.value, names, Level(1) < Level.HIGH, Mode("mul") == mode

    run(fn, lambda: (torch.randn(4), Mode.MUL))
    run(fn, lambda: (torch.randn(4), Mode.ADD))


# ---- user classes -------------------------------------------------------------------------------
class Shape:
    def __init__(self, scale):
        self._scale = scale

    @property
    def scale(self):
        return self._scale

    @scale.setter
    def scale(self, v):
        self._scale = max(v, 0.0)

    def apply(self, t):
        return t * self.scale


class Square(Shape):
    def apply(self, t):
        return super().apply(t) ** 2

    @classmethod
    def unit(cls):
        return cls(1.0)

    @staticmethod
    def kind():
        return "square"


class Circle(Shape):
    pass


def test_isinstance_on_user_class_hierarchy_picks_branch():
    def fn(x, s):
        if isinstance(s, Square):
            return s.apply(x), s.kind()
        if isinstance(s, Shape):
            return s.apply(x) + 1, type(s).__name__
        return x, None

    square, circle = Square(2.0), Circle(3.0)
    run(fn, lambda: (torch.randn(4), square))
    run(fn, lambda: (torch.randn(4), circle))


def test_property_setter_classmethod_and_staticmethod_inside():
    def fn(x):
        s = Square.unit()
        s.scale = -4.0
        t = Square(1.5)
        t.scale = t.scale + 1
        return s.apply(x), t.apply(x), Square.kind(), t.kind(), s.scale

    run(fn)


def test_property_setter_on_input_object_is_a_side_effect():
    obj = Shape(1.0)

    def setup():
        obj.scale = 1.0

    def fn(x):
        obj.scale = obj.scale * 3
        return obj.apply(x)

    run(fn, setup=setup, observe=lambda: obj.scale)


class Vec:
    """A tensor wrapper with arithmetic dunders, length and iteration."""

    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + (other.t if isinstance(other, Vec) else other))

    def __radd__(self, other):
        return self + other

    def __mul__(self, k):
        return Vec(self.t * k)

    def __len__(self):
        return self.t.shape[0]

    def __iter__(self):
        return iter(self.t.unbind(0))

    def __getitem__(self, i):
        return self.t[i]

    def __eq__(self, other):
        return isinstance(other, Vec) and self.t.shape == other.t.shape

    def __hash__(self):
        return hash(self.t.shape)


def test_user_class_dunders_arith_len_iter_getitem():
    def fn(x):
        v = Vec(x)
        w = 1.0 + v * 2 + v
        total = sum(w)
        firsts = [e * 0 for e in w]
        return w.t, total, len(w), w[-1], firsts[0], v == w

    run(fn, t23)


def test_sum_of_user_objects_with_radd_and_eq():
    def fn(x):
        vs = [Vec(x), Vec(x * 2), Vec(x + 1)]
        s = sum(vs)
        seen = [i for i, v in enumerate(vs) if v == s]
        return s.t, seen

    run(fn)


class Callable3:
    def __init__(self, k):
        self.k = k

    def __call__(self, t, extra=0):
        return t * self.k + extra


def test_callable_user_object_and_user_iterator():
    class Countdown:
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return self

        def __next__(self):
            if self.n == 0:
                raise StopIteration
            self.n -= 1
            return self.n

    def fn(x):
        f = Callable3(2)
        out = f(x, extra=1)
        for i in Countdown(3):
            out = out + i
        return out, callable(f), [i for i in Countdown(2)]

    run(fn)


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)

    def extra(self):
        return 1


class Child(Base):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return super().forward(x) + self.bias * super().extra()

    def extra(self):
        return 5


def test_module_super_forward_and_super_method():
    torch.manual_seed(0)
    m = Child()

    def fn(x):
        return m(x), type(m).__mro__[1].__name__

    run(fn, t23)


# ---- generators and iteration builtins ----------------------------------------------------------
def test_generator_consumed_by_list_sum_and_next():
    def gen(t, n):
        for i in range(n):
            yield t * i

    def fn(x):
        items = list(gen(x, 3))
        total = sum(gen(x, 4))
        g = gen(x, 2)
        first = next(g)
        return items, total, first, sum(v.sum() for v in gen(x, 2))

    run(fn)


def test_yield_from_inner_generator_and_its_return_value():
    def inner(t):
        yield t + 1
        yield t + 2
        return "done"

    def outer(t, log):
        status = yield from inner(t)
        log.append(status)
        yield t * 10

    def fn(x):
        log = []
        outs = [v for v in outer(x, log)]
        return torch.stack(outs), log

    run(fn)


def test_zip_enumerate_map_filter_reversed_sorted():
    def fn(x):
        parts = list(x.unbind(0))
        scaled = list(map(lambda p, k: p * k, parts, range(1, 10)))
        big = list(filter(lambda i: i % 2 == 0, range(len(parts))))
        pairs = [(i, p + q) for i, (p, q) in enumerate(zip(parts, reversed(scaled)), start=1)]
        by_norm = sorted(parts, key=lambda p: p.shape[0], reverse=True)
        return (
            [p for _, p in pairs],
            big,
            [i for i, _ in pairs],
            by_norm[0],
            list(filter(None, [0, 1, 2])),
        )

    run(fn, lambda: (torch.randn(3, 2),))


def test_range_object_as_input_and_its_slice():
    def fn(x, r):
        out = x
        for i in r[::-1]:
            out = out + i
        return out, len(r), r[1], list(r[1:]), 2 in r

    run(fn, lambda: (torch.randn(4), range(1, 7, 2)))


def test_while_loop_with_break_and_for_else():
    def fn(x):
        n, out = 0, x
        while True:
            n += 1
            out = out * 0.5
            if n >= 3:
                break
        for d in x.shape:
            if d > 10:
                found = d
                break
        else:
            found = -1
        return out, n, found

    run(fn)


# ---- strings ------------------------------------------------------------------------------------
def test_string_formatting_of_sizes_and_names_as_keys():
    def fn(x):
        b, n = x.shape
        key = f"{b:03d}x{n}"
        label = "%s-%d" % ("size", n)  # noqa: UP031 - %-formatting is what is tested
        name = "_".join(str(d) for d in x.shape)
        table = {key: x, label.upper(): x * 2, "{}/{}".format(b, n): x + 1}  # noqa: UP032
        shapes = f"{x.shape}|{list(x.shape)!r}|{tuple(x.shape)!s:>12}"
        return table, name.split("_"), key.startswith("002"), repr(x.shape), str(x.dtype), shapes

    run(fn, t23)


def test_string_methods_select_submodules_by_name():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        collections.OrderedDict(
            [
                ("proj_in", torch.nn.Linear(3, 4)),
                ("act", torch.nn.GELU()),
                ("proj_out", torch.nn.Linear(4, 3)),
            ]
        )
    )

    def fn(x):
        out = x
        names = []
        for name, mod in net.named_children():
            if name.startswith("proj"):
                names.append(name.replace("proj_", "").title())
            out = mod(out)
        return out, names, ",".join(names)

    run(fn, t23)


# ---- exceptions, asserts -------------------------------------------------------------------------
def test_try_except_finally_without_raise_and_with_caught_raise():
    def risky(t, fail):
        if fail:
            raise ValueError(f"bad {t.shape[0]}")
        return t + 1

    def fn(x):
        log = []
        try:
            y = risky(x, False)
        except ValueError:
            y = x
        finally:
            log.append("first")
        try:
            y = risky(y, True)
        except (KeyError, ValueError) as e:
            log.append(str(e))
            y = y * 2
        else:
            log.append("else")
        finally:
            log.append("second")
        return y, log

    run(fn)


def test_exception_raised_in_helper_escapes_with_type_and_message():
    def check_dims(t):
        if t.dim() != 3:
            raise RuntimeError(f"expected 3 dims, got {t.dim()}")
        return t

    def fn(x):
        y = x * 2
        return check_dims(y)

    run(fn, raises=RuntimeError)


def test_asserts_on_shapes_types_and_python_values():
    def fn(x, n):
        assert x.dim() == 2, "needs a matrix"
        assert isinstance(n, int) and n > 0
        assert x.shape[-1] % n == 0, f"{x.shape[-1]} not divisible by {n}"
        return x.reshape(x.shape[0], n, -1).sum(1)

    run(fn, lambda: (torch.randn(2, 6), 3))
    check_program(fn, lambda: (torch.randn(2, 6), 4))
    check_program(fn, lambda: (torch.randn(6), 3))


def test_getattr_with_default_hasattr_and_attributeerror_caught():
    class Holder:
        present = 2

    def fn(x):
        h = Holder()
        try:
            v = h.missing
        except AttributeError:
            v = 1
        return x * v * getattr(h, "present", 0) * getattr(h, "absent", 3), hasattr(h, "present")

    run(fn)


# ---- context managers ---------------------------------------------------------------------------
class Recorder:
    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def __enter__(self):
        self.log.append(f"enter {self.tag}")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"exit {self.tag} {exc_type is not None}")
        return False


def test_user_context_manager_class_nested_with_grad_modes():
    def fn(x, w):
        log = []
        with Recorder(log, "outer") as r:
            with torch.no_grad():
                a = x * w
                grad_inside = torch.is_grad_enabled()
                with torch.enable_grad():
                    b = x * w
            r.log.append("body")
        return a, b, log, grad_inside, a.requires_grad, b.requires_grad

    run(fn, lambda: (torch.randn(3), torch.randn(3, requires_grad=True)))


@contextlib.contextmanager
def scaled_log(log, k):
    log.append(("in", k))
    try:
        yield k * 2
    finally:
        log.append(("out", k))


def test_contextmanager_generator_and_nullcontext():
    def fn(x, flag):
        log = []
        with scaled_log(log, 3) as k:
            y = x * k
        ctx = torch.no_grad() if flag else contextlib.nullcontext()
        with ctx:
            z = y + 1
        return z, log

    run(fn, lambda: (torch.randn(3, requires_grad=True), True))
    run(fn, lambda: (torch.randn(3, requires_grad=True), False))


def test_exit_sees_exception_raised_in_with_body_caught_outside():
    def fn(x):
        log = []
        try:
            with Recorder(log, "cm"):
                y = x + 1
                raise KeyError("k")
        except KeyError:
            y = x - 1
        return y, log

    run(fn)


class Swallow:
    """Suppresses the exceptions of `types` (its __exit__ never reads the traceback)."""

    def __init__(self, log, *types):
        self.log, self.types = log, types

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(None if exc_type is None else exc_type.__name__)
        return exc_type is not None and issubclass(exc_type, self.types)


def _closes_then_raises(x, log):
    with Recorder(log, "inner"), Swallow(log, KeyError):
        y = x * 2
        raise IndexError(f"size {y.shape[0]}")


def test_exceptions_through_nested_with_blocks_suppressed_or_caught():
    def fn(x):
        log = []
        with Swallow(log, KeyError):
            y = x + 1
            raise KeyError("swallowed")
        with Recorder(log, "outer"):
            try:
                with torch.no_grad(), Recorder(log, "grad"):
                    z = x * 3
                    raise ValueError("bad")
            except ValueError as e:
                z = z + len(str(e))
        try:
            _closes_then_raises(x, log)
        except IndexError as e:
            z = z + len(e.args[0])
        return y, z, log, torch.is_grad_enabled()

    run(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_exception_leaving_with_uncaught_and_exit_reading_traceback():
    class KeepsTraceback:
        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            return tb is not None

    def uncaught(x):
        log = []
        with Recorder(log, "cm"):
            raise KeyError("out")

    def traceback_read(x):
        try:
            with KeepsTraceback():
                raise KeyError("k")
        except KeyError:
            x = x - 1
        return x + 1

    run(uncaught, raises=KeyError)
    # NOTE: an __exit__ that reads the traceback runs eagerly (traced code has none to give).
    run(traceback_read, breaks=None)


# ---- globals and module state -------------------------------------------------------------------
SCALE = 2.0
HISTORY = []
STATS = {"calls": 0}


def test_global_read_list_append_and_dict_increment():
    def setup():
        HISTORY.clear()
        STATS["calls"] = 0

    def fn(x):
        STATS["calls"] += 1
        HISTORY.append(x.shape[0])
        return x * SCALE + STATS["calls"]

    run(fn, setup=setup, observe=lambda: (list(HISTORY), dict(STATS)))


def test_global_rebound_inside_with_global_statement():
    def setup():
        global SCALE
        SCALE = 2.0

    def fn(x):
        global SCALE
        y = x * SCALE
        SCALE = SCALE + 1.0
        return y

    try:
        run(fn, setup=setup, observe=lambda: SCALE, stable=False)
    finally:
        setup()


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.calls = 0
        self.last = None
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        self.last = y.detach()
        self.running.mul_(0.9).add_(y.mean(0).detach() * 0.1)
        return y * self.calls


def test_module_attribute_and_buffer_mutated_in_forward():
    torch.manual_seed(0)
    m = Counting()
    state = {k: v.clone() for k, v in m.state_dict().items()}

    def setup():
        m.calls = 0
        m.last = None
        m.load_state_dict(state)

    def fn(x):
        return m(x)

    run(fn, t23, setup=setup, observe=lambda: (m.calls, m.last, m.running.clone()))


# ---- containers of modules, hooks ---------------------------------------------------------------
class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(3)])
        self.gates = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.full((3,), 0.5 * i)) for i in range(3)]
        )
        self.heads = torch.nn.ModuleDict({"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh()})
        self.extra = torch.nn.ParameterDict({"shift": torch.nn.Parameter(torch.ones(3))})

    def forward(self, x):
        for i, (layer, gate) in enumerate(zip(self.layers, self.gates)):
            x = layer(x) * gate + i
        outs = {name: head(x) for name, head in self.heads.items()}
        last = self.layers[-1](x) + self.layers[:2][0].bias
        return outs, last + self.extra["shift"], len(self.layers), "relu" in self.heads


def test_modulelist_parameterlist_moduledict_parameterdict_iteration():
    torch.manual_seed(0)
    m = Stack()
    run(lambda x: m(x), t23)


def test_sequential_slicing_len_reversed_and_named_parameters():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))

    def fn(x):
        y = seq[2](seq[1](x))
        for mod in reversed(seq):
            y = y + mod(x).sum()
        norm = sum(p.pow(2).sum() for name, p in seq.named_parameters() if "weight" in name)
        return y, norm, len(seq), [type(m).__name__ for m in seq]

    run(fn, t23)


def test_sequential_slices_called_iterated_and_indexed():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(
        torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3), torch.nn.Tanh()
    )

    class Backbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = seq

        def forward(self, x):
            stem, rest = self.features[:1], self.features[1:]
            h = rest(stem(x))
            tail = self.features[::2](x) + self.features[1:][1:](x)
            names = [type(m).__name__ for m in self.features[-2:]]
            return h, tail, self.features[1:][1](x), len(rest), names

    m = Backbone()
    run(lambda x: m(x), t23)


def test_sequential_slice_sees_replaced_children_and_new_weights():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))

    def fn(x):
        return seq[1:](x)

    def mutate(call):
        with torch.no_grad():
            seq[2].weight.mul_(2)
        seq[0] = torch.nn.Linear(3, 3)
        seq[2] = torch.nn.Linear(3, 2)

    run(fn, t23, mutate=mutate)


def test_sequential_slice_eval_in_forward_reaches_the_shared_children():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5), torch.nn.Linear(3, 3))

    def fn(x):
        tail = seq[1:]
        tail.eval()
        return tail(x), [m.training for m in seq]

    run(fn, t23, setup=seq.train, observe=lambda: [m.training for m in seq], stable=False)


def test_hooks_with_kwargs_and_tensor_hook_on_intermediate():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    seen = []

    def pre(mod, args, kwargs):
        return (args[0] * 2,), kwargs

    def post(mod, args, kwargs, out):
        seen.append(tuple(out.shape))
        return out - 1

    lin.register_forward_pre_hook(pre, with_kwargs=True)
    lin.register_forward_hook(post, with_kwargs=True)

    def fn(x):
        return lin(x).relu()

    run(fn, t23, setup=seen.clear, observe=lambda: list(seen), stable=True)


def test_module_constructed_and_called_inside_forward():
    class Block(torch.nn.Module):
        def forward(self, x):
            act = torch.nn.SiLU() if x.shape[-1] > 2 else torch.nn.ReLU()
            return torch.nn.Softmax(dim=-1)(act(x)), torch.nn.Dropout(p=0.0)(x)

    m = Block()
    run(lambda x: m(x), t23)


# ---- in-place writes ------------------------------------------------------------------------------
def test_inplace_ops_on_input_and_through_views():
    def fn(x):
        x.add_(1)
        x[::2].mul_(2)
        x.view(-1)[0] = 5.0
        row = x.unsqueeze(0)
        row.clamp_(max=4.0)
        x[..., -1] = x[..., 0]
        return x.sum()

    run(fn, lambda: (torch.randn(4, 3),))


def test_setitem_from_other_elements_of_the_same_tensor():
    def fn(x, y):
        x[..., -1] = x[..., 0]
        x[:, 1::2] = x[:, ::2] * 2
        y[0] = y[-1]
        y[1:2, :].add_(y[2:3, :])
        y.t()[0] = y[:, 1]  # the first column from the second: no element shared
        return x.sum(1), y

    run(fn, lambda: (torch.randn(4, 4), torch.randn(3, 3)))
    run(fn, lambda: (torch.randn(2, 6), torch.randn(4, 2)))


def test_setitem_from_overlapping_elements_of_the_same_tensor_runs_eagerly():
    def shift(x):
        y = x.clone()
        y[:, 1:] = y[:, :-1]  # eager's copy order decides what this writes
        return y

    def transpose_row(x):
        y = x.clone()
        y[:, 0] = y[0, :]  # y[0, 0] is read and written
        return y

    run(shift, lambda: (torch.randn(3, 4),), breaks=1)
    run(transpose_row, lambda: (torch.randn(3, 3),), breaks=1)


def test_inplace_on_transpose_and_diagonal_views_of_a_local():
    def fn(x):
        y = x.clone()
        y.t()[0].fill_(0)
        y.diagonal().add_(10)
        z = y.narrow(1, 1, 2)
        z *= -1
        return y, z.is_contiguous()

    run(fn, lambda: (torch.randn(3, 3),))


def test_setitem_with_mask_list_index_and_none():
    def fn(x):
        y = x.clone()
        y[y > 0] = 0.0
        y[[0, 2]] += 1
        y[None, 1] = y[None, 1] * 3
        y[1:, ...] -= 0.5
        return y

    run(fn, lambda: (torch.randn(3, 2),))


# ---- tensor values as Python values -------------------------------------------------------------
def test_tensor_metadata_as_python_values():
    def fn(x):
        info = (
            x.dim(),
            x.ndim,
            x.numel(),
            x.size(-1),
            tuple(x.stride()),
            x.is_contiguous(),
            x.storage_offset(),
            x.element_size(),
            x.dtype.is_floating_point,
            x.is_floating_point(),
            torch.is_tensor(x),
            x.device.type,
        )
        b, *rest = x.shape
        return x.new_zeros(rest) + b, info, x.shape[1:] + (1,), torch.Size([b, 1]), x.shape[::-1]

    run(fn, t23)


def test_tolist_and_item_used_in_python_arithmetic():
    def fn(x):
        vals = x.tolist()
        top = max(vals)
        return torch.tensor([v * 2 for v in vals]), top, x.sum().item() > 100

    run(fn, breaks=None, stable=False)


def test_new_tensor_from_sizes_and_dtype_branch():
    def fn(x):
        sizes = x.new_tensor(list(x.shape))
        idx = torch.arange(x.shape[0])
        if x.dtype == torch.float32:
            y = x.double()
        else:
            y = x.float()
        return (
            sizes * 2,
            idx,
            y.dtype,
            torch.finfo(x.dtype).min < 0,
            x.masked_fill(x < 0, float("-inf")),
        )

    run(fn, t23)


# ---- math, operator, functools.reduce -----------------------------------------------------------
def test_math_and_operator_on_sizes():
    def fn(x):
        d = x.shape[-1]
        scale = 1.0 / math.sqrt(d)
        n = functools.reduce(operator.mul, x.shape, 1)
        get_last = operator.itemgetter(-1)
        attr = operator.attrgetter("shape")
        return (
            (x * scale).sum(0),
            n,
            math.prod(x.shape),
            get_last(x.shape),
            attr(x),
            math.floor(math.log2(n)),
            math.isclose(scale, d**-0.5),
            operator.truediv(x, 2),
            operator.contains([d, n], n),
            math.ceil(d / 4),
        )

    run(fn, t23)


_MEAN_ROWS = operator.methodcaller("mean", dim=1, keepdim=True)


def test_operator_methodcaller_made_inside_and_read_from_globals():
    def fn(x):
        total = operator.methodcaller("sum", 0)
        fmt = operator.methodcaller("format", x.shape[0])
        return total(x), _MEAN_ROWS(x), fmt("{} rows"), operator.methodcaller("size", -1)(x)

    run(fn, t23)


def test_is_leaf_and_grad_fn_of_tensors_that_need_no_grad():
    def fn(x, w):
        with torch.no_grad():
            y = x @ w
        z = x * 2
        return y, (y.is_leaf, y.grad_fn is None, z.is_leaf, x.is_leaf, x.grad_fn, w.is_leaf)

    run(fn, lambda: (torch.randn(2, 3), torch.randn(3, 3)))
    # NOTE: one that requires grad may be a leaf or not: read eagerly (a break).
    run(fn, lambda: (torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)), breaks=1)


def test_min_max_any_all_divmod_on_sizes():
    def fn(x):
        q, r = divmod(x.shape[0] * 7, 4)
        small = min(x.shape)
        big = max(x.shape, key=lambda d: -d)
        if all(d > 1 for d in x.shape) and not any(d > 100 for d in x.shape):
            x = x + q
        return x * r, small, big, abs(-small), round(2.567, 1), pow(2, small)

    run(fn, t23)


# ---- slicing ----------------------------------------------------------------------------------------
def test_slicing_with_ellipsis_none_negative_indices():
    def fn(x):
        a = x[..., None, 1:]
        b = x[None, ..., ::2]
        c = x[-1, -2:]
        d = x[:, None][..., 0]
        e = x.flip(0)[::2]
        return a, b, c, d, e, (x[(slice(None), 0)]).shape

    run(fn, lambda: (torch.randn(3, 4),))


def test_negative_step_slice_raises_as_eager():
    def fn(x):
        y = x * 2
        return y[::-1]

    run(fn, raises=ValueError)


def test_python_sequence_slicing_negative_steps():
    def fn(x):
        parts = list(x.unbind(0))
        rev = parts[::-1]
        odd = parts[-1::-2]
        shape = tuple(x.shape)[::-1]
        return torch.stack(rev), torch.stack(odd), shape, "abcdef"[::-2], parts[10:]

    run(fn, lambda: (torch.randn(5, 2),))


def test_zero_dim_tensor_slice_bounds():
    def fn(x):
        c = torch.tensor(1)
        return x[2 - c : 2 + c, :] * 2

    run(fn, lambda: (torch.randn(5, 3),))


# ---- torch-level dynamic lookups ---------------------------------------------------------------
def test_getattr_on_torch_by_name_and_activation_table():
    acts = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.SiLU()}

    def fn(x, name):
        op = getattr(torch, "tanh")  # noqa: B009 - lookups by name are what is tested
        return op(acts[name](x)), getattr(torch.nn.functional, "softplus")(x)  # noqa: B009

    run(fn, lambda: (torch.randn(4), "gelu"))
    run(fn, lambda: (torch.randn(4), "silu"))


def test_chunk_split_unpacking_and_cat():
    def fn(x):
        a, *rest = x.chunk(3, dim=-1)
        p, q = torch.split(x, [2, 4], dim=-1)
        return torch.cat([a, *rest[::-1]], -1), p.sum() + q.sum(), len(rest)

    run(fn, lambda: (torch.randn(2, 6),))


# ---- autograd inside -------------------------------------------------------------------------------
def test_tensor_hook_registered_inside_then_backward():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 3)
        z = (y * y).sum()
        z.backward()
        return z.detach(), x.grad

    # NOTE: .grad is read after the in-graph backward(): a break there (as Dynamo breaks at
    # backward()), so the read sees what the backward wrote.
    run(fn, lambda: (torch.randn(4, requires_grad=True),), breaks=2, stable=False)


def test_requires_grad_of_outputs_under_mixed_grad_modes():
    def fn(x, w):
        with torch.no_grad():
            frozen = x @ w
        with torch.set_grad_enabled(True):
            live = x @ w
        return frozen, live, frozen.requires_grad, live.requires_grad

    run(fn, lambda: (torch.randn(2, 3), torch.randn(3, 2, requires_grad=True)))


def test_lru_cached_helper_and_typing_values_passed_through():
    @functools.lru_cache(maxsize=None)  # noqa: UP033 - the form transformers uses
    def table(n):
        return tuple(i * i for i in range(n))

    def fn(x, kinds: typing.List[int]):  # noqa: UP006 - typing generics are what is tested
        t = table(x.shape[0])
        hint = typing.Optional[int]  # noqa: UP045
        return x * t[-1] + sum(kinds), hint is typing.Optional[int]  # noqa: UP045

    run(fn, lambda: (torch.randn(3), [1, 2]))


@pytest.mark.parametrize("shape", [(3,), (2, 5)])
def test_shape_param_program(shape):
    def fn(x):
        return x.flatten().cumsum(0)[-1], x.shape

    run(fn, lambda: (torch.randn(*shape),))


# ---- more of the same kinds -------------------------------------------------------------------
def test_closures_in_a_loop_with_default_binding_and_late_binding():
    def fn(x):
        early = [lambda t, k=k: t * k for k in range(3)]
        late = [lambda t: t * k for k in range(3)]  # noqa: B023 - late binding is what is tested
        return [f(x) for f in early], [f(x) for f in late]

    run(fn)


def test_partial_of_partial_and_star_lambda_forwarding():
    def base(a, b, c=0, *, d=1):
        return a * b + c * d

    def fn(x):
        p = functools.partial(functools.partial(base, x), c=2)
        fwd = lambda *a, **k: p(*a, **k)
        return fwd(x.cos(), d=3), p.args[0] is x, sorted(p.keywords)

    run(fn)


def test_slice_objects_bool_list_index_and_shape_comparisons():
    def fn(x):
        s = slice(1, None)
        picked = x[[True, False, True]]
        same = x.shape == (3, 4) and x.size() == torch.Size([3, 4])
        return x[s], picked, same, x[s].shape[0], s.start, tuple(x.size()) != (3,)

    # NOTE: a list of bools is a mask known at trace time: its True positions (no nonzero()).
    run(fn, lambda: (torch.randn(3, 4),))


def test_isinstance_and_type_checks_of_tensors_and_containers():
    def fn(x, extra):
        out = x
        if isinstance(extra, (list, tuple)):
            out = out + len(extra)
        if type(x) is torch.Tensor and isinstance(x, torch.Tensor):
            out = out * 2
        if isinstance(extra, dict) or callable(extra):
            out = out - 1
        return out, type(extra).__name__

    run(fn, lambda: (torch.randn(3), [1, 2]))
    run(fn, lambda: (torch.randn(3), {"a": 1}))


def test_dict_items_unpacking_sorted_items_and_keyerror_caught():
    def fn(x):
        d = {"b": x * 2, "a": x + 1}
        acc = 0
        for name, t in sorted(d.items()):
            acc = acc + t.sum() * len(name)
        try:
            missing = d["zzz"]
        except KeyError as e:
            missing = x * 0 + len(str(e))
        return acc, missing, [k for k, _ in d.items()]

    run(fn)


def test_config_object_with_getattr_fallback_and_class_counter():
    class Cfg:
        made = 0

        def __init__(self, **kw):
            self._kw = kw
            type(self).made += 1

        def __getattr__(self, name):
            try:
                return self._kw[name]
            except KeyError:
                raise AttributeError(name) from None

    def setup():
        Cfg.made = 0

    def fn(x):
        cfg = Cfg(scale=3, shift=1)
        y = x * cfg.scale + cfg.shift
        return y, getattr(cfg, "missing", "default"), hasattr(cfg, "scale")

    # NOTE: `type(self).made += 1` writes a class attribute: replayed after the graph, as Dynamo
    # does (it was a break); reset by `setup`, a second identical call hits the cache.
    run(fn, setup=setup, observe=lambda: Cfg.made, breaks=0)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.tensor(2.0))

    @property
    def out_features(self):
        return self.lin.out_features

    @staticmethod
    def squash(t):
        return torch.tanh(t)

    @torch.no_grad()
    def stats(self, t):
        return t.mean(), t.std()

    def forward(self, x, *, bias=None):
        y = self.squash(self.lin(x)) * self.scale
        if bias is not None:
            y = y + bias
        mean, std = self.stats(y)
        bufs = {name: b.shape for name, b in self.named_buffers()}
        return y, mean, std, self.out_features, bufs


def test_module_property_staticmethod_no_grad_method_and_keyword_call():
    torch.manual_seed(0)
    m = Scaled()

    def fn(x):
        return m(x, bias=x.sum(0))

    run(fn, t23)


def test_modules_walk_with_isinstance_and_any():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(3, 3), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 2))
    )

    def fn(x):
        n_linear = sum(1 for mod in net.modules() if isinstance(mod, torch.nn.Linear))
        has_relu = any(isinstance(mod, torch.nn.ReLU) for mod in net.modules())
        return net(x) * n_linear, has_relu

    run(fn, t23)


def test_module_training_flag_flipped_between_calls():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.0), torch.nn.BatchNorm1d(3))

    def setup():
        m.train()

    def mutate(call):
        m.eval()

    def fn(x):
        y = m(x)
        return y * (2 if m.training else 3)

    run(fn, lambda: (torch.randn(4, 3),), mutate=mutate, setup=setup, stable=False)
    m.eval()


def test_generator_with_nonlocal_state_and_cat_of_genexp():
    def fn(x):
        seen = 0

        def gen(n):
            nonlocal seen
            for i in range(n):
                seen += 1
                yield x * i

        parts = torch.cat(tuple(gen(3)))
        return parts, seen, torch.stack([p.sum() for p in gen(2)])

    run(fn)


def test_dataclass_post_init_builds_tensor_fields():
    @dataclasses.dataclass
    class Box:
        lo: torch.Tensor
        hi: torch.Tensor
        size: torch.Tensor = dataclasses.field(init=False)

        def __post_init__(self):
            self.size = self.hi - self.lo

    def fn(x):
        b = Box(x, x + 2)
        return b.size, b.lo, [f.name for f in dataclasses.fields(b)]

    run(fn)


def test_int_and_math_helpers_on_sizes():
    def fn(x):
        n = x.shape[0] * x.shape[1]
        return (
            x.reshape(math.gcd(n, 4), -1),
            n.bit_length(),
            operator.index(x.shape[1]),
            math.isqrt(n),
            int("1" * x.shape[0]),
            float(x.shape[1]) / 2,
            -x.shape[0] // 4,
            divmod(-n, 4),
        )

    run(fn, t23)


def test_string_checks_format_conversions_and_methods():
    def fn(x, mode):
        label = "{!r}:{:>5}".format(mode, x.shape[0])  # noqa: UP032
        if "mean" in mode.lower():
            y = x.mean()
        elif mode.endswith("sum"):
            y = x.sum()
        else:
            y = x.max()
        return y, label, mode.split("_")[0].capitalize(), f"{float(x.shape[0]):.2f}"

    run(fn, lambda: (torch.randn(3), "Reduce_MEAN"))
    run(fn, lambda: (torch.randn(3), "reduce_sum"))


def test_tensor_index_with_int_tensor_and_where_on_python_scalars():
    def fn(x):
        idx = torch.tensor([2, 0])
        mask = x > 0
        return x[idx], torch.where(mask, x, 0.0), x.masked_fill(~mask, -1.5), x.clamp(min=-0.5)

    run(fn)


def test_try_finally_around_return_and_nested_helpers_raising():
    def inner(t, log):
        try:
            return t * 2
        finally:
            log.append("inner")

    def outer(t, log):
        try:
            return inner(t, log) + 1
        finally:
            log.append("outer")

    def fn(x):
        log = []
        return outer(x, log), log

    run(fn)


def test_jit_and_compiler_queries_and_version_checks():
    import sys

    def fn(x):
        y = x
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            y = y * 2
        if sys.version_info >= (3, 8) and 0 < x.shape[0] < 10:
            y = y - 1
        return y

    check_program(fn, t4)
    report = torchlite.explain(fn)(*t4())
    assert report.graph_break_count == 0, str(report)


def test_walrus_chained_comparisons_and_map_of_sizes():
    def fn(x):
        if (n := x.shape[0]) > 1 and 1 <= x.shape[1] <= 8:
            x = x * n
        dims = list(map(int, x.shape))
        return (
            x.view(*reversed(dims)),
            "x".join(map(str, dims)),
            x.permute(*reversed(range(x.dim()))),
        )

    run(fn, t23)


def test_module_forwarding_args_kwargs_to_child_and_moduledict_views():
    class Inner(torch.nn.Module):
        def forward(self, x, y=None, *, scale=1.0):
            return (x if y is None else x + y) * scale

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Identity(), "b": torch.nn.Tanh()})

        def forward(self, *args, **kwargs):
            assert all(isinstance(a, torch.Tensor) for a in args)
            out = self.inner(*args, **kwargs)
            names = list(self.heads.keys())
            return [h(out) for h in self.heads.values()], names, "a" in self.heads

    m = Outer()
    run(lambda x: m(x, x, scale=2.0), t23)


def test_kwargs_dict_built_then_unpacked_into_torch_functions():
    def fn(x):
        opts = {"scale_factor": 2, "mode": "nearest"}
        if x.shape[-1] > 2:
            opts["mode"] = "bilinear"
            opts.update(align_corners=False)
        return torch.nn.functional.interpolate(x, **opts), dict(**opts, extra=1)

    run(fn, lambda: (torch.randn(1, 2, 3, 3),))


def test_inplace_on_tensors_inside_list_and_dict_inputs():
    def fn(xs, d):
        xs[0].add_(1)
        d["w"].mul_(2)
        xs[1].copy_(d["w"].sum())
        return xs[0] + d["w"], len(xs)

    run(fn, lambda: ([torch.randn(3), torch.randn(3)], {"w": torch.randn(3)}))


def test_namedtuple_asdict_make_and_output_from_module():
    Pair = collections.namedtuple("Pair", ["left", "right"], defaults=[None])

    class M(torch.nn.Module):
        def forward(self, x):
            p = Pair(x * 2)
            q = p._replace(right=x + 1)
            return q, q._asdict()["left"], Pair._fields, q.right is not None

    m = M()
    run(lambda x: m(x), t23)


def test_stack_of_star_unpacked_lists_and_unbind_zip():
    def fn(x, y):
        a, b = list(x.unbind(0)), list(y.unbind(0))
        pairs = [p * q for p, q in zip(a, b)]
        return torch.stack([*a, *b]), torch.stack(pairs), torch.cat([*pairs[::-1]])

    run(fn, lambda: (torch.randn(2, 3), torch.randn(2, 3)))


def test_decorated_forward_with_wraps_and_no_grad_inner_function():
    def logged(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            self.seen = self.seen + 1
            return fn(self, *args, **kwargs)

        return wrapper

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.seen = 0

        @logged
        def forward(self, x):
            @torch.no_grad()
            def frozen(t):
                return self.lin(t)

            inner = frozen(x)
            return self.lin(x) + inner, inner.requires_grad

    torch.manual_seed(0)
    m = M()

    def setup():
        m.seen = 0

    run(
        lambda x: m(x),
        lambda: (torch.randn(2, 3),),
        setup=setup,
        observe=lambda: m.seen,
        stable=False,
    )


def test_abc_sequence_mapping_isinstance_and_typing_cast():
    import collections.abc

    def fn(x, seq, mapping):
        out = x
        if isinstance(seq, collections.abc.Sequence) and not isinstance(seq, str):
            out = out + len(seq)
        if isinstance(mapping, collections.abc.Mapping):
            out = out * mapping.get("k", 1)
        return typing.cast(torch.Tensor, out), isinstance(x, collections.abc.Iterable)

    run(fn, lambda: (torch.randn(3), (1, 2, 3), {"k": 2}))


# ---- edge cases of the forms above: the same exceptions and values as eager ---------------------
class Box:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return NotImplemented


class Temp:
    def __init__(self):
        self.gone = 1


@pytest.mark.parametrize(
    "case",
    [
        "ext_slice_wrong_size",
        "del_out_of_range",
        "self_slice_assign",
        "both_not_implemented",
        "reduce_empty",
        "reduce_too_many",
        "fromkeys_unhashable",
        "enum_bad_value",
        "replace_bad_field",
        "del_missing_attr",
        "max_key_default",
        "sorted_items_reverse",
        "partial_keyword_override",
        "intflag_times_tensor",
        "popitem_empty",
    ],
)
def test_edge_cases_raise_and_return_as_eager(case):
    class Color(enum.IntFlag):
        R = 1
        G = 2

    NT = collections.namedtuple("NT", "a b")

    def fn(x):
        items = [x, x + 1, x + 2, x + 3]
        if case == "ext_slice_wrong_size":
            items[::2] = [x]
        elif case == "del_out_of_range":
            del items[7]
        elif case == "self_slice_assign":
            items[1:] = items
            return torch.stack(items), len(items)
        elif case == "both_not_implemented":
            return Box(x) + Box(x)
        elif case == "reduce_empty":
            return functools.reduce(operator.add, [])
        elif case == "reduce_too_many":
            return functools.reduce(operator.add, items, x, x)
        elif case == "fromkeys_unhashable":
            return dict.fromkeys([[1], 2])
        elif case == "enum_bad_value":
            return Level(7)
        elif case == "replace_bad_field":
            return NT(x, 1)._replace(c=2)
        elif case == "del_missing_attr":
            t = Temp()
            del t.gone
            del t.gone
        elif case == "max_key_default":
            return max([], key=lambda v: -v, default=x), min(x.shape, key=lambda d: (d % 2, d))
        elif case == "sorted_items_reverse":
            return sorted({"b": x, "a": x * 2, "c": x - 1}.items(), reverse=True)
        elif case == "partial_keyword_override":
            p = functools.partial(functools.partial(torch.clamp, min=-0.1), min=-0.2, max=0.3)
            return p(x), p.keywords, p.func is torch.clamp
        elif case == "popitem_empty":
            return {}.popitem()
        elif case == "intflag_times_tensor":
            return x * Color.G, x + (Color.R | Color.G)
        return torch.stack(items)

    check_program(fn, t23)


@pytest.mark.parametrize("where", ["inside", "after"])
def test_user_context_manager_with_a_graph_break_inside_or_after(where):
    log = []

    def fn(x):
        with Recorder(log, "cm"):
            y = x * 2
            if where == "inside" and y.sum() > 0:  # a break on the tensor's value
                y = y + 1
        z = y - 1
        if where == "after" and z.sum() > 0:
            z = z * 3
        return z, list(log)

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))
    report = torchlite.explain(fn)(*t4())
    assert report.graph_break_count >= 1


class Ranked:
    """Ordered and printed by Python dunders."""

    def __init__(self, rank, t):
        self.rank, self.t = rank, t

    def __lt__(self, other):
        return self.rank < other.rank

    def __gt__(self, other):
        return self.rank > other.rank

    def __repr__(self):
        return f"Ranked({self.rank})"


def test_user_objects_ordered_printed_and_size_numel():
    def fn(x):
        items = [Ranked(2, x), Ranked(0, x * 2), Ranked(1, x + 1), Ranked(0, x - 1)]
        ordered = sorted(items)
        backwards = sorted(items, reverse=True)
        low, high = min(items), max(items)
        return (
            [r.t for r in ordered],
            [r.rank for r in backwards],
            low.t,
            high.rank,
            str(low),
            repr(high),
            Ranked(3, x) > Ranked(1, x),
            0 < Ranked(1, x).rank,
            x.reshape(x.shape.numel()),
            x.shape.numel(),
        )

    run(fn, t23)


# ---- objects as dict keys, dict() of a mapping ---------------------------------------------------
class _Tag:
    """A user object hashed by identity (object's __hash__ and __eq__)."""


_TAG_A, _TAG_B = _Tag(), _Tag()
_SCALES = {_TAG_A: 2.0, _TAG_B: -1.0}


def test_user_objects_and_modules_as_dict_keys():
    lin, act = torch.nn.Linear(4, 4), torch.nn.ReLU()

    def fn(x, weights):
        per_module = {lin: x * 2, act: x - 1}  # keyed by modules
        out = lin(per_module[lin]) * _SCALES[_TAG_A] + act(per_module[act]) * _SCALES[_TAG_B]
        weights[_TAG_B] = out.sum()  # a store into an input dict keyed by objects
        present = (_TAG_A in weights, _TAG_B in _SCALES, lin in per_module)
        return out * weights[_TAG_A], {_TAG_A: out}, present

    run(fn, lambda: (torch.randn(4), {_TAG_A: torch.randn(4)}))


def test_an_object_key_replaced_by_another_object_recompiles():
    registry = {}

    def fn(x):
        return x * registry[_current[0]]

    _current = [_Tag()]
    registry[_current[0]] = 3.0
    compiled = torchlite.compile(fn)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x * 3.0)
    _current[0] = _Tag()
    registry[_current[0]] = -2.0
    torch.testing.assert_close(compiled(x), x * -2.0)
    assert torchlite.explain(fn)(x).graph_break_count == 0


def test_an_object_with_its_own_hash_as_a_key_breaks_and_keeps_eagers_result():
    @dataclasses.dataclass(frozen=True)
    class Key:
        name: str

    key = Key("a")
    table = {Key("a"): 5.0}

    def fn(x):
        return x * table[key]

    run(fn, breaks=None)
    kinds = torchlite.explain(fn)(torch.randn(4)).breaks_by_kind
    assert kinds == {"unsupported_dict_key": 1}


def test_dict_of_a_model_output_and_its_items():
    transformers = pytest.importorskip("transformers")

    @dataclasses.dataclass
    class Out(transformers.utils.ModelOutput):
        logits: torch.Tensor | None = None
        hidden: torch.Tensor | None = None
        extra: torch.Tensor | None = None

    def fn(x):
        o = Out(logits=x * 2, hidden=x + 1)
        d = dict(o)
        merged = dict(o, scale=x.sum())
        return d["logits"] + d["hidden"], sorted(d), merged["scale"] * 2, len(merged)

    run(fn)


# ---- lists of bools indexing tensors -------------------------------------------------------------
_KEEP = [True, False, True]


def test_bool_list_indexing_reads_and_writes_tensors():
    def fn(x):
        y = x.clone()
        y[[False, True, False]] = 0.5  # a write through a mask
        picked = x[_KEEP] * 2  # a global list
        cols = x[:, [True, False, False, True]]  # a mask on the second dimension
        row = x[1, [False, True, True, False]]
        none = x[[False, False, False]]
        return y, picked, cols, row, none.shape, x[[True, True, True]].sum(0)

    run(fn, lambda: (torch.randn(3, 4),))


def test_bool_list_of_the_wrong_length_raises_eagers_index_error():
    def fn(x):
        return x[[True, False]] * 2

    run(fn, lambda: (torch.randn(3, 4),), raises=IndexError)


# ---- collections.Counter made in the trace -----------------------------------------------------
def test_counter_made_in_traced_code_counts_missing_keys_and_updates():
    def fn(x):
        c = collections.Counter(["a", "b", "a"])  # _count_elements (C) -> its Python stand-in
        sizes = collections.Counter(s for s in x.shape)  # an iterable the trace generates
        sizes.update([x.shape[0], x.shape[0]])
        c["b"] += 2
        return x * c["a"] + c["z"], sizes[x.shape[0]], len(sizes), sorted(c.items()), c

    run(fn, t23)


def test_isinstance_of_generators_and_builtin_iterators_made_in_traced_code():
    import collections.abc
    import types

    def fn(x):
        gen = (r * 2 for r in x.unbind(0))
        mapped = map(torch.relu, x.unbind(0))
        checks = (
            isinstance(gen, types.GeneratorType),
            isinstance(gen, collections.abc.Iterator),
            isinstance(gen, collections.abc.Mapping),
            isinstance(mapped, map),
            isinstance(mapped, (list, tuple)),
            isinstance(zip(gen, mapped), zip),
        )
        return torch.stack(list(gen)) + torch.stack(list(mapped)), checks

    run(fn, t23)
