"""Guards on Python state a trace reads besides its arguments: module and class attributes,
instance attributes that are absent, closure contents, defaults, builtins, torch's own
namespaces. Each test compiles, calls, mutates that state, calls again and compares with eager:
a missing guard shows as the compiled call returning the value of before the mutation."""

import functools
import math
import random
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import torchlite


def _same_after_each(fn, mutations, *shapes, fullgraph=False):
    """Calls compiled `fn` and eager `fn` on fresh random inputs, then after each mutation
    (a callable) again: every pair of results must agree."""
    compiled = torchlite.compile(fn, fullgraph=fullgraph)
    for mutate in [None, *mutations]:
        if mutate is not None:
            mutate()
        args = [torch.randn(s) for s in shapes]
        expected = fn(*args)
        torch.testing.assert_close(compiled(*args), expected)
        torch.testing.assert_close(compiled(*args), expected)  # the cached entry, too


def _user_module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


# ------------------------------------------------------------------ imported modules' attributes

cfgmod = _user_module("tl_test_cfgmod", FACTOR=2.0, act=torch.relu, OFFSET=1)


def _uses_cfgmod(x):
    return cfgmod.act(x) * cfgmod.FACTOR + cfgmod.OFFSET


def test_user_module_constant_rebound_recompiles():
    def set_factor():
        cfgmod.FACTOR = 5.0

    try:
        _same_after_each(_uses_cfgmod, [set_factor], (4,))
    finally:
        cfgmod.FACTOR = 2.0


def test_user_module_function_rebound_recompiles():
    def set_act():
        cfgmod.act = torch.tanh

    try:
        _same_after_each(_uses_cfgmod, [set_act], (4,))
    finally:
        cfgmod.act = torch.relu


def test_unrelated_write_to_module_keeps_the_cache():
    compiled = torchlite.compile(_uses_cfgmod)
    x = torch.randn(4)
    compiled(x)
    before = torchlite.counters()["recompiles"]
    cfgmod.UNRELATED = object()  # bumps the module dict's version, not what the trace read
    try:
        torch.testing.assert_close(compiled(x), _uses_cfgmod(x))
        assert torchlite.counters()["recompiles"] == before
    finally:
        del cfgmod.UNRELATED


def test_math_pi_monkeypatched_recompiles():
    def f(x):
        return x * math.pi

    def patch():
        math.pi = 3.0

    old = math.pi
    try:
        _same_after_each(f, [patch], (4,))
    finally:
        math.pi = old


def test_torch_sigmoid_monkeypatched_recompiles():
    def f(x):
        return torch.sigmoid(x) + 1

    old = torch.sigmoid

    def patch():
        torch.sigmoid = torch.tanh

    try:
        _same_after_each(f, [patch], (4,))
    finally:
        torch.sigmoid = old


def test_functional_gelu_monkeypatched_recompiles():
    def f(x):
        return F.gelu(x) * 2

    old = F.gelu

    def patch():
        F.gelu = F.relu

    try:
        _same_after_each(f, [patch], (4,))
    finally:
        F.gelu = old


def test_tensor_method_monkeypatched_recompiles():
    def f(x):
        return x.sin() + 1

    old = torch.Tensor.sin

    def patch():
        torch.Tensor.sin = torch.Tensor.cos

    try:
        _same_after_each(f, [patch], (4,))
    finally:
        torch.Tensor.sin = old


def test_module_dict_edit_recompiles():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2.0

        def forward(self, x):
            return x * self.k

    m = Scale()

    def edit():
        m.__dict__["k"] = 3.0

    _same_after_each(m, [edit], (4,))


# ------------------------------------------------------------------ class attributes


class _Plain:
    scale = 2.0

    def __init__(self):
        self.bias = 1.0


def test_class_attribute_through_instance_changed_on_class_recompiles():
    obj = _Plain()

    def f(x):
        return x * obj.scale + obj.bias

    def change():
        _Plain.scale = 7.0

    try:
        _same_after_each(f, [change], (4,))
    finally:
        _Plain.scale = 2.0


def test_class_attribute_of_nn_module_changed_on_class_recompiles():
    class Net(torch.nn.Module):
        FACTOR = 2.0

        def forward(self, x):
            return x * self.FACTOR

    net = Net()

    def change():
        Net.FACTOR = 3.0

    _same_after_each(net, [change], (4,))


