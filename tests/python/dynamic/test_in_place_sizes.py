"""In-place writes in size-generic entries (frame/size_generic.cpp): `x += y`, `relu_()`,
`inplace=True`, `masked_fill_`, `copy_` into a view, `index_copy_`/`index_put_`, slice assignment
into a cache, writes into the caller's tensors. A write is the same write at every size; what
depends on the sizes is whether it overlaps what it reads (`x[:, 2:] += x[:, :-2]` shares no
element at 3 or 4 columns and one at 5): capture traced it where nothing overlapped
(capture/eager_checks.cpp), and each new size asks again, the inputs placed in their real memory.
Where an operand overlaps, that size is captured again and the op runs eagerly: eager's error
(dense views) or eager's own order (strided ones).

Each program runs over >= 4 sizes, compiled and eager on copies of the same inputs: results,
inputs after the call (the caller sees writes) and errors equal eager's at every size; programs
whose writes cannot overlap capture each frame at most twice (the first call, then the automatic
recompile that makes the entry size-generic). Counters are process-wide: differences are taken."""

import logging

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

SIZES = [(2, 5), (3, 9), (4, 7), (2, 12), (5, 6)]


def _run(fn, args):
    try:
        return fn(*args), None
    except RuntimeError as e:
        return None, str(e)


def _sweep(fn, make_args, sizes=SIZES):
    """Captures per size of `fn` compiled, each call checked against eager on copies."""
    torchlite.reset()
    compiled = torchlite.compile(fn)
    frames = []
    for i, size in enumerate(sizes):
        # NOTE: made twice from one seed, not cloned: views of one storage stay views of one
        torch.manual_seed(100 + i)
        mine = list(make_args(*size))
        torch.manual_seed(100 + i)
        theirs = list(make_args(*size))
        before = torchlite.counters()["frames"]
        out, err = _run(compiled, mine)
        frames.append(torchlite.counters()["frames"] - before)
        ref, ref_err = _run(fn, theirs)
        assert err == ref_err, (size, err, ref_err)
        if ref_err is None:
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        for a, b in zip(mine, theirs, strict=True):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    return frames


def _two(b, t):
    return torch.randn(b, t), torch.randn(b, t)


# --- whole-tensor writes of values the graph made: the same tensor at every size -------------


def iadd_fresh(x, y):
    z = x * 2
    z += y
    z -= 1
    return z * y


def number_plus_tensor(x, y):
    acc = 0  # T5's relative position buckets
    acc += (x > 0).long() * 4
    acc += (y > 0).long()
    return acc


def relu_method(x, y):
    h = x @ y.t()
    h.relu_()
    return h + 1, h.sum(-1)


def inplace_activations(x, y):
    a = F.relu(x + y, inplace=True)
    b = F.hardtanh(x - y, -0.5, 0.5, True)
    c = F.leaky_relu(x * y, 0.1, inplace=True)
    return a + b + c


def mul_then_identity(x, y):
    z = x.exp()
    w = z.mul_(y)
    return z * 2, w is z


def masked_fill_fresh(x, y):
    s = x @ y.t()
    s.masked_fill_(s > 0.5, -1.0)
    return s.softmax(-1)


def add_itself(x, y):
    z = x + y
    z.add_(z)  # the same view: full overlap, allowed at every size
    return z


def resnet_block(x, y):
    out = F.relu(x * 1.5, inplace=True)
    out += y
    return F.relu(out, inplace=True)


# --- writes into views: disjoint at every size ------------------------------------------------


def copy_into_narrow(x, y):
    buf = torch.zeros(x.shape[0], x.shape[1] + 2)
    buf.narrow(1, 1, x.shape[1]).copy_(x)
    buf[:, 0] = y[:, 0]
    return buf * 2


def halves(x, y):
    z = x * y
    h = z.shape[1] // 2
    z[:, z.shape[1] - h :] += z[:, :h]  # disjoint at every width
    return z


def transpose_view_write(x, y):
    z = x + y
    z.t().mul_(3)
    z[0].sub_(1)
    return z


def index_copy_rows(x, y):
    z = x * 1
    idx = torch.arange(0, x.shape[0], 2)
    z.index_copy_(0, idx, y[idx] * 10)
    return z


def index_put_rows(x, y):
    z = x.clone()
    idx = torch.arange(x.shape[0] - 1)
    z.index_put_((idx,), y[1:], accumulate=True)
    return z


# --- writes into the caller's tensors (visible after the call) --------------------------------


def input_writes(x, y):
    x.add_(y)
    x.mul_(2)
    x[:, :2] = 0
    y.relu_()
    return x.sum(-1) + y.sum(-1)


def input_iadd(x, y):
    x += y * 2
    return x


def kv_cache(cache, k):
    # a cache of 16 positions written at 4..4+n (transformers' static cache writes by slices)
    n = k.shape[1]
    cache[:, 4 : 4 + n] = k
    return cache[:, : 4 + n].sum(-1)


def kv_index_copy(cache, k):
    # StaticCache's update: `index_copy_` of the new positions into the caller's cache
    pos = torch.arange(3, 3 + k.shape[1])
    cache.index_copy_(1, pos, k)
    return cache[:, : 3 + k.shape[1]].mean(-1)


def input_view_writes(x, y):
    x.t().add_(1)
    x[1:].mul_(y[:-1])
    return x * 2


def kv_make(b, t):
    return torch.zeros(b, 16), torch.randn(b, t)


KV_SIZES = [(2, 3), (3, 5), (4, 2), (2, 7), (5, 4)]

