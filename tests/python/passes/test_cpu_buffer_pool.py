"""Large CPU kernel outputs (16 MB and more) come from torchlite's pool of warm memory: values,
dtypes and strides as eager's, a block is reused only once its tensor is gone (from any
thread), small outputs and TORCHLITE_CPU_POOL_MB=0 use torch's allocator, reset() frees
idle blocks."""

import os
import subprocess
import sys
import threading

import pytest
import torch
from helpers import assert_same

import torchlite
from torchlite import _C

BIG = (2048, 2048)  # 16 MB of float32: the smallest pooled size


def _softmax(x):
    return torch.softmax(x * 2, -1)


def _stats():
    return _C.cpu_pool_stats()


def test_large_output_is_pooled_and_equals_eager():
    x = torch.randn(BIG)
    fn = torchlite.compile(_softmax)
    before = _stats()
    y = fn(x)
    assert_same(y, _softmax(x))
    after = _stats()
    assert after["fresh"] + after["reused"] == before["fresh"] + before["reused"] + 1
    assert after["live_bytes"] >= before["live_bytes"] + x.numel() * 4


def test_block_is_reused_only_after_its_tensor_is_freed():
    fn = torchlite.compile(_softmax)
    x1, x2 = torch.randn(BIG), torch.randn(BIG)
    y1 = fn(x1)
    y2 = fn(x2)  # y1 still alive: another block
    assert y1.data_ptr() != y2.data_ptr()
    assert_same(y1, _softmax(x1))
    assert_same(y2, _softmax(x2))
    ptr = y1.data_ptr()
    del y1
    reused = _stats()["reused"]
    y3 = fn(x1)
    assert y3.data_ptr() == ptr
    assert _stats()["reused"] == reused + 1
    assert_same(y3, _softmax(x1))
    assert_same(y2, _softmax(x2))


def test_tensor_freed_on_another_thread_returns_its_block():
    fn = torchlite.compile(_softmax)
    x = torch.randn(BIG)
    held = [fn(x)]
    ptr = held[0].data_ptr()
    t = threading.Thread(target=held.clear)
    t.start()
    t.join()
    assert fn(x).data_ptr() == ptr


@pytest.mark.parametrize(
    "dtype, shape",
    [
        (torch.bfloat16, (4096, 2048)),
        (torch.float16, (2048, 4096)),
        (torch.float64, (1024, 2048)),
        (torch.int64, (1024, 2048)),
    ],
)
def test_pooled_outputs_of_every_dtype_equal_eager(dtype, shape):
    def fn(x):
        return (x * 3 + 1).t(), x > 0

    x = (torch.randn(shape) * 10).to(dtype)
    compiled = torchlite.compile(fn)
    for _ in range(2):
        got, want = compiled(x), fn(x)
        assert_same(got[0], want[0])
        assert_same(got[1], want[1])
        assert got[0].stride() == want[0].stride()


def test_small_outputs_use_torch_allocator():
    fn = torchlite.compile(_softmax)
    before = _stats()
    x = torch.randn(64, 64)
    assert_same(fn(x), _softmax(x))
    after = _stats()
    assert (after["fresh"], after["reused"]) == (before["fresh"], before["reused"])


def test_reset_frees_idle_blocks():
    fn = torchlite.compile(_softmax)
    y = fn(torch.randn(BIG))
    del y
    assert _stats()["idle_bytes"] > 0
    torchlite.reset()
    assert _stats()["idle_bytes"] == 0


def test_pool_off_by_environment():
    code = (
        "import torch, torchlite\n"
        "from torchlite import _C\n"
        "x = torch.randn(2048, 2048)\n"
        "y = torchlite.compile(lambda x: torch.softmax(x, -1))(x)\n"
        "torch.testing.assert_close(y, torch.softmax(x, -1))\n"
        "s = _C.cpu_pool_stats()\n"
        "assert s['fresh'] == 0 and s['reused'] == 0, s\n"
        "assert y.untyped_storage().resizable()\n"
    )
    env = dict(os.environ, TORCHLITE_CPU_POOL_MB="0")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr


def _child_softmax_sum(conn):
    # GNU OpenMP's thread pool does not survive fork(); like torch's own
    # forked workers, the child runs single-threaded.
    torch.set_num_threads(1)
    x = torch.ones(BIG)
    y = torchlite.compile(_softmax)(x)  # a pooled output in the forked child
    conn.send(float(y.sum()))
    conn.close()


def test_forked_child_allocates_from_its_pool():
    import multiprocessing as mp

    fn = torchlite.compile(_softmax)
    keep = fn(torch.randn(BIG))  # the parent holds a pooled block across the fork
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child_softmax_sum, args=(child,))
    p.start()
    assert parent.poll(120), "the forked child did not answer"
    total = parent.recv()
    p.join(30)
    assert p.exitcode == 0
    assert abs(total - BIG[0]) < 1e-2  # each softmax row sums to 1
    assert_same(keep, keep.clone())
