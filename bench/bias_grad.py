"""The bias gradient of a linear layer in backward: a column sum of the output gradient g
[M, N]. Device time of eager's sum, torchlite's reduction kernel, torch.compile's, and a
cuBLAS GEMV (`ones[1, M] @ g`, the form max-autotune would try against ours in a training
backward), behind a spinning kernel (the host queues the calls while it runs, so launch
overhead is not counted), bf16, GPT-2 small's and BERT-base's sizes.

    python bench/bias_grad.py

H100, 2026-11-27 (docs/internals/cuda_graphs.md, "Training graphs"): 4096x3072 eager 16.60 us,
torchlite 10.27, torch.compile 10.57, cuBLAS 9.64; 4096x768 11.50 / 4.80 / 10.70 / 6.85: the
GEMV gains 6% at one size and loses at the others, so the backward keeps its reduction.
"""

import os
import statistics
import tempfile

_tmp = tempfile.mkdtemp(prefix="tl_bias_grad_")
os.environ.setdefault("TORCHLITE_CACHE_DIR", os.path.join(_tmp, "torchlite"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_tmp, "inductor"))

import torch

import torchlite

SIZES = [(4096, 3072), (4096, 768), (1024, 3072), (1024, 768)]


def device_us(fn, *args, reps: int = 7, calls: int = 20) -> float:
    """Median over `reps` of the mean device time of `calls` back-to-back `fn(*args)`."""
    fn(*args)
    fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda._sleep(3_000_000)  # holds the stream while the calls are queued
        start.record()
        for _ in range(calls):
            fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def column_sum(g):
    return g.sum(0)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for m, n in SIZES:
        g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        ones = torch.ones(1, m, device="cuda", dtype=torch.bfloat16)
        tl, tc = torchlite.compile(column_sum), torch.compile(column_sum)
        expected = g.float().sum(0)
        for fn in (tl, tc):
            torch.testing.assert_close(fn(g).float(), expected, rtol=2e-2, atol=1e-1)
        row = {
            "eager sum": device_us(column_sum, g),
            "torchlite sum": device_us(tl, g),
            "torch.compile sum": device_us(tc, g),
            "cuBLAS ones@g": device_us(torch.mm, ones, g),
        }
        print(f"{m}x{n} bf16: " + "; ".join(f"{k} {v:.2f} us" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
