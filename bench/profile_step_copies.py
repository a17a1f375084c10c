"""Host work of one training step (forward, loss.backward(), AdamW) of a timm CNN, eager vs
torchlite vs torch.compile, from one torch.profiler trace each: copy_/clone/fill_ calls (forward
and whole step), kernel launches, cudaMemcpyAsync calls, and the fill_ calls with their shapes,
callers and CPU time. Batch norm's running statistics are the case this watches: eager's kernel
updates them in place, a compiled forward must too (tests/python/training/
test_running_stats_in_place.py).

    python bench/profile_step_copies.py [--device cuda|cpu] [--model resnet50] [--batch 32]
                                        [--px 224] [--kinds eager,torchlite,torch.compile]
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torchvision_compat import work_around_mismatched_torchvision

work_around_mismatched_torchvision()

import timm

import torchlite

_COUNTED = ("aten::copy_", "aten::clone", "aten::fill_", "aten::zero_")


def _wrap(kind: str, model):
    if kind == "torchlite":
        return torchlite.compile(model)
    if kind == "torch.compile":
        return torch.compile(model)
    return model


def _callers(e, depth=4) -> str:
    names, p = [], e.cpu_parent
    while p is not None and len(names) < depth:
        names.append(p.name)
        p = p.cpu_parent
    return " < ".join(names)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--px", type=int, default=224)
    ap.add_argument("--kinds", default="eager,torchlite,torch.compile")
    args = ap.parse_args()
    dev = args.device
    torch.manual_seed(0)
    base = timm.create_model(args.model).to(dev).train()
    x = torch.randn(args.batch, 3, args.px, args.px, device=dev)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    print(f"{args.model} fp32 bs{args.batch} {args.px}px on {dev}")
    for kind in args.kinds.split(","):
        model = copy.deepcopy(base)
        fn = _wrap(kind, model)
        opt = torch.optim.AdamW(model.parameters())

        def step(fn=fn, opt=opt):
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                out = fn(x)
            out.float().square().mean().backward()
            opt.step()

        for _ in range(3):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
        for _ in range(2):  # NOTE: the second trace: the first one's start is not a step's
            with profile(activities=activities, record_shapes=True) as prof:
                step()
                if dev == "cuda":
                    torch.cuda.synchronize()
        events = prof.events()
        counts = collections.Counter(e.name for e in events)
        forward = [e for e in events if e.name == "forward"]
        fwd_counts: collections.Counter = collections.Counter()
        if forward:
            f = forward[0]
            lo, hi = f.time_range.start, f.time_range.end
            fwd_counts = collections.Counter(
                e.name for e in events if e.time_range.start >= lo and e.time_range.end <= hi
            )
        launches = sum(v for k, v in counts.items() if k in ("cudaLaunchKernel", "cuLaunchKernel"))
        launches += counts["cuLaunchKernelEx"] + counts["cudaLaunchKernelExC"]
        step_row = ", ".join(f"{k.split('::')[1]} {counts[k]}" for k in _COUNTED)
        fwd_row = ", ".join(f"{k.split('::')[1]} {fwd_counts[k]}" for k in _COUNTED)
        print(f"[{kind}] step: {step_row}; launches {launches}, memcpy {counts['cudaMemcpyAsync']}")
        print(f"[{kind}] forward: {fwd_row}")
        for e in events:
            if e.name == "aten::fill_" or e.name == "CompiledTraining":
                print(
                    f"    {e.name} {e.cpu_time_total:.0f} us cpu (self {e.self_cpu_time_total:.0f})"
                    f" {e.input_shapes if e.name == 'aten::fill_' else ''} < {_callers(e)}"
                )


if __name__ == "__main__":
    main()
