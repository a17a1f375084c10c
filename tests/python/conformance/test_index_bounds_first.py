"""An index op after an in-place op and Python side effects (transformers' StaticCache filling
its cache lazily) is checked before the graph's first effect instead of breaking the graph
(csrc/capture/index_bounds.h): one graph when the indices are in range, and eager's error with
eager's state (attributes written, counters advanced) when they are not."""

import pytest
import torch
from conformance_check import check_program

import torchlite

_CACHES = []  # the caches of the latest run, for observe()


class _Cache:
    """A StaticCache layer: buffers made on first use, a length counter updated in place."""

    def __init__(self, size, start, read_after_write=False):
        self.size = size
        self.length = torch.tensor(start)
        self.ready = False
        self.read_after_write = read_after_write

    def update(self, k):
        if not self.ready:
            self.buf = torch.zeros(self.size, k.shape[1])
            self.ready = True
        n = k.shape[0]
        if self.read_after_write:
            # NOTE: the positions read the counter after its update: a check of them before the
            # update would see other values.
            self.length.add_(n)
            pos = torch.arange(n) + self.length
        else:
            pos = torch.arange(n) + self.length
            self.length.add_(n)
        self.buf.index_copy_(0, pos, k)
        return self.buf


def _fill(k):
    total = k.sum()
    for c in _CACHES:
        total = total + c.update(k * 2).sum()
    return total


def _observe():
    return [(c.ready, c.length.clone(), getattr(c, "buf", None)) for c in _CACHES]


def _inputs(rows, starts, size=8, read_after_write=False):
    def make():
        _CACHES[:] = [_Cache(size, s, read_after_write) for s in starts]
        return (torch.randn(rows, 3),)

    return make


@pytest.mark.parametrize("starts", [(0,), (0, 2), (5, 1)], ids=["one", "two", "two-late"])
def test_index_copy_after_lazy_init_and_counter_update_is_one_graph(starts):
    check_program(_fill, _inputs(3, starts), observe=_observe)
    report = torchlite.explain(_fill)(*_inputs(3, starts)())
    assert report.graph_break_count == 0, report.break_reasons


@pytest.mark.parametrize(
    "starts", [(6,), (0, 6), (6, 0), (-1,)], ids=["one", "second", "first", "negative"]
)
def test_out_of_range_indices_raise_eagers_error_with_eagers_state(starts):
    # NOTE: eager raises at index_copy_ after the buffers were made and the counters advanced;
    # the compiled call must leave the same attributes and counters, and raise the same error.
    check_program(_fill, _inputs(3, starts), observe=_observe)


@pytest.mark.parametrize("start", [0, 5, 6])
def test_indices_read_after_the_update_are_not_checked_before_it(start):
    # start 5: the positions before the update (5..7) are in range, after it (8..10) they are
    # not: a check made before the update would pass and the graph would raise after it.
    check_program(_fill, _inputs(3, (start,), read_after_write=True), observe=_observe)


def test_bounds_failure_runs_the_frame_eagerly_once():
    compiled = torchlite.compile(_fill)
    compiled(*_inputs(3, (0,))())
    (k,) = _inputs(3, (7,))()
    with pytest.raises(IndexError):
        compiled(k)
    # NOTE: one eager run: the counter advanced once, as eager's.
    assert int(_CACHES[0].length) == 10 and _CACHES[0].ready
    (k,) = _inputs(3, (1,))()
    expected = _fill(k)
    _inputs(3, (1,))()
    torch.testing.assert_close(compiled(k), expected)


_LOG = []  # the Python side effect of _dropout_then_loss, for observe()


