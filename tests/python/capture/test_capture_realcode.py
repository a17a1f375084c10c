"""Python that real model code (transformers, timm) runs inside forward: dataclasses and
ModelOutput returns, sets, imports and try bodies in helpers, registries, config lookups,
logging, torch.finfo. Each case is compared with eager and captured in one graph."""

import dataclasses
import functools
import logging
import operator
from collections import OrderedDict

import pytest
import torch
from helpers import assert_same, check, counters

import torchlite

LOG = logging.getLogger("torchlite.tests.realcode")
LOG.setLevel(logging.WARNING)


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor | None = None
    tags: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: torch.Tensor
    scale: float = 2.0


class Registry(OrderedDict):
    """A dict subclass made in traced code (OrderedDict like ModelOutput)."""


class Interface:
    """A mapping with Python dunders, like transformers' AttentionInterface."""

    _global = {"double": lambda x: x * 2, "neg": operator.neg}  # noqa: RUF012

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __contains__(self, key):
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __len__(self):
        return len(self._global) + len(self._local)


INTERFACE = Interface()


def _graphs_and_breaks(fn, *args, **kwargs):
    report = torchlite.explain(fn)(*args, **kwargs)
    return report.graph_count, report.graph_break_count


def _vars(obj):
    return {k: v for k, v in vars(obj).items()}


# --- dataclasses and dict subclasses as return values ------------------------------------------


def test_dataclass_built_and_returned_matches_eager():
    def fn(x):
        p = Pair(x.sin(), second=x + 1)
        p.tags.append(3)
        return Pair(p.first * 2, p.second), p

    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    x = torch.randn(4)
    for inp in (x, x, torch.randn(4)):
        out, exp = compiled(inp), fn(inp)
        for a, e in zip(out, exp):
            assert type(a) is Pair
            assert_same(_vars(a), _vars(e))


def test_frozen_dataclass_uses_object_setattr_and_matches_eager():
    def fn(x):
        f = Frozen(x.cos())
        return f.value * f.scale, f

    out, f = torchlite.compile(fn, fullgraph=True)(x := torch.randn(3))
    exp, g = fn(x)
    assert_same(out, exp)
    assert type(f) is Frozen and _vars(f).keys() == _vars(g).keys()
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.scale = 1.0


def test_dict_subclass_built_in_traced_code_keeps_items_and_order():
    def fn(x):
        r = Registry()
        r["b"] = x + 1
        r["a"] = x * 2
        r.attr = 5
        return r, len(r), "a" in r, list(r.keys())

    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    x = torch.randn(3)
    out, exp = compiled(x), fn(x)
    assert type(out[0]) is Registry and out[0].attr == 5
    assert_same(dict(out[0]), dict(exp[0]))
    assert out[1:] == exp[1:]


# --- sets -----------------------------------------------------------------------------------------


def test_set_literal_comprehension_and_methods_match_eager():
    def fn(x, names):
        s = {n.upper() for n in names}
        s |= {"EXTRA"}
        s.add("B")
        t = set(names) | {"z"}
        hit = "A" in s and "q" not in t and len(s) == 3
        return x * len(s) if hit else x, sorted(s), sorted(t)

    check(fn, torch.randn(3), ("a", "b"))


def test_set_of_tensors_is_a_clean_break():
    def fn(x):
        s = {x}
        return x * len(s)

    x = torch.randn(3)
    assert_same(torchlite.compile(fn)(x), fn(x))
    _graphs, breaks = _graphs_and_breaks(fn, x)
    assert breaks == 1


# --- imports, try bodies, registries ---------------------------------------------------------------


def _helper_with_import(x):
    import math

    import torch.nn.functional as F

    return F.relu(x) * math.pi


def _helper_with_try(d, key):
    try:
        v = d[key]
    except KeyError:
        v = None
    return v


def test_import_of_loaded_module_inside_function_is_traced():
    def fn(x):
        return _helper_with_import(x) + 1

    check(fn, torch.randn(5))


def test_try_body_in_inlined_helper_is_traced_when_it_does_not_raise():
    def fn(x):
        return x * _helper_with_try({"a": 3.0}, "a")

    check(fn, torch.randn(4))


