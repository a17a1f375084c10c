"""Library calls that real model code makes inside forward and Dynamo captures without a
break: functools.lru_cache helpers, typing generics as values, NumPy on constants, weakrefs,
OrderedDict, autograd.Function.apply without grad. Each case checks parity with eager and
the graph/break count."""

import functools
import math
import typing
import weakref
from collections import OrderedDict

import pytest
import torch
from helpers import check, counters

import torchlite


def _graphs_and_breaks(fn, *args):
    report = torchlite.explain(fn)(*args)
    return report.graph_count, report.graph_break_count


# --- functools.lru_cache -------------------------------------------------------------------------

CALLS = []


@functools.lru_cache
def _scale_for(n):
    CALLS.append(n)  # impure on purpose: it must run exactly when eager runs it (on a miss)
    return math.sqrt(n) * 2


@functools.cache
def _pattern(n, mode="even"):
    return tuple(i for i in range(n) if (i % 2 == 0) == (mode == "even"))


@functools.lru_cache(maxsize=4)
def _shared_list(n):
    return list(range(n))


@functools.cache
def _tensor_helper(x):
    return x.sin() + 1


def test_lru_cached_helper_on_constants_runs_the_cache_like_eager():
    def fn(x):
        return x * _scale_for(4) + len(_pattern(5, mode="odd"))

    _scale_for.cache_clear()
    CALLS.clear()
    check(fn, torch.randn(3))
    assert CALLS == [4]  # one miss in the trace, hits afterwards (eager ran 3 more hits)
    assert _scale_for.cache_info().misses == 1
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)


def test_lru_cached_helper_on_tensors_is_inlined():
    def fn(x):
        return _tensor_helper(x) * 2

    check(fn, torch.randn(4))
    assert _graphs_and_breaks(fn, torch.randn(4)) == (1, 0)


def test_lru_cached_result_that_is_mutable_is_the_cached_object():
    def fn(x):
        idx = _shared_list(3)
        return x[idx[-1]] + len(idx)

    _shared_list.cache_clear()
    check(fn, torch.randn(5))


class _Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @functools.lru_cache  # noqa: B019
    def _mask_len(self, n):
        return n * 2

    def forward(self, x):
        return self.lin(x)[:, : self._mask_len(1)]


def test_lru_cached_method_matches_eager():
    m = _Cached()
    check(m, torch.randn(3, 4))
    assert _graphs_and_breaks(m, torch.randn(3, 4)) == (1, 0)


# --- typing generics as values --------------------------------------------------------------------


def _apply(x, hint: torch.Tensor | None = None):
    return x if hint is None else x + hint


def test_typing_generics_as_values_and_passed_through():
    def fn(x):
        kinds = (typing.List[int], typing.Optional[torch.Tensor])  # noqa: UP006, UP045
        y = _apply(x * 2, None)
        return y, kinds[0], kinds[1]

    out = check(fn, torch.randn(3))(torch.randn(3))
    assert out[1] is typing.List[int] and out[2] == typing.Optional[torch.Tensor]  # noqa: UP006, UP045
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)


# NOTE: Python 3.12's typing keeps its caches in a module dict keyed by function
# (`_caches[func](*args)` in _tp_cache): a dict keyed by objects compared by identity.
SCALE_BY_ACTIVATION = {torch.nn.ReLU: 2.0, torch.nn.GELU: 3.0, torch.sigmoid: 4.0}


def test_dict_keyed_by_classes_and_functions_is_read_in_graph():
    act = torch.nn.GELU()

    def fn(x):
        return x.sin() * SCALE_BY_ACTIVATION[type(act)] + SCALE_BY_ACTIVATION[torch.sigmoid]

    check(fn, torch.randn(3))
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)


def test_dict_keyed_by_classes_guards_its_entries():
    def fn(x):
        return x * SCALE_BY_ACTIVATION[torch.nn.GELU] + len(SCALE_BY_ACTIVATION)

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    try:
        SCALE_BY_ACTIVATION[torch.nn.GELU] = 7.0
        torch.testing.assert_close(compiled(x), fn(x))
        SCALE_BY_ACTIVATION[torch.nn.SiLU] = 1.0
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        SCALE_BY_ACTIVATION[torch.nn.GELU] = 3.0
        SCALE_BY_ACTIVATION.pop(torch.nn.SiLU, None)


