"""Python's cyclic garbage collector stays paused while torchlite captures a frame or compiles a
size-generic entry for new sizes (core/gc_pause.h). That work makes thousands of short-lived
Python objects (meta tensors, tuples, dicts); each 700 of them started a young collection, and
those count towards full collections, which walk every object of the process (0.1-0.5 s with
transformers loaded: a new sequence length's first call paid one whenever it landed there).
The tests lower the collector's first threshold so that any burst of allocations would collect,
and count the collections a call starts."""

import gc

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


def _collections_during(call):
    """(result of call(), generations of the collections started while it ran)."""
    started = []

    def note(phase, info):
        if phase == "start":
            started.append(info["generation"])

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(10, threshold[1], threshold[2])
    gc.callbacks.append(note)
    try:
        out = call()
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*threshold)
    return out, started


@pytest.fixture(autouse=True)
def _fresh():
    torchlite.reset()
    yield
    torchlite.reset()


def test_a_new_sizes_compile_starts_no_collection():
    compiled = torchlite.compile(_block)
    with torch.no_grad():
        for t in (5, 7):  # exact entry, then the size-generic one
            compiled(torch.randn(2, t, 16))
        for t in (9, 13, 6):
            x = torch.randn(2, t, 16)
            before = torchlite.counters()["size_instances"]
            out, started = _collections_during(lambda x=x: compiled(x))
            assert torchlite.counters()["size_instances"] == before + 1  # compiled in this call
            torch.testing.assert_close(out, _block(x), atol=1e-5, rtol=1e-5)
            # NOTE: the first allocation after the pause may collect once (the young objects
            # it counted); before the pause the replay and compile started several.
            assert len(started) <= 1, started
            assert 2 not in started


def test_a_capture_starts_no_collection():
    compiled = torchlite.compile(_block)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        frames = torchlite.counters()["frames"]
        out, started = _collections_during(lambda: compiled(x))
        assert torchlite.counters()["frames"] == frames + 1
    torch.testing.assert_close(out, _block(x), atol=1e-5, rtol=1e-5)
    assert len(started) <= 1, started


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