def test_try_body_that_raises_runs_its_handler_in_one_graph():
    def fn(x):
        v = _helper_with_try({"a": 3.0}, "b")
        return x if v is None else x * v

    check(fn, torch.randn(4))


class ChunkedFeedForward(torch.nn.Module):
    """transformers' apply_chunking_to_forward reads inspect.signature of a bound method."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def chunk(self, hidden):
        return self.lin(hidden).relu()

    def forward(self, x):
        import inspect

        n_args = len(inspect.signature(self.chunk).parameters)
        assert self.chunk.__func__ is ChunkedFeedForward.chunk and self.chunk.__self__ is self
        return self.chunk(x) * n_args


def test_inspect_signature_and_method_parts_are_captured():
    check(ChunkedFeedForward(), torch.randn(3, 4))


class FirstLayers(torch.nn.Module):
    """`for layer in self.layers[: config.n]` as Llama-family decoders loop."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))

    def forward(self, x):
        for layer in self.layers[: self.n]:
            x = layer(x).tanh()
        for layer in self.layers[::-2]:
            x = x + layer(x)
        return x


@pytest.mark.parametrize("n", [0, 2, 4])
def test_module_list_slice_is_iterated_in_one_graph(n):
    check(FirstLayers(n), torch.randn(2, 4))


def test_mapping_registry_with_python_dunders_matches_eager():
    def fn(x, name):
        if name in INTERFACE and len(INTERFACE) == 2:
            return INTERFACE[name](x)
        return x

    check(fn, torch.randn(3), "double")
    check(fn, torch.randn(3), "neg")


# --- library calls ---------------------------------------------------------------------------------


def test_finfo_iinfo_and_compiler_queries_match_eager():
    def fn(x):
        lo = torch.finfo(x.dtype).min
        hi = torch.iinfo(torch.int8).max
        flags = (torch.compiler.is_compiling(), torch.jit.is_scripting(), torch.jit.is_tracing())
        return x.clamp(min=lo / 2) + hi, flags[1:], torch.is_grad_enabled()

    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    x = torch.randn(3)
    out, exp = compiled(x), fn(x)
    assert_same(out, exp)


def test_compiler_is_compiling_is_true_inside_torchlite():
    def fn(x):
        return x + 1 if torch.compiler.is_compiling() else x - 1

    x = torch.randn(3)
    torch.testing.assert_close(torchlite.compile(fn, fullgraph=True)(x), x + 1)


def test_disabled_logging_call_is_skipped_and_enabled_one_breaks():
    def quiet(x):
        LOG.debug("value %s", 3)
        LOG.info("info")
        return x * 2

    def loud(x):
        LOG.warning("careful")
        return x * 2

    check(quiet, torch.randn(3))
    x = torch.randn(3)
    assert _graphs_and_breaks(quiet, x)[1] == 0
    assert _graphs_and_breaks(loud, x)[1] >= 1
    assert_same(torchlite.compile(loud)(x), loud(x))


class _OnceLogger(logging.Logger):
    """A logger with transformers' warning_once: an lru_cache wrapper around warning."""

    @functools.lru_cache(None)  # noqa: B019 (NOTE: transformers' own form: one write per message)
    def warning_once(self, *args):
        self.warning(*args)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_warning_once_through_lru_cache_writes_once_without_a_break():
    log = _OnceLogger("torchlite.tests.realcode.once")
    log.setLevel(logging.WARNING)
    sink = _Collect()
    log.addHandler(sink)
    log.propagate = False

    def fn(x):
        log.warning_once("loss_type is unset")
        return x * 2

    x = torch.randn(3)
    assert _graphs_and_breaks(fn, x) == (1, 0)
    assert sink.messages == ["loss_type is unset"]  # NOTE: eager's first call writes it once
    compiled = torchlite.compile(fn)
    for _ in range(3):
        y = torch.randn(4)
        assert_same(compiled(y), fn(y))
    assert sink.messages == ["loss_type is unset"]

    def other(x):
        log.warning_once("another message %s", x.shape[0])
        return x + 1

    assert_same(torchlite.compile(other)(x), x + 1)
    assert sink.messages == ["loss_type is unset", "another message 3"]