# --- nn.Module instances built inside forward ----------------------------------------------------

REGISTERED = []


class SiLUActivation(torch.nn.Module):
    """transformers' old activation class: no __init__ of its own."""

    def forward(self, x):
        return x * torch.sigmoid(x)


class ScaledAct(torch.nn.Module):
    def __init__(self, alpha=1.0, inner=None):
        super().__init__()
        self.alpha = alpha
        self.inner = inner if inner is not None else torch.nn.ReLU()

    def forward(self, x):
        return self.inner(x) * self.alpha


def test_torch_nn_modules_built_in_forward_are_captured():
    def fn(x):
        y = torch.nn.Softmax(dim=-1)(x)
        z = torch.nn.MaxPool1d(2)(x)
        return y, z, torch.nn.GELU(approximate="tanh")(x)

    check(fn, torch.randn(2, 3, 8))
    assert _graphs_and_breaks(fn, torch.randn(2, 3, 8)) == (1, 0)


def test_user_modules_built_in_forward_trace_their_init():
    def fn(x):
        return SiLUActivation()(x) + ScaledAct(2.0)(x) + ScaledAct(0.5, torch.nn.Tanh())(x)

    check(fn, torch.randn(4))
    assert _graphs_and_breaks(fn, torch.randn(4)) == (1, 0)


class Registering(torch.nn.Module):
    def __init__(self, name):
        super().__init__()
        REGISTERED.append(name)  # an effect outside the instance: made on every call

    def forward(self, x):
        return x + 1


def test_effects_of_a_traced_module_init_happen_on_every_call():
    def fn(x):
        return Registering("r")(x)

    REGISTERED.clear()
    # NOTE: the list's length is guarded, so each call recompiles; the effect is the point.
    check(fn, torch.randn(4), cache_hit=False)
    assert REGISTERED == ["r"] * 6  # three eager and three compiled calls


def test_module_with_parameters_built_in_forward_breaks_and_keeps_the_rng():
    def fn(x):
        return torch.nn.Linear(3, 3)(x)

    x = torch.randn(2, 3)
    torch.manual_seed(0)
    expected, after_eager = fn(x), torch.rand(2)
    torchlite.reset()
    torch.manual_seed(0)
    actual, after_compiled = torchlite.compile(fn)(x), torch.rand(2)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(after_compiled, after_eager)  # the trace drew no random numbers
    report = torchlite.explain(fn)(x)
    assert report.break_reasons[0].kind == "module_built_in_forward"
    assert "__init__" in report.break_reasons[0].hint


@pytest.mark.parametrize(
    "make_loss",
    [
        lambda: torch.nn.CrossEntropyLoss(),
        lambda: torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1),
        lambda: torch.nn.NLLLoss(reduction="sum"),
        lambda: torch.nn.MSELoss(),
    ],
    ids=["cross_entropy", "cross_entropy_options", "nll_sum", "mse"],
)
def test_loss_modules_built_in_forward_are_captured_with_their_gradients(make_loss):
    # NOTE: BERT's MLM head builds CrossEntropyLoss() in forward; its absent class weight is
    # registered as the buffer None, which once broke the graph as "holds buffers".
    def fn(logits, target):
        loss_fn = make_loss()
        if isinstance(loss_fn, torch.nn.MSELoss):
            return loss_fn(logits.softmax(-1), torch.nn.functional.one_hot(target, 5).float())
        if isinstance(loss_fn, torch.nn.NLLLoss):
            return loss_fn(logits.log_softmax(-1), target)
        return loss_fn(logits, target)

    for n in (6, 9):
        logits = torch.randn(n, 5, requires_grad=True)
        target = torch.randint(0, 5, (n,))
        ref_logits = logits.detach().clone().requires_grad_()
        out = torchlite.compile(fn)(logits, target)
        expected = fn(ref_logits, target)
        torch.testing.assert_close(out, expected)
        out.backward()
        expected.backward()
        torch.testing.assert_close(logits.grad, ref_logits.grad)
    assert _graphs_and_breaks(fn, logits, target) == (1, 0)


