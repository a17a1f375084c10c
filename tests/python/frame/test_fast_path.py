"""The compiled fast path (an entry whose CompiledFrame runs instead of the
frame): on 3.12 the hook itself clears and pops the frame, the riskiest part
of the layer. Torch-free, so it runs on 3.12 here too."""

import gc
import sys

import pytest


@pytest.fixture
def constant_fn(marker_C):
    calls = []

    def f(x, y, *args, **kwargs):
        calls.append(1)
        return "body"

    config = marker_C.make_config(None, "torchlite", False, 8, None)
    sentinel = object()
    marker_C._test_insert_constant_entry(f, config, sentinel)
    return marker_C.CompiledFunction(f, config), f, sentinel, calls


def test_hit_returns_the_cached_value_without_running_the_body(constant_fn, Marker):
    cf, f, sentinel, calls = constant_fn
    assert cf(Marker(), 1) is sentinel
    assert cf(Marker(), 1, 2, 3, k=4) is sentinel
    assert calls == []
    assert f(Marker(), 1) == "body"


def test_fast_path_leaks_nothing_in_1000_calls(constant_fn, Marker, marker_C):
    cf, f, sentinel, calls = constant_fn
    x, y, z = Marker(), object(), object()

    def call():
        return cf(x, y, z, k=z)

    for _ in range(10):
        call()
    gc.collect()
    refs = [sys.getrefcount(o) for o in (x, y, z, f, cf, sentinel)]
    objs = len(gc.get_objects())
    top = marker_C._test_datastack_top()
    for _ in range(1000):
        assert call() is sentinel
    assert marker_C._test_datastack_top() == top
    gc.collect()
    assert [sys.getrefcount(o) for o in (x, y, z, f, cf, sentinel)] == refs
    assert len(gc.get_objects()) <= objs + 5
    assert calls == []


def test_deep_recursion_still_works_after_many_fast_path_calls(constant_fn, Marker, marker_C):
    cf, _, sentinel, _ = constant_fn
    for _ in range(5000):
        assert cf(Marker(), 0) is sentinel

    def rec(x, n):
        return 0 if n == 0 else 1 + rec(x, n - 1)

    config = marker_C.make_config(None, "torchlite", False, 8, None)
    depth = sys.getrecursionlimit() - 100
    assert marker_C.CompiledFunction(rec, config)(Marker(), depth) == depth


def test_fast_path_inside_an_eager_frame_and_across_data_stack_chunks(marker_C, Marker):
    config = marker_C.make_config(None, "torchlite", False, 8, None)

    def leaf(x, n):
        return "body"

    marker_C._test_insert_constant_entry(leaf, config, "cached")

    def rec(x, n):
        # Each level calls the cached leaf, at data-stack depths that cross
        # chunk boundaries; a leaf that opens a chunk must run eagerly.
        here = leaf(x, n)
        if n == 0:
            return [here]
        return [here] + rec(x, n - 1)

    out = marker_C.CompiledFunction(rec, config)(Marker(), 600)
    assert len(out) == 601
    assert set(out) <= {"cached", "body"}
    assert out.count("cached") > 590


def test_fast_path_frame_with_cells_and_closure(marker_C, Marker):
    config = marker_C.make_config(None, "torchlite", False, 8, None)
    k = object()

    def f(x):
        def g():
            return x, k

        return g

    marker_C._test_insert_constant_entry(f, config, 42)
    cf = marker_C.CompiledFunction(f, config)
    x = Marker()
    refs = sys.getrefcount(x), sys.getrefcount(k)
    for _ in range(100):
        assert cf(x) == 42
    assert (sys.getrefcount(x), sys.getrefcount(k)) == refs


def test_entries_of_another_config_are_ignored(marker_C, Marker):
    cfg_a = marker_C.make_config(None, "torchlite", False, 8, None)
    cfg_b = marker_C.make_config(None, "torchlite", False, 8, None)

    def f(x):
        return "body"

    marker_C._test_insert_constant_entry(f, cfg_a, "a")
    assert marker_C.CompiledFunction(f, cfg_b)(Marker()) == "body"
    assert marker_C.CompiledFunction(f, cfg_a)(Marker()) == "a"
    assert marker_C.cache_entry_count(f) == 2


def test_failed_capture_raises_and_releases_the_frame(marker_C, Marker):
    marker_C._test_use_stub_compiler(2)

    def f(x, y):
        return "body"

    cf = marker_C.CompiledFunction(f, marker_C.make_config(None, "torchlite", False, 8, None))
    x, y = Marker(), object()
    refs = sys.getrefcount(x), sys.getrefcount(y)
    top = marker_C._test_datastack_top()
    for _ in range(200):
        with pytest.raises(ValueError, match="stub compiler failed on f"):
            cf(x, y)
    assert marker_C._test_datastack_top() == top
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs
    assert not marker_C.is_hook_installed()
    assert marker_C.cache_entry_count(f) == 0
