"""Item and attribute writes through `super().__setitem__` / `super().__setattr__` on a dict
subclass the compiled function receives (transformers' ModelOutput, an OrderedDict subclass
that keeps its items and attributes in step): captured, replayed on the caller's object after
the graph, and seen by reads later in the same trace."""

from collections import OrderedDict
from dataclasses import dataclass, fields

import pytest
import torch
from helpers import assert_same, counters

import torchlite


class Output(OrderedDict):
    """ModelOutput's item/attribute mirroring, written from scratch."""

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self.values())[k]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)


def _make(x):
    o = Output()
    o["hidden"] = x
    o["logits"] = x.sum(-1)
    return o


def _set_item(o, x):
    o["hidden"] = o["hidden"] * 2 + x
    return o["hidden"].sin(), len(o)


def _set_attr(o, x):
    o.logits = x.mean(-1)
    return o["logits"] + o.logits


def _new_key(o, x):
    o["extra"] = x.cos()
    return tuple(o.keys()), o[2] * 2


class Plain(dict):
    pass


def _plain_dict_subclass(d, x):
    d["a"] = x + 1
    return d["a"] * 3


def _same_state(a, b):
    assert list(a.keys()) == list(b.keys())
    for k in b:
        torch.testing.assert_close(a[k], b[k])
        if isinstance(b, Output):
            torch.testing.assert_close(getattr(a, k), getattr(b, k))


@pytest.mark.parametrize("fn", [_set_item, _set_attr, _new_key], ids=lambda f: f.__name__)
def test_writes_to_a_model_output_argument_are_captured_and_replayed(fn):
    torchlite.reset()
    x = torch.randn(3, 4)
    report = torchlite.explain(fn)(_make(x), x)
    assert report.graph_break_count == 0, str(report)
    compiled = torchlite.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        got, want = _make(x), _make(x)
        assert_same(compiled(got, x), fn(want, x))
        _same_state(got, want)


def test_plain_dict_subclass_item_write_is_replayed():
    torchlite.reset()
    compiled = torchlite.compile(_plain_dict_subclass)
    x = torch.randn(5)
    got, want = Plain(a=x), Plain(a=x)
    torch.testing.assert_close(compiled(got, x), _plain_dict_subclass(want, x))
    _same_state(got, want)
    before = counters()
    got2 = Plain(a=x)
    compiled(got2, x)
    assert counters()["frames"] == before["frames"]
    _same_state(got2, want)


def test_other_mutators_after_a_write_break_instead_of_losing_the_write():
    def fn(d, x):
        d["a"] = x
        d.pop("b")
        return x * 2

    torchlite.reset()
    compiled = torchlite.compile(fn)
    x = torch.randn(2)
    got, want = Plain(a=1, b=2), Plain(a=1, b=2)
    torch.testing.assert_close(compiled(got, x), fn(want, x))
    assert list(got.keys()) == list(want.keys()) == ["a"]
    assert got["a"] is x and want["a"] is x


def test_transformers_model_output_post_init_and_setitem():
    utils = pytest.importorskip("transformers.utils")

    @dataclass
    class Out(utils.ModelOutput):
        a: torch.Tensor | None = None
        b: torch.Tensor | None = None

    assert [f.name for f in fields(Out)] == ["a", "b"]

    def fn(o, x):
        o["a"] = x * 3
        o.b = o.a + 1
        return o.to_tuple()

    torchlite.reset()
    x = torch.randn(4)
    report = torchlite.explain(fn)(Out(a=x), x)
    assert report.graph_break_count == 0, str(report)
    compiled = torchlite.compile(fn)
    got, want = Out(a=x), Out(a=x)
    r, e = compiled(got, x), fn(want, x)
    assert len(r) == len(e) == 2
    for a, b in zip(r, e):
        torch.testing.assert_close(a, b)
    _same_state(got, want)


# --- del of an item of a dict subclass made in traced code ---------------------------------------


class _Tracked(OrderedDict):
    """A subclass whose own __delitem__ (Python) must run."""

    def __delitem__(self, key):
        super().__delitem__(key)
        self["deleted"] = key


def _ordered_del(x):
    d = OrderedDict(a=x, b=x * 2, c=x + 1)
    del d["a"]
    d["a"] = x * 3  # re-inserted at the end
    return [(k, v.sum()) for k, v in d.items()], len(d)


def _own_delitem(x):
    d = _Tracked(a=x, b=x * 2)
    del d["a"]
    return list(d.keys()), d["b"] + 1


@pytest.mark.parametrize("fn", [_ordered_del, _own_delitem])
def test_del_of_an_item_made_in_traced_code_stays_in_the_graph(fn):
    x = torch.randn(3)
    torchlite.reset()
    report = torchlite.explain(fn)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert_same(torchlite.compile(fn)(x), fn(x))


def _del_missing(x):
    d = OrderedDict(a=x)
    try:
        del d["b"]
    except KeyError:
        return x + 1
    return x


def test_del_of_a_missing_key_raises_as_eager():
    x = torch.randn(3)
    torchlite.reset()
    assert_same(torchlite.compile(_del_missing)(x), _del_missing(x))
