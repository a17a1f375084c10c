"""The frame hook with real tensors and the real capture (compile_frame)."""

import functools
import gc
import sys
import threading
import traceback

import pytest

torch = pytest.importorskip("torch")


def compiled(C, fn, limit=8):
    return C.CompiledFunction(fn, C.make_config(None, "torchlite", False, limit, None))


def test_tensor_frame_is_cached_and_hit_on_the_second_call(C):
    def f(x, y):
        return x * y + 1

    cf = compiled(C, f)
    x, y = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(cf(x, y), f(x, y))
    hits = C.counters()["cache_hits"]
    torch.testing.assert_close(cf(x, y), f(x, y))
    assert C.counters()["cache_hits"] == hits + 1
    assert C.cache_entry_count(f) == 1


def test_frames_without_tensors_are_not_cached(C):
    def f(a, b):
        return a + b

    assert compiled(C, f)(1, 2) == 3
    assert C.cache_entry_count(f) == 0


def test_module_and_list_of_tensors_arguments_are_cached(C):
    lin = torch.nn.Linear(4, 4)

    def f(m, xs):
        return m(xs[0]) + xs[1]

    cf = compiled(C, f)
    xs = [torch.randn(2, 4), torch.randn(2, 4)]
    torch.testing.assert_close(cf(lin, xs), f(lin, xs))
    assert C.cache_entry_count(f) == 1


def test_torch_code_is_never_intercepted(C):
    def f(x):
        return torch.nn.functional.normalize(x, dim=0)

    def g(x):
        # A graph break: print() runs eagerly, so the functional call goes
        # through the hook as an ordinary frame.
        print(end="")
        return torch.nn.functional.normalize(x, dim=0)

    x = torch.randn(4)
    for fn in (f, g):
        torch.testing.assert_close(compiled(C, fn)(x), torch.nn.functional.normalize(x, dim=0))
    assert C.cache_entry_count(torch.nn.functional.normalize) == 0


def test_reset_empties_the_caches(C):
    def f(x):
        return x + 1

    cf = compiled(C, f)
    cf(torch.ones(2))
    assert C.cache_entry_count(f) == 1
    C.reset()
    assert C.cache_entry_count(f) == 0
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 2.0))


def test_exception_keeps_type_message_and_user_frame(C):
    def user_fn(x):
        y = x + 1
        raise ValueError(f"bad {y.shape[0]}")

    with pytest.raises(ValueError, match="bad 3") as info:
        compiled(C, user_fn)(torch.ones(3))
    assert "user_fn" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert not C.is_hook_installed()


def test_no_reference_leaks_over_1000_calls(C):
    def f(x, y):
        return x * y

    cf = compiled(C, f)
    x, y = torch.randn(4), torch.randn(4)
    for _ in range(10):
        cf(x, y)
    gc.collect()
    refs = [sys.getrefcount(o) for o in (x, y, f, cf)]
    objs = len(gc.get_objects())
    for _ in range(1000):
        cf(x, y)
    gc.collect()
    assert [sys.getrefcount(o) for o in (x, y, f, cf)] == refs
    assert len(gc.get_objects()) <= objs + 10


@pytest.mark.filterwarnings("ignore:torchlite.*cache_size_limit:RuntimeWarning")
def test_recursion_200_deep_with_tensors(C):
    def rec(x, n):
        if n == 0:
            return x
        print(end="")  # graph break: each level is its own frame
        return rec(x + 1, n - 1)

    torch.testing.assert_close(compiled(C, rec)(torch.zeros(2), 200), torch.full((2,), 200.0))


def test_four_threads_get_the_right_answers(C):
    def f(x, k):
        return (x * k).sum()

    cf = compiled(C, f)
    errors, results = [], {}

    def worker(i):
        try:
            x = torch.full((4,), float(i))
            for _ in range(30):
                results[i] = float(cf(x, 2))
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: 8.0 * i for i in range(4)}
    assert not C.is_hook_installed()


def test_compiled_method_on_a_module(C):
    config = C.make_config(None, "torchlite", False, 8, None)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        @functools.partial(C.CompiledFunction, config=config)
        def forward(self, x):
            return torch.relu(self.lin(x))

    net = Net()
    x = torch.randn(2, 3)
    expected = torch.relu(net.lin(x))
    torch.testing.assert_close(net(x), expected)
    torch.testing.assert_close(net(x), expected)
    assert C.cache_entry_count(Net.forward) == 1


def test_disabled_function_runs_eagerly_inside_a_compiled_one(C):
    def leaf(x):
        return x * 2

    dleaf = C.DisabledFunction(leaf)

    def f(x):
        return dleaf(x) + 1

    x = torch.ones(2)
    torch.testing.assert_close(compiled(C, f)(x), torch.full((2,), 3.0))
    assert C.cache_entry_count(leaf) == 0