def test_inherited_class_attribute_changed_on_base_recompiles():
    class Base:
        k = 1.0

    class Child(Base):
        pass

    def f(x):
        return x + Child.k

    def change():
        Base.k = 4.0

    _same_after_each(f, [change], (4,))


def test_class_attribute_through_super_changed_recompiles():
    class Base(torch.nn.Module):
        k = 1.0

        def forward(self, x):
            return x + self.k

    class Child(Base):
        def forward(self, x):
            return super().forward(x) * super().k

    net = Child()

    def change():
        Base.k = 3.0

    _same_after_each(net, [change], (4,))


def test_deleted_class_attribute_raises_like_eager():
    class A:
        a = 2.0

    def f(x):
        return x * A.a

    compiled = torchlite.compile(f)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), f(x))
    del A.a
    with pytest.raises(AttributeError):
        f(x)
    with pytest.raises(AttributeError):
        compiled(x)


def test_class_attribute_shadowed_by_instance_attribute_recompiles():
    obj = _Plain()

    def f(x):
        return x * obj.scale

    def shadow():
        obj.scale = 9.0

    _same_after_each(f, [shadow], (4,))


def test_property_replaced_on_class_recompiles():
    class P:
        @property
        def k(self):
            return 2.0

    obj = P()

    def f(x):
        return x * obj.k

    def replace():
        P.k = property(lambda self: 5.0)

    _same_after_each(f, [replace], (4,))


def test_method_replaced_on_class_recompiles():
    class M:
        def k(self):
            return 2.0

    obj = M()

    def f(x):
        return x * obj.k()

    def replace():
        M.k = lambda self: 6.0

    _same_after_each(f, [replace], (4,))


# ------------------------------------------------------------------ instance attributes


def test_attribute_added_later_read_with_getattr_default_recompiles():
    class Cfg:
        pass

    cfg = Cfg()

    def f(x):
        return x * getattr(cfg, "x", 1.0)

    def add():
        cfg.x = 3.0

    _same_after_each(f, [add], (4,))


def test_hasattr_on_python_attribute_of_input_tensor_matches_eager():
    def f(x):
        if hasattr(x, "tag"):
            return x + 1
        return x - 1

    compiled = torchlite.compile(f)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), f(x))
    y = torch.randn(4)
    y.tag = "marked"
    torch.testing.assert_close(compiled(y), f(y))
    torch.testing.assert_close(compiled(x), f(x))


# ------------------------------------------------------------------ closures, defaults, globals


def test_set_in_closure_mutated_between_calls_recompiles():
    names = {"a"}

    def f(x):
        return x + 1 if "b" in names else x - 1

    _same_after_each(f, [lambda: names.add("b")], (4,))


def test_closure_cell_rebound_by_nonlocal_recompiles():
    k = 1.0

    def f(x):
        return x * k

    def rebind():
        nonlocal k
        k = 5.0

    _same_after_each(f, [rebind], (4,))


def test_inlined_closure_cell_rebound_recompiles():
    k = 1.0

    def g(x):
        return x * k

    def f(x):
        return g(x) + 1

    def rebind():
        nonlocal k
        k = 5.0

    _same_after_each(f, [rebind], (4,))


def _with_default(x, cfg=[1.0]):  # noqa: B006 -- the mutable default is what is tested
    return x * cfg[0]


def test_mutable_default_argument_mutated_recompiles():
    def f(x):
        return _with_default(x) + 1

    def mutate():
        _with_default.__defaults__[0][0] = 4.0

    try:
        _same_after_each(f, [mutate], (4,))
    finally:
        _with_default.__defaults__[0][0] = 1.0


def test_defaults_replaced_recompiles():
    def g(x, k=1.0):
        return x * k

    def f(x):
        return g(x) + 1

    def replace():
        g.__defaults__ = (3.0,)

    _same_after_each(f, [replace], (4,))


def test_partial_keywords_mutated_recompiles():
    def g(x, k):
        return x * k

    p = functools.partial(g, k=1.0)

    def f(x):
        return p(x) + 1

    def mutate():
        p.keywords["k"] = 3.0

    _same_after_each(f, [mutate], (4,))


GLOBAL_K = 1.0


def test_global_read_through_globals_dict_recompiles():
    def f(x):
        return x * globals()["GLOBAL_K"]

    def change():
        global GLOBAL_K
        GLOBAL_K = 2.0

    try:
        _same_after_each(f, [change], (4,))
    finally:
        globals()["GLOBAL_K"] = 1.0


def _uses_len(x):
    return x * len([1, 2])


