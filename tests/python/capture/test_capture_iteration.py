"""Lazy iteration, live views and autograd state (issue 20 items 9 and 10): iterators produce
items when stepped, as in CPython, so user code they run interleaves with the consumer; dict
views follow their dict; autograd hooks and flags behave as in eager.

Try statements are put in helpers: an inlined call runs its handlers at trace time.
"""

import builtins
import types
from collections.abc import Sequence

import pytest
import torch
from semantics_check import randn, same_as_eager

import torchlite

# --------------------------------------------------------------------------- lazy iterators


def test_zip_over_map_calls_the_function_once_per_step():
    def fn(x):
        n = 0

        def count(v):
            nonlocal n
            n += 1
            return v

        out = []
        for a, b in zip(map(count, [1, 2, 3]), [x, x * 2]):
            out.append(b * n + a)
        return out, n

    same_as_eager(fn, randn(3), fullgraph=True)


def test_extend_with_map_sees_the_list_growing():
    def fn(x):
        y = [x]
        y.extend(map(lambda v: y[-1] + v + len(y), [1, 2, 3]))  # noqa: C417 - map is tested
        return y

    same_as_eager(fn, randn(3), fullgraph=True)


def test_extend_with_map_whose_function_mutates_a_nonlocal():
    def fn(x):
        n = 0

        def count(v):
            nonlocal n
            n += 1
            return v * n

        y = [x]
        y.extend(map(count, [x, x * 2, x * 3]))
        return y, n

    same_as_eager(fn, randn(3), fullgraph=True)
    same_as_eager(fn, randn(3))


def test_extend_with_generator_reading_the_last_item():
    def fn(x):
        y = [x]

        def gen():
            for _ in range(3):
                yield y[-1] + 1

        y.extend(gen())
        return y

    same_as_eager(fn, randn(3), fullgraph=True)


def test_generator_body_runs_when_iterated_not_when_called():
    def fn(x):
        state = [1]

        def gen():
            yield state[0]

        it = gen()
        state[0] = 5
        return x + list(it)[0]  # noqa: RUF015 - list() runs the body now

    same_as_eager(fn, randn(3), fullgraph=True)


def test_generator_code_after_a_yield_runs_only_when_resumed():
    def fn(x):
        log = []

        def gen():
            log.append(1)
            yield x + 1
            log.append(2)
            yield x + 2

        it = gen()
        return next(it), list(log)

    same_as_eager(fn, randn(3), fullgraph=True)


def test_generator_interleaves_with_the_loop_body():
    def fn(x):
        state = [0]

        def gen():
            for _ in range(3):
                yield state[0]

        out = []
        for v in gen():
            state[0] += 1
            out.append(x + v)
        return out

    same_as_eager(fn, randn(3), fullgraph=True)


def test_any_and_in_stop_consuming_at_the_first_match():
    def fn(x):
        log = []

        def gen():
            for i in range(4):
                log.append(i)
                yield i

        it = gen()
        return x + 1, any(v > 0 for v in gen()), 1 in it, list(log), list(it)

    same_as_eager(fn, randn(3), fullgraph=True)


def test_generator_left_suspended_in_try_finally_runs_its_cleanup():
    def fn(x):
        log = []

        def gen():
            try:
                yield 1
                log.append("resumed")
                yield 2
            finally:
                log.append("cleanup")

        return x + next(gen()), log

    same_as_eager(fn, randn(3))


class _Pair(Sequence):
    """A collections.abc.Sequence: its __iter__ is Sequence's generator with `except IndexError`."""

    def __init__(self, *items):
        self.items = items

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)


def test_zip_of_two_abc_sequences_leaves_one_suspended_in_except_and_stays_one_graph():
    # NOTE: zip stops at the first sequence's end and leaves the second's generator suspended
    # inside `try: ... except IndexError:`; closing it runs no user code (GeneratorExit is not
    # an IndexError), so the frame stays one graph (transformers' DynamicCache does this).
    def fn(x):
        out = x
        for a, b in zip(_Pair(1, 2), _Pair(3.0, 4.0)):
            out = out * a + b
        return out

    same_as_eager(fn, randn(3), fullgraph=True)


def test_generator_suspended_in_except_that_catches_generator_exit_still_breaks():
    def fn(x):
        log = []

        def gen():
            try:
                yield 1
                yield 2
            except BaseException:
                log.append("closed")
                raise

        return x + next(gen()), log

    same_as_eager(fn, randn(3))
    assert torchlite.explain(fn)(randn(3)).graph_break_count >= 1


def _gen_with_except_index_error():
    try:
        yield 1
        yield 2
    except IndexError:
        log.append("closed")  # noqa: F821 - `log` is a global of the copy's module
        raise


def test_generator_whose_except_name_is_shadowed_by_a_module_global_still_breaks():
    # NOTE: a copy of the generator whose module binds `IndexError` to BaseException: closing
    # it runs the handler, so it must not be left to the trace.
    log = []
    scope = {"IndexError": BaseException, "log": log, "__builtins__": builtins}
    gen = types.FunctionType(_gen_with_except_index_error.__code__, scope)

    def fn(x):
        return x + next(gen())

    x = randn(3)
    torch.testing.assert_close(fn(x), x + 1)
    assert log == ["closed"]
    torch.testing.assert_close(torchlite.compile(fn)(x), x + 1)
    assert log == ["closed", "closed"]
    assert torchlite.explain(fn)(x).graph_break_count >= 1


def test_map_stepped_with_next_across_a_graph_break():
    def fn(x):
        m = map(lambda v: v + 1, [x, x * 2, x * 3])  # noqa: C417 - map is tested
        a = next(m)
        print(end="")
        return a, next(m), list(m)

    same_as_eager(fn, randn(3))


