"""Compiled calls keep no references across calls: input refcounts and the number of
GC-tracked objects stay flat over 1000 calls, and outputs die when the caller drops them.

Slack, and why: measurements start after a warm-up (capture, caches, lazily created torch
dispatch state), so a correct runtime adds nothing. A few objects may still appear once, from
allocations Python or torch make lazily (warning registries, type caches, free-list resizing),
hence OBJECT_SLACK. A leak of even one object or reference per call shows up as >= 1000.
"""

import gc
import sys
import weakref

import pytest
import torch
from torch import nn

import torchlite

CALLS = 1000
WARMUP = 10
REF_SLACK = 0
OBJECT_SLACK = 50


def _pointwise(x):
    return (x * 2).sin() + 1


def _with_break(x):
    y = x * 2
    s = y.sum().item()
    return y + s


def _returns_container(x):
    return {"a": x + 1, "b": [x * 2, (x.sum(),)]}


def _refcounts(args):
    # NOTE: one code path for both measurements, so temporaries add the same counts.
    return [sys.getrefcount(a) for a in args]


def _measure(fn, *args):
    """(refcount growth per argument, growth of GC-tracked objects) over CALLS calls."""
    for _ in range(WARMUP):
        fn(*args)
    gc.collect()
    refs = _refcounts(args)
    objects = len(gc.get_objects())
    for _ in range(CALLS):
        fn(*args)
    gc.collect()
    objects = len(gc.get_objects()) - objects
    return [now - then for now, then in zip(_refcounts(args), refs)], objects


@pytest.mark.parametrize(
    "fn", [_pointwise, _with_break, _returns_container], ids=lambda f: f.__name__
)
def test_repeated_calls_leak_no_references(fn):
    compiled = torchlite.compile(fn)
    x = torch.randn(16)
    ref_growth, object_growth = _measure(compiled, x)
    assert all(g <= REF_SLACK for g in ref_growth), ref_growth
    assert object_growth <= OBJECT_SLACK, object_growth


def test_repeated_module_calls_leak_no_references():
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    compiled = torchlite.compile(m)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref_growth, object_growth = _measure(compiled, x)
    assert all(g <= REF_SLACK for g in ref_growth), ref_growth
    assert object_growth <= OBJECT_SLACK, object_growth
    # Parameters are not pinned by extra references per call either.
    assert sys.getrefcount(m[0].weight) < 20


def test_repeated_raising_calls_leak_no_references():
    def fn(x):
        if x.shape[0] == 3:
            raise ValueError("no")
        return x

    compiled = torchlite.compile(fn)
    x = torch.randn(3)

    def call(t):
        try:
            compiled(t)
        except ValueError:
            pass

    ref_growth, object_growth = _measure(call, x)
    assert all(g <= REF_SLACK for g in ref_growth), ref_growth
    assert object_growth <= OBJECT_SLACK, object_growth


def test_outputs_are_freed_when_caller_drops_them():
    compiled = torchlite.compile(_returns_container)
    x = torch.randn(4)
    compiled(x)
    out = compiled(x)
    refs = [weakref.ref(out["a"]), weakref.ref(out["b"][0]), weakref.ref(out["b"][1][0])]
    del out
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_inputs_are_freed_after_compiled_call():
    compiled = torchlite.compile(_pointwise)
    compiled(torch.randn(4))
    x = torch.randn(4)
    compiled(x)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_reset_releases_compiled_state():
    def fn(x):
        return x + 1

    compiled = torchlite.compile(fn)
    compiled(torch.randn(3))
    gc.collect()
    before = len(gc.get_objects())
    for n in range(2, 6):
        compiled(torch.randn(n))
        torchlite.reset()
    gc.collect()
    assert len(gc.get_objects()) - before <= OBJECT_SLACK