def test_builtin_shadowed_by_module_global_recompiles():
    def shadow():
        globals()["len"] = lambda seq: 10

    try:
        _same_after_each(_uses_len, [shadow], (4,))
    finally:
        globals().pop("len", None)


# ------------------------------------------------------------------ torch and Python state


def test_inference_mode_tensor_input_matches_eager():
    def f(x):
        return x.is_inference(), x * 2

    compiled = torchlite.compile(f)
    x = torch.randn(4)
    assert compiled(x)[0] is False
    with torch.inference_mode():
        y = torch.randn(4)
    got, want = compiled(y), f(y)
    assert got[0] == want[0]
    torch.testing.assert_close(got[1], want[1])


def test_autograd_profiler_switched_on_between_calls_matches_eager():
    def f(x):
        if torch.autograd._profiler_enabled():
            return x + 1
        return x - 1

    compiled = torchlite.compile(f)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), f(x))
    with torch.autograd.profiler.profile():
        torch.testing.assert_close(compiled(x), f(x))
    torch.testing.assert_close(compiled(x), f(x))


def test_python_random_is_drawn_on_every_call():
    def f(x):
        return x * random.random()

    compiled = torchlite.compile(f)
    x = torch.ones(4)
    for seed in (1, 2, 3):
        random.seed(seed)
        want = f(x)
        random.seed(seed)
        got = compiled(x)
        torch.testing.assert_close(got, want)


def test_tensor_method_replaced_by_python_function_is_traced():
    def f(x):
        return x.sin() + 1

    old = torch.Tensor.sin

    def patch():
        torch.Tensor.sin = lambda self: self.cos() * 2

    try:
        _same_after_each(f, [patch], (4,))
    finally:
        torch.Tensor.sin = old


def test_unrelated_class_attribute_write_keeps_the_cache():
    class Counter:
        k = 2.0
        calls = 0

    def f(x):
        return x * Counter.k

    compiled = torchlite.compile(f)
    x = torch.randn(4)
    compiled(x)
    before = torchlite.counters()["recompiles"]
    Counter.calls += 1  # clears the class's version tag; Counter.k is unchanged
    torch.testing.assert_close(compiled(x), f(x))
    torch.testing.assert_close(compiled(x), f(x))
    assert torchlite.counters()["recompiles"] == before


def test_module_attribute_added_later_read_with_getattr_default_recompiles():
    mod = _user_module("tl_test_optional_mod")

    def f(x):
        return x * getattr(mod, "SCALE", 1.0)

    def add():
        mod.SCALE = 3.0

    _same_after_each(f, [add], (4,))


def test_keyword_default_mutated_recompiles():
    def g(x, *, k=1.0):
        return x * k

    def f(x):
        return g(x) + 1

    def mutate():
        g.__kwdefaults__["k"] = 3.0

    _same_after_each(f, [mutate], (4,))


def test_guards_text_names_the_attribute_tables():
    def f(x):
        return x * math.pi + cfgmod.OFFSET

    report = str(torchlite.explain(f)(torch.randn(3)))
    assert "ATTR_TABLE G['math']: pi" in report
    assert "ATTR_TABLE G['cfgmod']: OFFSET" in report


_ORDERED = {"a": 1.0, "b": 2.0, "c": 3.0}


def _reinsert(key):
    _ORDERED[key] = _ORDERED.pop(key)


def test_dict_key_order_changed_with_same_keys_recompiles():
    # NOTE: same keys, length and values; only the insertion order (what iteration follows)
    # changes.
    def fn(x):
        first = next(iter(_ORDERED.values()))
        names = "".join(k for k in _ORDERED)
        return x * first + len(names.split("a")[0])

    _same_after_each(fn, [lambda: _reinsert("a"), lambda: _reinsert("b")], (3,))


class _ScaleSetting:
    """A non-data descriptor whose answer is a class attribute read when it is accessed."""

    factor = 2.0

    def __get__(self, obj, owner=None):
        return _ScaleSetting.factor * (1 if obj is None else obj.sign)


class _UsesSetting:
    scale = _ScaleSetting()

    def __init__(self):
        self.sign = 1


def test_user_descriptor_reading_changed_state_recompiles():
    holder = _UsesSetting()

    def fn(x):
        return x * holder.scale

    def flip_sign():
        holder.sign = -1

    _same_after_each(fn, [lambda: setattr(_ScaleSetting, "factor", 5.0), flip_sign], (3,))
    _ScaleSetting.factor = 2.0