def test_list_appended_to_while_looping_is_iterated_further():
    def fn(x):
        items = [1, 2]
        out = x
        for v in items:
            if len(items) < 4:
                items.append(v + 10)
            out = out + v
        return out, items

    same_as_eager(fn, randn(3), fullgraph=True)


def test_reversed_list_follows_removals():
    def fn(x):
        items = [1, 2, 3]
        r = reversed(items)
        items.pop()
        return x + 1, list(r)

    same_as_eager(fn, randn(3), fullgraph=True)


def _dict_resized_while_iterating(x):
    d = {"a": 1, "b": 2}
    try:
        for _ in d:
            d["c"] = 3
    except RuntimeError as e:
        return x + 1, str(e)
    return x


def test_dict_resized_while_iterating_raises():
    same_as_eager(lambda x: _dict_resized_while_iterating(x), randn(3), fullgraph=True)


def test_dict_views_are_live():
    def fn(x):
        d = {"a": x}
        keys, values, items = d.keys(), d.values(), d.items()
        d["b"] = x * 2
        return list(keys), list(values), list(items), len(values), "b" in keys, type(keys).__name__

    same_as_eager(fn, randn(3), fullgraph=True)


def _len_of(x, it):
    try:
        return len(it)
    except TypeError as e:
        return x + 1, str(e)


def test_len_of_an_iterator_raises_type_error():
    same_as_eager(lambda x: _len_of(x, map(abs, [1, 2])), randn(3), fullgraph=True)
    same_as_eager(lambda x: _len_of(x, iter([1, 2])), randn(3), fullgraph=True)


def test_sum_honours_the_start_keyword():
    def fn(x):
        return sum([x, x], start=x), sum([1, 2], start=5), sum([1, 2], 10)

    same_as_eager(fn, randn(3), fullgraph=True)


def test_filter_and_enumerate_of_a_generator():
    def fn(x):
        def gen():
            yield x
            yield x * 0
            yield x * 2

        return [i * t for i, t in enumerate(filter(lambda t: bool(t.shape[0]), gen()), start=1)]

    same_as_eager(fn, randn(3), fullgraph=True)


# --------------------------------------------------------------------------- autograd state


def _pack_count(fn, x):
    packed = []

    def pack(t):
        packed.append(t.device.type)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x)
    out.sum().backward()
    return packed


def test_saved_tensors_hooks_pack_as_often_as_eager_on_the_first_call():
    def fn(x):
        return (x * x).sin().cos()

    x = randn(4).requires_grad_()
    expected = _pack_count(fn, x)
    compiled = torchlite.compile(fn)
    assert _pack_count(compiled, x) == expected  # the call that captures
    assert _pack_count(compiled, x) == expected  # from the cache


def test_retain_grad_in_compiled_code_fills_grad():
    def fn(x):
        y = x.sin()
        y.retain_grad()
        return y.cos(), y

    results = []
    for f in (fn, torchlite.compile(fn)):
        x = torch.ones(3, requires_grad=True)
        z, y = f(x)
        z.sum().backward()
        results.append((y.grad, x.grad, y.retains_grad))
    assert results[1][0] is not None
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])
    assert results[1][2] == results[0][2]


def test_leaf_made_with_requires_grad_in_compiled_code_stays_a_leaf():
    def fn(x):
        w = torch.ones(3, requires_grad=True)
        return w, (w * x).sum()

    results = []
    for f in (fn, torchlite.compile(fn)):
        w, loss = f(torch.full((3,), 2.0))
        loss.backward()
        results.append((w.requires_grad, w.is_leaf, loss.requires_grad, w.grad))
    assert results[1][:3] == results[0][:3]
    torch.testing.assert_close(results[1][3], results[0][3])


def test_an_iterator_over_the_callers_containers_is_returned_without_a_break():
    # NOTE: ModuleList.__iter__ (`iter(self._modules.values())`) is captured on its own when
    # eagerly run code loops over a ModuleList after a graph break.
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    names = {"a": 1, "b": 2, "c": 3}

    def advanced(m, d, k):
        i = iter(m._modules.values())
        for _ in range(k):
            next(i)
        return i, iter(d)

    compiled = torchlite.compile(advanced)
    for k in (0, 1, 1, 3):
        got, got_keys = compiled(layers, names, k)
        want, want_keys = advanced(layers, names, k)
        assert type(got) is type(want)
        assert [id(v) for v in got] == [id(v) for v in want]
        assert list(got_keys) == list(want_keys)
    report = torchlite.explain(advanced)(layers, names, 1)
    assert report.graph_break_count == 0
    report = torchlite.explain(layers.__iter__)()
    assert report.graph_break_count == 0


def test_a_returned_iterator_sees_later_changes_to_the_container_as_eager():
    d = {"x": 1, "y": 2}

    def values_of(d):
        return iter(d.values())

    compiled = torchlite.compile(values_of)
    for fn in (values_of, compiled):
        it = fn(d)
        assert next(it) == 1
        d["z"] = 3
        with pytest.raises(RuntimeError, match="changed size"):
            next(it)
        del d["z"]


def test_an_iterator_over_a_list_made_in_traced_code_is_still_right():
    def fresh(x):
        items = [x + 1, x * 2]
        return iter(items), items

    compiled = torchlite.compile(fresh)
    x = torch.randn(3)
    it, items = compiled(x)
    items.append(x)  # the iterator walks the very list returned beside it, as in eager
    assert len(list(it)) == 3
