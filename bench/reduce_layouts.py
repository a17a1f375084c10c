"""Reductions in every layout on the GPU: eager vs torchlite vs torch.compile (inductor), one
process, sampled in turns (bench/gpu.py's method), plus each case's kernel schedule and the
per-kernel check against eager (bench/kernel_check.py).

    python bench/reduce_layouts.py [--quick] [--skip-inductor] [--no-kernel-check] [--only TEXT]
                                   [--device cpu]

Cases: a squeeze-excitation pooling (SiLU then a spatial mean) and batch-norm training
statistics + SiLU over a channels-last 64x32x112x112 bf16 activation (the issue's 5.4 ms
kernel), a spatial mean with more channels, column sums, a multi-axis sum, layer norms over short
rows and over a permuted channels-first input (ConvNeXt), and short rows.

--device cpu runs the CPU reduction layouts (f32, wall-clock medians in turns; --threads N sets
torch's and torchlite's thread count): GroupNorm(1, C) (PoolFormer's norm) over channels-last
and contiguous activations, spatial means and adaptive_avg_pool2d in channels-last, batch-norm
training statistics in channels-last, a column sum, a multi-axis sum (docs/reductions.md,
section 2), and the fusion cost model's prologue cases: a SiLU before a spatial mean (kept
fused), a broadcast producer recomputed per row, and a broadcast producer re-reading large
inputs (section 3).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import gpu
import kernel_check
import torch
import torch.nn.functional as F

import torchlite

BF16 = torch.bfloat16


def se_pool(x):
    return F.silu(x).mean((2, 3), keepdim=True)


def bn_stats_silu(x):
    v, m = torch.var_mean(x, (0, 2, 3), keepdim=True, correction=0)
    return F.silu((x - m) * torch.rsqrt(v + 1e-5))


def layer_norm_2d(x, w, b):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b, 1e-6).permute(0, 3, 1, 2)


def heavy_weights(w):
    return torch.exp(torch.sin(w)) * torch.tanh(w) * torch.erf(w)


def group_norm_1(x, w, b):
    return F.group_norm(x, 1, w, b, 1e-5)


def pool_head(x):
    return F.adaptive_avg_pool2d(F.silu(x), 1).flatten(1)


def bn_train(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True)


def cpu_layout_cases(n):
    def cl(*shape):
        return torch.randn(*shape).to(memory_format=torch.channels_last)

    def wb(c):
        return torch.randn(c), torch.randn(c)

    yield f"GroupNorm(1,C) cl {n}x64x56x56", group_norm_1, (cl(n, 64, 56, 56), *wb(64))
    yield f"GroupNorm(1,C) nchw {n}x64x56x56", group_norm_1, (torch.randn(n, 64, 56, 56), *wb(64))
    yield f"GroupNorm(1,C) cl {n}x512x7x7", group_norm_1, (cl(n, 512, 7, 7), *wb(512))
    yield f"spatial mean cl {n}x256x28x28", lambda x: x.mean((2, 3)), (cl(n, 256, 28, 28),)
    yield f"adaptive pool 1 +SiLU cl {n}x1280x7x7", pool_head, (cl(n, 1280, 7, 7),)
    yield (
        f"adaptive pool 7 cl {n}x256x14x14",
        lambda x: F.adaptive_avg_pool2d(x, 7) * 2,
        (cl(n, 256, 14, 14),),
    )
    yield f"BN train stats cl {n}x64x56x56", bn_train, (cl(n, 64, 56, 56), *wb(64))
    yield "column sum 65536x64", lambda x: x.sum(0), (torch.randn(65536, 64),)
    yield "sum (0,2) 64x64x1024", lambda x: x.sum((0, 2)), (torch.randn(64, 64, 1024),)
    yield (
        f"sum (1,2,3) of cl {n}x64x56x56",
        lambda x: x.sum((1, 2, 3)),
        (cl(n, 64, 56, 56),),
    )


def cpu_cases(quick):
    n = 2 if quick else 8
    yield from cpu_layout_cases(n)
    x = torch.randn(n, 32, 56, 56)
    yield f"SE pool cl {n}x32x56x56 f32", se_pool, (x.to(memory_format=torch.channels_last),)
    yield f"SE pool contiguous {n}x32x56x56 f32", se_pool, (x,)
    rows = 256 if quick else 2048
    yield (
        f"broadcast heavy producer {rows}x2048",
        lambda x, w: (x * heavy_weights(w)).sum(-1),
        (torch.randn(rows, 2048), torch.randn(2048)),
    )
    yield (
        f"broadcast re-read producer {n // 2}x1024x2048",
        lambda x, a, b: (x * (a * b)).sum(-1),
        (torch.randn(n // 2, 1024, 2048), torch.randn(1024, 2048), torch.randn(1024, 2048)),
    )


def cpu_interleaved_ms(fns, args, rounds=7, iters=5):
    """Median wall-clock ms a call of each function, sampled in turns."""
    import statistics
    import time

    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(iters):
                fn(*args)
            times[i].append((time.perf_counter() - start) * 1e3 / iters)
    return [statistics.median(t) for t in times]


def cases(quick):
    n = 8 if quick else 64

    def cl(*shape, dtype=BF16):
        return torch.randn(*shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)

    yield f"SE pool cl {n}x32x112x112 bf16", se_pool, (cl(n, 32, 112, 112),)
    yield f"BN stats+SiLU cl {n}x32x112x112", bn_stats_silu, (cl(n, 32, 112, 112),)
    yield f"spatial mean cl {n}x256x28x28", lambda x: x.mean((2, 3)), (cl(n, 256, 28, 28),)
    yield "column sum 1Mx64 f32", lambda x: x.sum(0), (torch.randn(1 << 20, 64, device="cuda"),)
    yield (
        "column sum 65536x1024 bf16",
        lambda x: x.sum(0),
        (torch.randn(65536, 1024, device="cuda", dtype=BF16),),
    )
    yield (
        "sum (0,2) 256x64x4096 f32",
        lambda x: x.sum((0, 2)),
        (torch.randn(256, 64, 4096, device="cuda"),),
    )
    # Layer norms over rows shorter than a warp's packs (ConvNeXt's 40 channels, Swin's 96) and
    # over a channels-first tensor permuted to channels-last (ConvNeXt's LayerNorm2d).
    for rows, width in ((100352, 40), (100352, 96)):
        yield (
            f"layer norm {rows}x{width} bf16",
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-6),
            (
                torch.randn(rows, width, device="cuda", dtype=BF16),
                torch.randn(width, device="cuda", dtype=BF16),
                torch.randn(width, device="cuda", dtype=BF16),
            ),
        )
    yield (
        f"layer norm permuted {n // 2}x40x56x56",
        layer_norm_2d,
        (
            torch.randn(n // 2, 40, 56, 56, device="cuda", dtype=BF16),
            torch.randn(40, device="cuda", dtype=BF16),
            torch.randn(40, device="cuda", dtype=BF16),
        ),
    )
    yield (
        "short rows 4Mx8 bf16",
        lambda x: x.sum(-1),
        (torch.randn(1 << 22, 8, device="cuda", dtype=BF16),),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-inductor", action="store_true")
    ap.add_argument("--no-kernel-check", action="store_true")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    a = ap.parse_args()
    cpu = a.device == "cpu"
    if a.threads:
        torch.set_num_threads(a.threads)
    if cpu:
        print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads")
    else:
        props = torch.cuda.get_device_properties(0)
        print(f"torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs")
    timed = cpu_interleaved_ms if cpu else gpu.interleaved_ms
    print(
        f"{'case':34} {'eager ms':>9} {'torchlite':>10} {'inductor':>9} {'eager/tl':>9}"
        f" {'ind/tl':>7} {'kernels':>7} {'tl err':>8}",
        flush=True,
    )
    checks = []
    with torch.no_grad():
        for name, fn, args in (cpu_cases if cpu else cases)(a.quick):
            if a.only not in name:
                continue
            torchlite.reset()
            before = torchlite.counters()["kernels"]
            tl = torchlite.compile(fn)
            tl(*args)
            kernels = torchlite.counters()["kernels"] - before
            err = gpu.rel_err(tl(*args), fn(*args))
            ind_ms = float("nan")
            if a.skip_inductor:
                eager, tl_ms = timed([fn, tl], args)
            else:
                ind = torch.compile(fn)
                ind(*args)
                eager, tl_ms, ind_ms = timed([fn, tl, ind], args)
                torch._dynamo.reset()
            print(
                f"{name:34} {eager:9.3f} {tl_ms:10.3f} {ind_ms:9.3f} {eager / tl_ms:8.2f}x"
                f" {ind_ms / tl_ms:6.2f}x {kernels:7d} {err:8.1e}",
                flush=True,
            )
            if not (a.no_kernel_check or cpu):
                checks.append((name, kernel_check.check_kernels(fn, args)))
    losers = []
    for name, rows in checks:
        losers += kernel_check.report(name[:24], rows, 1.05)
    if checks:
        print(f"# kernel check: {len(losers)} kernel(s) slower than their eager ops")


if __name__ == "__main__":
    main()
