"""Channels-last convolution weights: converted by torch inside every convolution, by the graph in
one grouped launch at its start (the default, passes/conv_weights.h: convert_conv_weights), or
kept per parameter version (the opt-in cache_conv_weights); eager and optionally torch.compile
beside them, sampled in turns (bench/gpu.py's method), one process, bf16 CUDA inference.

    python bench/conv_weights.py [--models inception_v3,resnet50] [--batch 32] [--runs 5]
        [--torch-compile]

Prints per model the ms per forward of each, and the CUDA kernels one call launches (torch
profiler: every kernel, cuDNN's and the weight copies included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torchvision_compat import work_around_mismatched_torchvision

import torchlite

sys.path.insert(0, _HERE)
from timing import cuda_ms

PX = {"inception_v3": 299}

VARIANTS = {
    "tl_torch": {"convert_conv_weights": False, "cache_conv_weights": False},
    "tl_grouped": {},
    "tl_cache": {"cache_conv_weights": True},
}


def cuda_kernels_in_call(fn, x) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(x)
        torch.cuda.synchronize()
    return sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def row(name, batch, runs, with_torch_compile):
    import timm

    model = timm.create_model(name, pretrained=False).eval().to("cuda", torch.bfloat16)
    x = torch.randn(batch, 3, PX.get(name, 224), PX.get(name, 224), device="cuda")
    x = x.to(torch.bfloat16)
    fns = {"eager": model}
    fns.update({k: torchlite.compile(model, options=o) for k, o in VARIANTS.items()})
    if with_torch_compile:
        fns["torch.compile"] = torch.compile(model)
    times = {k: [] for k in fns}
    with torch.no_grad():
        want = model(x).float()
        for k, f in fns.items():
            got = f(x).float()
            err = ((got - want).norm() / want.norm()).item()
            assert err < 2e-2, f"{name} {k}: relative error {err}"
        kernels = {k: cuda_kernels_in_call(f, x) for k, f in fns.items()}
        for _ in range(runs):
            for k, f in fns.items():
                times[k].append(cuda_ms(f, (x,), iters=10))
    med = {k: statistics.median(v) for k, v in times.items()}
    cols = "  ".join(f"{k} {v:.3f} ms ({kernels[k]} kernels)" for k, v in med.items())
    print(
        f"{name:<18} b{batch}  {cols}  torch/grouped {med['tl_torch'] / med['tl_grouped']:.3f}x"
        f"  grouped/cache {med['tl_grouped'] / med['tl_cache']:.3f}x",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="inception_v3,resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--torch-compile", action="store_true")
    a = parser.parse_args()
    work_around_mismatched_torchvision()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    for name in a.models.split(","):
        row(name, a.batch, a.runs, a.torch_compile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
