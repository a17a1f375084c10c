"""Dynamo-style program families the random generator does not write (wrong20, issue 20).

Generators driven by send/throw/close and `yield from`, user context managers that swallow
exceptions, try/finally with return/break/continue in loops, closures over loop variables,
properties and __getattr__/__getattribute__ with effects, class attributes, globals and ABC
registrations changed between calls (guards), functools, dataclasses, enums, key= orderings
over tensors, float/int edge cases, formatted shapes, in-place writes through views of views
and aliasing inputs. Each program runs eagerly and compiled (conformance_check.check_program).
"""

import abc
import dataclasses
import enum
import functools
import math

import torch
from conformance_check import check_program


def t4():
    return (torch.randn(4),)


# ---- generators
def test_g_send():
    def gen():
        total = 0
        while True:
            v = yield total
            if v is None:
                break
            total += v

    def fn(x):
        g = gen()
        next(g)
        a = g.send(2)
        b = g.send(3)
        try:
            g.send(None)
        except StopIteration:
            pass
        return x * a + b

    check_program(fn, t4)


def test_g_throw():
    def gen():
        try:
            yield 1
            yield 2
        except ValueError:
            yield 10

    def fn(x):
        g = gen()
        a = next(g)
        b = g.throw(ValueError)
        return x + a + b

    check_program(fn, t4)


def test_g_close():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        finally:
            log.append("closed")

    def fn(x):
        g = gen()
        a = next(g)
        g.close()
        return x + a + len(log)

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))


def test_g_yield_from():
    def inner(t):
        yield t + 1
        yield t * 2
        return t - 1

    def outer(t):
        r = yield from inner(t)
        yield r

    def fn(x):
        return list(outer(x))

    check_program(fn, t4)


def test_g_yield_from_send():
    def inner():
        s = 0
        while True:
            v = yield s
            if v is None:
                return s
            s += v

    def outer():
        r = yield from inner()
        yield r * 100

    def fn(x):
        g = outer()
        next(g)
        g.send(1)
        g.send(2)
        r = g.send(None)
        return x * r

    check_program(fn, t4)


def test_g_genexp_tensor():
    def fn(x):
        return sum(t * i for i, t in enumerate(x.unbind(0)))

    check_program(fn, t4)


def test_g_return_value():
    def gen(x):
        yield x
        return 5

    def fn(x):
        g = gen(x)
        next(g)
        try:
            next(g)
        except StopIteration as e:
            return x * e.value

    check_program(fn, t4)


# ---- context managers
class Swallow:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", et.__name__ if et else None))
        return et is not None and issubclass(et, KeyError)


def test_cm_swallow():
    log = []

    def fn(x):
        with Swallow(log):
            x = x + 1
            raise KeyError("k")
        return x * 2

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))


def test_cm_not_swallow():
    log = []

    def fn(x):
        try:
            with Swallow(log):
                x = x + 1
                raise ValueError("v")
        except ValueError as e:
            return x * 3, str(e)

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))


def test_cm_return_inside():
    log = []

    def fn(x):
        with Swallow(log) as s:
            return x * len(s.log)

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))


def test_cm_contextlib():
    import contextlib

    log = []

    @contextlib.contextmanager
    def cm(v):
        log.append("in")
        try:
            yield v * 2
        except ZeroDivisionError:
            log.append("zde")
        finally:
            log.append("out")

    def fn(x):
        with cm(3) as k:
            y = x * k
            1 / 0  # noqa: B018
        return y

    check_program(fn, t4, setup=log.clear, observe=lambda: list(log))


def test_cm_suppress():
    import contextlib

    def fn(x):
        with contextlib.suppress(IndexError):
            x = x + [1][2]  # noqa: PLE0643
        return x

    check_program(fn, t4)


# ---- try/finally in loops
def test_tf_return_in_finally_loop():
    def fn(x):
        out = []
        for i in range(4):
            try:
                if i == 1:
                    continue
                if i == 3:
                    break
                out.append(x * i)
            finally:
                out.append(x + i)
        return out

    check_program(fn, t4)


def test_tf_finally_overrides_return():
    def fn(x):
        for i in range(3):
            try:
                return x + i
            finally:
                if i == 0:
                    continue  # noqa: B012
        return x

    check_program(fn, t4)