def test_warning_once_of_a_tensor_value_still_breaks():
    log = _OnceLogger("torchlite.tests.realcode.once_tensor")
    log.setLevel(logging.WARNING)
    sink = _Collect()
    log.addHandler(sink)
    log.propagate = False

    def fn(x):
        log.warning_once("value %s", x.sum())
        return x * 2

    x = torch.randn(3)
    assert _graphs_and_breaks(fn, x)[1] >= 1
    assert_same(torchlite.compile(fn)(x), x * 2)


def test_logging_level_change_recompiles():
    def fn(x):
        LOG.info("now visible")
        return x + 1

    torchlite.reset()
    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    assert_same(compiled(x), x + 1)
    before = counters()
    LOG.setLevel(logging.INFO)
    try:
        assert_same(compiled(x), x + 1)  # the logger now prints: no stale skipped call
        assert (
            counters()["frames"] > before["frames"]
            or counters()["graph_breaks"] > before["graph_breaks"]
        )
    finally:
        LOG.setLevel(logging.WARNING)


def test_dataclasses_fields_and_is_dataclass_match_eager():
    def fn(x):
        names = [f.name for f in dataclasses.fields(Pair)]
        return x * len(names), names, dataclasses.is_dataclass(Pair)

    check(fn, torch.randn(2))


# --- keyword calls, config lookups, strings --------------------------------------------------------


class Config:
    hidden = 4
    act = "gelu"


CONFIG = Config()


def _inner(x, *, scale=1.0, shift=0.0, **extra):
    return x * scale + shift + extra.get("bias", 0.0)


def _outer(x, **kwargs):
    return _inner(x, **kwargs)


def test_kwargs_forwarding_and_config_getattr_defaults_match_eager():
    def fn(x):
        scale = getattr(CONFIG, "scale", 2.0)
        act = getattr(CONFIG, "act", "relu")
        has = hasattr(CONFIG, "hidden"), hasattr(CONFIG, "nope")
        y = _outer(x, scale=scale, bias=0.5, shift=float(CONFIG.hidden))
        return getattr(torch.nn.functional, act)(y), has

    check(fn, torch.randn(3))


def test_strings_formatting_assert_and_isinstance_tuple_match_eager():
    def fn(x, mode):
        assert x.dim() == 1, f"bad rank {x.dim()}"
        name = "layer_%d" % x.shape[0] + "_{}".format(mode.strip().lower())  # noqa: UP031, UP032
        ok = isinstance(mode, (int, str)) and name.startswith("layer") and name.endswith("sum")
        (b,) = x.shape
        return (x.sum() if ok else x) * b, name, x.shape == torch.Size([b]), x.shape[-1:] == (b,)

    check(fn, torch.randn(4), " SUM ")


def test_dict_views_and_get_match_eager():
    def fn(x, d):
        total = x
        for k, v in d.items():
            total = total + v * len(k)
        return total, list(d.keys()), d.get("missing", 1.5), [v.sum() for v in d.values()]

    check(fn, torch.randn(2), {"a": torch.randn(2), "bb": torch.randn(2)})


def test_environment_lookup_and_isinstance_of_methods_capture_in_one_graph():
    # transformers reads flags with os.environ.get (a dict with bytes keys inside) and asks
    # inspect-style isinstance(obj.method, types.MethodType) questions in forward.
    import os
    import types

    os.environ["TORCHLITE_TEST_FLAG"] = "1"

    class Net(torch.nn.Module):
        def helper(self):
            return 1

        def forward(self, x):
            if os.environ.get("TORCHLITE_TEST_FLAG", "0") == "1":
                x = x + 1
            if isinstance(self.helper, types.MethodType) and not isinstance(
                x.add, types.MethodType
            ):
                x = x * 2
            return x

    net = Net()
    check(net.forward, torch.randn(3))


def test_callable_of_methods_functions_and_values_matches_eager():
    class Net(torch.nn.Module):
        def helper(self):
            return 1

        def forward(self, x):
            flags = (
                callable(self.helper),
                callable(x.add),
                callable(x),
                callable(self),
                callable(3),
            )
            return x * sum(int(f) + 1 for f in flags), flags

    check(Net().forward, torch.randn(3))


class Action(str, __import__("enum").Enum):
    """transformers' ExplicitEnum: a str mixin, so == is str's C comparison."""

    NONE = "none"
    RAISE = "raise"


