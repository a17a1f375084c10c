"""Python's cyclic garbage collector runs while torchlite captures a frame or compiles a
size-generic entry for new sizes, as it does during any other code: the young collections that
work's objects start count towards the older ones, which free reference cycles made before the
call. (A pause during capture and compile, core/gc_pause.h until session 26, lost those
collections: a model dropped under FSDP2, a reference cycle holding its parameters and gradients,
outlived the next model's first compiled step, 19.5 GB at the FSDP2 benchmark's peak.) The tests
lower the collector's thresholds so that the work of one call would collect, and check that
garbage in the middle generation made before the call is freed by it."""

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

W1 = torch.randn(32, 16)
W2 = torch.randn(16, 32)


def _block(x):
    b, t, c = x.shape
    h = F.gelu(F.linear(F.layer_norm(x, (c,)), W1))
    h = torch.softmax(h.view(b, t, 4, -1) * 0.5, dim=-1).view(b, t, -1)
    return x + F.linear(h, W2)


class _Cycle:
    pass


def _garbage_freed_by(call):
    """(call()'s result, whether a reference cycle dropped before the call, in the middle
    generation, was freed by the collections the call's own work started)."""
    threshold = gc.get_threshold()
    gc.collect()
    cycle = _Cycle()
    cycle.me = cycle
    cycle.payload = torch.ones(1000)  # NOTE: what such cycles hold in practice: tensors
    ref = weakref.ref(cycle)
    gc.collect(0)  # NOTE: reachable: moves to the middle generation
    del cycle
    # NOTE: a young collection every 10 objects, a middle one every 2 young ones; full ones
    # never (they also free the cycle, but CPython starts them by a ratio of long-lived objects
    # that a small test cannot reach). A new size's compile of _block starts 4 young collections
    # since the passes' new nodes take their meta results from C++ shape rules (it started more
    # when torch's Python meta kernels ran); a cached call starts none.
    gc.set_threshold(10, 2, 1_000_000)
    try:
        out = call()
        return out, ref() is None
    finally:
        gc.set_threshold(*threshold)


@pytest.fixture(autouse=True)
def _fresh():
    torchlite.reset()
    yield
    torchlite.reset()


def test_a_capture_collects_garbage_made_before_it():
    compiled = torchlite.compile(_block)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        frames = torchlite.counters()["frames"]
        out, freed = _garbage_freed_by(lambda: compiled(x))
        assert torchlite.counters()["frames"] == frames + 1  # captured in this call
    torch.testing.assert_close(out, _block(x), atol=1e-5, rtol=1e-5)
    assert freed


def test_a_new_sizes_compile_collects_garbage_made_before_it():
    compiled = torchlite.compile(_block)
    with torch.no_grad():
        for t in (5, 7):  # exact entry, then the size-generic one
            compiled(torch.randn(2, t, 16))
        for t in (9, 13):
            x = torch.randn(2, t, 16)
            before = torchlite.counters()["size_instances"]
            out, freed = _garbage_freed_by(lambda x=x: compiled(x))
            assert torchlite.counters()["size_instances"] == before + 1  # compiled in this call
            torch.testing.assert_close(out, _block(x), atol=1e-5, rtol=1e-5)
            assert freed


def test_a_cached_call_is_no_collection_point():
    """The other side: a call served from the cache makes too few objects to collect, so the
    tests above measure the capture's and compile's work, not the call's."""
    compiled = torchlite.compile(_block)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        compiled(x)
        frames = torchlite.counters()["frames"]
        out, freed = _garbage_freed_by(lambda: compiled(x))
        assert torchlite.counters()["frames"] == frames
    torch.testing.assert_close(out, _block(x), atol=1e-5, rtol=1e-5)
    assert not freed


def test_the_collector_stays_as_the_user_left_it():
    compiled = torchlite.compile(_block)
    with torch.no_grad():
        gc.disable()
        try:
            for t in (5, 7, 9):
                compiled(torch.randn(2, t, 16))
            assert not gc.isenabled()
        finally:
            gc.enable()
        compiled(torch.randn(2, 11, 16))
    assert gc.isenabled()


def _tensors_alive():
    gc.collect()
    return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))


def test_a_new_sizes_instance_keeps_no_meta_examples():
    """An instance compiled for new sizes keeps no meta tensor of its replay alive: each one
    kept was a Python object (with its storage's) the collector walked at every full
    collection, for as long as the layout stays cached (tens of them a new length for a small
    transformer)."""
    compiled = torchlite.compile(_block)
    n = 8
    with torch.no_grad():
        for t in (5, 7, 9):  # exact entry, then the size-generic one and an instance
            compiled(torch.randn(2, t, 16))
        before_tensors = _tensors_alive()
        before_objects = len(gc.get_objects())
        instances = torchlite.counters()["size_instances"]
        for t in range(11, 11 + n):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x), _block(x), atol=1e-5, rtol=1e-5)
        del x
        after_tensors = _tensors_alive()
        after_objects = len(gc.get_objects())
    assert torchlite.counters()["size_instances"] == instances + n  # one instance a length
    assert after_tensors == before_tensors
    # NOTE: before, ~22 objects a length stayed (12 meta tensors, 9 storages, 2 torch.Size).
    assert after_objects - before_objects <= 3 * n, after_objects - before_objects