def test_tf_nested_except_reraise():
    def fn(x):
        try:
            try:
                raise ValueError("a")
            except ValueError:
                raise KeyError("b")
        except KeyError as e:
            return x * 2, repr(e), type(e.__context__).__name__

    check_program(fn, t4)


def test_tf_finally_while():
    def fn(x):
        i = 0
        acc = x
        while True:
            try:
                i += 1
                if i > 3:
                    break
                acc = acc * 2
            finally:
                acc = acc - 1
        return acc, i

    check_program(fn, t4)


# ---- closures over loop vars
def test_cl_late_binding():
    def fn(x):
        fs = [lambda: x * i for i in range(3)]  # noqa: B023
        gs = [lambda i=i: x * i for i in range(3)]
        return [f() for f in fs] + [g() for g in gs]

    check_program(fn, t4)


def test_cl_nonlocal_counter():
    def fn(x):
        n = 0

        def inc():
            nonlocal n
            n += 1
            return n

        for _ in range(3):
            inc()
        return x * n

    check_program(fn, t4)


def test_cl_cell_rebind_after_def():
    def fn(x):
        k = 1
        f = lambda: x * k
        k = 5
        return f()

    check_program(fn, t4)


# ---- properties / getattr
def test_pr_property_side_effect():
    class A:
        def __init__(self):
            self.n = 0

        @property
        def v(self):
            self.n += 1
            return self.n

    a = A()

    def fn(x):
        return x * a.v + a.v

    check_program(fn, t4, setup=lambda: setattr(a, "n", 0), observe=lambda: a.n, calls=3)


def test_pr_getattr_fallback():
    class A:
        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            self.calls.append(name)
            if name.startswith("k"):
                return len(name)
            raise AttributeError(name)

    a = A()

    def fn(x):
        r = x * a.kk + getattr(a, "zz", 7)
        return r, hasattr(a, "qq")

    check_program(fn, t4, setup=a.calls.clear, observe=lambda: list(a.calls))


def test_pr_getattribute():
    class A:
        log = []  # noqa: RUF012

        def __init__(self):
            self.v = 3

        def __getattribute__(self, name):
            type(self).log.append(name)
            return object.__getattribute__(self, name)

    a = A()

    def fn(x):
        return x * a.v

    check_program(fn, t4, setup=A.log.clear, observe=lambda: list(A.log))


def test_pr_setter():
    class A:
        def __init__(self):
            self._v = 1
            self.sets = 0

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, val):
            self.sets += 1
            self._v = val * 2

    a = A()

    def fn(x):
        a.v = 3
        return x * a.v

    check_program(
        fn, t4, setup=lambda: a.__dict__.update(_v=1, sets=0), observe=lambda: (a._v, a.sets)
    )


# ---- class attribute mutation / global rebinding
class K:
    scale = 2.0

    def f(self, x):
        return x * self.scale


def test_ca_class_attr():
    k = K()

    def fn(x):
        return k.f(x) + K.scale

    def mutate(call):
        K.scale = 2.0 + call

    try:
        check_program(fn, t4, mutate, calls=3)
    finally:
        K.scale = 2.0


def test_ca_method_replaced():
    k = K()
    orig = K.f

    def fn(x):
        return k.f(x)

    def mutate(call):
        K.f = (lambda self, x: x - call) if call == 1 else orig

    try:
        check_program(fn, t4, mutate, calls=3)
    finally:
        K.f = orig


G = 3


def test_gl_rebind():
    global G

    def fn(x):
        return x * G

    def mutate(call):
        global G
        G = 3 + call

    try:
        check_program(fn, t4, mutate, calls=3)
    finally:
        G = 3


H = [1, 2]


def test_gl_list_mut():
    def fn(x):
        return x * len(H) + H[-1]

    def mutate(call):
        H.append(call)

    check_program(fn, t4, mutate, calls=3)


# ---- functools
def test_ft_lru_cache():
    calls = []

    @functools.cache
    def f(n):
        calls.append(n)
        return n * 2

    def fn(x):
        return x * f(3) + f(3) + f(4)

    check_program(fn, t4, observe=lambda: len(calls))


