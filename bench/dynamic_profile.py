"""Where a size-generic entry's steady time goes, next to a static compile at the same length.

transformers GPT-2 (as bench/dynamic.py's hf section): torchlite default compiled over a few
lengths (the later ones served by the size-generic entry's instances), then a static compile for
the same length; for each, the median wall time of a call, the counters a call moves (kernel
launches, eager fallbacks, captures, size instances) and torch.profiler's ops and kernels by
self time (CPU and CUDA), so the two can be told apart op by op.

    python bench/dynamic_profile.py --device cuda --dtype bfloat16 --layers 6 --n-embd 768 \
        --batch 4 --lengths 37,61 --at 211
"""

import argparse
import statistics
import time

import torch
from dynamic import make_model
from torch.profiler import ProfilerActivity, profile

import torchlite

KEYS = ("frames", "size_instances", "kernel_launches", "eager_fallbacks", "cache_hits", "graphs")


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def measure(name, fn, ids, device, rows):
    with torch.no_grad():
        for _ in range(3):
            fn(ids)
        sync(device)
        before = dict(torchlite.counters())
        times = []
        for _ in range(20):
            t = time.perf_counter()
            fn(ids)
            sync(device)
            times.append(time.perf_counter() - t)
        after = torchlite.counters()
        moved = {k: (after[k] - before[k]) / 20 for k in KEYS if after[k] != before[k]}
        print(f"== {name}: {statistics.median(times) * 1e3:.2f} ms a call; per call {moved}")
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=acts) as p:
            for _ in range(5):
                fn(ids)
            sync(device)
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(p.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=60))
    print(p.key_averages().table(sort_by="count", row_limit=rows, max_name_column_width=60))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--device", default="cpu")
    a.add_argument("--dtype", default="float32")
    a.add_argument("--layers", type=int, default=2)
    a.add_argument("--n-embd", type=int, default=128)
    a.add_argument("--batch", type=int, default=2)
    a.add_argument("--lengths", default="37,61")
    a.add_argument("--at", type=int, default=211)
    a.add_argument("--rows", type=int, default=25)
    args = a.parse_args()
    import dynamic

    dynamic.DTYPE = getattr(torch, args.dtype)
    model = make_model(args.layers, args.device, args.n_embd)
    ids = {
        n: torch.randint(0, 1000, (args.batch, n), device=args.device)
        for n in [*map(int, args.lengths.split(",")), args.at]
    }
    measure("eager", model, ids[args.at], args.device, args.rows)
    torchlite.reset()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for x in ids.values():
            compiled(x)
    measure(
        f"torchlite default (instance at {args.at})", compiled, ids[args.at], args.device, args.rows
    )
    torchlite.reset()
    static = torchlite.compile(model, dynamic=False)
    measure(f"torchlite static ({args.at})", static, ids[args.at], args.device, args.rows)


if __name__ == "__main__":
    main()
