"""Issue 26 item 7: JIT code is freed when the last cache entry using it dies and on
torchlite.reset(); a soak of compile/drop/reset cycles keeps RSS bounded."""

import gc
import os
import threading
import time

import pytest
import torch
from conftest import needs_cpu_kernels

import torchlite
from torchlite import _C

pytestmark = needs_cpu_kernels


def fresh_function(i: int):
    """A new code object each call (a nested def would share one code object): its cache
    entries die with it."""
    scope = {"torch": torch}
    exec(f"def f_{i}(x):\n    return torch.tanh(x * {i + 1.5}) + {i}\n", scope)  # noqa: S102
    return scope[f"f_{i}"]


def run_compiled(i: int, n: int = 32):
    f = fresh_function(i)
    x = torch.randn(n)
    torch.testing.assert_close(torchlite.compile(f)(x), torch.tanh(x * (i + 1.5)) + i)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setattr(torchlite.config, "cache_dir", "")


def test_kernels_are_freed_with_the_function_that_used_them():
    gc.collect()
    base = _C.live_cpu_kernels()
    fns = [fresh_function(i) for i in range(5)]
    for i, f in enumerate(fns):
        x = torch.randn(16)
        torch.testing.assert_close(torchlite.compile(f)(x), torch.tanh(x * (i + 1.5)) + i)
    assert _C.live_cpu_kernels() >= base + 5
    del fns, f
    gc.collect()
    assert _C.live_cpu_kernels() == base


def test_reset_frees_kernels_of_functions_still_alive():
    gc.collect()
    base = _C.live_cpu_kernels()
    f = fresh_function(7)
    compiled = torchlite.compile(f)
    x = torch.randn(16)
    torch.testing.assert_close(compiled(x), f(x))
    assert _C.live_cpu_kernels() > base
    torchlite.reset()
    gc.collect()
    assert _C.live_cpu_kernels() == base
    torch.testing.assert_close(compiled(x), f(x))  # compiles again after the reset


def test_identical_kernels_share_code_until_the_last_user_dies():
    gc.collect()
    base = _C.live_cpu_kernels()
    a, b = fresh_function(3), fresh_function(3)  # two code objects, the same kernel
    x = torch.randn(16)
    torchlite.compile(a)(x), torchlite.compile(b)(x)
    assert _C.live_cpu_kernels() == base + 1
    del a
    gc.collect()
    assert _C.live_cpu_kernels() == base + 1
    torch.testing.assert_close(torchlite.compile(b)(x), torch.tanh(x * 4.5) + 3)
    del b
    gc.collect()
    assert _C.live_cpu_kernels() == base


def soak(seconds: float, threads: int = 1, forks: bool = False, report=None) -> tuple[int, float]:
    """Compile/drop/reset cycles for `seconds` on `threads` threads (with `forks`, a forked
    child compiles and checks a function of its own every 200 cycles); returns (cycles, RSS
    growth in MB after a warm-up). `report(elapsed_s, cycles, rss_mb)` is called about every
    30 s (the long soak's RSS curve)."""
    counter = iter(range(10**9))
    lock = threading.Lock()
    failures = []

    def work():
        try:
            while time.monotonic() < deadline:
                with lock:
                    i = next(counter)
                run_compiled(i % 5000)
                if i % 40 == 39:
                    torchlite.reset()
                if forks and i % 200 == 199:
                    fork_and_check(i + 1)
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            failures.append(e)

    for i in range(60):  # warm-up: allocator pools, torch's caches, LLVM's first use
        run_compiled(10_000 + i)
    torchlite.reset()
    gc.collect()
    start, began = rss_mb(), time.monotonic()
    deadline = began + seconds  # NOTE: after the warm-up, which may be slow on a loaded machine
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    while any(t.is_alive() for t in pool):
        for t in pool:
            t.join(timeout=30)
        if report:
            report(time.monotonic() - began, next(counter), rss_mb())
    if failures:
        raise failures[0]
    torchlite.reset()
    gc.collect()
    return next(counter), rss_mb() - start


def fork_and_check(i: int):
    """A forked child compiles and checks a function; it must exit cleanly (no lock left held
    by another thread of the parent, no crash)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            torch.set_num_threads(1)  # GNU OpenMP's pool does not survive fork
            run_compiled(i)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while True:  # NOTE: polled, so a child stuck on a lock fails the test instead of hanging it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("forked child did not finish in 120 s (a lock held across fork?)")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, f"forked child failed (status {status})"


def test_soak_compile_drop_reset_keeps_rss_bounded():
    # NOTE: kernels of objects earlier tests still hold (a module-level compiled function) stay.
    gc.collect()
    kernels_before = _C.live_cpu_kernels()
    soak(5, threads=2, forks=True)  # warm-up: the first cycles grow RSS once (arenas, caches)
    cycles, growth = soak(15, threads=2, forks=True)
    assert cycles > 20
    # NOTE: ~42 KB a compiled function used to stay mapped forever (+50 MB per 1,200).
    assert growth < 4, f"RSS grew {growth:.1f} MB over {cycles} compile/drop cycles"
    assert _C.live_cpu_kernels() <= kernels_before


@pytest.mark.slow
def test_soak_long_with_threads_and_forks():
    """The hour-long soak (TORCHLITE_SOAK_SECONDS, default 3600): 4 threads compiling, dropping
    and resetting, forked children compiling too; RSS stays bounded. Prints the RSS curve."""
    seconds = float(os.environ.get("TORCHLITE_SOAK_SECONDS", "3600"))

    def report(elapsed, cycles, rss):
        print(f"soak: {elapsed:7.0f} s  {cycles:8d} cycles  RSS {rss:8.1f} MB", flush=True)

    cycles, growth = soak(seconds, threads=4, forks=True, report=report)
    print(f"soak: {cycles} cycles, RSS growth {growth:.1f} MB")
    assert growth < 64, f"RSS grew {growth:.1f} MB over {cycles} cycles"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2 + 1


def test_entries_of_dropped_models_are_removed_from_the_shared_code():
    """forward's code object is shared by every instance: each compiled-and-dropped model used
    to leave an entry (and its kernels) on it for good (issue 26 item 8)."""
    gc.collect()
    base = _C.live_cpu_kernels()
    for _ in range(12):
        m = Block()
        x = torch.randn(3, 4)
        torch.testing.assert_close(torchlite.compile(m)(x), m(x))
        assert _C.cache_entry_count(Block.forward) >= 1
        del m
        gc.collect()
        assert _C.cache_entry_count(Block.forward) == 0
    assert _C.live_cpu_kernels() == base
    keep = Block()
    torch.testing.assert_close(torchlite.compile(keep)(x), keep(x))
    assert _C.cache_entry_count(Block.forward) == 1