def _dropout_then_loss(x, target, kind):
    # NOTE: transformers' loss after a training forward: dropout (a random draw, a visible
    # effect) and a Python side effect (its output collector's global), then the loss, whose
    # class targets eager checks when it runs.
    _LOG.append(len(_LOG))
    h = torch.nn.functional.dropout(x, 0.25, training=True)
    if kind == "cross_entropy":
        return torch.nn.functional.cross_entropy(h, target, ignore_index=-1, reduction="sum")
    if kind == "padded_shift":  # GPT-2's label shift: pad with ignore_index, drop the first
        shifted = torch.nn.functional.pad(target, (0, 1), value=-100)[..., 1:].contiguous()
        return torch.nn.functional.cross_entropy(h.view(-1, h.shape[-1]), shifted.view(-1))
    if kind == "nll_positional":
        return torch.nn.functional.nll_loss(h.log_softmax(-1), target, None, None, 2)
    if kind == "module":  # BERT's MLM head builds its loss module in forward
        return torch.nn.CrossEntropyLoss()(h, target)
    return torch.nn.functional.cross_entropy(h[0], target[0])  # one unbatched row


_LOSS_KINDS = ["cross_entropy", "padded_shift", "nll_positional", "module", "unbatched"]


def _loss_inputs(kind, bad=None):
    def make():
        _LOG.clear()
        x = torch.randn(2, 3, 5) if kind == "padded_shift" else torch.randn(4, 5)
        target = torch.randint(0, 5, x.shape[:-1])
        target[0] = {"cross_entropy": -1, "nll_positional": 2}.get(kind, target[0])
        if bad is not None:
            target[0] = bad
        return x, target, kind

    return make


@pytest.mark.parametrize("kind", _LOSS_KINDS)
def test_loss_targets_after_dropout_and_python_side_effect_are_one_graph(kind):
    check_program(_dropout_then_loss, _loss_inputs(kind), observe=lambda: list(_LOG))
    report = torchlite.explain(_dropout_then_loss)(*_loss_inputs(kind)())
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1


@pytest.mark.parametrize("bad", [5, -2, 99], ids=["classes", "negative", "far"])
@pytest.mark.parametrize("kind", _LOSS_KINDS)
def test_loss_targets_out_of_range_raise_eagers_error_with_eagers_state(kind, bad):
    # NOTE: eager raises at the loss after the log entry and the dropout's draw: the compiled
    # call leaves the same log and raises the same error (check_program compares both).
    check_program(_dropout_then_loss, _loss_inputs(kind, bad), observe=lambda: list(_LOG))


class _KVLayer:
    """A StaticCache layer: keys and values written at the same positions."""

    def __init__(self, size, start):
        self.size = size
        self.length = torch.tensor(start)
        self.ready = False

    def update(self, k, v):
        if not self.ready:
            self.keys = torch.zeros(self.size, k.shape[1])
            self.values = torch.zeros(self.size, k.shape[1])
            self.ready = True
        pos = torch.arange(k.shape[0]) + self.length
        self.length.add_(k.shape[0])
        self.keys.index_copy_(0, pos, k)
        self.values.index_copy_(0, pos, v)
        return self.keys, self.values


_LAYERS = []


def _fill_kv(x):
    total = x.sum()
    for layer in _LAYERS:
        k, v = layer.update(x * 2, x + 1)
        total = total + k.sum() + v.sum()
    return total


def _kv_inputs(starts, rows=3, size=8):
    def make():
        _LAYERS[:] = [_KVLayer(size, s) for s in starts]
        return (torch.randn(rows, 4),)

    return make


def _observe_kv():
    return [(c.ready, c.length.clone(), getattr(c, "keys", None)) for c in _LAYERS]


@pytest.mark.parametrize(
    "starts", [(0,), (0, 2, 1), (0, 6), (6, 0)], ids=["one", "three", "late", "first"]
)
def test_indices_checked_once_per_index(starts):
    # NOTE: the values' index_copy_ reads the indices the keys' one checked (the first layer's
    # computed before the first effect, the others' copied before it): one check each, not one
    # per op (each is a call on every run, a host sync on a device). Out of range (late, first):
    # eager's error with eager's state.
    check_program(_fill_kv, _kv_inputs(starts), observe=_observe_kv)
    if max(starts) + 3 > 8:
        return
    graphs = torchlite.explain(_fill_kv)(*_kv_inputs(starts)()).graphs
    assert len(graphs) == 1
    checks = [n for n in graphs[0].nodes() if n["name"].startswith("check_index_bounds")]
    assert len(checks) == len(starts)
