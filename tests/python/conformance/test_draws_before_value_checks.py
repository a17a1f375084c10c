"""An op that checks its operands' values (an embedding's ids, an advanced index, gather) after a
training-mode dropout and a Python side effect is captured in the same graph: the dropout's
draw and a no_grad block's grad-mode switch are the graph's only visible effects, and the frame
undoes them (the generators' states and the grad mode saved before the graph) to run eagerly
when the graph raises (csrc/capture/effect_order.cpp, csrc/frame/captured_frame.cpp). Before,
each such op was a graph break (effect_order), training transformers broke at every embedding
or pooled-token index after a dropout. Out-of-range indices raise eager's error at the user's
line, with eager's Python effects and the generator advanced as eager advances it."""

import pytest
import torch
import torch.nn.functional as F
from conformance_check import assert_same_value, check_program

import torchlite

_LOG = []  # the Python side effect of the programs, for observe()


def _observe():
    # NOTE: the generator's state too: an eager rerun without it put back draws twice.
    return [list(_LOG), torch.get_rng_state()]


def _lookup(h, ids, kind):
    if kind == "embedding":
        return F.embedding(ids, h)
    if kind == "module_embedding":  # nn.Embedding calls torch.embedding(weight, ids)
        return torch.embedding(h, ids)
    if kind == "getitem":
        return h[ids]
    if kind == "getitem_pair":  # a pooled token: hidden[arange(b), positions]
        return h[torch.arange(ids.shape[0]), ids]
    if kind == "gather":
        return h.gather(0, ids.view(-1, 1).expand(-1, h.shape[1]))
    return h.index_select(0, ids)


def _dropout_then_lookup(x, ids, kind):
    _LOG.append(kind)
    h = F.dropout(x, 0.25, training=True) * 2
    return _lookup(h, ids, kind)


_KINDS = ["embedding", "module_embedding", "getitem", "getitem_pair", "gather", "index_select"]


def _inputs(kind, bad=None, grad=False):
    def make():
        _LOG.clear()
        x = torch.randn(6, 4, requires_grad=grad)
        ids = torch.randint(0, 4, (4,))
        if bad is not None:
            ids[1] = bad
        return x, ids, kind

    return make


@pytest.mark.parametrize("kind", _KINDS)
def test_lookup_after_dropout_and_python_effect_is_one_graph(kind):
    check_program(_dropout_then_lookup, _inputs(kind), observe=_observe)
    report = torchlite.explain(_dropout_then_lookup)(*_inputs(kind)())
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons


@pytest.mark.parametrize("bad", [6, 99], ids=["size", "far"])
@pytest.mark.parametrize("kind", _KINDS)
def test_lookup_out_of_range_raises_eagers_error_with_eagers_state(kind, bad):
    # NOTE: eager raises at the lookup after the log entry and the dropout's draw; compiled, the
    # same error at the same line, the same log and the same generator state.
    check_program(_dropout_then_lookup, _inputs(kind, bad), observe=_observe)


def _train_step(fn, make):
    torch.manual_seed(7)
    x, *rest = make()
    try:
        out = fn(x, *rest)
    except (IndexError, RuntimeError) as e:
        return ("raise", type(e), str(e), list(_LOG), torch.get_rng_state())
    out.square().sum().backward()
    return ("ok", out.detach(), x.grad, list(_LOG), torch.get_rng_state())


@pytest.mark.parametrize("bad", [None, 99], ids=["in_range", "out_of_range"])
@pytest.mark.parametrize("kind", _KINDS)
def test_training_lookup_after_dropout_matches_eager(kind, bad):
    # NOTE: the compiled forward and backward (the training issue's joint graph): the failure
    # comes from inside the compiled forward, whose draws the frame undoes as well.
    torchlite.reset()
    compiled = torchlite.compile(_dropout_then_lookup)
    for _ in range(2):
        expected = _train_step(_dropout_then_lookup, _inputs(kind, bad, grad=True))
        actual = _train_step(compiled, _inputs(kind, bad, grad=True))
        assert_same_value(actual, expected)
    report = torchlite.explain(_dropout_then_lookup)(*_inputs(kind, grad=True)())
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert "compiled forward and backward" in str(report.training)


def _no_grad_then_gather(x, idx):
    # NOTE: phimoe's router: indices chosen under no_grad (a grad-mode switch, a visible
    # effect), then gathered.
    _LOG.append(len(_LOG))
    with torch.no_grad():
        top = x.abs().argmax(-1, keepdim=True)
    return x.gather(1, idx) + x.gather(1, top)


def _gather_inputs(bad=None, grad=False):
    def make():
        _LOG.clear()
        x = torch.randn(5, 3, requires_grad=grad)
        idx = torch.randint(0, 3, (5, 2))
        if bad is not None:
            idx[2, 1] = bad
        return x, idx

    return make


@pytest.mark.parametrize("bad", [None, 3, -9], ids=["in_range", "size", "negative"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_gather_after_no_grad_block_and_python_effect(bad, grad):
    check_program(_no_grad_then_gather, _gather_inputs(bad, grad), observe=_observe)
    report = torchlite.explain(_no_grad_then_gather)(*_gather_inputs(None, grad)())
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert torch.is_grad_enabled()


def _draw_lookup_then_write(x, ids, acc):
    _LOG.append(0)
    h = F.dropout(x, 0.5, training=True)
    out = h[ids]
    acc.add_(1)  # NOTE: a lasting effect after the lookup: it must not run twice
    return out


@pytest.mark.parametrize("bad", [None, 7], ids=["in_range", "out_of_range"])
def test_a_write_after_the_lookup_runs_once_when_the_lookup_raises(bad):
    def make():
        _LOG.clear()
        ids = torch.tensor([0, 2, 1]) if bad is None else torch.tensor([0, bad, 1])
        return torch.randn(4, 3), ids, torch.zeros(2)

    check_program(_draw_lookup_then_write, make, observe=_observe)


def _dropout_then_index_copy(x, buf, pos):
    # NOTE: the index op writes an input itself: it would be the graph's first lasting effect
    # when it raises, so its indices are checked before the graph's effects instead
    # (capture/index_bounds.h), as without the dropout.
    _LOG.append(0)
    h = F.dropout(x, 0.5, training=True)
    buf.index_copy_(0, pos, h)
    return buf.sum()


@pytest.mark.parametrize("bad", [None, 5], ids=["in_range", "out_of_range"])
def test_an_index_op_writing_an_input_after_dropout_fails_as_eager(bad):
    def make():
        _LOG.clear()
        pos = torch.tensor([0, 2]) if bad is None else torch.tensor([0, bad])
        return torch.randn(2, 3), torch.zeros(4, 3), pos

    check_program(_dropout_then_index_copy, make, observe=_observe)


def _dropout_then_inverse_permutation(x, perm):
    # NOTE: transformers' grouped experts (integrations/moe.py) invert a permutation by writing
    # a tensor the graph made: no lasting effect, so it needs no check before the graph.
    _LOG.append(0)
    h = F.dropout(x, 0.5, training=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.size(0))
    return h[inv]


@pytest.mark.parametrize("bad", [None, 9], ids=["in_range", "out_of_range"])
def test_an_index_write_into_a_new_tensor_after_dropout_is_one_graph(bad):
    def make():
        _LOG.clear()
        perm = torch.randperm(5)
        if bad is not None:
            perm[1] = bad
        return torch.randn(5, 3), perm

    check_program(_dropout_then_inverse_permutation, make, observe=_observe)
    if bad is None:
        report = torchlite.explain(_dropout_then_inverse_permutation)(*make())
        assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