GENERIC = [
    (iadd_fresh, _two, SIZES),
    (number_plus_tensor, _two, SIZES),
    (relu_method, _two, SIZES),
    (inplace_activations, _two, SIZES),
    (mul_then_identity, _two, SIZES),
    (masked_fill_fresh, _two, SIZES),
    (add_itself, _two, SIZES),
    (resnet_block, _two, SIZES),
    (copy_into_narrow, _two, SIZES),
    (halves, _two, SIZES),
    (transpose_view_write, _two, SIZES),
    (index_copy_rows, _two, SIZES),
    (index_put_rows, _two, SIZES),
    (input_writes, _two, SIZES),
    (input_iadd, _two, SIZES),
    (kv_cache, kv_make, KV_SIZES),
    (kv_index_copy, kv_make, KV_SIZES),
    (input_view_writes, _two, SIZES),
]


@pytest.mark.parametrize(
    "fn,make,sizes", [pytest.param(*c, id=c[0].__name__) for c in GENERIC]
)  # fmt: skip
def test_an_in_place_write_that_cannot_overlap_is_size_generic(fn, make, sizes):
    frames = _sweep(fn, make, sizes)
    assert frames[0] > 0
    assert frames[2:] == [0] * (len(sizes) - 2), frames


# --- overlap that depends on the sizes ---------------------------------------------------------
# Where dense views overlap, eager raises ("some elements ... refer to a single memory
# location"); where strided ones do, it writes in an order of its own. Either way the compiled
# call gives eager's answer: those sizes are captured again and the op runs eagerly.


def shift_by_two(x, y):
    z = x + y
    z[:, 2:] += z[:, :-2]  # 3 or 4 columns: disjoint; 5 or more: columns 2.. are read and written
    return z


def input_shift_by_two(x, y):
    x[:, 2:] += x[:, :-2]
    return x + y


def shift_1d(x, y):
    z = x.flatten() * 1
    z[2:] += z[:-2]  # dense: eager raises from 5 elements on
    return z + 1


def add_one_view_to_another(a, b):
    # a = base[0:n], b = base[5:5+n]: disjoint while n <= 5
    a.add_(b)
    return a * 2


def _views_of_one_storage(b, n):
    base = torch.randn(5 + n)
    return base[0:n], base[5 : 5 + n]


def _row(b, t):
    return torch.randn(1, t), torch.randn(1, t)


OVERLAP = [
    # (fn, make, sizes, the sizes where eager raises)
    (shift_by_two, _two, [(2, 3), (3, 4), (4, 3), (2, 6), (3, 4), (5, 9), (4, 3)], []),
    (input_shift_by_two, _two, [(2, 4), (3, 3), (2, 4), (4, 8), (3, 3), (2, 5)], []),
    (shift_1d, _row, [(1, 3), (1, 4), (1, 3), (1, 6), (1, 4), (1, 9)], [3, 5]),
    (
        add_one_view_to_another,
        _views_of_one_storage,
        [(1, 3), (1, 4), (1, 2), (1, 7), (1, 5), (1, 9), (1, 3)],
        [3, 5],
    ),
]


@pytest.mark.parametrize(
    "fn,make,sizes,raising", [pytest.param(*c, id=c[0].__name__) for c in OVERLAP]
)  # fmt: skip
def test_a_write_overlapping_at_some_sizes_gives_eagers_answer_there(fn, make, sizes, raising):
    frames = _sweep(fn, make, sizes)
    for i in raising:  # eager's error was compared in _sweep: make sure there was one
        torch.manual_seed(100 + i)
        with pytest.raises(RuntimeError, match="single memory location"):
            fn(*make(*sizes[i]))
    # NOTE: the third size overlaps nothing and comes before any overlap: served as it is.
    assert frames[2] == 0, frames


def test_an_overlapping_size_is_named_in_the_recompiles_log(monkeypatch, caplog):
    monkeypatch.setattr(config, "logs", "recompiles")
    with caplog.at_level(logging.INFO, logger="torchlite"):
        frames = _sweep(shift_by_two, _two, [(2, 3), (3, 4), (4, 6)])
    assert frames[:2] == [1, 1]
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "operator.iadd" in m and "partly overlaps at the new sizes" in m for m in messages
    ), messages


def _scale_then_add_view(a, b, log):
    c = a * 3
    log.append("before")
    a.mul_(2)
    a.add_(b)  # raises where a and b (views of one storage) overlap
    return a + c


def test_python_effects_before_an_overlapping_write_happen_as_in_eager():
    """Without the per-size overlap check the size-generic graph raised at n = 7 before its
    recorded `log.append` was replayed: the caller's list stayed empty where eager's had it."""
    torchlite.reset()
    compiled = torchlite.compile(_scale_then_add_view)
    for n in [3, 4, 2, 7, 5, 9]:
        base = torch.randn(5 + n)
        theirs = base.clone()
        logs = [], []
        errors = []
        for fn, t, log in [(compiled, base, logs[0]), (_scale_then_add_view, theirs, logs[1])]:
            try:
                fn(t[0:n], t[5 : 5 + n], log)
                errors.append(None)
            except RuntimeError as e:
                errors.append(str(e))
        assert errors[0] == errors[1], (n, errors)
        assert logs[0] == logs[1] == ["before"], (n, logs)
        torch.testing.assert_close(base, theirs)
        assert (errors[1] is None) == (n <= 5)


def test_explain_lists_the_writes_decided_per_size():
    x = torch.randn(2, 4)
    torchlite.mark_dynamic(x, 1)
    guards = torchlite.explain(shift_by_two)(x, torch.randn(2, 4)).guards
    lines = [line for g in guards for line in g.splitlines()]
    writes = [line for line in lines if line.startswith("WRITE_OVERLAP")]
    assert len(writes) == 2 and "operator.iadd" in writes[0], guards
    assert "decided per new size" in writes[0] and "test_in_place_sizes.py" in writes[0], guards