def test_ft_partial_kw():
    def g(x, a, b=1, *, c=2):
        return x * a + b - c

    p = functools.partial(g, b=5, c=1)

    def fn(x):
        return p(x, 2), p(x, a=3, c=0)

    check_program(fn, t4)


def test_ft_wraps():
    def deco(f):
        @functools.wraps(f)
        def w(*a, **k):
            return f(*a, **k) + 1

        return w

    @deco
    def h(x, s=2):
        return x * s

    def fn(x):
        return h(x, s=3), h.__name__, h.__wrapped__(x)

    check_program(fn, t4)


def test_ft_reduce():
    def fn(x):
        return functools.reduce(lambda a, b: a * b + 1, [x, x, 2.0], 1.0)

    check_program(fn, t4)


# ---- dataclasses
@dataclasses.dataclass(frozen=True)
class Fz:
    a: int
    b: float = 2.0


@dataclasses.dataclass
class Df:
    items: list = dataclasses.field(default_factory=list)
    n: int = 0


def test_dc_frozen():
    def fn(x):
        f = Fz(3)
        try:
            f.a = 4
        except dataclasses.FrozenInstanceError as e:
            return x * f.a + f.b, type(e).__name__

    check_program(fn, t4)


def test_dc_default_factory():
    def fn(x):
        d1, d2 = Df(), Df()
        d1.items.append(x)
        return len(d1.items), len(d2.items), d1 == d2, dataclasses.replace(d1, n=3).n

    check_program(fn, t4)


def test_dc_asdict():
    def fn(x):
        f = Fz(1, 0.5)
        d = dataclasses.asdict(f)
        return x * d["b"] + d["a"], dataclasses.astuple(f)

    check_program(fn, t4)


# ---- enums
class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Flag(enum.IntFlag):
    A = 1
    B = 2


def test_en_members():
    def fn(x):
        c = Color.GREEN
        r = x * c.value
        if c is Color.GREEN:
            r = r + 1
        return r, c.name, Color(1).name, [m.name for m in Color], Color["RED"].value

    check_program(fn, t4)


def test_en_intflag():
    def fn(x):
        f = Flag.A | Flag.B
        return x * int(f), Flag.A in f, bool(f & Flag.B)

    check_program(fn, t4)


# ---- ABC isinstance
class Base(abc.ABC):
    @abc.abstractmethod
    def m(self): ...


class Impl(Base):
    def m(self):
        return 2


class Virtual:
    pass


def test_abc_isinstance():
    import collections.abc as cabc

    def fn(x):
        i = Impl()
        return (
            x * i.m(),
            isinstance(i, Base),
            isinstance([], cabc.Sequence),
            isinstance({}, cabc.Mapping),
            isinstance(x, cabc.Iterable),
            isinstance(3, cabc.Hashable),
            isinstance(Virtual(), Base),
        )

    check_program(fn, t4)


def test_abc_register_between_calls():
    def fn(x):
        return x * isinstance(Virtual(), Base)

    def mutate(call):
        if call == 1:
            Base.register(Virtual)

    check_program(fn, t4, mutate, calls=3)


def test_abc_instantiate_abstract():
    def fn(x):
        try:
            Base()
        except TypeError as e:
            return x, "abstract" in str(e)

    check_program(fn, t4)


# ---- sorted/min/max key over tensors
def test_so_sorted_shape_key():
    def fn(x):
        ts = [x[:2], x, x[:1]]
        return sorted(ts, key=lambda t: t.shape[0])

    check_program(fn, t4)


def test_so_max_len():
    def fn(x):
        ts = [x[:2], x, x[:1]]
        return max(ts, key=len) * 2, min(ts, key=lambda t: t.numel())

    check_program(fn, t4)


def test_so_sorted_reverse_stable():
    def fn(x):
        pairs = [(1, "a"), (0, "b"), (1, "c")]
        s = sorted(pairs, key=lambda p: p[0], reverse=True)
        return x * s[0][0], [p[1] for p in s]

    check_program(fn, t4)


# ---- numerics
def test_nu_neg_zero():
    def fn(x):
        z = -0.0
        return x * math.copysign(1.0, z), str(z), z == 0.0, 1 / float("inf")

    check_program(fn, t4)


