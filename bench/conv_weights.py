"""Channels-last convolution weights kept per parameter version (passes/conv_weights.h) against
converted in every call: eager, torchlite with cache_conv_weights off and on, optionally
torch.compile, sampled in turns (bench/gpu.py's method), one process, bf16 CUDA inference.

    python bench/conv_weights.py [--models inception_v3,resnet50] [--batch 32] [--runs 5]
        [--torch-compile]

Prints per model the ms per forward of each, the ratio off/on, and the weight copies torchlite
made after the first call (counters()["conv_weight_copies"]; 0 with the cache on).
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


def row(name, batch, runs, with_torch_compile):
    import timm

    model = timm.create_model(name, pretrained=False).eval().to("cuda", torch.bfloat16)
    x = torch.randn(batch, 3, PX.get(name, 224), PX.get(name, 224), device="cuda")
    x = x.to(torch.bfloat16)
    fns = {
        "eager": model,
        "tl_off": torchlite.compile(model, options={"cache_conv_weights": False}),
        "tl_on": torchlite.compile(model, options={"cache_conv_weights": True}),
    }
    if with_torch_compile:
        fns["torch.compile"] = torch.compile(model)
    times = {k: [] for k in fns}
    with torch.no_grad():
        want = model(x).float()
        for k, f in fns.items():
            got = f(x).float()
            err = ((got - want).norm() / want.norm()).item()
            assert err < 2e-2, f"{name} {k}: relative error {err}"
        copies = torchlite.counters()["conv_weight_copies"]
        for _ in range(runs):
            for k, f in fns.items():
                times[k].append(cuda_ms(f, (x,), iters=10))
        copies = torchlite.counters()["conv_weight_copies"] - copies
    med = {k: statistics.median(v) for k, v in times.items()}
    cols = "  ".join(f"{k} {v:.3f} ms" for k, v in med.items())
    print(
        f"{name:<16} b{batch}  {cols}  off/on {med['tl_off'] / med['tl_on']:.3f}x"
        f"  weight copies in timed calls: {copies}",
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
