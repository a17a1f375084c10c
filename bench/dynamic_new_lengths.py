"""A new sequence length's cost on a frame that already has its size-generic entry.

transformers GPT-2 (as bench/dynamic.py's hf section), torchlite default: a few lengths to get
the size-generic entry, then N new lengths in a row, each called twice. Prints the first call's
time, the second call's (same length: no compile), their difference (what a new length costs),
the Python objects each new length leaves alive (gc.get_objects() after a full collection, before
and after the N lengths) and the cyclic collections the N lengths started (count and time per
generation). `TORCHLITE_LOGS=recompiles` adds each instance's replay and compile times.

    OMP_NUM_THREADS=1 python bench/dynamic_new_lengths.py [--n 40] [--layers 2] [--n-embd 128]

On a shared, loaded machine OMP_NUM_THREADS=1 keeps OpenMP barriers (waiting for a descheduled
thread) out of the numbers: with 2 threads at load ~10 on 2 cores every call ran 3-6x slower,
eager too.
"""

import argparse
import gc
import statistics
import time

import torch
from dynamic import make_model

import torchlite


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=40, help="new lengths")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    a = p.parse_args()
    model = make_model(a.layers, "cpu", a.n_embd)
    compiled = torchlite.compile(model)
    collections = []
    started = [0.0]

    def note(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))

    def ids(t):
        return torch.randint(0, 1000, (a.batch, t))

    with torch.no_grad():
        for t in (37, 61, 88):  # an exact entry, then the size-generic one
            compiled(ids(t))
        gc.collect()
        objects_before = len(gc.get_objects())
        gc.callbacks.append(note)
        first, second = [], []
        for t in range(100, 100 + a.n):
            x = ids(t)
            s = time.perf_counter()
            compiled(x)
            first.append(time.perf_counter() - s)
            s = time.perf_counter()
            compiled(x)
            second.append(time.perf_counter() - s)
        gc.callbacks.remove(note)
        gc.collect()
        objects_after = len(gc.get_objects())
    c = torchlite.counters()
    print(f"captures {c['frames']}, size instances {c['size_instances']}")
    print(
        f"first call at a new length ({a.n} lengths): median {statistics.median(first) * 1e3:.1f}"
        f" ms, max {max(first) * 1e3:.1f} ms"
    )
    cost = statistics.median(f - s for f, s in zip(first, second))
    print(
        f"second call at that length: median {statistics.median(second) * 1e3:.1f} ms; "
        f"a new length costs {cost * 1e3:.1f} ms (median of first - second)"
    )
    print(f"Python objects kept per new length: {(objects_after - objects_before) / a.n:.1f}")
    for g in (0, 1, 2):
        ts = [d for gen, d in collections if gen == g]
        print(f"generation {g} collections: {len(ts)}, {sum(ts) * 1e3:.1f} ms in all")


if __name__ == "__main__":
    main()
