"""Llama's repeat_kv copy (grouped-query attention: each cached head repeated n_rep times) on the
GPU: eager vs torchlite with its sizes in the code (literal divisors: one kernel text per length)
vs torchlite with runtime sizes (the divisors n_rep x length x head size and length as dims
numbers, divided by with magic multipliers: one text for every length) vs torch.compile.
Microseconds a call, the median of CUDA-event timings, all in one process.

    python bench/runtime_divisors.py [--lengths 1000,4097] [--dtype bfloat16]
"""

import argparse

import torch

import torchlite


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="1000,4097")
    p.add_argument("--dtype", default="bfloat16")
    a = p.parse_args()
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
