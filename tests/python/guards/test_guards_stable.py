"""Stable guards (issue 22 item 3): after a capture, a second call with the same inputs hits the
cache, also when the forward writes module state (an attribute set on every call, a cache dict
filled on the first call) or builds modules of its own. Each result matches eager."""

import collections
import copy

import pytest
import torch
from helpers import assert_counters_delta, assert_same, at_least, counters
from torch import nn

import torchlite


def _assert_second_call_hits_cache(model, *args, calls=3):
    """Runs `model` compiled and an eager deep copy `calls` times on the same inputs: equal
    results every time, and no capture after the first call."""
    eager = copy.deepcopy(model)
    compiled = torchlite.compile(model)
    after_first = None
    for i in range(calls):
        assert_same(compiled(*args), eager(*args), path=f"call {i}")
        if i == 0:
            after_first = counters()
    assert_counters_delta(
        after_first, counters(), frames=0, graphs=0, recompiles=0, cache_hits=at_least(calls - 1)
    )
    return compiled


class _RecordsSeqLen(nn.Module):
    """Writes an attribute on every call (transformers' Funnel attention structure)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.seq_len = x.shape[0]
        return self.lin(x) * self.seq_len


def test_attribute_written_on_every_call_does_not_recompile():
    _assert_second_call_hits_cache(_RecordsSeqLen(), torch.randn(3, 4))


class _CachesBias(nn.Module):
    """Fills a per-device cache dict on the first call (timm's LeViT attention biases)."""

    def __init__(self):
        super().__init__()
        self.biases = nn.Parameter(torch.randn(4))
        self.cache = {}

    def bias(self, device):
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.biases * 2
        return self.cache[key]

    def forward(self, x):
        return x + self.bias(x.device)


def test_cache_dict_filled_on_first_call_does_not_recompile_on_second():
    with torch.no_grad():
        _assert_second_call_hits_cache(_CachesBias(), torch.randn(2, 4))


class _SetsFlagOnce(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if not hasattr(self, "warmed"):
            self.warmed = True
        return self.lin(x).relu()


def test_attribute_set_on_first_call_only_does_not_recompile_on_second():
    _assert_second_call_hits_cache(_SetsFlagOnce(), torch.randn(2, 4))


def test_attribute_changed_by_the_user_still_recompiles():
    model = _RecordsSeqLen()
    compiled = torchlite.compile(model)
    x = torch.randn(3, 4)
    compiled(x)
    compiled(x)
    model.lin = nn.Linear(4, 4)
    before = counters()
    assert_same(compiled(x), model.lin(x) * 3)
    assert_counters_delta(before, counters(), recompiles=1)


class _Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, x):
        return x * self.s


class _BuildsModulesInForward(nn.Module):
    """Builds modules on every call (transformers' `nn.ReLU()(x)`, `ACT2FN[name](x)`)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = nn.Softmax(dim=-1)(self.lin(x))
        return _Scale(2.0)(y) + 1


def test_modules_built_in_forward_do_not_recompile():
    _assert_second_call_hits_cache(_BuildsModulesInForward(), torch.randn(2, 4))


def test_module_built_in_forward_with_other_settings_is_not_mistaken_for_the_first():
    def fn(x, s):
        return _Scale(s)(x.cos()) - 1

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    for s in (2.0, 2.0, 3.0, -1.5, 2.0):
        assert_same(compiled(x, s), fn(x, s))


class _Output(collections.OrderedDict):
    """A dict subclass returned by every call (transformers' ModelOutput)."""

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


class _ReturnsOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return _Output(hidden=self.lin(x), pooled=x.mean(0))


class _UsesOutputAsTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _ReturnsOutput()

    def forward(self, x):
        out = self.inner(x)
        print(end="")  # NOTE: a graph break, so the dict-subclass methods are frames of their own
        hidden, pooled = out.to_tuple()
        return hidden * 2 + pooled


def test_dict_subclass_output_read_after_a_break_does_not_recompile():
    _assert_second_call_hits_cache(_UsesOutputAsTuple(), torch.randn(2, 4))


class _ModelOutputLike(collections.OrderedDict):
    """transformers' ModelOutput: a str key is read through a plain dict of its items, an int
    through the tuple of its values."""

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self.values())[k]


def _output_then_break(x):
    out = _ModelOutputLike(hidden=x + 1, pooled=x * 2)
    print(end="")  # NOTE: a graph break: `out` reaches the resume function as a local
    return out["hidden"] * out[1] + sum(out.values()) * len(list(out.keys()))


def test_ordered_dict_subclass_views_after_a_break_do_not_recompile():
    x = torch.randn(3)
    compiled = torchlite.compile(_output_then_break)
    for i in range(3):
        assert_same(compiled(x), _output_then_break(x), path=f"call {i}")
        if i == 0:
            after_first = counters()
    assert_counters_delta(after_first, counters(), frames=0, graphs=0, recompiles=0)
    # The views are read in one graph after the break, not broken on.
    report = torchlite.explain(_output_then_break)(torch.randn(3))
    assert report.graph_break_count == 1, report.break_reasons


def _items_left_on_stack(d, x):
    return _sum_items(d.items(), _breaks_and_doubles(x))


def _breaks_and_doubles(x):
    print(end="")  # NOTE: the break leaves `d.items()` on the stack of the resume function
    return x * 2


def _sum_items(items, y):
    return sum(v for _, v in items) * y


def test_dict_view_left_on_the_resume_stack_does_not_recompile():
    for d in (
        {"a": torch.randn(3), "b": torch.randn(3)},
        _ModelOutputLike(a=torch.randn(3), b=torch.randn(3)),
    ):
        torchlite.reset()
        x = torch.randn(3)
        compiled = torchlite.compile(_items_left_on_stack)
        assert_same(compiled(d, x), _items_left_on_stack(d, x))
        before = counters()
        assert_same(compiled(d, x), _items_left_on_stack(d, x))
        assert_counters_delta(before, counters(), frames=0, graphs=0, recompiles=0)
        # The view reads the dict as it is now: new values are inputs, not constants.
        d2 = type(d)(a=torch.randn(3), b=torch.randn(3))
        assert_same(compiled(d2, x), _items_left_on_stack(d2, x))


class _ReversedIteration(collections.OrderedDict):
    """Iterates in its own (Python) order: must not be read from storage."""

    def __iter__(self):
        return reversed(list(super().__iter__()))

    def keys(self):
        return list(iter(self))


def _keys_in_order_after_break(out, x):
    print(end="")
    parts = []
    for i, k in enumerate(out.keys()):
        parts.append(out[k] * (i + 1))
    return torch.stack(parts) + x


@pytest.mark.parametrize(
    ("cls", "moved"),
    [
        # NOTE: move_to_end changes the iteration order, not the storage order
        (_ModelOutputLike, (None, "a", None, "b")),
        (_ReversedIteration, (None, None)),
    ],
    ids=["move_to_end", "overridden_iteration"],
)
def test_dict_subclass_after_a_break_is_read_in_its_own_iteration_order(cls, moved):
    compiled = torchlite.compile(_keys_in_order_after_break)
    x = torch.randn(3)
    for last in moved:
        out = cls(a=torch.randn(3), b=torch.randn(3), c=torch.randn(3))
        if last:
            out.move_to_end(last)
        assert_same(compiled(out, x), _keys_in_order_after_break(out, x), path=f"last={last}")
    if cls is _ModelOutputLike:  # read from storage: one graph after the break
        report = torchlite.explain(_keys_in_order_after_break)(out, x)
        assert report.graph_break_count == 1, report.break_reasons


class _ScaledGetitem(dict):
    """`d[k]` scales, `d.get(k)` (dict's C method) reads storage."""

    def __getitem__(self, k):
        return dict.__getitem__(self, k) * 10


def _get_after_break(d, x):
    print(end="")
    return d.get("a") + d["b"] + x


def test_dict_subclass_items_are_fed_from_storage_not_its_getitem():
    compiled = torchlite.compile(_get_after_break)
    for i in range(3):
        d = _ScaledGetitem(a=torch.randn(3), b=torch.randn(3))
        x = torch.randn(3)
        assert_same(compiled(d, x), _get_after_break(d, x), path=f"call {i}")


class _MovesBufferEachCall(nn.Module):
    """transformers' CTRL: `self.pos = self.pos.to(device, dtype)` on every forward."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.randn(8, 4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x, idx):
        self.pos = self.pos.to(device=x.device, dtype=x.dtype)
        return self.lin(x) + self.pos[idx, :]


def test_buffer_stored_back_by_a_no_op_to_is_captured_and_stable():
    model = _MovesBufferEachCall()
    pos = model.pos
    x, idx = torch.randn(3, 4), torch.tensor([0, 5, 7])
    _assert_second_call_hits_cache(model, x, idx)
    assert model.pos is pos  # the no-op .to() stored back the same tensor, as in eager
    report = torchlite.explain(model)(x, idx)
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons


def test_buffer_stored_back_by_a_real_cast_still_matches_eager():
    model, eager = _MovesBufferEachCall(), _MovesBufferEachCall()
    eager.load_state_dict(model.state_dict())
    compiled = torchlite.compile(model)
    x, idx = torch.randn(3, 4, dtype=torch.float64), torch.tensor([1, 2, 3])
    model.lin.double()
    eager.lin.double()
    assert_same(compiled(x, idx), eager(x, idx))
    assert model.pos.dtype == torch.float64 and eager.pos.dtype == torch.float64
