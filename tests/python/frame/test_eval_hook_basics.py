"""The frame hook without torch: Marker instances stand in for tensors, and the
stub compile_frame makes every captured frame a graph break run eagerly."""

import asyncio
import functools
import gc
import sys
import threading
import traceback
import warnings

import pytest


def compiled(C, fn, config=None, limit=8):
    config = config or C.make_config(None, "torchlite", False, limit, None)
    return C.CompiledFunction(fn, config)


def test_compiled_call_returns_the_plain_result(marker_C, Marker):
    def f(a, b, *, c=3):
        return a.v * b + c

    cf = compiled(marker_C, f)
    assert cf(Marker(2), 5, c=1) == f(Marker(2), 5, c=1) == 11
    assert cf(Marker(2), b=5) == 13


def test_hook_is_installed_only_inside_a_compiled_call(marker_C, Marker):
    seen = []

    def f(x):
        seen.append(marker_C.is_hook_installed())
        return x

    assert not marker_C.is_hook_installed()
    compiled(marker_C, f)(Marker())
    assert seen == [True]
    assert not marker_C.is_hook_installed()


def test_hook_is_removed_when_the_call_raises(marker_C, Marker):
    def f(x):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        compiled(marker_C, f)(Marker())
    assert not marker_C.is_hook_installed()


def test_second_call_hits_the_cache(marker_C, Marker):
    def f(x):
        return x.v + 1

    cf = compiled(marker_C, f)
    cf(Marker(1))
    hits = marker_C.counters()["cache_hits"]
    assert cf(Marker(2)) == 3
    assert marker_C.counters()["cache_hits"] == hits + 1
    assert marker_C.cache_entry_count(f) == 1
    assert marker_C.cache_entry_count(cf) == 1


def test_frames_without_tensors_are_not_cached(marker_C):
    def f(x, y):
        return [x, y]

    assert compiled(marker_C, f)(1, (2, 3)) == [1, (2, 3)]
    assert marker_C.cache_entry_count(f) == 0


def test_tensors_one_level_inside_containers_count(marker_C, Marker):
    def f(xs):
        return len(xs)

    cf = compiled(marker_C, f)
    cf([1, Marker()])
    cf.__wrapped__  # noqa: B018
    assert marker_C.cache_entry_count(f) == 1

    def g(d):
        return len(d)

    compiled(marker_C, g)({"a": Marker()})
    assert marker_C.cache_entry_count(g) == 1

    def h(nested):
        return len(nested)

    compiled(marker_C, h)([[Marker()]])  # two levels deep: not looked at
    assert marker_C.cache_entry_count(h) == 0


def test_frames_called_by_an_eager_frame_are_intercepted(marker_C, Marker):
    def inner(x):
        return x.v * 2

    def outer(x):
        return inner(x) + 1

    assert compiled(marker_C, outer)(Marker(4)) == 9
    assert marker_C.cache_entry_count(outer) == 1
    assert marker_C.cache_entry_count(inner) == 1


def test_reset_empties_the_caches(marker_C, Marker):
    def f(x):
        return x

    cf = compiled(marker_C, f)
    cf(Marker())
    assert marker_C.cache_entry_count(f) == 1
    marker_C.reset()
    assert marker_C.cache_entry_count(f) == 0
    cf(Marker())
    assert marker_C.cache_entry_count(f) == 1


def test_generators_and_coroutines_are_untouched(marker_C, Marker):
    def gen(x, n):
        for i in range(n):
            yield x.v + i

    async def coro(x):
        await asyncio.sleep(0)
        return x.v * 10

    async def agen(x):
        yield x.v
        yield x.v + 1

    async def drain(x):
        return [v async for v in agen(x)]

    def f(x):
        return list(gen(x, 5)), asyncio.run(coro(x)), asyncio.run(drain(x))

    assert compiled(marker_C, f)(Marker(1)) == ([1, 2, 3, 4, 5], 10, [1, 2])
    for fn in (gen, coro, agen):
        assert marker_C.cache_entry_count(fn) == 0


def test_generator_throw_and_close_run_finally(marker_C, Marker):
    log = []

    def gen(x):
        try:
            yield x
            yield x
        finally:
            log.append("finally")

    def f(x):
        g = gen(x)
        next(g)
        with pytest.raises(ValueError):
            g.throw(ValueError("in gen"))
        g2 = gen(x)
        next(g2)
        g2.close()
        return log

    assert compiled(marker_C, f)(Marker()) == ["finally", "finally"]


def test_exception_propagates_with_type_message_and_traceback(marker_C, Marker):
    def user_function(x):
        raise ValueError(f"bad value {x.v}")

    with pytest.raises(ValueError, match="bad value 7") as info:
        compiled(marker_C, user_function)(Marker(7))
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "user_function" in names


def test_repeated_calls_leak_no_references(marker_C, Marker):
    def f(x, y):
        return y

    cf = compiled(marker_C, f)
    x, y = Marker(), object()
    for _ in range(10):
        cf(x, y)
    before = [sys.getrefcount(o) for o in (x, y, f, cf)]
    gc.collect()
    objs = len(gc.get_objects())
    for _ in range(1000):
        cf(x, y)
    gc.collect()
    assert [sys.getrefcount(o) for o in (x, y, f, cf)] == before
    assert len(gc.get_objects()) <= objs + 5


def test_recursion_200_deep(marker_C, Marker):
    def rec(x, n):
        return 0 if n == 0 else 1 + rec(x, n - 1)

    assert compiled(marker_C, rec)(Marker(), 200) == 200


