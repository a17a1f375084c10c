"""Norm backward kernels: eager vs torchlite vs torch.compile, one process.

A norm's backward needs two reductions in different orders: the input gradient reduces each row
(g * w * x over the row), the weight gradient sums g * x_hat over every row (a column sum).
torchlite runs them as a row kernel and a column kernel that reads x and g again. This bench
times the backward alone (CUDA events around `out.backward(g)` after an untimed forward, medians)
and lists each backward kernel's GPU time (torch.profiler), so the column kernel's share -- what
computing both in one kernel would save at most -- is measured, not guessed.

    python bench/norm_backward.py [--device cuda|cpu] [--only NAME] [--kinds eager,torchlite,...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torchlite


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.2 + 1)

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


class LayerNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.2 + 1)
        self.bias = torch.nn.Parameter(torch.randn(d) * 0.2)

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias)


# name -> (module class, rows, width, dtype of weights and activations)
CASES = {
    "RMSNorm bf16 4096x4096 (Llama-7B, 8x512 tokens)": (LlamaRMSNorm, 4096, 4096, torch.bfloat16),
    "RMSNorm f32 4096x4096": (LlamaRMSNorm, 4096, 4096, torch.float32),
    "RMSNorm bf16 16384x2048": (LlamaRMSNorm, 16384, 2048, torch.bfloat16),
    "LayerNorm bf16 4096x768 (GPT-2, 8x512 tokens)": (LayerNorm, 4096, 768, torch.bfloat16),
    "LayerNorm bf16 32768x1024": (LayerNorm, 32768, 1024, torch.bfloat16),
}
CPU_SIZE = {"rows": 512, "width": 1024}
KINDS = ["eager", "torchlite", "torch.compile"]


def _build(kind, cls, d, dtype, device):
    torch.manual_seed(0)
    m = cls(d).to(device=device, dtype=dtype)
    if kind == "torchlite":
        return torchlite.compile(m)
    if kind == "torch.compile":
        return torch.compile(m)
    return m


def _backward_ms(m, x, g, device, iters=20, rounds=5):
    """Median over rounds of the mean backward time (the forward before each runs untimed)."""
    times = []
    for _ in range(rounds):
        total = 0.0
        for _ in range(iters):
            out = m(x)
            if device == "cuda":
                start, end = torch.cuda.Event(True), torch.cuda.Event(True)
                start.record()
                out.backward(g)
                end.record()
                end.synchronize()
                total += start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                out.backward(g)
                total += (time.perf_counter() - t0) * 1e3
        times.append(total / iters)
    return statistics.median(times)


def _kernels(m, x, g):
    """(name, us) of each GPU kernel of one backward, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    out = m(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out.backward(g)
        torch.cuda.synchronize()
    rows = []
    for e in prof.events():
        if str(e.device_type).endswith("CUDA") and "memset" not in e.name.lower():
            us = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
            rows.append((e.name, us))
    return rows


def run_case(name, cls, rows, d, dtype, device, kinds):
    x = (torch.randn(rows, d, device=device) * 2 + 0.5).to(dtype).requires_grad_()
    g = torch.randn(rows, d, device=device, dtype=dtype)
    moved = 3 * rows * d * dtype.itemsize  # x, g read once, dx written: the one-kernel floor
    print(f"{name} [run at {rows}x{d}]: one-pass floor {moved / 1e6:.1f} MB", flush=True)
    grads = {}
    for kind in kinds:
        try:
            m = _build(kind, cls, d, dtype, device)
            t0 = time.perf_counter()
            m(x).backward(g)
            cold = time.perf_counter() - t0
            x.grad = None
            m(x).backward(g)
            grads[kind] = x.grad.float().clone()
            ms = _backward_ms(m, x, g, device)
            x.grad = None
            line = f"  {kind:<14} backward {ms * 1e3:9.1f} us  cold {cold:6.2f} s"
            if device == "cuda":
                line += f"  ({moved / (ms * 1e-3) / 1e12:.2f} TB/s at the one-pass floor)"
            print(line, flush=True)
            if device == "cuda":
                for kname, us in _kernels(m, x, g):
                    print(f"      {us:8.1f} us  {kname[:90]}")
                x.grad = None
        except Exception as e:  # noqa: BLE001 -- a failing system is a row, not the end
            print(f"  {kind:<14} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    if "eager" in grads:
        for kind, gr in grads.items():
            err = (gr - grads["eager"]).abs().max().item()
            print(f"  {kind:<14} max |dx - eager dx| {err:.3g}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default="", help="comma-separated parts of case names")
    p.add_argument("--kinds", default=",".join(KINDS))
    args = p.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    print(f"torch {torch.__version__}, device {args.device}")
    if args.device == "cuda":
        print(f"card {torch.cuda.get_device_name()}")
        cfg = getattr(torch._inductor.config, "triton", None)
        print(f"inductor mix_order_reduction: {getattr(cfg, 'mix_order_reduction', 'absent')}")
    for name, (cls, rows, d, dtype) in CASES.items():
        only = [o.strip().lower() for o in args.only.split(",") if o.strip()]
        if only and not any(o in name.lower() for o in only):
            continue
        if args.device == "cpu":
            rows, d = CPU_SIZE["rows"], CPU_SIZE["width"]
        run_case(name, cls, rows, d, dtype, args.device, kinds)


if __name__ == "__main__":
    main()