def test_module_with_a_tensor_weight_built_in_forward_still_breaks():
    def fn(logits, target, weight):
        return torch.nn.CrossEntropyLoss(weight=weight)(logits, target)

    args = torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.rand(5)
    torch.testing.assert_close(torchlite.compile(fn)(*args), fn(*args))
    kinds = [b.kind for b in torchlite.explain(fn)(*args).break_reasons]
    assert kinds and kinds[0] == "module_built_in_forward"


def test_module_built_in_forward_holding_a_tensor_breaks():
    class Bad(torch.nn.Module):
        def __init__(self, t):
            super().__init__()
            self.t = t

        def forward(self, x):
            return x + self.t

    def fn(x):
        return Bad(x * 2)(x)

    x = torch.randn(3)
    torch.testing.assert_close(torchlite.compile(fn)(x), fn(x))
    kinds = [b.kind for b in torchlite.explain(fn)(x).break_reasons]
    assert kinds[0] == "module_built_in_forward"


def test_module_built_in_forward_returned_or_live_at_a_break_runs_eagerly():
    def returned(x):
        m = torch.nn.Softmax(dim=0)
        return m(x), m

    def live(x):
        m = torch.nn.Tanh()
        y = m(x)
        print(end="")
        return m(y)

    x = torch.randn(3)
    out, m = torchlite.compile(returned)(x)
    torch.testing.assert_close(out, returned(x)[0])
    assert isinstance(m, torch.nn.Softmax) and m is not torchlite.compile(returned)(x)[1]
    torch.testing.assert_close(torchlite.compile(live)(x), live(x))


# --- OrderedDict, del d[k] ------------------------------------------------------------------------


def test_ordered_dict_construction_and_methods_match_eager():
    def fn(x):
        d = OrderedDict(a=x, b=x * 2)
        d2 = OrderedDict([("c", x)])
        d2.update([("z", x + 1)])
        d2.move_to_end("c", last=False)
        first = d2.popitem(last=False)
        d3 = OrderedDict()
        d3["q"] = 1
        return d["a"] + d["b"] + first[1], d2, list(d.keys()), isinstance(d3, OrderedDict), d3

    out = check(fn, torch.randn(3))(torch.randn(3))
    assert type(out[1]) is OrderedDict and type(out[4]) is OrderedDict
    assert _graphs_and_breaks(fn, torch.randn(3)) == (1, 0)


def test_del_item_and_dunder_delitem_match_eager():
    def fn(x, d):
        local = {"a": x, "b": x * 2}
        del local["a"]
        local.__delitem__("b")
        del d["drop"]
        return x + len(local), len(d)

    check(fn, torch.randn(3), {"drop": 1, "keep": torch.randn(3)})
    assert _graphs_and_breaks(fn, torch.randn(3), {"drop": 1}) == (1, 0)


def test_del_of_a_missing_key_raises_key_error_like_eager():
    def fn(x):
        d = {"a": x}
        del d["b"]
        return x

    with pytest.raises(KeyError):
        torchlite.compile(fn)(torch.randn(2))


# --- torch.autograd.Function.apply ----------------------------------------------------------------


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad * ctx.k, None


class _ExpPlus(torch.autograd.Function):
    """The newer style: forward without ctx, setup_context separately."""

    @staticmethod
    def forward(x):
        return x.exp(), x + 1

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[0])

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * ctx.saved_tensors[0] + g2


def _fn_apply(x):
    return _Square.apply(x, 3.0) + _ExpPlus.apply(x)[1]


def test_autograd_function_without_grad_is_inlined():
    check(_fn_apply, torch.randn(4))
    assert _graphs_and_breaks(_fn_apply, torch.randn(4)) == (1, 0)
    with torch.no_grad():
        x = torch.randn(4, requires_grad=True)
        check(_fn_apply, x)
        assert _graphs_and_breaks(_fn_apply, x) == (1, 0)


def test_autograd_function_with_grad_is_one_graph_and_backward_matches_eager():
    # NOTE: the Function is one graph node calling apply (tests/python/training/
    # test_custom_function.py); before, a break at each apply.
    x = torch.randn(4, requires_grad=True)
    torchlite.reset()
    out = torchlite.compile(_fn_apply)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    x2 = x.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad(_fn_apply(x2).sum(), x2)
    torch.testing.assert_close(out, _fn_apply(x2))
    torch.testing.assert_close(grad, expected)
    assert _graphs_and_breaks(_fn_apply, x) == (1, 0)


