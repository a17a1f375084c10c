"""Per-call cost of size-generic entries next to static ones (issue 24: the guard cost of a
dynamic entry stays near a static one's).

Each case is one tiny compiled function on a small CPU tensor, compiled twice: dynamic=False
(exact TENSOR_MATCH guards) and dynamic=True (a size-generic entry: relaxed TENSOR_MATCH,
SIZE_RELATION guards for the sizes the trace relied on, the compiled graph picked by layout).
The dynamic entry is timed at the size it was captured for and at a second size it serves.
Runs alternate between the two compiles (`--rounds`), so a load change on the machine hits
both alike; the table gives the median of the per-round medians, in microseconds per call.

    python bench/overhead_dynamic.py [--rounds 5] [--samples 60] [--inner 50]
"""

import argparse
import os
import statistics
import sys

import torch

import torchlite

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import per_call_us


def pointwise(x):
    return x * 2 + 1


def relation(x):
    t = x.size(1)
    if t > 8:  # a SIZE_RELATION guard `s1 > 8` on a dynamic entry
        return x * 2 + t
    return x - t


def three_symbols(x):
    b, t, c = x.shape  # three symbols read from one input
    if t > 2 and c % 2 == 0:
        return x.view(b * t, c) * 2 + b
    return x


def reshaped(x):
    return x.reshape(x.size(0), -1) * 2  # view-or-copy checked per layout


CASES = [
    ("x * 2 + 1", pointwise, (4, 16), (6, 16)),
    ("relation t > 8", relation, (4, 16), (4, 24)),
    ("3 symbols of one input", three_symbols, (2, 4, 16), (3, 6, 16)),
    ("reshape(b, -1)", reshaped, (4, 4, 8), (5, 4, 8)),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--inner", type=int, default=50)
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; us per call")
    print(f"{'case':26} {'static':>9} {'dyn@first':>10} {'dyn@other':>10} {'dyn/static':>11}")
    with torch.no_grad():
        for name, fn, first, other in CASES:
            x, y = torch.randn(first), torch.randn(other)
            static = torchlite.compile(fn, dynamic=False)
            dynamic = torchlite.compile(fn, dynamic=True)
            for f in (static, dynamic):
                torch.testing.assert_close(f(x), fn(x))
            torch.testing.assert_close(dynamic(y), fn(y))
            before = torchlite.counters()["frames"]
            runs = {"s": [], "d1": [], "d2": []}
            for _ in range(a.rounds):
                runs["s"].append(per_call_us(static, (x,), a.samples, a.inner, 0.5))
                runs["d1"].append(per_call_us(dynamic, (x,), a.samples, a.inner, 0.5))
                runs["d2"].append(per_call_us(dynamic, (y,), a.samples, a.inner, 0.5))
            assert torchlite.counters()["frames"] == before, "a timed call captured again"
            s, d1, d2 = (statistics.median(runs[k]) for k in ("s", "d1", "d2"))
            print(f"{name:26} {s:9.2f} {d1:10.2f} {d2:10.2f} {max(d1, d2) / s:10.2f}x")


if __name__ == "__main__":
    main()