@dataclasses.dataclass
class Version:
    major: int
    minor: int


class Loose:
    """A Python __eq__ that declines other types (NotImplemented)."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        if not isinstance(other, Loose):
            return NotImplemented
        return self.v == other.v

    __hash__ = None


ACTION = {"current": Action.NONE}
V1, V1_AGAIN, V2 = Version(1, 0), Version(1, 0), Version(2, 0)
LOOSE_A, LOOSE_B = Loose(1), Loose(1)


def test_equality_with_custom_eq_is_captured_and_matches_eager():
    def fn(x):
        action = ACTION["current"]
        k = 1
        if action == Action.RAISE:
            k += 10
        if action != Action.RAISE and "none" == action:
            k += 2
        if V1 == V1_AGAIN and V1 != V2:
            k += 4
        if LOOSE_A == LOOSE_B and LOOSE_A != 3:
            k += 8
        return x * k

    compiled = check(fn, torch.randn(3))
    ACTION["current"] = Action.RAISE  # an identity guard on the enum member recompiles
    x = torch.randn(3)
    assert_same(compiled(x), fn(x))
    ACTION["current"] = Action.NONE


def test_membership_in_a_tuple_of_enum_members_is_captured():
    def fn(x):
        action = ACTION["current"]
        hit = action in (Action.RAISE, Action.NONE)
        miss = action in (Action.RAISE,)
        return x * (2 if hit else 3) + (5 if miss else 7)

    check(fn, torch.randn(3))


def _scaled_in_context(x, enabled):
    import contextlib

    ctx = torch.no_grad() if enabled else contextlib.nullcontext()
    with ctx:
        y = x * 2
    return y + 1


def test_python_context_manager_in_inlined_helper_is_captured():
    def fn(x):
        return _scaled_in_context(x, False).relu()

    check(fn, torch.randn(4))


class _AbstractBase(__import__("abc").ABC):
    @__import__("abc").abstractmethod
    def scale(self): ...


class _Concrete(_AbstractBase):
    def scale(self):
        return 3


def test_class_with_abc_metaclass_is_constructed_in_traced_code():
    def fn(x):
        return x * _Concrete().scale()

    check(fn, torch.randn(4))

    def build_abstract(x):
        return x * _AbstractBase()  # TypeError, raised as in eager

    with pytest.raises(TypeError, match="abstract"):
        torchlite.compile(build_abstract)(torch.randn(2))


class SharedChildren(torch.nn.Module):
    """`for block in self.children()` (regnet): nn.Module keeps a memo set of modules, so a
    module registered twice is visited once."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Tanh()
        self.again = self.a

    def forward(self, x):
        seen = set()
        for block in self.children():
            x = block(x)
            seen.add(block)
        return x * len(seen) + (1 if self.b in seen else 0)


def test_sets_of_modules_and_children_iteration_are_captured():
    check(SharedChildren(), torch.randn(2, 4))


# --- activation registries, lru_cached helpers, modules made in forward ----------------------------


class GELUTanh(torch.nn.Module):
    """transformers' activation classes keep the function they apply as an attribute."""

    def __init__(self, use_python: bool = False):
        super().__init__()
        if use_python:
            self.act = self._python
        else:
            self.act = functools.partial(torch.nn.functional.gelu, approximate="tanh")

    def _python(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))

    def forward(self, x):
        return self.act(x)


