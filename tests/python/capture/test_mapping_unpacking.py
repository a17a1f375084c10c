"""`f(**obj)` and `{**obj}` of a dict subclass made in compiled code (transformers' ModelOutput
handed on as keyword arguments): read as CPython reads it — a subclass that keeps dict's
iteration by its storage, an OrderedDict subclass through keys() and its own __getitem__ — in
one graph, with eager's values."""

from collections import OrderedDict

import pytest
import torch
from helpers import assert_counters_delta, assert_same, counters

import torchlite

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutputWithPooling


class Plain(dict):
    pass


class Doubling(OrderedDict):
    """keys() from OrderedDict, items through its own __getitem__: ** must call it."""

    def __getitem__(self, k):
        return dict(self.items())[k] * 2


def _consume(last_hidden_state, pooler_output=None, hidden_states=None, attentions=None):
    extra = 0 if pooler_output is None else pooler_output.sum()
    return last_hidden_state.tanh() + extra, hidden_states is None


def _model_output(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x * 2, pooler_output=x.mean(0))
    return _consume(**out)


def _model_output_none_field(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x + 1)  # None fields are not items
    return _consume(**out), {**out, "more": x.cos()}


def _two_of(a, c, **rest):
    return a + c, sorted(rest)


def _plain(x):
    d = Plain(a=x.sin(), b=x.cos())
    d["c"] = x * 3
    return {**d}, _two_of(**d)


def _own_getitem(x):
    d = Doubling()
    d["a"] = x.exp()
    d["b"] = x + 1
    return {**d}


@pytest.mark.parametrize("fn", [_model_output, _model_output_none_field, _plain, _own_getitem])
@pytest.mark.parametrize("shape", [(3, 4), (2, 5)])
def test_unpacking_a_traced_dict_subclass_matches_eager(fn, shape):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        x = torch.randn(shape)
        assert_same(compiled(x), fn(x))


@pytest.mark.parametrize("fn", [_model_output, _model_output_none_field, _plain])
def test_unpacking_a_traced_dict_subclass_is_one_graph(fn):
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    before = counters()
    x = torch.randn(3, 4)
    assert_same(compiled(x), fn(x))
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)


def _from_caller(out, d):
    return _consume(**out), {**d}


def test_unpacking_dict_subclasses_the_caller_passed_in_follows_their_keys():
    torchlite.reset()
    compiled = torchlite.compile(_from_caller)
    x = torch.randn(3, 4)
    cases = [
        (BaseModelOutputWithPooling(last_hidden_state=x, pooler_output=x[0]), Plain(a=x)),
        (BaseModelOutputWithPooling(last_hidden_state=x.cos()), Plain(a=x, b=x * 2)),
        (BaseModelOutputWithPooling(last_hidden_state=x, pooler_output=x[1] * 3), Plain(a=x)),
    ]
    before = counters()
    assert_same(compiled(*cases[0]), _from_caller(*cases[0]))
    assert_counters_delta(before, counters(), graphs=1, graph_breaks=0)
    for out, d in cases:  # NOTE: other keys recompile (guarded), the same keys reuse the entry
        assert_same(compiled(out, d), _from_caller(out, d))
    before = counters()
    out, d = cases[0]
    assert_same(compiled(out, d), _from_caller(out, d))
    assert_counters_delta(before, counters(), graphs=0, graph_breaks=0, recompiles=0)