# --- NumPy on constants ---------------------------------------------------------------------------


def test_numpy_on_constants_is_folded():
    np = pytest.importorskip("numpy")

    def fn(x):
        scale = np.sqrt(2.0) + np.float32(0.5)
        w = torch.tensor(np.array([1.0, 2.0, 3.0]), dtype=x.dtype)
        return x.reshape(int(np.prod(x.shape[:-1])), -1) * w * scale

    check(fn, torch.randn(2, 3))
    assert _graphs_and_breaks(fn, torch.randn(2, 3)) == (1, 0)


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
def test_numpy_on_a_tensor_breaks_with_its_kind():
    np = pytest.importorskip("numpy")

    def fn(x):
        return x + 1, np.sqrt(x)

    x = torch.rand(3)
    out, s = torchlite.compile(fn)(x)
    torch.testing.assert_close(out, x + 1)
    torch.testing.assert_close(torch.as_tensor(s), torch.as_tensor(np.sqrt(x)))
    report = torchlite.explain(fn)(x)
    assert [b.kind for b in report.break_reasons] == ["numpy_call"]


def test_numpy_array_folded_once_is_not_shared_mutably():
    np = pytest.importorskip("numpy")

    def fn(x):
        a = np.zeros(3)
        np.add(a, 1.0, out=a)  # writes to the array: runs eagerly
        return x * torch.tensor(a, dtype=x.dtype)

    x = torch.randn(3)
    compiled = torchlite.compile(fn)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), fn(x))


def test_methods_of_an_array_made_in_traced_code_are_folded():
    np = pytest.importorskip("numpy")

    def fn(x):
        a = np.array([1.0, 2.0, 4.0])
        b = a.astype(np.float32).reshape(3, 1)
        return x * float(a.sum()) + torch.tensor(b.tolist()) + a.max().item()

    check(fn, torch.randn(3, 2))
    assert _graphs_and_breaks(fn, torch.randn(3, 2)) == (1, 0)


_OUTSIDE = None


def test_methods_of_an_array_from_outside_keep_their_break():
    np = pytest.importorskip("numpy")
    global _OUTSIDE
    _OUTSIDE = np.array([1.0, 2.0])

    def fn(x):
        return x * float(_OUTSIDE.sum())

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    _OUTSIDE[0] = 10.0  # written between calls: the sum must follow
    torch.testing.assert_close(compiled(x), fn(x))
    report = torchlite.explain(fn)(x)
    assert report.graph_break_count == 1, str(report)


# --- generators with `yield from`, Tensor.grad ---------------------------------------------------


class _Walk(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.ReLU()
        self.c = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())

    def layers(self):
        yield from self.children()
        yield from [self.b]
        yield from (m for m in self.c)

    def forward(self, x):
        for m in self.layers():
            x = m(x)
        return x


def test_yield_from_over_module_children_is_one_graph():
    m = _Walk()
    check(m, torch.randn(2, 3))
    assert _graphs_and_breaks(m, torch.randn(2, 3)) == (1, 0)


def _sub():
    yield 1
    return 5


def _outer():
    r = yield from _sub()
    yield r


def test_value_of_yield_from_is_a_clean_break():
    def fn(x):
        return [x * v for v in _outer()]

    x = torch.randn(3)
    out, exp = torchlite.compile(fn)(x), fn(x)
    for a, e in zip(out, exp, strict=True):
        torch.testing.assert_close(a, e)


def test_tensor_grad_reads_are_guarded_inputs():
    def fn(x, w):
        g = w.grad
        y = x * 2
        return (x + 1 if g is None else x + g), y.grad

    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    before = counters()
    for step in range(3):
        out, exp = compiled(x, w), fn(x, w)
        torch.testing.assert_close(out[0], exp[0])
        assert out[1] is None
        if step == 0:
            (w * 3).sum().backward()  # w.grad appears: recompiles once, then hits
    assert counters()["recompiles"] - before["recompiles"] == 1
    w.grad = None
    assert _graphs_and_breaks(fn, x, w) == (1, 0)


def test_grad_of_a_non_leaf_breaks():
    def fn(x):
        y = x * 2
        return y.grad

    x = torch.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="not a leaf"):
        assert torchlite.compile(fn)(x) is None
    assert torchlite.explain(fn)(x).break_reasons[0].kind == "unsupported_attribute"