def test_nu_nan_inf():
    def fn(x):
        n = float("nan")
        i = float("inf")
        return x * (n != n), i > 1e308, math.isinf(-i), x + i, max(1.0, n), min(n, 1.0)  # noqa: PLR0124

    check_program(fn, t4)


def test_nu_bigint():
    def fn(x):
        b = 2**70
        return x * (b % 7), b // 3, b > 2**63, -b >> 3, float(2**60 + 1)

    check_program(fn, t4)


def test_nu_zero_div():
    def fn(x):
        d = 0
        return x / d if False else x * (3 / d)

    check_program(fn, t4)


def test_nu_zero_div_mod():
    def fn(x):
        try:
            return x * (5 % 0)
        except ZeroDivisionError as e:
            return x * 2, str(e)

    check_program(fn, t4)


def test_nu_float_floordiv_zero():
    def fn(x):
        try:
            return x * (5.0 // 0.0)
        except ZeroDivisionError as e:
            return x * 3, str(e)

    check_program(fn, t4)


def test_nu_int_overflow_to_tensor():
    def fn(x):
        return x.long() * (2**40), x * 1e300 * 1e10

    check_program(fn, t4)


def test_nu_round_half():
    def fn(x):
        return (
            x * round(2.5),
            round(3.5),
            round(-0.5),
            round(1.25, 1),
            divmod(-7, 2),
            -7 // 2,
            -7 % 2,
        )

    check_program(fn, t4)


# ---- string formatting of shapes
def test_sf_shape_format():
    def fn(x):
        y = x.view(2, 2)
        return (
            y,
            f"{y.shape}",
            str(y.shape),
            "%s" % (tuple(y.shape),),  # noqa: UP031
            f"{y.shape[0]}x{y.shape[1]}",
            repr(y.size()),
        )

    check_program(fn, t4)


def test_sf_dtype_device():
    def fn(x):
        return x, f"{x.dtype}|{x.device}|{x.dim():03d}|{x.shape[0]:>4}|{x.numel()!r}"

    check_program(fn, t4)


# ---- in-place on views / aliasing inputs
def test_ip_view_of_view():
    def fn(x):
        y = x.view(2, 2)
        z = y[0]
        z.add_(1)
        w = y.t()[1]
        w.mul_(2)
        return x, y, z, w

    check_program(fn, t4)


def test_ip_aliasing_inputs():
    def fn(a, b):
        a.add_(b)
        b.mul_(2)
        return a + b

    def mk():
        base = torch.randn(6)
        return (base[:4], base[2:])

    check_program(fn, mk)


def test_ip_same_input_twice():
    def fn(a, b):
        a.mul_(2)
        return a + b

    def mk():
        t = torch.randn(4)
        return (t, t)

    check_program(fn, mk)


def test_ip_diag_view():
    def fn(x):
        m = x.view(2, 2)
        m.diagonal().zero_()
        m[:, 1] += 1
        return x

    check_program(fn, t4)


def test_ip_unsqueeze_expand_copy():
    def fn(x):
        y = torch.zeros(3, 4)
        y[1:].copy_(x.unsqueeze(0).expand(2, 4))
        y.select(0, 0).fill_(2)
        return y

    check_program(fn, t4)


def test_pr_object_setattr_runs_property_setter():
    class A:
        def __init__(self):
            self._v = 1

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, val):
            self._v = val + 10

    a = A()

    def fn(x):
        object.__setattr__(a, "v", 2)
        b = A()
        b.v = 5
        return x * a.v + b.v

    check_program(fn, t4, setup=lambda: setattr(a, "_v", 1), observe=lambda: a._v)


def test_pr_read_only_property_assignment_raises():
    class A:
        @property
        def v(self):
            return 1

    a = A()

    def fn(x):
        try:
            a.v = 3
        except AttributeError as e:
            return x * a.v, str(e)
        return x

    check_program(fn, t4)


def test_abc_issubclass_follows_registration():
    class Iface(abc.ABC):
        pass

    class Plain:
        pass

    def fn(x):
        return x * issubclass(Plain, Iface) + x * isinstance(Plain(), (int, Iface))

    def mutate(call):
        if call == 1:
            Iface.register(Plain)

    check_program(fn, t4, mutate, calls=3)
