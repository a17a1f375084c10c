"""Programs in the spirit of Dynamo's own test suite, written for torchlite (wrong20, issue 20).

Tensor subclasses with __torch_function__, nn.Module hooks and attribute changes between calls,
grad-mode nesting and decorators, sets, dict subclasses, namedtuple/dataclass outputs, super()
chains, class/static methods, __getattr__ overrides, global/nonlocal state, functools/itertools,
formatted sizes, exceptions with tracebacks, asserts on tensors, data-dependent branches,
in-place writes through views and .data/.detach(), random state and torch.Generator objects.
Each runs eagerly and compiled (default mode and fullgraph=True, where a graph break is an
accepted outcome), twice, with a change between the calls where the program reads state.

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import collections
import dataclasses
import functools
import itertools
import operator
import typing

import pytest
import torch
from conformance_check import check_program

import torchlite


def t4():
    return (torch.randn(4),)


def t23():
    return (torch.randn(2, 3),)


def check(fn, make_args=t4, mutate=None, *, setup=None, observe=None, calls=2):
    """check_program in default mode, then with fullgraph=True (a graph break may raise there)."""
    check_program(fn, make_args, mutate, setup=setup, observe=observe, calls=calls)
    if setup is not None:
        setup()
    try:
        check_program(
            fn, make_args, mutate, setup=setup, observe=observe, calls=calls, fullgraph=True
        )
    except AssertionError as e:
        # NOTE: fullgraph=True may refuse a program with Unsupported (a graph break with its
        # reason); any other difference is a wrong result.
        if "raised Unsupported" not in str(e):
            raise


# ---- tensor subclasses and __torch_function__ -------------------------------------------------
class Doubling(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.add or func is torch.Tensor.add:
            return out * 2
        return out


class Logged(torch.Tensor):
    calls: typing.ClassVar[list] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_sub_torch_function_rewrites_add():
    def fn(x):
        y = x.as_subclass(Doubling)
        z = torch.add(y, 1)
        return z.as_subclass(torch.Tensor), type(z).__name__

    check(fn)


def test_sub_method_call_goes_through_torch_function():
    def fn(x):
        y = x.as_subclass(Doubling)
        return y.add(3).sin().as_subclass(torch.Tensor)

    check(fn)


def test_sub_input_subclass_type_kept():
    def fn(x):
        return (x * 2 + 1), isinstance(x, Doubling)

    check(fn, lambda: (torch.randn(3).as_subclass(Doubling),))


def test_sub_torch_function_logs_each_call():
    def fn(x):
        y = x.as_subclass(Logged)
        z = y.mul(2).relu()
        return z.as_subclass(torch.Tensor)

    check(
        fn,
        setup=Logged.calls.clear,
        observe=lambda: len(Logged.calls),
    )


def test_sub_plain_subclass_method():
    class WithMethod(torch.Tensor):
        def double(self):
            return self * 2

    def fn(x):
        y = x.as_subclass(WithMethod)
        return y.double() + 1

    check(fn)


# ---- nn.Module hooks and attribute mutation ---------------------------------------------------
def _lin():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def test_mod_forward_pre_hook_changes_input():
    m = _lin()
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))

    def fn(x):
        return m(x)

    check(fn, lambda: (torch.randn(2, 4),))


def test_mod_forward_hook_changes_output():
    m = _lin()
    log = []

    def hook(mod, args, out):
        log.append(tuple(out.shape))
        return out + 1

    m.register_forward_hook(hook)

    def fn(x):
        return m(x).sum(-1)

    check(fn, lambda: (torch.randn(2, 4),), setup=log.clear, observe=lambda: list(log))


def test_mod_hook_added_between_calls():
    m = _lin()
    handles = []

    def reset():
        for h in handles:
            h.remove()
        handles.clear()

    def mutate(call):
        reset()
        handles.append(m.register_forward_hook(lambda mod, a, out: out * 10))

    def fn(x):
        return m(x)

    try:
        check(fn, lambda: (torch.randn(2, 4),), mutate, setup=reset)
    finally:
        reset()


def test_mod_hook_removed_between_calls():
    m = _lin()
    handles = []

    def setup():
        for h in handles:
            h.remove()
        handles.clear()
        handles.append(m.register_forward_pre_hook(lambda mod, a: (a[0] + 5,)))

    def mutate(call):
        for h in handles:
            h.remove()
        handles.clear()

    def fn(x):
        return m(x)

    try:
        check(fn, lambda: (torch.randn(2, 4),), mutate, setup=setup)
    finally:
        mutate(0)


def test_mod_forward_hook_with_kwargs():
    class M(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m = M()
    m.register_forward_pre_hook(
        lambda mod, args, kwargs: (args, {"scale": kwargs.get("scale", 1.0) + 1}), with_kwargs=True
    )

    def fn(x):
        return m(x, scale=3.0)

    check(fn)


def test_mod_state_dict_hook():
    m = _lin()

    def hook(mod, sd, prefix, local_metadata):
        sd[prefix + "extra"] = torch.ones(1)
        return sd

    m._register_state_dict_hook(hook)

    def fn(x):
        sd = m.state_dict()
        return x + len(sd), sorted(sd)

    check(fn)


def test_mod_attribute_float_changed_between_calls():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0
            self.use_relu = True

        def forward(self, x):
            y = x * self.scale
            return y.relu() if self.use_relu else y.tanh()

    m = M()

    def setup():
        m.scale, m.use_relu = 2.0, True

    def mutate(call):
        m.scale, m.use_relu = 3.5, False

    check(lambda x: m(x), t4, mutate, setup=setup)


def test_mod_submodule_swapped_between_calls():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(x) + 1

    m = M()

    def setup():
        m.act = torch.nn.ReLU()

    def mutate(call):
        m.act = torch.nn.Sigmoid()

    check(lambda x: m(x), t4, mutate, setup=setup)


def test_mod_training_flag_between_calls():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x - 2

    m = M()

    def setup():
        m.train()

    def mutate(call):
        m.eval()

    check(lambda x: m(x), t4, mutate, setup=setup)


def test_mod_buffer_updated_in_forward():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            self.count += 1
            return x * self.count

    m = M()

    check(lambda x: m(x), t4, setup=lambda: m.count.zero_(), observe=lambda: m.count.clone())


def test_mod_attribute_set_in_forward():
    class M(torch.nn.Module):
        def forward(self, x):
            self.last = x.sum()
            self.n = getattr(self, "n", 0) + 1
            return x + self.n

    m = M()

    def setup():
        m.__dict__.pop("n", None)
        m.__dict__.pop("last", None)

    check(
        lambda x: m(x),
        t4,
        setup=setup,
        observe=lambda: (getattr(m, "n", None), getattr(m, "last", None)),
    )


def test_mod_modulelist_and_moduledict_iteration():
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
    heads = torch.nn.ModuleDict({"b": torch.nn.Linear(4, 2), "a": torch.nn.Linear(4, 1)})

    def fn(x):
        for i, layer in enumerate(layers):
            x = layer(x) if i % 2 == 0 else x + layer(x)
        return {k: h(x) for k, h in heads.items()}

    check(fn, lambda: (torch.randn(2, 4),))


def test_mod_parameter_data_written_between_calls():
    m = _lin()

    def setup():
        with torch.no_grad():
            m.weight.fill_(0.5)

    def mutate(call):
        m.weight.data = torch.full((3, 4), -1.0)

    check(lambda x: m(x), lambda: (torch.randn(2, 4),), mutate, setup=setup)


# ---- grad modes -------------------------------------------------------------------------------
def test_gm_nested_no_grad_enable_grad():
    def fn(x):
        with torch.no_grad():
            a = x * 2
            with torch.enable_grad():
                b = x * 3
            c = x * 4
        return a, b, c, torch.is_grad_enabled()

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_gm_no_grad_decorator_on_helper():
    @torch.no_grad()
    def helper(t):
        return t * 2, torch.is_grad_enabled()

    def fn(x):
        a, g = helper(x)
        return a + 1, g, x * 2

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_gm_enable_grad_decorator_inside_no_grad():
    @torch.enable_grad()
    def helper(t):
        return t.sin()

    def fn(x):
        with torch.no_grad():
            y = helper(x)
            z = x.cos()
        return y, z

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_gm_set_grad_enabled_false():
    def fn(x):
        with torch.set_grad_enabled(False):
            y = x * 2
        return y, x * 3

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_gm_inference_mode_inside():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            flag = torch.is_inference_mode_enabled()
        return y.clone(), flag, torch.is_inference_mode_enabled()

    check(fn)


def test_gm_inference_mode_decorator():
    @torch.inference_mode()
    def helper(t):
        return t + 1

    def fn(x):
        return helper(x) * 1, x.requires_grad

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_gm_called_under_no_grad_then_grad():
    state = {"grad": True}

    def fn(x):
        return x * 2

    compiled = torchlite.compile(fn)
    for grad in (True, False, True):
        state["grad"] = grad
        x = torch.randn(3, requires_grad=True)
        with torch.set_grad_enabled(grad):
            out = compiled(x)
            ref = fn(x)
        assert out.requires_grad == ref.requires_grad
        torch.testing.assert_close(out, ref)


def test_gm_no_grad_exception_restores_mode():
    def fn(x):
        try:
            with torch.no_grad():
                y = x * 2
                raise ValueError("v")
        except ValueError:
            pass
        return x * 3, torch.is_grad_enabled(), y

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


# ---- sets and frozensets ----------------------------------------------------------------------
def test_set_algebra():
    def fn(x):
        a = {1, 2, 3, 4}
        b = frozenset({3, 4, 5})
        u = a | b
        i = a & b
        d = a - b
        s = a ^ b
        return x * len(u) + sum(i), sorted(d), sorted(s), type(b | a).__name__, 3 in i

    check(fn)


def test_set_methods_and_mutation():
    def fn(x):
        s = set()
        for v in (3, 1, 3, 2):
            s.add(v)
        s.discard(7)
        s.update([9, 1])
        s.difference_update({2})
        t = s.copy()
        t.remove(9)
        return x + len(s), sorted(s), sorted(t), s.issuperset(t), t.isdisjoint({100})

    check(fn)


def test_set_of_shapes():
    def fn(x):
        shapes = {tuple(x.shape), (2, 3), tuple(x.t().shape)}
        return x.sum() * len(shapes), sorted(shapes)

    check(fn, t23)


def test_set_global_mutated_between_calls():
    allowed = {1, 2}

    def setup():
        allowed.clear()
        allowed.update({1, 2})

    def mutate(call):
        allowed.add(3)

    def fn(x):
        return x * sum(1 for i in range(5) if i in allowed)

    check(fn, t4, mutate, setup=setup)


def test_frozenset_as_dict_key():
    def fn(x):
        d = {frozenset({1, 2}): x, frozenset({3}): x * 2}
        return d[frozenset({2, 1})] + d[frozenset([3])]

    check(fn)


# ---- dict subclasses, OrderedDict, defaultdict ------------------------------------------------
def test_dict_ordered_move_to_end():
    def fn(x):
        od = collections.OrderedDict(a=1, b=2, c=3)
        od.move_to_end("a")
        od["d"] = 4
        od.popitem(last=False)
        return x * od["a"], list(od.keys())

    check(fn)


def test_dict_defaultdict_list():
    def fn(x):
        dd = collections.defaultdict(list)
        for i, t in enumerate(x.unbind(0)):
            dd[i % 2].append(t)
        return {k: torch.stack(v).sum() for k, v in dd.items()}, len(dd)

    check(fn)


def test_dict_defaultdict_int_counter():
    def fn(x):
        dd = collections.defaultdict(int)
        for w in "abcab":
            dd[w] += 1
        return x * dd["a"] + dd["z"], dict(dd)

    check(fn)


def test_dict_subclass_missing():
    class Default(dict):
        def __missing__(self, key):
            return key * 10

    def fn(x):
        d = Default(a=1)
        return x + d["a"] + d[3], len(d)

    check(fn)


def test_dict_subclass_getitem_override():
    class Scaled(dict):
        def __getitem__(self, k):
            return super().__getitem__(k) * 2

    def fn(x):
        d = Scaled(w=x)
        return d["w"] + 1, type(d).__name__, dict.__getitem__(d, "w")

    check(fn)


def test_dict_counter():
    def fn(x):
        c = collections.Counter("hello world")
        top = c.most_common(2)
        return x * c["l"], top

    check(fn)


def test_dict_chainmap():
    def fn(x):
        cm = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
        return x * cm["a"] + cm["b"], sorted(cm)

    check(fn)


def test_dict_input_mutated_in_place():
    def fn(d):
        d["y"] = d["x"] * 2
        d.pop("drop", None)
        return d["y"].sum()

    check(fn, lambda: ({"x": torch.randn(3), "drop": 1},))


def test_dict_ordered_input_changes_keys_between_calls():
    def make():
        return (collections.OrderedDict([("a", torch.randn(2)), ("b", torch.randn(2))]),)

    def fn(d):
        out = 0
        for i, (k, v) in enumerate(d.items()):
            out = out + v * (i + 1)
        return out, list(d)

    check(fn, make)


# ---- namedtuple and dataclass outputs ---------------------------------------------------------
Pair = collections.namedtuple("Pair", ["first", "second"])


class Triple(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor
    c: int = 3


@dataclasses.dataclass
class Out:
    value: torch.Tensor
    aux: dict
    n: int = 0


def test_nt_return_namedtuple():
    def fn(x):
        return Pair(x + 1, x * 2)

    check(fn)


def test_nt_typing_namedtuple_default_and_replace():
    def fn(x):
        t = Triple(x, x * 2)
        u = t._replace(c=5)
        return u, t.c, u.a + u.b * u.c

    check(fn)


def test_nt_namedtuple_input_fields():
    def fn(p):
        return p.first * p.second, p._fields, len(p)

    check(fn, lambda: (Pair(torch.randn(3), torch.randn(3)),))


def test_dc_return_dataclass():
    def fn(x):
        return Out(x.relu(), {"s": x.sum()}, n=x.dim())

    check(fn)


def test_dc_replace_and_fields():
    def fn(x):
        o = Out(x, {}, 1)
        o2 = dataclasses.replace(o, n=4)
        names = [f.name for f in dataclasses.fields(o2)]
        return o2.value * o2.n, names

    check(fn)


def test_dc_post_init_and_eq():
    @dataclasses.dataclass
    class Cfg:
        width: int
        depth: int = 2
        total: int = dataclasses.field(init=False)

        def __post_init__(self):
            self.total = self.width * self.depth

    def fn(x):
        a = Cfg(3)
        b = Cfg(3, 2)
        return x * a.total, a == b, repr(a)

    check(fn)


# ---- super() chains, class and static methods -------------------------------------------------
class Base:
    scale = 1

    def f(self, x):
        return x + self.scale

    @classmethod
    def make(cls):
        return cls()

    @staticmethod
    def helper(x):
        return x * 3


class Mid(Base):
    def f(self, x):
        return super().f(x) * 2


class Leaf(Mid):
    scale = 5

    def f(self, x):
        return super().f(x) - 1

    @classmethod
    def make(cls):
        obj = super().make()
        obj.tag = cls.__name__
        return obj


def test_super_deep_chain():
    def fn(x):
        return Leaf().f(x), Mid().f(x)

    check(fn)


def test_super_classmethod_chain():
    def fn(x):
        o = Leaf.make()
        return o.f(x), o.tag, type(o).__name__

    check(fn)


def test_super_staticmethod_via_instance_and_class():
    def fn(x):
        return Leaf.helper(x) + Leaf().helper(x), Base.helper(2)

    check(fn)


def test_super_class_attr_changed_between_calls():
    def setup():
        Leaf.scale = 5

    def mutate(call):
        Leaf.scale = 11

    try:
        check(lambda x: Leaf().f(x), t4, mutate, setup=setup)
    finally:
        setup()


def test_super_diamond_mro():
    class A:
        def who(self):
            return ["A"]

    class B(A):
        def who(self):
            return ["B", *super().who()]

    class C(A):
        def who(self):
            return ["C", *super().who()]

    class D(B, C):
        def who(self):
            return ["D", *super().who()]

    def fn(x):
        names = D().who()
        return x * len(names), names, [k.__name__ for k in D.__mro__]

    check(fn)


def test_super_two_arg_form():
    class A:
        def g(self):
            return 1

    class B(A):
        def g(self):
            return 2

    class C(B):
        def g(self):
            return super(B, self).g() + 10

    check(lambda x: x * C().g())


def test_super_init_in_module_subclass():
    class Scaled(torch.nn.Linear):
        def __init__(self, *a, factor=2.0, **k):
            super().__init__(*a, **k)
            self.factor = factor

        def forward(self, x):
            return super().forward(x) * self.factor

    torch.manual_seed(0)
    m = Scaled(4, 2, factor=3.0)
    check(lambda x: m(x), lambda: (torch.randn(3, 4),))


def test_classmethod_created_inside():
    class Acc:
        def __init__(self, v):
            self.v = v

        @classmethod
        def zero_like(cls, t):
            return cls(torch.zeros_like(t))

        def __add__(self, other):
            return Acc(self.v + other.v)

    def fn(x):
        a = Acc.zero_like(x)
        for t in (x, x * 2):
            a = a + Acc(t)
        return a.v

    check(fn)


# ---- __getattr__ / __getattribute__ -----------------------------------------------------------
def test_ga_getattr_proxy_to_tensor():
    class Proxy:
        def __init__(self, t):
            self._t = t

        def __getattr__(self, name):
            return getattr(self._t, name)

    def fn(x):
        p = Proxy(x)
        return p.sin() + p.shape[0], p.dtype

    check(fn)


def test_ga_getattribute_counts_reads():
    class Counting:
        def __init__(self):
            object.__setattr__(self, "reads", 0)
            object.__setattr__(self, "w", 3)

        def __getattribute__(self, name):
            if name != "reads":
                object.__setattr__(self, "reads", object.__getattribute__(self, "reads") + 1)
            return object.__getattribute__(self, name)

    def fn(x):
        c = Counting()
        y = x * c.w + c.w
        return y, c.reads

    check(fn)


def test_ga_getattr_raises_attributeerror_default():
    class Maybe:
        def __getattr__(self, name):
            if name.startswith("opt_"):
                return
            raise AttributeError(name)

    def fn(x):
        m = Maybe()
        a = m.opt_scale
        b = getattr(m, "missing", 7)
        return x * (b if a is None else a), hasattr(m, "zzz"), hasattr(m, "opt_z")

    check(fn)


def test_ga_module_getattr_override():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def __getattr__(self, name):
            if name == "alias":
                return self.lin
            return super().__getattr__(name)

    torch.manual_seed(0)
    m = M()
    check(lambda x: m.alias(x) + m.lin.bias, lambda: (torch.randn(2, 4),))


# ---- globals and nonlocals --------------------------------------------------------------------
COUNTER = 0
FACTOR = 2.0


def _bump():
    global COUNTER
    COUNTER += 1
    return COUNTER


def test_gl_global_counter_incremented():
    def setup():
        global COUNTER
        COUNTER = 0

    def fn(x):
        a = _bump()
        b = _bump()
        return x * a + b

    check(fn, setup=setup, observe=lambda: COUNTER)


def test_gl_global_factor_rebound_between_calls():
    def setup():
        global FACTOR
        FACTOR = 2.0

    def mutate(call):
        global FACTOR
        FACTOR = -0.5

    def fn(x):
        return x * FACTOR

    try:
        check(fn, t4, mutate, setup=setup)
    finally:
        setup()


def test_gl_nonlocal_in_nested_closures():
    def fn(x):
        total = 0

        def add(v):
            nonlocal total
            total += v

            def twice():
                nonlocal total
                total *= 2

            twice()

        add(1)
        add(3)
        return x * total, total

    check(fn)


def test_gl_closure_cell_mutated_between_calls():
    box = [1.0]

    def make():
        scale = box[0]

        def inner(x):
            return x * scale

        return inner

    state = {"f": make()}

    def setup():
        box[0] = 1.0
        state["f"] = make()

    def mutate(call):
        box[0] = 4.0
        state["f"] = make()

    def fn(x):
        return state["f"](x)

    check(fn, t4, mutate, setup=setup)


# ---- functools and itertools ------------------------------------------------------------------
def test_it_reduce_tensors():
    def fn(x):
        parts = x.unbind(0)
        return functools.reduce(operator.add, parts), functools.reduce(lambda a, b: a * b, parts, 1)

    check(fn)


def test_it_chain_product():
    def fn(x):
        acc = x
        for a, b in itertools.product(range(2), (1, 3)):
            acc = acc + a * b
        items = list(itertools.chain([1, 2], (3,), range(4, 6)))
        return acc, items, list(itertools.chain.from_iterable([[1], [2, 3]]))

    check(fn)


def test_it_zip_longest_accumulate():
    def fn(x):
        pairs = list(itertools.zip_longest([x, x * 2], [1], fillvalue=10))
        acc = list(itertools.accumulate([1, 2, 3, 4]))
        prod = list(itertools.accumulate([1, 2, 3], operator.mul))
        out = sum(a * b for a, b in pairs)
        return out, acc, prod

    check(fn)


def test_it_accumulate_tensors_and_islice():
    def fn(x):
        running = list(itertools.accumulate(x.unbind(0)))
        first = list(itertools.islice(itertools.count(5, 2), 3))
        return torch.stack(running), first

    check(fn)


def test_it_groupby_and_pairwise():
    def fn(x):
        groups = [(k, len(list(g))) for k, g in itertools.groupby("aabccc")]
        pw = list(itertools.pairwise([1, 4, 9]))
        return x * len(groups), groups, pw

    check(fn)


def test_it_permutations_combinations():
    def fn(x):
        perms = list(itertools.permutations(range(3), 2))
        combs = list(itertools.combinations("abc", 2))
        return x * len(perms) + len(combs), combs[-1]

    check(fn)


def test_it_partial_of_method_and_cache():
    calls = []

    @functools.cache
    def table(n):
        calls.append(n)
        return tuple(range(n))

    def setup():
        calls.clear()
        table.cache_clear()

    def fn(x):
        f = functools.partial(torch.Tensor.mul, other=2)
        return f(x) + len(table(3)) + len(table(3))

    check(fn, setup=setup, observe=lambda: list(calls))


# ---- string formatting of sizes ----------------------------------------------------------------
def test_fmt_sizes():
    def fn(x):
        s = f"{x.shape}|{x.size(0)}x{x.size(1):03d}|{list(x.shape)}|{x.dim()}"
        t = "%s-%d" % (tuple(x.shape), x.numel())  # noqa: UP031 - %-formatting is the case
        u = "{0}/{1!r}".format(x.shape[-1], str(x.dtype))  # noqa: UP030, UP032
        return x * len(s), s, t, u

    check(fn, t23)


def test_fmt_size_changes_between_calls():
    shapes = [(2, 3), (4, 5)]

    def fn(x):
        return x.sum(), f"shape={tuple(x.shape)} n={x.numel():,}"

    calls = iter([0, 0, 1, 1])

    def make():
        return (torch.randn(*shapes[next(calls)]),)

    check_program(fn, make)


def test_fmt_error_message_with_shape():
    def fn(x):
        if x.shape[0] != 5:
            raise ValueError(f"expected 5 rows, got {x.shape[0]} (shape {tuple(x.shape)})")
        return x

    check(fn, t23)


# ---- exceptions and tracebacks ----------------------------------------------------------------
def test_ex_traceback_lines_through_helpers():
    def inner(t):
        return t.view(7)

    def middle(t):
        return inner(t) + 1

    def fn(x):
        return middle(x)

    check(fn)


def test_ex_chained_cause_and_context():
    def fn(x):
        try:
            try:
                raise KeyError("a")
            except KeyError as e:
                raise ValueError("b") from e
        except ValueError as e:
            return (
                x + 1,
                type(e.__cause__).__name__,
                type(e.__context__).__name__,
                e.__suppress_context__,
            )

    check(fn)


def test_ex_custom_exception_attrs():
    class Oops(Exception):
        def __init__(self, code, t):
            super().__init__(f"code {code}")
            self.code = code
            self.t = t

    def fn(x):
        try:
            raise Oops(3, x * 2)
        except Oops as e:
            return e.t + e.code, str(e), e.args

    check(fn)


def test_ex_finally_runs_on_raise():
    log = []

    def fn(x):
        try:
            y = x * 2
            log.append("body")
            return y.view(5)
        finally:
            log.append("finally")

    check(fn, setup=log.clear, observe=lambda: list(log))


def test_ex_exception_group_like_reraise():
    def fn(x):
        errors = []
        for i in range(3):
            try:
                if i == 1:
                    raise IndexError(i)
                x = x + i
            except IndexError as e:
                errors.append(e.args[0])
        if errors:
            try:
                raise RuntimeError(f"{len(errors)} failed")
            except RuntimeError as e:
                return x, str(e), errors
        return x

    check(fn)


def test_ex_tensor_op_error_caught():
    def fn(x):
        try:
            y = x @ torch.ones(3, 3)
        except RuntimeError:
            y = x.sum()
        return y

    check(fn)


def test_ex_traceback_object_inspected():
    def fn(x):
        try:
            raise ValueError("v")
        except ValueError as e:
            tb = e.__traceback__
            return x + 1, tb is not None, tb.tb_frame.f_code.co_name

    check(fn)


# ---- asserts on tensors and data-dependent branches -------------------------------------------
def test_assert_on_tensor_passes_and_fails():
    def fn(x):
        assert (x.abs() >= 0).all(), "abs"
        assert x.sum() > 100, f"sum too small: {x.shape}"
        return x

    check(fn)


def test_assert_shape():
    def fn(x):
        assert x.dim() == 2 and x.shape[1] == 3, "bad shape"
        return x * 2

    calls = iter([0, 0, 1, 1])

    def make():
        return (torch.randn(2, 3) if next(calls) == 0 else torch.randn(3),)

    check_program(fn, make)


def test_branch_on_tensor_value():
    def fn(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x - 100
        if x.max().item() > 0.5:
            y = y + 1
        return y

    flip = iter([1.0, 1.0, -1.0, -1.0])

    def make():
        return (torch.randn(4).abs() * next(flip),)

    check_program(fn, make)


def test_branch_while_on_tensor():
    def fn(x):
        n = 0
        while x.norm() > 1 and n < 20:
            x = x / 2
            n += 1
        return x, n

    check(fn, lambda: (torch.randn(4) * 10,))


def test_branch_bool_of_single_element():
    def fn(x):
        flag = x[0] > 0
        return x + 1 if flag else x - 1, bool(flag)

    check(fn)


# ---- in-place ops on views and aliases --------------------------------------------------------
def test_ip_write_through_slice_of_input():
    def fn(x):
        v = x[1:3]
        v.mul_(10)
        return x.sum(), v

    check(fn)


def test_ip_write_through_transpose_view():
    def fn(x):
        x.t()[0].fill_(7)
        return x

    check(fn, t23)


def test_ip_alias_same_tensor_twice():
    def fn(a, b):
        a.add_(1)
        return b * 2

    def make():
        t = torch.randn(3)
        return (t, t)

    check(fn, make)


def test_ip_view_of_input_returned_then_mutated():
    def fn(x):
        v = x.view(2, 2)
        x.add_(1)
        return v, v._base is x

    check(fn)


def test_ip_unbind_views_mutated():
    def fn(x):
        a, b = x.unbind(0)
        a.zero_()
        b.add_(3)
        return x

    check(fn, t23)


def test_ip_data_write():
    def fn(x):
        y = x * 2
        x.data.mul_(3)
        return y, x

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_ip_detach_write_shares_storage():
    def fn(x):
        d = x.detach()
        d.add_(5)
        return x * 1, d.requires_grad

    check(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_ip_data_assignment():
    def fn(x, y):
        x.data = y * 2
        return x + 1

    check(fn, lambda: (torch.randn(3), torch.randn(3)))


def test_ip_setitem_with_mask_and_index():
    def fn(x):
        x[x > 0] = 0.0
        x[[0, 2]] += 1
        return x

    check(fn)


def test_ip_out_argument():
    def fn(x, out):
        torch.add(x, 1, out=out)
        return out * 2

    check(fn, lambda: (torch.randn(4), torch.empty(4)))


def test_ip_inplace_on_expanded_view_raises():
    def fn(x):
        e = x.unsqueeze(0).expand(3, 4)
        e.add_(1)
        return e

    check(fn)


# ---- random state and generators --------------------------------------------------------------
def test_rng_manual_seed_inside():
    def fn(x):
        torch.manual_seed(7)
        a = torch.rand(3)
        b = torch.randn(3)
        return x.sum() + a, b

    check(fn, observe=lambda: torch.rand(1))


def test_rng_global_draws_advance():
    def fn(x):
        return x + torch.rand(4), torch.randn(2)

    check(fn, observe=lambda: torch.rand(1), calls=3)


def test_rng_generator_object():
    g = torch.Generator().manual_seed(3)

    def setup():
        g.manual_seed(3)

    def fn(x):
        a = torch.rand(4, generator=g)
        b = torch.randn(4, generator=g)
        return x + a + b

    check(fn, setup=setup, observe=lambda: torch.rand(1, generator=g), calls=3)


def test_rng_generator_created_inside():
    def fn(x):
        g = torch.Generator()
        g.manual_seed(11)
        return x * torch.rand(4, generator=g), g.initial_seed()

    check(fn)


def test_rng_get_set_state():
    def fn(x):
        s = torch.get_rng_state()
        a = torch.rand(4)
        torch.set_rng_state(s)
        b = torch.rand(4)
        return x + a - b

    check(fn, observe=lambda: torch.rand(1))


def test_rng_fork_rng():
    def fn(x):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            a = torch.rand(4)
        return x + a, torch.rand(2)

    check(fn, observe=lambda: torch.rand(1))


def test_rng_dropout_train():
    def fn(x):
        return torch.nn.functional.dropout(x, 0.5, training=True)

    check(fn, lambda: (torch.ones(16),), observe=lambda: torch.rand(1))


# ---- mixed: iterating containers of modules/tensors -------------------------------------------
def test_mix_sorted_dict_of_tensors_by_norm():
    def fn(x):
        d = {"a": x, "b": x * 3, "c": -x * 2}
        order = sorted(d, key=lambda k: d[k].norm().item())
        return order, torch.stack([d[k] for k in order])

    check(fn)


def test_mix_enumerate_reversed_zip():
    def fn(x):
        out = []
        for i, (a, b) in enumerate(zip(reversed(x.unbind(0)), range(10))):
            out.append(a * b + i)
        return torch.stack(out)

    check(fn)


def test_mix_list_methods_on_tensors():
    def fn(x):
        xs = list(x.unbind(0))
        xs.insert(1, x.sum())
        xs.reverse()
        last = xs.pop()
        xs.extend([last, last * 2])
        idx = xs.index(last)
        return torch.stack(xs), idx, xs.count(last)

    check(fn)


def test_mix_kwargs_star_unpacking():
    def g(a, *rest, scale=1, **kw):
        return (a + sum(rest)) * scale + kw.get("bias", 0)

    def fn(x):
        args = (x, x * 2)
        kw = {"scale": 3, "bias": 1}
        return g(*args, **kw), g(x, bias=2)

    check(fn)


@pytest.mark.parametrize("shape", [(3,), (2, 5)])
def test_mix_shapes_param(shape):
    def fn(x):
        return x.reshape(-1).cumsum(0)[-1] * len(x.shape)

    check(fn, lambda: (torch.randn(*shape),))


# ---- mutable C containers read by item (defaultdict, deque) ----------------------------------
def test_cc_defaultdict_increment_in_loop():
    def fn(x):
        dd = collections.defaultdict(int)
        for w in "abcab":
            dd[w] += 1
        return x * dd["a"] + dd["z"], dict(dd)

    check(fn)


def test_cc_defaultdict_factory_runs_per_missing_key():
    made = []
    dd = collections.defaultdict(lambda: made.append(1) or 3)

    def setup():
        made.clear()
        dd.clear()

    def fn(x):
        return x * dd["k"] + len(made)

    check(fn, setup=setup, observe=lambda: (list(made), dict(dd)), calls=3)


def test_cc_defaultdict_global_value_changed_between_calls():
    dd = collections.defaultdict(int, k=2)

    def setup():
        dd.clear()
        dd["k"] = 2

    def mutate(call):
        dd["k"] = 10 + call

    check(lambda x: x * dd["k"], t4, mutate, setup=setup, calls=3)


def test_cc_deque_item_changed_between_calls():
    dq = collections.deque([1, 2])

    def setup():
        dq.clear()
        dq.extend([1, 2])

    def mutate(call):
        dq.appendleft(5 + call)

    check(lambda x: x * dq[0] + dq[-1], t4, mutate, setup=setup, calls=3)


# ---- gradients through compiled programs ------------------------------------------------------
def check_grads(fn, make_args, calls=2):
    """Compiled and eager give the same values and the same input .grad after backward()."""
    compiled = torchlite.compile(fn)
    for call in range(calls):
        grads = []
        for runner in (fn, compiled):
            torch.manual_seed(2000 + call)
            args = make_args()
            out = runner(*args)
            loss = sum(o.sum() for o in (out if isinstance(out, tuple) else (out,)))
            loss.backward()
            grads.append((out, [a.grad for a in args if isinstance(a, torch.Tensor)]))
        (e_out, e_g), (c_out, c_g) = grads
        torch.testing.assert_close(c_out, e_out)
        for a, b in zip(c_g, e_g):
            assert (a is None) == (b is None), f"grad presence differs: {a} vs {b}"
            if a is not None:
                torch.testing.assert_close(a, b)


def _leaf(*shape):
    return lambda: (torch.randn(*shape, requires_grad=True),)


def test_gr_tensor_hook_inside_scales_grad():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 3)
        return y.sin()

    check_grads(fn, _leaf(4))


def test_gr_no_grad_part_and_detach():
    def fn(x):
        with torch.no_grad():
            s = x.sum()
        return x * s + x.detach() ** 2

    check_grads(fn, _leaf(4))


def test_gr_inplace_on_intermediate_view():
    def fn(x):
        y = x * 1
        y[1:3].mul_(5)
        return y.exp()

    check_grads(fn, _leaf(4))


def test_gr_data_write_not_tracked():
    def fn(x):
        y = x * 2
        y.data.add_(100)
        return y * x

    check_grads(fn, _leaf(4))


def test_gr_custom_autograd_function():
    class Clip(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t.clamp(-0.5, 0.5)

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * (t.abs() < 0.5).float() * 2

    check_grads(lambda x: Clip.apply(x * 3), _leaf(5))


def _grad_inside(x):
    y = (x**3).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    return g


def test_gr_autograd_grad_inside_raises_clearly_under_the_compiled_backward():
    # NOTE: a second derivative through a compiled backward is refused with a clear error, as
    # torch.compile's is (issue 21 allows an error or a fallback, never a wrong value).
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="second derivative.*compiled_backward"):
        torchlite.compile(_grad_inside)(x).sum().backward()


def test_gr_autograd_grad_inside_matches_eager_op_by_op():
    def fn(x):
        return _grad_inside(x)

    compiled = torchlite.compile(fn, options={"compiled_backward": False})
    for call in range(2):
        torch.manual_seed(2000 + call)
        xe = torch.randn(4, requires_grad=True)
        xc = xe.detach().clone().requires_grad_()
        e, c = fn(xe), compiled(xc)
        torch.testing.assert_close(c, e)
        e.sum().backward()
        c.sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)


def test_gr_module_full_backward_hook():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append(go[0].shape) or (gi[0] * 2,))

    def fn(x):
        return m(x).tanh()

    check_grads(fn, _leaf(2, 4))


def test_gr_requires_grad_toggled_between_calls():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    compiled = torchlite.compile(lambda x: m(x).sum())
    for rg in (True, False, True):
        m.weight.requires_grad_(rg)
        m.weight.grad = None
        x = torch.randn(4, 3)
        out = compiled(x)
        ref = m(x).sum()
        assert out.requires_grad == ref.requires_grad
        torch.testing.assert_close(out, ref)
    m.weight.requires_grad_(True)


# ---- more module state between calls ----------------------------------------------------------
def test_mod_parameter_replaced_between_calls():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    w0 = m.weight

    def setup():
        m.weight = w0

    def mutate(call):
        m.weight = torch.nn.Parameter(torch.ones(2, 4) * call)

    check(lambda x: m(x), lambda: (torch.randn(3, 4),), mutate, setup=setup)


def test_mod_new_submodule_added_between_calls():
    class M(torch.nn.Module):
        def forward(self, x):
            if hasattr(self, "extra"):
                x = self.extra(x)
            return x + 1

    m = M()

    def setup():
        m._modules.pop("extra", None)

    def mutate(call):
        m.extra = torch.nn.Tanh()

    check(lambda x: m(x), t4, mutate, setup=setup)


def test_mod_dtype_changed_between_calls():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)

    def setup():
        m.float()

    def mutate(call):
        m.double()

    def make():
        return (torch.randn(3, 4, dtype=m.weight.dtype),)

    check(lambda x: m(x), make, mutate, setup=setup)


def test_mod_hook_counts_calls_on_module_state():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            return x * 2

    m = M()

    def hook(mod, args):
        mod.calls += 1

    m.register_forward_pre_hook(hook)

    def setup():
        m.calls = 0

    check(lambda x: m(x) + m.calls, t4, setup=setup, observe=lambda: m.calls)


def test_mod_load_state_dict_between_calls():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    sd0 = {k: v.clone() for k, v in m.state_dict().items()}

    def setup():
        m.load_state_dict(sd0)

    def mutate(call):
        m.load_state_dict({"weight": torch.full((2, 4), 0.25), "bias": torch.ones(2) * call})

    check(lambda x: m(x), lambda: (torch.randn(3, 4),), mutate, setup=setup)


def test_mod_setattr_override_counts():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            object.__setattr__(self, "writes", 0)

        def __setattr__(self, name, value):
            object.__setattr__(self, "writes", self.writes + 1)
            super().__setattr__(name, value)

        def forward(self, x):
            self.state = x.sum()
            return x + self.writes

    m = M()

    def setup():
        object.__setattr__(m, "writes", 0)

    check(lambda x: m(x), t4, setup=setup, observe=lambda: m.writes)


# ---- tensor subclasses, more ------------------------------------------------------------------
def test_sub_torch_function_mode():
    from torch.overrides import TorchFunctionMode

    class AddToSub(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.add:
                func = torch.sub
            return func(*args, **(kwargs or {}))

    def fn(x):
        with AddToSub():
            a = torch.add(x, 1)
        return a, torch.add(x, 1)

    check(fn)


def test_sub_attribute_on_subclass_instance():
    class Tagged(torch.Tensor):
        pass

    def fn(x):
        y = (x * 2).as_subclass(Tagged)
        y.tag = "t"
        return y.as_subclass(torch.Tensor) + 1, y.tag

    check(fn)


def test_sub_python_attr_on_input_tensor():
    def fn(x):
        x.note = getattr(x, "note", 0) + 1
        return x * x.note

    check(fn)


def test_sub_parameter_subclass_in_module():
    class MyParam(torch.nn.Parameter):
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = MyParam(torch.ones(4) * 2)

        def forward(self, x):
            return x * self.w, type(self.w).__name__

    m = M()
    check(lambda x: m(x))


# ---- dicts, sets, namedtuples, more ------------------------------------------------------------
def test_dict_merge_operators_and_views():
    def fn(x):
        a = {"a": 1, "b": 2}
        b = {"b": 3, "c": 4}
        m = a | b
        a |= {"z": 0}
        common = a.keys() & b.keys()
        items = sorted(m.items() - a.items())
        return x * m["b"], list(m), sorted(common), items, list(reversed(m))

    check(fn)


def test_dict_setdefault_fromkeys_popitem():
    def fn(x):
        d = dict.fromkeys(["p", "q"], 0)
        d.setdefault("r", []).append(x)
        d.setdefault("p", 9)
        k, v = d.popitem()
        return v[0] * 2, k, d

    check(fn)


def test_dict_tensor_keys_by_identity():
    def fn(x):
        y = x + 1
        d = {x: "x", y: "y"}
        return d[y], d[x], len(d), y in d

    check(fn)


def test_dict_view_live_after_mutation():
    def fn(x):
        d = {"a": x}
        ks = d.keys()
        vs = d.values()
        d["b"] = x * 2
        return len(ks), sum(vs), list(ks)

    check(fn)


def test_set_comprehension_and_sorted_strings():
    def fn(x):
        s = {w.upper() for w in ["a", "b", "a", "c"]}
        t = frozenset(range(5)) - {1, 3}
        return x * len(s), sorted(s), sorted(t), max(t), min(s)

    check(fn)


def test_set_of_tensors_identity():
    def fn(x):
        y = x * 2
        s = {x, y, x}
        s.discard(y)
        return len(s), x in s, y in s

    check(fn)


def test_nt_asdict_make_and_eq():
    def fn(x):
        p = Pair._make([x, 3])
        d = p._asdict()
        a, b = p
        return a * b, list(d), p == (p.first, 3), isinstance(p, tuple)

    check(fn)


def test_dc_frozen_hash_order():
    @dataclasses.dataclass(frozen=True, order=True)
    class Key:
        a: int
        b: str

    def fn(x):
        ks = sorted([Key(2, "b"), Key(1, "z"), Key(2, "a")])
        table = {Key(1, "z"): x}
        return table[Key(1, "z")] * ks[0].a, [k.b for k in ks], Key(1, "a") < Key(1, "b")

    check(fn)


def test_dc_input_mutated_in_place():
    @dataclasses.dataclass
    class State:
        t: torch.Tensor
        steps: int = 0

    def fn(s):
        s.t = s.t * 2
        s.steps += 1
        return s.t.sum()

    check(fn, lambda: (State(torch.randn(3)),))


# ---- classes, more ----------------------------------------------------------------------------
def test_cls_classmethod_mutates_class_state():
    class Registry:
        count = 0

        @classmethod
        def bump(cls):
            cls.count += 1
            return cls.count

    def setup():
        Registry.count = 0

    check(lambda x: x * Registry.bump(), setup=setup, observe=lambda: Registry.count)


def test_cls_init_subclass_and_super():
    registry = []

    class Base:
        def __init_subclass__(cls, **kw):
            super().__init_subclass__(**kw)
            registry.append(cls.__name__)

        def f(self, x):
            return x + 1

    class Child(Base):
        def f(self, x):
            return super().f(x) * len(registry)

    check(lambda x: Child().f(x))


def test_cls_property_through_super():
    class A:
        @property
        def v(self):
            return 2

    class B(A):
        @property
        def v(self):
            return super().v * 10

    check(lambda x: x * B().v)


def test_cls_cached_property():
    class Lazy:
        def __init__(self, t):
            self.t = t
            self.n = 0

        @functools.cached_property
        def heavy(self):
            self.n += 1
            return self.t * 2

    def fn(x):
        o = Lazy(x)
        return o.heavy + o.heavy, o.n

    check(fn)


def test_cls_singledispatch():
    @functools.singledispatch
    def scale(v):
        return v

    @scale.register
    def _(v: int):
        return v * 10

    check(lambda x: x * scale(2) + scale(1.5))


def test_cls_cmp_to_key_sorted():
    def cmp(a, b):
        return (a[1] > b[1]) - (a[1] < b[1])

    def fn(x):
        items = sorted([("a", 3), ("b", 1), ("c", 2)], key=functools.cmp_to_key(cmp))
        return x * items[0][1], [k for k, _ in items]

    check(fn)


def test_cls_metaclass_call_and_attr():
    class Meta(type):
        def __call__(cls, *a):
            obj = super().__call__(*a)
            obj.made_by = "meta"
            return obj

    class W(metaclass=Meta):
        def __init__(self, k):
            self.k = k

    def fn(x):
        w = W(3)
        return x * w.k, w.made_by

    check(fn)


# ---- globals, more ----------------------------------------------------------------------------
G_TABLE = {"scale": 2}
G_LIST = [1, 2]


def test_gl_global_dict_value_changed_between_calls():
    def setup():
        G_TABLE.clear()
        G_TABLE["scale"] = 2

    def mutate(call):
        G_TABLE["scale"] = 7

    try:
        check(lambda x: x * G_TABLE["scale"] + len(G_TABLE), t4, mutate, setup=setup)
    finally:
        setup()


def test_gl_global_list_appended_in_fn():
    def setup():
        G_LIST[:] = [1, 2]

    def fn(x):
        G_LIST.append(len(G_LIST))
        return x * sum(G_LIST)

    try:
        check(fn, setup=setup, observe=lambda: list(G_LIST))
    finally:
        setup()


def test_gl_globals_dict_read():
    def fn(x):
        return x * globals()["FACTOR"]

    check(fn)


# ---- itertools / functools, more --------------------------------------------------------------
def test_it_cycle_repeat_starmap():
    def fn(x):
        c = list(itertools.islice(itertools.cycle([1, 2]), 5))
        r = list(itertools.repeat(x, 2))
        s = list(itertools.starmap(operator.mul, [(2, 3), (4, 5)]))
        return sum(r) * c[-1], c, s

    check(fn)


def test_it_takewhile_dropwhile_compress():
    def fn(x):
        vals = [1, 3, 5, 2, 7]
        tw = list(itertools.takewhile(lambda v: v < 4, vals))
        dw = list(itertools.dropwhile(lambda v: v < 4, vals))
        cp = list(itertools.compress("abcde", [1, 0, 1, 0, 1]))
        ff = list(itertools.filterfalse(lambda v: v % 2, vals))
        return x * len(tw), dw, cp, ff

    check(fn)


def test_it_tee_and_product_repeat():
    def fn(x):
        a, b = itertools.tee(iter([x, x * 2, x * 3]))
        first = next(a)
        rest = list(b)
        pr = list(itertools.product([0, 1], repeat=2))
        return first + sum(rest), pr

    check(fn)


def test_it_reduce_with_initial_and_dicts():
    def fn(x):
        merged = functools.reduce(lambda acc, d: {**acc, **d}, [{"a": 1}, {"b": 2}, {"a": 3}], {})
        total = functools.reduce(lambda acc, t: acc + t * merged["a"], x.unbind(0), torch.zeros(()))
        return total, merged

    check(fn)


# ---- formatting, more -------------------------------------------------------------------------
def test_fmt_item_and_repr():
    def fn(x):
        s = f"{x.sum().item():.3f} {x.shape!r} {x.size()} {x.dtype} {x.device.type:>5}"
        return x + 1, s, str(x.shape), repr(x.shape[0]), ", ".join(str(d) for d in x.shape)

    check(fn, t23)


# ---- exceptions, more -------------------------------------------------------------------------
def test_ex_raise_from_none_and_bare_reraise():
    def fn(x):
        try:
            try:
                {}["k"]
            except KeyError:
                raise ValueError("no k") from None
        except ValueError as e:
            try:
                raise
            except ValueError as e2:
                return x + 1, e2 is e, e.__suppress_context__, e.__cause__

    check(fn)


def test_ex_try_except_else_finally_order():
    log = []

    def fn(x):
        for v in (0, 1):
            try:
                if v:
                    raise KeyError(v)
                log.append("try")
            except KeyError:
                log.append("except")
            else:
                log.append("else")
            finally:
                log.append("finally")
        return x * len(log)

    check(fn, setup=log.clear, observe=lambda: list(log))


def test_ex_error_in_comprehension_caught():
    def fn(x):
        try:
            return [1 / v for v in (1, 0)]
        except ZeroDivisionError as e:
            return x * 2, str(e)

    check(fn)


def test_ex_exit_sees_exception_and_raises_new():
    class Convert:
        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            if et is KeyError:
                raise RuntimeError("converted") from ev
            return False

    def fn(x):
        try:
            with Convert():
                raise KeyError("k")
        except RuntimeError as e:
            return x * 3, str(e), type(e.__cause__).__name__

    check(fn)


def test_ex_generator_raises_caught_outside():
    def gen(t):
        yield t
        raise ValueError("gen")

    def fn(x):
        out = []
        try:
            for v in gen(x):
                out.append(v * 2)
        except ValueError as e:
            out.append(x + len(str(e)))
        return out

    check(fn)


def test_ex_torch_assert():
    def fn(x):
        torch._assert(x.shape[0] == 4, "needs 4")
        return x + 1

    check(fn)


# ---- data-dependent, more ---------------------------------------------------------------------
def test_dd_boolean_mask_varies():
    def fn(x):
        pos = x[x > 0]
        return pos.sum(), pos.numel(), x.nonzero().shape

    check(fn, lambda: (torch.randn(8),), calls=3)


def test_dd_tolist_and_argmax_index():
    names = ["a", "b", "c", "d"]

    def fn(x):
        i = int(x.argmax())
        vals = x.tolist()
        return names[i], vals, x * vals[0]

    check(fn, calls=3)


def test_dd_any_all_branches():
    def fn(x):
        if (x > 1).any():
            x = x.clamp(max=1)
        if (x < 5).all():
            x = x * 2
        return x

    check(fn, lambda: (torch.randn(6) * 2,), calls=3)


# ---- in-place / views, more -------------------------------------------------------------------
def test_ip_metadata_inplace_ops():
    def fn(x):
        x.unsqueeze_(0)
        x.transpose_(0, 1)
        return x.shape, x * 2

    check(fn, t23)


def test_ip_strided_and_diagonal_writes():
    def fn(x):
        x[::2].add_(1)
        x.diagonal().zero_()
        torch.narrow(x, 1, 0, 1).copy_(torch.full((3, 1), 9.0))
        return x

    check(fn, lambda: (torch.randn(3, 3),))


def test_ip_input_and_its_view_both_passed():
    def fn(base, view):
        view.mul_(2)
        base.add_(1)
        return base + view

    def make():
        b = torch.randn(4)
        return (b, b[1:3])

    check(fn, make)


def test_ip_random_fill_of_input():
    def fn(x):
        x.uniform_(-1, 1)
        x[0].normal_()
        return x * 2

    check(fn, observe=lambda: torch.rand(1))


def test_ip_requires_grad_inside():
    def fn(x):
        y = x.detach().clone().requires_grad_()
        return y * 2, y.requires_grad

    check(fn)


# ---- random, more -----------------------------------------------------------------------------
def test_rng_various_samplers():
    def fn(x):
        a = torch.randint(0, 10, (4,))
        b = torch.randperm(4)
        c = torch.bernoulli(torch.full((4,), 0.5))
        d = torch.multinomial(torch.ones(4), 2)
        e = torch.normal(torch.zeros(4), torch.ones(4))
        return x + a + b + c + e, d

    check(fn, observe=lambda: torch.rand(1), calls=3)


def test_rng_generator_as_input():
    def fn(x, g):
        return x + torch.rand(4, generator=g)

    check(fn, lambda: (torch.randn(4), torch.Generator().manual_seed(5)), calls=3)


def test_rng_initial_seed_and_seed_inside():
    def fn(x):
        torch.manual_seed(123)
        s = torch.initial_seed()
        return x * torch.rand(1), s

    check(fn, observe=lambda: torch.rand(1))


def test_rng_python_random_inside():
    import random

    def setup():
        random.seed(4)

    def fn(x):
        return x * random.random() + random.randint(0, 5)

    check(fn, setup=setup, observe=lambda: random.random(), calls=3)


# ---- torch function and dispatch modes the caller entered --------------------------------------
class _AddToSub(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.add or func is torch.Tensor.add:
            func = torch.sub
        return func(*args, **(kwargs or {}))


class _ZeroAdds(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 0 if func is torch.ops.aten.add.Tensor else out


@pytest.mark.parametrize("mode", [_AddToSub, _ZeroAdds])
def test_modes_active_at_call_are_honoured_then_left(mode):
    def fn(x):
        return torch.add(x, 1).sin() + x.add(2)

    compiled = torchlite.compile(fn)
    for active in (False, True, False, True):
        x = torch.randn(4)
        if active:
            with mode():
                out, ref = compiled(x), fn(x)
        else:
            out, ref = compiled(x), fn(x)
        torch.testing.assert_close(out, ref, msg=f"mode active={active}")


def test_modes_entered_inside_the_function():
    def fn(x):
        a = torch.add(x, 1)
        with _AddToSub():
            b = torch.add(x, 1)
            c = x.add(1)
        return a, b, c, torch.add(x, 1)

    check(fn)


# ---- subclasses and hooks, edge cases ----------------------------------------------------------
def test_sub_input_torch_add_through_torch_function():
    def fn(x):
        return torch.add(x, 1).as_subclass(torch.Tensor), torch.mul(x, 2).as_subclass(torch.Tensor)

    check(fn, lambda: (torch.randn(3).as_subclass(Doubling),))


def test_sub_overridden_method_on_subclass_input():
    class Odd(torch.Tensor):
        def sigmoid(self):
            return "not a tensor"

        ndim_bonus = 10

    def fn(x):
        return x.sigmoid(), x.ndim_bonus, (x * 2).as_subclass(torch.Tensor)

    check(fn, lambda: (torch.randn(3).as_subclass(Odd),))


def test_sub_class_attribute_changed_between_calls():
    class Scaled(torch.Tensor):
        factor = 2

    def setup():
        Scaled.factor = 2

    def mutate(call):
        Scaled.factor = 5

    def fn(x):
        return x.as_subclass(torch.Tensor) * x.factor

    check(fn, lambda: (torch.randn(3).as_subclass(Scaled),), mutate, setup=setup)


def test_sub_disable_torch_function_subclass_inside():
    def fn(x):
        with torch._C.DisableTorchFunctionSubclass():
            a = torch.add(x, 1)
        return a.as_subclass(torch.Tensor), torch._C._is_torch_function_enabled()

    check(fn, lambda: (torch.randn(3).as_subclass(Doubling),))


def test_mod_global_forward_hook_registered_between_calls():
    from torch.nn.modules.module import register_module_forward_hook

    m = torch.nn.Tanh()
    handles = []

    def reset():
        for h in handles:
            h.remove()
        handles.clear()

    def mutate(call):
        reset()
        handles.append(register_module_forward_hook(lambda mod, a, out: out + 100))

    try:
        check(lambda x: m(x), t4, mutate, setup=reset)
    finally:
        reset()


def test_mod_call_override():
    class Twice(torch.nn.Module):
        def forward(self, x):
            return x + 1

        def __call__(self, x):
            return super().__call__(x) * 2

    m = Twice()
    check(lambda x: m(x))


def test_mod_hook_on_child_sees_parent_state():
    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.child = torch.nn.Linear(4, 4)
            self.scale = 1.0

    torch.manual_seed(0)
    p = Parent()
    p.child.register_forward_hook(lambda mod, a, out: out * p.scale)

    def setup():
        p.scale = 1.0

    def mutate(call):
        p.scale = -3.0

    check(lambda x: p.child(x), lambda: (torch.randn(2, 4),), mutate, setup=setup)


def test_mod_buffer_reassigned_between_calls():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("shift", torch.zeros(4))

        def forward(self, x):
            return x + self.shift

    m = M()

    def setup():
        m.shift = torch.zeros(4)

    def mutate(call):
        m.shift = torch.full((4,), float(call + 1))

    check(lambda x: m(x), t4, mutate, setup=setup)


def test_mod_parametrize_weight():
    import torch.nn.utils.parametrize as P

    class Sym(torch.nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).t()

    torch.manual_seed(0)
    m = torch.nn.Linear(3, 3)
    P.register_parametrization(m, "weight", Sym())
    check(lambda x: m(x), lambda: (torch.randn(2, 3),))


# ---- global torch state inside ----------------------------------------------------------------
def test_state_set_default_dtype_inside():
    def fn(x):
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            y = torch.ones(2) + x.sum()
        finally:
            torch.set_default_dtype(old)
        return y, y.dtype

    check(fn)


def test_state_default_dtype_changed_between_calls():
    def setup():
        torch.set_default_dtype(torch.float32)

    def mutate(call):
        torch.set_default_dtype(torch.float64)

    def fn(x):
        return torch.arange(3.0) * x.sum(), torch.tensor(1.5).dtype

    try:
        check(fn, t4, mutate, setup=setup)
    finally:
        setup()


def test_state_saved_tensors_hooks_inside():
    log = []

    def fn(x):
        with torch.autograd.graph.saved_tensors_hooks(
            lambda t: log.append("pack") or t, lambda t: log.append("unpack") or t
        ):
            y = x.sin() * x
        return y

    check(
        fn,
        lambda: (torch.randn(3, requires_grad=True),),
        setup=log.clear,
        observe=lambda: list(log),
    )


def test_state_grad_mode_left_changed_by_function():
    def fn(x):
        torch.set_grad_enabled(False)
        y = x * 2
        return y, torch.is_grad_enabled()

    try:
        check(
            fn,
            lambda: (torch.randn(3, requires_grad=True),),
            setup=lambda: torch.set_grad_enabled(True),
            observe=torch.is_grad_enabled,
        )
    finally:
        torch.set_grad_enabled(True)


def test_state_deterministic_flag_read():
    def setup():
        torch.use_deterministic_algorithms(False)

    def mutate(call):
        torch.use_deterministic_algorithms(True)

    def fn(x):
        return x * (2 if torch.are_deterministic_algorithms_enabled() else 3)

    try:
        check(fn, t4, mutate, setup=setup)
    finally:
        setup()


# ---- iteration protocols ----------------------------------------------------------------------
def test_iter_user_iterable_with_getitem():
    class Seq:
        def __init__(self, t):
            self.t = t

        def __getitem__(self, i):
            if i >= 3:
                raise IndexError(i)
            return self.t * i

    def fn(x):
        return sum(Seq(x)), list(Seq(1))

    check(fn)


def test_iter_iter_with_sentinel():
    def fn(x):
        vals = iter([3, 2, 0, 5])
        got = list(iter(lambda: next(vals), 0))
        return x * sum(got), got

    check(fn)


def test_iter_next_default_and_exhaustion():
    def fn(x):
        it = iter(x.unbind(0))
        a = next(it)
        rest = list(it)
        return a + next(it, torch.zeros(())), len(rest)

    check(fn)


def test_iter_map_filter_zip_strict():
    def fn(x):
        sq = list(map(lambda t: t * t, x.unbind(0)))  # noqa: C417 - map is the case
        pos = list(filter(lambda t: bool(t > 0), sq))
        try:
            list(zip([1, 2], [1], strict=True))
        except ValueError as e:
            msg = str(e)
        return torch.stack(sq), len(pos), msg

    check(fn)


def test_iter_dict_iteration_mutation_raises():
    def fn(x):
        d = {"a": 1, "b": 2}
        try:
            for k in d:
                d[k + "!"] = 0
        except RuntimeError as e:
            return x * len(d), str(e)
        return x

    check(fn)


def test_iter_list_mutated_while_iterating():
    def fn(x):
        xs = [1, 2, 3, 4]
        seen = []
        for v in xs:
            seen.append(v)
            if v == 2:
                xs.remove(v)
        return x * len(seen), seen, xs

    check(fn)


# ---- numbers and operators --------------------------------------------------------------------
def test_num_divmod_pow_round_on_sizes():
    def fn(x):
        n = x.shape[0]
        q, r = divmod(n * 7, 3)
        return x * q + r, n**2, round(n / 3, 2), -n // 3, -n % 3, abs(-n), n.bit_length()

    check(fn, lambda: (torch.randn(5),))


def test_num_tensor_scalar_ops_and_comparisons():
    def fn(x):
        s = x.sum()
        return 2**s, 1 / (s + 10), s // 1, s % 1, -s, +s, abs(s), s == s, s != s + 1  # noqa: PLR0124

    check(fn)


def test_num_float_int_conversions_of_tensors():
    def fn(x):
        s = x.sum()
        return int(s * 100), float(s), round(float(s), 3), bool(s > 0), complex(float(s)).real

    check(fn, calls=3)


def test_num_matmul_operator_and_inplace():
    def fn(a, b):
        c = a @ b
        c @= b
        c **= 2
        c //= 0.5
        return c

    check(fn, lambda: (torch.randn(3, 3), torch.randn(3, 3)))


def test_num_chained_comparisons_on_python_values():
    def fn(x):
        n = x.numel()
        return x * (1 < n <= 4), 0 < n < 3, n in range(2, 10, 2), isinstance(n, bool)

    check(fn)


# ---- guards: what changes between calls -------------------------------------------------------
def per_call(*makers):
    """make_args for check_program giving call k (eager and compiled alike) makers[k]()."""
    n = [0]

    def make():
        k = n[0] // 2
        n[0] += 1
        return makers[k]()

    return make


def test_gd_inputs_alias_only_on_second_call():
    def fn(a, b):
        a.add_(1)
        return b * 2

    def same():
        t = torch.randn(4)
        return (t, t)

    check_program(fn, per_call(lambda: (torch.randn(4), torch.randn(4)), same, same), calls=3)


def test_gd_input_view_of_other_input_on_second_call():
    def fn(a, b):
        a.mul_(2)
        return a + b

    def overlapping():
        t = torch.randn(6)
        return (t[:4], t[2:])

    check_program(fn, per_call(lambda: (torch.randn(4), torch.randn(4)), overlapping), calls=2)


def test_gd_strides_and_offset_change():
    def fn(x):
        return x.view(-1) if x.is_contiguous() else x.reshape(-1) * 2

    check_program(
        fn,
        per_call(
            lambda: (torch.randn(3, 4),),
            lambda: (torch.randn(4, 3).t(),),
            lambda: (torch.randn(5, 4)[1:4],),
        ),
        calls=3,
    )


def test_gd_dtype_and_requires_grad_change():
    def fn(x):
        return x * 2, x.dtype, x.requires_grad

    check_program(
        fn,
        per_call(
            lambda: (torch.randn(3),),
            lambda: (torch.randn(3, dtype=torch.float64),),
            lambda: (torch.randn(3, requires_grad=True),),
            lambda: (torch.randint(0, 5, (3,)),),
        ),
        calls=4,
    )


def test_gd_optional_tensor_argument():
    def fn(x, bias=None):
        return x * 2 if bias is None else x * 2 + bias

    check_program(
        fn,
        per_call(
            lambda: (torch.randn(3), None),
            lambda: (torch.randn(3), torch.ones(3)),
            lambda: (torch.randn(3), None),
        ),
        calls=3,
    )


def test_gd_list_length_and_tuple_contents_change():
    def fn(xs, spec):
        out = sum(xs)
        for k, v in spec:
            out = out * v if k == "mul" else out + v
        return out

    check_program(
        fn,
        per_call(
            lambda: ([torch.randn(2)] * 2, (("mul", 2),)),
            lambda: ([torch.randn(2)] * 3, (("add", 2), ("mul", 3))),
        ),
    )


def test_gd_function_defaults_changed_between_calls():
    def helper(t, k=2):
        return t * k

    def setup():
        helper.__defaults__ = (2,)

    def mutate(call):
        helper.__defaults__ = (9,)

    check(lambda x: helper(x), t4, mutate, setup=setup)


def test_gd_kwdefaults_changed_between_calls():
    def helper(t, *, k=2):
        return t * k

    def setup():
        helper.__kwdefaults__ = {"k": 2}

    def mutate(call):
        helper.__kwdefaults__ = {"k": -1}

    check(lambda x: helper(x), t4, mutate, setup=setup)


def test_gd_partial_keywords_changed_between_calls():
    p = functools.partial(torch.mul, other=2)

    def setup():
        p.keywords["other"] = 2

    def mutate(call):
        p.keywords["other"] = 5

    check(lambda x: p(x), t4, mutate, setup=setup)


def test_gd_closure_cell_contents_set_between_calls():
    k = 2

    def helper(t):
        return t * k

    def setup():
        helper.__closure__[0].cell_contents = 2

    def mutate(call):
        helper.__closure__[0].cell_contents = 7

    check(lambda x: helper(x), t4, mutate, setup=setup)


def test_gd_code_replaced_between_calls():
    def helper(t):
        return t + 1

    def other(t):
        return t - 1

    code0 = helper.__code__

    def setup():
        helper.__code__ = code0

    def mutate(call):
        helper.__code__ = other.__code__

    check(lambda x: helper(x), t4, mutate, setup=setup)


def test_gd_instance_method_shadowed_between_calls():
    class Obj:
        def act(self, t):
            return t + 1

    o = Obj()

    def setup():
        o.__dict__.pop("act", None)

    def mutate(call):
        o.act = lambda t: t * 100

    check(lambda x: o.act(x), t4, mutate, setup=setup)


def test_gd_global_tensor_changed_in_place_and_rebound():
    box = {"t": torch.ones(4)}

    def setup():
        box["t"] = torch.ones(4)

    def mutate(call):
        if call == 1:
            box["t"].mul_(3)
        else:
            box["t"] = torch.full((4,), 5.0)

    check(lambda x: x + box["t"], t4, mutate, setup=setup, calls=3)


def test_gd_global_tensor_requires_grad_toggled():
    w = torch.ones(4)

    def setup():
        w.requires_grad_(False)

    def mutate(call):
        w.requires_grad_(True)

    try:
        check(lambda x: (x * w).sum(), t4, mutate, setup=setup)
    finally:
        setup()


def test_gd_enum_value_branch():
    import enum

    class Mode(enum.Enum):
        A = 1
        B = 2

    cfg = {"mode": Mode.A}

    def setup():
        cfg["mode"] = Mode.A

    def mutate(call):
        cfg["mode"] = Mode.B

    def fn(x):
        return x * 2 if cfg["mode"] is Mode.A else x - 2

    check(fn, t4, mutate, setup=setup)


def test_gd_object_attr_deleted_between_calls():
    class Cfg:
        pass

    c = Cfg()

    def setup():
        c.scale = 3

    def mutate(call):
        del c.scale

    check(lambda x: x * getattr(c, "scale", -1) + hasattr(c, "scale"), t4, mutate, setup=setup)


def test_gd_slots_object_attr_changed():
    class P:
        __slots__ = ("a",)

        def __init__(self):
            self.a = 1

    p = P()

    def setup():
        p.a = 1

    def mutate(call):
        p.a = 4

    check(lambda x: x * p.a, t4, mutate, setup=setup)


def test_gd_property_backing_changed():
    class C:
        def __init__(self):
            self._v = 2

        @property
        def v(self):
            return self._v * 10

    c = C()

    def setup():
        c._v = 2

    def mutate(call):
        c._v = 3

    check(lambda x: x * c.v, t4, mutate, setup=setup)


# ---- torch.func and other higher-order calls --------------------------------------------------
def test_hop_jacrev_jacfwd_of_a_torch_builtin():
    # NOTE: the transforms' wrappers carry torch.sin's names (functools.wraps): recorded as
    # torch.sin they computed sin, not its Jacobian.
    from torch.func import jacfwd, jacrev

    check(lambda x: (jacrev(torch.sin)(x), jacfwd(torch.cos)(x)))


def test_hop_vmap_of_a_torch_builtin():
    from torch.func import vmap

    check(lambda a, b: vmap(torch.dot)(a, b), lambda: (torch.randn(3, 4), torch.randn(3, 4)))


def test_hop_vmap_grad_of_lambdas():
    from torch.func import grad, vmap

    def fn(x):
        per_row = vmap(lambda r: (r.sin() * r).sum())(x)
        g = grad(lambda t: (t**3).sum())(x[0])
        return per_row, g

    check(fn, lambda: (torch.randn(3, 4),))


def test_hop_functional_call_with_swapped_weights():
    from torch.func import functional_call

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)

    def fn(x, w):
        return functional_call(lin, {"weight": w, "bias": torch.zeros(2)}, (x,)), lin(x)

    check(fn, lambda: (torch.randn(3, 4), torch.randn(2, 4)))


def test_hop_checkpoint_values_and_grads():
    from torch.utils.checkpoint import checkpoint

    check_grads(lambda x: checkpoint(lambda t: t.sin().cos() * t, x, use_reentrant=False), _leaf(4))


# ---- sequence + and * ----------------------------------------------------------------------------
def test_seq_size_repeat_and_concat_stay_sizes():
    def fn(x):
        return x.shape * 2, 2 * x.shape, (1,) + x.shape, x.shape + (5,), x.shape * 0

    check(fn)


def test_seq_repeat_with_count_first():
    def fn(x):
        return x * len(2 * [1, 2]), 2 * [1, 2], 3 * (1,), [x] * 2, 2 * [x]

    check(fn)


def test_seq_list_imul_iadd_change_the_list_in_place():
    def fn(x):
        xs = [1, x]
        alias = xs
        xs *= 2
        xs += (3,)
        return x * len(alias), alias

    check(fn)


def test_seq_list_plus_tuple_raises():
    def fn(x):
        xs = [x]
        try:
            xs = xs + (x,)
        except TypeError as e:
            return x, str(e)
        return xs

    check(fn)


# ---- OrderedDict order after move_to_end ----------------------------------------------------------
def test_od_reordered_ordered_dict_iterates_in_its_order():
    od = collections.OrderedDict(a=1, b=2, c=3)

    def setup():
        od.clear()
        od.update(a=1, b=2, c=3)
        od.move_to_end("a")

    def mutate(call):
        od.move_to_end("b", last=False)

    def fn(x):
        return x * od["a"], list(od), [v for v in od.values()], list(od.items())

    check(fn, t4, mutate, setup=setup)


def test_od_reordered_ordered_dict_argument():
    def make():
        d = collections.OrderedDict(a=torch.randn(2), b=torch.randn(2))
        d.move_to_end("a")
        return (d,)

    def fn(d):
        out = []
        for i, (k, v) in enumerate(d.items()):
            out.append((k, v * (i + 1)))
        return out

    check(fn, make)


def test_mod_hook_registered_with_prepend_runs_first():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    log = []
    m.register_forward_hook(lambda mod, a, o: log.append("second") or o * 2)
    m.register_forward_hook(lambda mod, a, o: log.append("first") or o + 1, prepend=True)
    m.register_forward_pre_hook(lambda mod, a: log.append("pre-second"))
    m.register_forward_pre_hook(lambda mod, a: log.append("pre-first"), prepend=True)
    check(lambda x: m(x), lambda: (torch.randn(2, 4),), setup=log.clear, observe=lambda: list(log))


def test_seq_shape_kept_in_a_set_stays_a_size():
    def fn(x):
        return x, sorted({x.shape, (4,), tuple(x.shape)}), {x.shape: 1}

    check(fn)


def test_modes_device_context_places_factories():
    # NOTE: `with torch.device(...)` is a torch function mode: factories inside the compiled
    # function must land on its device, as in eager.
    def fn(x):
        return torch.ones(2).device.type, x.device.type

    compiled = torchlite.compile(fn)
    x = torch.randn(2)
    assert compiled(x) == fn(x) == ("cpu", "cpu")
    with torch.device("meta"):
        assert compiled(x) == fn(x) == ("meta", "cpu")
    assert compiled(x) == ("cpu", "cpu")