# --- explain: breaks grouped by kind, hints -----------------------------------------------------


def test_explain_groups_breaks_by_kind_and_shows_hints():
    def fn(x):
        a = torch.nn.Linear(2, 2)(x)
        print(end="")
        b = torch.nn.Linear(2, 2)(a)
        return b

    report = torchlite.explain(fn)(torch.randn(2))
    by_kind = report.breaks_by_kind
    assert by_kind["module_built_in_forward"] == 2 and by_kind["unsupported_builtin"] == 1
    text = str(report)
    assert "Breaks by kind:" in text and "module_built_in_forward: 2" in text
    assert "Hint: create the module once in __init__" in text
    torchlite.reset()
    with pytest.raises(torchlite.Unsupported, match="Hint: create the module once"):
        torchlite.compile(fn, fullgraph=True)(torch.randn(2))


# --- weakref.ref ----------------------------------------------------------------------------------


class _Config:
    def __init__(self, scale):
        self.scale = scale


def test_weakref_made_in_traced_code_returns_its_object():
    def fn(x, cfg, layer):
        ref, layer_ref = weakref.ref(cfg), weakref.ref(layer)
        target = ref()
        return layer_ref()(x) * (target.scale if target is not None else 1.0)

    layer = torch.nn.Linear(3, 3)
    check(fn, torch.randn(2, 3), _Config(2.0), layer)
    assert _graphs_and_breaks(fn, torch.randn(2, 3), _Config(2.0), layer) == (1, 0)
    compiled = torchlite.compile(fn)
    for scale in (3.0, 4.0):  # another object of the same class: its own ref, not the traced one
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x, _Config(scale), layer), fn(x, _Config(scale), layer))


def test_weakref_from_the_frame_is_a_clean_break():
    cfg = _Config(2.0)

    def fn(x, ref):
        target = ref()
        return x * target.scale

    x = torch.randn(3)
    torch.testing.assert_close(torchlite.compile(fn)(x, weakref.ref(cfg)), fn(x, weakref.ref(cfg)))


def test_weakref_from_the_frame_is_called_in_the_graph_and_read_on_every_call():
    def fn(x, ref):
        target = ref()
        return x * (target.scale if target is not None else -1.0)

    first, second = _Config(2.0), _Config(3.0)
    assert _graphs_and_breaks(fn, torch.randn(3), weakref.ref(first)) == (1, 0)
    compiled = torchlite.compile(fn, fullgraph=True)
    for cfg in (first, second, first):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, weakref.ref(cfg)), fn(x, weakref.ref(cfg)))
    dead = _Config(4.0)
    ref = weakref.ref(dead)
    del dead  # NOTE: the referent dies: ref() is None, as eager sees it
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, ref), fn(x, ref))


def test_weakref_to_a_parameter_is_compared_by_identity_like_eager():
    layer = torch.nn.Linear(3, 3)

    def fn(x, ref):
        return layer(x) if ref() is layer.weight else -x

    x = torch.randn(2, 3)
    compiled = torchlite.compile(fn, fullgraph=True)
    torch.testing.assert_close(
        compiled(x, weakref.ref(layer.weight)), fn(x, weakref.ref(layer.weight))
    )
    other = torch.nn.Parameter(torch.randn(3, 3))
    torch.testing.assert_close(compiled(x, weakref.ref(other)), fn(x, weakref.ref(other)))


# --- math on sizes --------------------------------------------------------------------------------


def test_math_prod_over_sizes_and_lists_of_them_folds():
    def fn(x):
        h, w = x.shape[-2:]
        flat = x.reshape(math.prod(x.shape[:-2]), math.prod([h, w]))
        return flat * math.prod(s for s in (2, 3)) + math.fsum([0.5, h])

    for dynamic in (False, None):
        torchlite.reset()
        compiled = torchlite.compile(fn, fullgraph=True, dynamic=dynamic)
        for shape in ((2, 3, 4), (3, 3, 4), (4, 2, 5)):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), fn(x))
    assert _graphs_and_breaks(fn, torch.randn(2, 3, 4)) == (1, 0)


