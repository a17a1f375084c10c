"""Llama's repeat_kv copy (grouped-query attention: each cached head repeated n_rep times) on the
GPU: eager vs torchlite with its sizes in the code (literal divisors: one kernel text per length)
vs torchlite with runtime sizes (the divisors n_rep x length x head size and length as dims
numbers, divided by with magic multipliers: one text for every length) vs torch.compile.
Microseconds a call, the median of CUDA-event timings, all in one process.
On the CPU (--device cpu) the runtime-size kernel is timed twice: dividing by the magic numbers
(the default) and dividing plainly by the loaded number (`_C._set_cpu_plain_division`), the
median of wall-clock timings.

    python bench/runtime_divisors.py [--lengths 1000,4097] [--dtype bfloat16]
    python bench/runtime_divisors.py --device cpu [--lengths 257,1000] [--dtype float32]
"""

import argparse
import time

import torch

import torchlite
from torchlite import _C


def repeat_kv(x, n_rep=4):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d) * 2


def time_us(fn, x, reps=50):
    with torch.no_grad():
        for _ in range(5):
            fn(x)
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000)
    return sorted(times)[len(times) // 2]


def time_cpu_us(kinds, x, rounds=40, best=False):
    """Median (or, `best`, the fastest) microseconds a call of each of `kinds`, timed in
    interleaved rounds (the load of a shared machine hits every kind alike)."""
    times = {name: [] for name in kinds}
    with torch.no_grad():
        for fn in kinds.values():
            for _ in range(3):
                fn(x)
        for _ in range(rounds):
            for name, fn in kinds.items():
                t0 = time.perf_counter()
                fn(x)
                times[name].append((time.perf_counter() - t0) * 1e6)
    return [sorted(t)[0 if best else len(t) // 2] for t in times.values()]


def plain_division(fn):
    """`fn` whose CPU kernels (compiled at its calls) divide by runtime divisors plainly."""

    def call(x):
        _C._set_cpu_plain_division(True)
        try:
            return fn(x)
        finally:
            _C._set_cpu_plain_division(False)

    return call


def main_cpu(a):
    dtype = getattr(torch, a.dtype)
    kinds = {
        "eager": repeat_kv,
        "literal": torchlite.compile(repeat_kv, dynamic=False),
        "runtime plain /": plain_division(torchlite.compile(repeat_kv, dynamic=True)),
        "runtime magic": torchlite.compile(repeat_kv, dynamic=True),
        "torch.compile": torch.compile(repeat_kv),
    }
    stat = "fastest" if a.best else "median"
    print(
        f"threads {torch.get_num_threads()}, x = [1, {a.heads}, length, {a.head_dim}] {a.dtype}, "
        f"{stat} of interleaved rounds"
    )
    print(f"{'length':>8} " + " ".join(f"{k:>16}" for k in kinds))
    for n in [int(s) for s in a.lengths.split(",")]:
        x = torch.randn(1, a.heads, n, a.head_dim, dtype=dtype)
        with torch.no_grad():
            for name, fn in kinds.items():
                torch.testing.assert_close(fn(x), repeat_kv(x), msg=name)
        row = time_cpu_us(kinds, x, best=a.best)
        print(f"{n:>8} " + " ".join(f"{t:>14.1f}us" for t in row))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="1000,4097")
    p.add_argument("--dtype", default=None, help="bfloat16 on cuda, float32 on cpu")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--heads", type=int, default=4, help="cpu only")
    p.add_argument("--best", action="store_true", help="cpu: the fastest round, not the median")
    p.add_argument("--head-dim", type=int, default=64, help="cpu only")
    a = p.parse_args()
    if a.device == "cpu":
        a.dtype = a.dtype or "float32"
        if a.lengths == "1000,4097":
            a.lengths = "257,1000"
        return main_cpu(a)
    a.dtype = a.dtype or "bfloat16"
    dtype = getattr(torch, a.dtype)
    kinds = {
        "eager": repeat_kv,
        "torchlite static": torchlite.compile(repeat_kv, dynamic=False),
        "torchlite runtime": torchlite.compile(repeat_kv, dynamic=True),
        "torch.compile": torch.compile(repeat_kv),
    }
    print(f"{'length':>8} " + " ".join(f"{k:>18}" for k in kinds))
    for n in [int(s) for s in a.lengths.split(",")]:
        x = torch.randn(1, 8, n, 128, device="cuda", dtype=dtype)
        with torch.no_grad():
            for name, fn in kinds.items():
                torch.testing.assert_close(fn(x), repeat_kv(x), msg=name)
        row = [time_us(fn, x) for fn in kinds.values()]
        print(f"{n:>8} " + " ".join(f"{t:>16.1f}us" for t in row))


if __name__ == "__main__":
    main()