class ClassInstantier(OrderedDict):
    """ACT2FN: a dict of classes (or (class, kwargs)) that builds an instance on every lookup."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2FN = ClassInstantier(
    {
        "gelu_pytorch_tanh": GELUTanh,
        "gelu_python_tanh": (GELUTanh, {"use_python": True}),
        "relu": torch.nn.ReLU,
        "silu": torch.nn.SiLU,
        "softmax": (torch.nn.Softmax, {"dim": -1}),
    }
)


@functools.lru_cache
def is_torch_greater_or_equal(version: str) -> bool:
    parts = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return parts >= tuple(int(p) for p in version.split("."))


@functools.cache
def rope_inv_freq(dim: int, base: float = 10000.0):
    return tuple(1.0 / (base ** (i / dim)) for i in range(0, dim, 2))


class RegistryMLP(torch.nn.Module):
    def __init__(self, act: str):
        super().__init__()
        self.act_name = act
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        act = ACT2FN[self.act_name]  # looked up (and built) inside forward, as some models do
        h = act(self.fc(x))
        if is_torch_greater_or_equal("2.0"):
            h = h * torch.tensor(rope_inv_freq(16), dtype=h.dtype)
        return torch.nn.Softmax(dim=-1)(h)


@pytest.mark.parametrize(
    "act", ["gelu_pytorch_tanh", "gelu_python_tanh", "relu", "silu", "softmax"]
)
def test_activation_registry_lookup_in_forward_is_one_graph(act):
    m = RegistryMLP(act).eval()
    check(m, torch.randn(2, 8))
    assert _graphs_and_breaks(m, torch.randn(2, 8)) == (1, 0)


@dataclasses.dataclass
class BaseModelOutputWithPast(OrderedDict):
    """A ModelOutput-style result: dataclass fields mirrored as dict items (None skipped)."""

    last_hidden_state: torch.Tensor | None = None
    past_key_values: tuple | None = None
    hidden_states: tuple | None = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


class LayerNormChannelsFirst(torch.nn.LayerNorm):
    """timm-style LayerNorm subclass applied to NCHW by permuting around F.layer_norm."""

    def __init__(self, num_channels, eps=1e-6):
        super().__init__(num_channels, eps=eps)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = torch.nn.functional.layer_norm(
            x, self.normalized_shape, self.weight, self.bias, self.eps
        )
        return x.permute(0, 3, 1, 2)


class TinyEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNormChannelsFirst(4)
        self.proj = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x, output_hidden_states: bool = True):
        states = []
        for layer in (self.norm, self.proj):
            x = layer(x)
            states.append(x)
        pooled = torch.nn.AdaptiveAvgPool2d(1)(x).flatten(1)
        out = BaseModelOutputWithPast(
            last_hidden_state=x,
            hidden_states=tuple(states) if output_hidden_states else None,
        )
        return out, out.to_tuple()[0] + pooled[:, :, None, None]


def test_model_output_with_layer_norm_subclass_and_modules_made_in_forward():
    m = TinyEncoder().eval()
    check(m, torch.randn(2, 4, 3, 3))
    assert _graphs_and_breaks(m, torch.randn(2, 4, 3, 3)) == (1, 0)


@dataclasses.dataclass
class ContrastiveOutput(OrderedDict):
    """CLIPOutput: the two towers' ModelOutputs nested as fields of the result."""

    logits: torch.Tensor | None = None
    text_model_output: BaseModelOutputWithPast | None = None
    vision_model_output: BaseModelOutputWithPast | None = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value


class TwoTowers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.text = torch.nn.Linear(4, 4)
        self.vision = torch.nn.Linear(4, 4)

    def forward(self, t, v):
        text = BaseModelOutputWithPast(last_hidden_state=self.text(t))
        vision = BaseModelOutputWithPast(last_hidden_state=self.vision(v))
        logits = text.last_hidden_state @ vision.last_hidden_state.t()
        return ContrastiveOutput(logits=logits, text_model_output=text, vision_model_output=vision)


def test_model_output_nested_in_a_model_output_is_one_graph():
    # CLIP broke 11 times: each nested output is both an attribute and an item of the result,
    # which the residual took for one object referenced twice.
    m = TwoTowers().eval()
    inputs = (torch.randn(3, 4), torch.randn(2, 4))
    check(m, *inputs)
    out = torchlite.compile(m)(*inputs)
    assert out["text_model_output"] is out.text_model_output
    assert list(out.keys()) == ["logits", "text_model_output", "vision_model_output"]
    assert_same(out.vision_model_output.last_hidden_state, m.vision(inputs[1]))
    assert _graphs_and_breaks(m, *inputs) == (1, 0)


def test_zip_strict_over_equal_lengths_is_one_graph():
    # torch.nn.LSTM/GRU's _weights_have_changed: `zip(names, refs, strict=True)` every forward
    names = ("scale", "shift")

    def fn(x, ws):
        for name, w in zip(names, ws, strict=True):
            x = x * w if name == "scale" else x + w
        return x

    check(fn, torch.randn(3), [2.0, 3.0])
    assert _graphs_and_breaks(fn, torch.randn(3), [2.0, 3.0]) == (1, 0)


