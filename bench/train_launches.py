"""Kernel launches per training step (forward, loss.backward(), AdamW): eager vs torchlite vs
torch.compile, one process, counted by torch.profiler (host launch calls `cuLaunchKernel*` /
`cudaLaunchKernel*` and device kernels), with the host time of each region.

    python bench/train_launches.py [--only resnet50] [--kinds eager,torchlite,torch.compile]

Runs bench/train.py's CUDA rows (default: resnet50 fp32 bs32).
"""

from __future__ import annotations

import argparse
import collections
import copy
import importlib.util
import os

import torch
from torch.profiler import ProfilerActivity, profile

_HERE = os.path.dirname(os.path.abspath(__file__))


def _train_module():
    spec = importlib.util.spec_from_file_location("bench_train", os.path.join(_HERE, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count(runner, inputs) -> collections.Counter:
    for _ in range(3):
        runner.step(inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        runner.step(inputs)
        torch.cuda.synchronize()
    out = collections.Counter()
    for e in p.events():
        name = e.name
        if name.startswith(("cuLaunchKernel", "cudaLaunchKernel")):
            out["launch calls"] += 1
        elif name.startswith(("cudaMemcpy", "cuMemcpy")):
            out["memcpy calls"] += 1
        if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in name.lower():
            out["device kernels"] += 1
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="resnet50 fp32 bs32")
    p.add_argument("--kinds", default="eager,torchlite,torch.compile")
    args = p.parse_args()
    train = _train_module()
    import torchlite

    for name, (build, make_inputs, amp) in train.CUDA_ROWS.items():
        if args.only not in name:
            continue
        torch.manual_seed(0)
        base = build().cuda().train()
        inputs = make_inputs("cuda")
        print(name)
        for kind in args.kinds.split(","):
            model = copy.deepcopy(base)
            if kind == "eager":
                step_model = model
            elif kind == "torchlite":
                torchlite.reset()
                step_model = torchlite.compile(model)
            else:
                torch._dynamo.reset()
                step_model = torch.compile(model)
            runner = train.Runner(model, step_model, "cuda", amp)
            c = count(runner, inputs)
            print(f"  {kind:<14} " + "  ".join(f"{k} {v}" for k, v in sorted(c.items())))


if __name__ == "__main__":
    main()
