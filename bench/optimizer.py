"""Optimizer step benchmark: eager vs torchlite vs torch.compile of `opt.step()`, one process.

One row per optimizer over the same parameters (default: 100 tensors, ~10M float32 values, 50
Linear layers of 448x448 plus bias): median (and fastest) ms per step (gradients set once, steps repeated),
the speedup over eager's default (foreach) step, and the cold compile time (first step minus a
warm step). Each compiled optimizer's parameters are checked against eager's after the timed
steps (same gradients, same number of steps).

    python bench/optimizer.py [--device cpu|cuda] [--only NAME[,NAME...]] [--steps N]
                              [--layers N] [--width N] [--threads N] [--no-inductor]
                              [--gpt2 [--embd N --vocab N --blocks N]] [--dtype float32|bfloat16]
                              [--modes eager,torchlite,torch.compile]

`--modes` may add "torchlite ungrouped" (one launch per parameter, for comparison).
`--gpt2`: the parameters of a GPT-2 (default GPT-2 small: 148 tensors of 15 shapes, 124M values;
`--embd/--vocab/--blocks` shrink it for the CPU). The torchlite row also prints its kernel
launches per step (counters()["kernel_launches"]): one per parameter without horizontal fusion,
one per distinct update body with it (passes/group_kernels.h).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import torch

import torchlite

OPTIMIZERS = {
    "SGD momentum": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
    "SGD nesterov wd": lambda ps: torch.optim.SGD(
        ps, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4
    ),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "Adam amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-3, amsgrad=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01),
}


def make_params(layers: int, width: int, device: str) -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    out = []
    for _ in range(layers):
        out.append(torch.nn.Parameter(torch.randn(width, width, device=device) * 0.02))
        out.append(torch.nn.Parameter(torch.zeros(width, device=device)))
    return out


def make_gpt2_params(embd: int, vocab: int, blocks: int, device: str, dtype) -> list:
    """GPT-2's parameters in model order (transformers' GPT2LMHeadModel, tied head)."""
    torch.manual_seed(0)
    shapes = [(vocab, embd), (1024, embd)]
    for _ in range(blocks):
        shapes += [(embd,), (embd,), (embd, 3 * embd), (3 * embd,), (embd, embd), (embd,)]
        shapes += [(embd,), (embd,), (embd, 4 * embd), (4 * embd,), (4 * embd, embd), (embd,)]
    shapes += [(embd,), (embd,)]
    return [torch.nn.Parameter(torch.randn(s, device=device, dtype=dtype) * 0.02) for s in shapes]


def clone_with_grads(params, grads):
    ps = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, g in zip(ps, grads):
        p.grad = g
    return ps


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(step, steps: int, device: str) -> tuple[float, float, float]:
    """(first step s, median warm step ms, fastest warm step ms)."""
    sync(device)
    t0 = time.perf_counter()
    step()
    sync(device)
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return first, statistics.median(times), min(times)


def run_row(name, make_opt, params, grads, args) -> None:
    results = {}
    finals = {}
    modes = ["eager", "eager single-tensor", "torchlite"]
    if not args.no_inductor:
        modes.append("torch.compile")
    if args.modes:
        modes = ["eager"] + [m for m in args.modes.split(",") if m and m != "eager"]
    launches = {}
    for mode in modes:
        ps = clone_with_grads(params, grads)
        opt = make_opt(ps)
        if mode == "eager single-tensor":
            for g in opt.param_groups:
                g["foreach"] = False
        if mode == "torchlite":
            step = torchlite.compile(opt.step)
        elif mode == "torchlite ungrouped":  # one launch per parameter (no horizontal fusion)
            step = torchlite.compile(opt.step, options={"group_kernels": False})
        elif mode == "torch.compile":
            torch.compiler.reset()
            step = torch.compile(opt.step)
        else:
            step = opt.step
        results[mode] = time_steps(step, args.steps, args.device)
        # NOTE: one more step in every column (the same number of steps for the check below):
        # torchlite's counts its kernel launches.
        before = torchlite.counters()["kernel_launches"]
        step()
        if mode.startswith("torchlite"):
            launches[mode] = torchlite.counters()["kernel_launches"] - before
        finals[mode] = [p.detach() for p in ps]
    eager = results["eager"][1]
    for mode, (first, warm, best) in results.items():
        cold = f"{first - warm / 1e3:6.2f} s" if "compile" in mode or "lite" in mode else "-"
        match = "-"
        extra = f"  launches/step {launches[mode]}" if mode in launches else ""
        if mode != "eager":
            ok = all(
                torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                for a, b in zip(finals[mode], finals["eager"])
            )
            match = "yes" if ok else "NO"
        print(
            f"{name:18s} {mode:20s} {warm:9.3f} ms  {eager / warm:5.2f}x  (fastest {best:8.3f} ms)"
            f"  cold {cold:>9s}  matches eager: {match}{extra}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--only", default="", help="comma-separated optimizer names")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--width", type=int, default=448)
    ap.add_argument("--no-inductor", action="store_true", help="skip the torch.compile column")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    ap.add_argument("--gpt2", action="store_true", help="GPT-2's parameters (see --embd)")
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--modes", default="", help="comma-separated columns (eager always runs)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.gpt2:
        params = make_gpt2_params(args.embd, args.vocab, args.blocks, args.device, dtype)
    else:
        params = [p.to(dtype) for p in make_params(args.layers, args.width, args.device)]
        params = [torch.nn.Parameter(p.detach()) for p in params]
    torch.manual_seed(1)
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    total = sum(p.numel() for p in params)
    print(
        f"{len(params)} tensors, {total / 1e6:.1f}M values, {args.device}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}, {args.dtype}"
        + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else "")
    )
    only = [s for s in args.only.split(",") if s]
    for name, make_opt in OPTIMIZERS.items():
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        run_row(name, make_opt, params, grads, args)


if __name__ == "__main__":
    main()