def test_zip_strict_over_unequal_lengths_raises_as_eager():
    def fn(x, ws):
        for w in zip(("a", "b", "c"), ws, strict=True):
            x = x * w[1]
        return x

    with pytest.raises(ValueError, match="shorter"):
        fn(torch.randn(3), [2.0, 3.0])
    with pytest.raises(ValueError, match="shorter"):
        torchlite.compile(fn)(torch.randn(3), [2.0, 3.0])


# --- input checks with `assert` on tensor values (XLM's embeddings) -------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_xlm_style_asserts_on_lengths_stay_in_one_graph(causal):
    from realcode_asserts import TinyXLM

    model = TinyXLM(causal=causal).eval()
    ids = torch.tensor([[5, 6, 7, 8, 2, 2], [9, 10, 11, 12, 13, 14]])
    torchlite.reset()
    with torch.no_grad():
        report = torchlite.explain(model)(ids)
        assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
        compiled = torchlite.compile(model)
        assert_same(compiled(ids), model(ids))
        first = counters()
        lengths = torch.tensor([3, 6])
        assert_same(compiled(ids), model(ids))
        assert counters()["frames"] == first["frames"]
        assert_same(compiled(ids, lengths), model(ids, lengths))
        with pytest.raises(AssertionError):
            compiled(ids, torch.tensor([3, 7]))  # a length past the sequence, as eager raises


# Issue 22: modules built in forward across a break, counters, most_common(n).


class _ClassInstantier(OrderedDict):
    """transformers' ACT2CLS/ClassInstantier: `_ACT2CLS_PER_CALL["gelu"]` builds the activation anew."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


_ACT2CLS_PER_CALL = _ClassInstantier(
    {
        "gelu": torch.nn.GELU,
        "gelu_new": (torch.nn.GELU, {"approximate": "tanh"}),
        "silu": torch.nn.SiLU,
    }
)


@torchlite.disable
def _report(*args):
    """A helper compiled code cannot see into (a progress callback, a profiler marker)."""


class _MlpWithActivationLookup(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1, self.fc2, self.act_name = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4), act

    def forward(self, x):
        act = _ACT2CLS_PER_CALL[self.act_name]
        h = act(self.fc1(x))
        _report("mlp", h.shape)
        return self.fc2(act(h))


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "silu"])
def test_activation_looked_up_per_call_and_live_at_a_break_hits_the_cache(act):
    model = _MlpWithActivationLookup(act)
    compiled = torchlite.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    before = counters()
    assert_same(compiled(x), model(x))
    after = counters()
    assert after["frames"] == before["frames"] and after["recompiles"] == before["recompiles"]


class _StepScheduledDropPath(torch.nn.Module):
    """timm/transformers-style step bookkeeping: a Python int step counter read into math."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.num_steps = 0
        self.ema = 0.0

    def forward(self, x):
        self.num_steps += 1
        self.ema = 0.9 * self.ema + 0.1 * self.num_steps
        return self.proj(x) * (0.1 * self.num_steps - 1) + self.ema


def test_step_counter_and_running_average_do_not_recompile_every_call():
    model, eager = _StepScheduledDropPath(), _StepScheduledDropPath()
    eager.load_state_dict(model.state_dict())
    compiled = torchlite.compile(model)
    before = counters()
    for _ in range(12):
        x = torch.randn(3, 4)
        assert_same(compiled(x), eager(x))
    after = counters()
    assert (
        after["frames"] - before["frames"] <= 2
        and after["eager_fallbacks"] == before["eager_fallbacks"]
    )
    assert model.num_steps == eager.num_steps == 12 and model.ema == pytest.approx(eager.ema)


def test_counter_most_common_vocabulary_in_forward_is_one_graph():
    import collections

    def fn(x, tokens):
        top = collections.Counter(tokens).most_common(2)
        return x * top[0][1] - top[1][1], [t for t, _ in top]

    tokens = ["the", "a", "the", "cat", "a", "the"]
    check(fn, torch.randn(3), tokens)
    report = torchlite.explain(fn)(torch.randn(3), tokens)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