def test_math_of_a_tensor_breaks_with_a_hint():
    def fn(x):
        return x + math.prod([x, 2])

    x = torch.randn(3)
    torch.testing.assert_close(torchlite.compile(fn)(x), fn(x))
    (reason,) = torchlite.explain(fn)(x).break_reasons
    assert reason.kind == "unsupported_operand" and "torch.prod" in reason.hint


def test_numpy_random_and_stateful_calls_are_not_folded():
    np = pytest.importorskip("numpy")

    def fn(x):
        return x * float(np.random.rand())

    x = torch.randn(3)
    compiled = torchlite.compile(fn)
    for seed in (0, 1, 2):  # a folded draw would repeat the first value
        np.random.seed(seed)
        expected = fn(x)
        np.random.seed(seed)
        torch.testing.assert_close(compiled(x), expected)
    assert torchlite.explain(fn)(x).break_reasons[0].kind == "numpy_call"


def test_numpy_on_a_writeable_array_argument_breaks():
    np = pytest.importorskip("numpy")

    def fn(x, a):
        np.copyto(a, 2.0)
        return x * float(np.sum(a))

    x = torch.randn(3)
    a1, a2 = np.ones(2), np.ones(2)
    torch.testing.assert_close(torchlite.compile(fn)(x, a1), fn(x, a2))
    assert (a1 == a2).all()
    assert torchlite.explain(fn)(x, np.ones(2)).break_reasons[0].kind == "numpy_call"


# --- obj.__dict__ and vars(obj) -------------------------------------------------------------------


class _Holder:
    def __init__(self):
        self.k = 3


class _DictReader(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x, h):
        made = _Holder()
        d = self.__dict__
        return (
            x * d.get("scale", 1.0)
            + ("scale" in vars(self))
            + vars(h)["k"]
            + h.__dict__.get("k")
            + len(vars(made))
        )


def test_instance_dict_reads_and_vars_are_captured():
    check(_DictReader(), torch.randn(3), _Holder())
    assert _graphs_and_breaks(_DictReader(), torch.randn(3), _Holder()) == (1, 0)


def test_vars_of_an_object_without_dict_raises_type_error_like_eager():
    def fn(x):
        return x * len(vars(3))

    with pytest.raises(TypeError, match="__dict__"):
        torchlite.compile(fn)(torch.randn(2))


# --- torch.nn methods called unbound on a module (SqueezeBERT's NCW LayerNorm) --------------------


class _ChannelsFirstLayerNorm(torch.nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 1)
        x = torch.nn.LayerNorm.forward(self, x)
        return x.permute(0, 2, 1)


class _UsesUnboundLinear(torch.nn.Linear):
    def forward(self, x):
        return torch.nn.Linear.forward(self, x).relu() + torch.nn.Module.__call__(self.norm, x)

    def __init__(self):
        super().__init__(6, 6)
        self.norm = _ChannelsFirstLayerNorm(6, eps=1e-5)


@pytest.mark.parametrize("shape", [(2, 6, 5), (1, 6, 3)])
def test_torch_nn_method_called_unbound_on_a_module_is_inlined(shape):
    norm = _ChannelsFirstLayerNorm(shape[1]).eval()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(*shape)
    check(norm, x)
    assert _graphs_and_breaks(norm, x) == (1, 0)
    model = _UsesUnboundLinear().eval()
    y = torch.randn(3, 6, 6)
    check(model, y)
    assert _graphs_and_breaks(model, y) == (1, 0)


# --- parameters in a memo set (nn.Module.parameters() inside forward: XLNet's dtype) ------------


class _TiedAndCountsParameters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight  # tied: parameters() yields it once

    def forward(self, x):
        dtype = next(self.parameters()).dtype
        n = len(list(self.parameters()))
        return (self.a(x) + self.b(x)).to(dtype) * n


def test_parameters_in_a_memo_set_are_members_by_identity():
    model = _TiedAndCountsParameters().eval()
    x = torch.randn(2, 4)
    check(model, x)
    assert _graphs_and_breaks(model, x) == (1, 0)
    before = counters()
    compiled = torchlite.compile(model)
    compiled(x)
    compiled(x)
    assert counters()["recompiles"] == before["recompiles"]
    # Untying changes what parameters() yields: the identity guards see it.
    model.b.weight = torch.nn.Parameter(model.a.weight.detach().clone())
    torch.testing.assert_close(compiled(x), model(x))