def test_recursion_close_to_the_python_limit(marker_C, Marker):
    # 3.12 charges two C-recursion units per call under the hook; the hook
    # refunds them so the Python limit is what stops recursion.
    def rec(x, n):
        return 0 if n == 0 else 1 + rec(x, n - 1)

    depth = sys.getrecursionlimit() - 100
    assert compiled(marker_C, rec)(Marker(), depth) == depth
    with pytest.raises(RecursionError):
        compiled(marker_C, rec)(Marker(), sys.getrecursionlimit() + 100)
    assert not marker_C.is_hook_installed()


def test_threads_get_the_right_answers(marker_C, Marker):
    def f(x, i):
        total = 0
        for k in range(200):
            total += x.v + i + k
        return total

    cf = compiled(marker_C, f)
    results, errors = {}, []

    def worker(i):
        try:
            for _ in range(50):
                results[i] = cf(Marker(i), i)
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: f(Marker(i), i) for i in range(4)}
    assert not marker_C.is_hook_installed()


def test_compiled_method_via_decorator(marker_C, Marker):
    config = marker_C.make_config(None, "torchlite", False, 8, None)

    class Model:
        def __init__(self, k):
            self.k = k

        @functools.partial(marker_C.CompiledFunction, config=config)
        def forward(self, x):
            return self.k * x.v

    m = Model(3)
    assert m.forward(Marker(5)) == 15
    assert Model.forward(m, Marker(2)) == 6
    assert marker_C.cache_entry_count(Model.forward) == 1


def test_wrapper_supports_update_wrapper(C, config):
    def f(x):
        """doc of f"""
        return x

    cf = functools.update_wrapper(C.CompiledFunction(f, config), f)
    assert cf.__wrapped__ is f
    assert cf.__name__ == "f" and cf.__doc__ == "doc of f"
    assert cf.fn is f and cf.config is config
    cf.extra = 1
    assert cf.__dict__["extra"] == 1
    df = functools.update_wrapper(C.DisabledFunction(f), f)
    assert df.__wrapped__ is f and df.__qualname__ == f.__qualname__


def test_disabled_function_is_not_intercepted(marker_C, Marker):
    def leaf(x):
        return x.v

    disabled_leaf = marker_C.DisabledFunction(leaf)

    def f(x):
        return disabled_leaf(x) + 1

    assert compiled(marker_C, f)(Marker(1)) == 2
    assert marker_C.cache_entry_count(f) == 1
    assert marker_C.cache_entry_count(leaf) == 0


def test_nested_compiled_calls_use_the_innermost_config(marker_C, Marker):
    cfg_a = marker_C.make_config(None, "a", False, 8, None)
    cfg_b = marker_C.make_config(None, "b", False, 8, None)
    assert cfg_a.id != cfg_b.id

    def g(x):
        return "body"

    marker_C._test_insert_constant_entry(g, cfg_a, "from cache")
    g_a = marker_C.CompiledFunction(g, cfg_a)
    assert g_a(Marker()) == "from cache"
    assert marker_C.CompiledFunction(g, cfg_b)(Marker()) == "body"

    def outer(x):
        return g_a(x)

    assert marker_C.CompiledFunction(outer, cfg_b)(Marker()) == "from cache"


def test_cache_size_limit_runs_eagerly_and_warns_once(marker_C, Marker):
    def f(x, y):
        return y

    cf = compiled(marker_C, f, limit=2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert cf(Marker(), 1) == 1
        assert cf(Marker(), "s") == "s"
        assert marker_C.counters()["recompiles"] == 1
        assert cf(Marker(), 1.5) == 1.5
        assert cf(Marker(), None) is None
        assert cf(Marker(), 2) == 2  # still served by the first entry
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith("torchlite: f (test_eval_hook_basics.py:")
    assert "hit cache_size_limit (2); last guard failure: " in msgs[0]
    assert "L['y']" in msgs[0]
    assert "Raise torchlite.config.cache_size_limit" in msgs[0]
    assert marker_C.counters()["eager_fallbacks"] == 2
    assert marker_C.cache_entry_count(f) == 2


def test_recompiles_are_logged(marker_C, Marker):
    events = []
    marker_C.set_log_sink(lambda ch, msg: events.append((ch, msg)))
    marker_C.set_log_channels("recompiles")
    try:

        def f(x, y):
            return y

        cf = compiled(marker_C, f)
        cf(Marker(), 1)
        cf(Marker(), "s")
    finally:
        marker_C.set_log_channels("")
        marker_C.set_log_sink(None)
    assert len(events) == 1 and events[0][0] == "recompiles"
    assert events[0][1].startswith("f ") and "L['y']" in events[0][1]


def test_cache_size_limit_warning_as_error_propagates(marker_C, Marker):
    def f(x):
        return x.v

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="cache_size_limit"):
            compiled(marker_C, f, limit=0)(Marker())
    assert not marker_C.is_hook_installed()


def test_frames_are_not_intercepted_while_tracing(marker_C, Marker):
    def f(x):
        return x.v

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        assert compiled(marker_C, f)(Marker(3)) == 3
    finally:
        sys.settrace(None)
    assert marker_C.cache_entry_count(f) == 0


def test_closures_and_cells_work(marker_C, Marker):
    k = 10

    def f(x):
        def g():
            return x.v + k

        return g()

    assert compiled(marker_C, f)(Marker(1)) == 11
    assert compiled(marker_C, f)(Marker(2)) == 12
