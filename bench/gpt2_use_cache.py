"""GPT-2 small 8x512 bf16 inference on CUDA, use_cache=True then False on one compiled model:
eager / torchlite / torch.compile wall time per call (30 calls, synchronized), host time per call
(from a synchronize to the call's return: what the host spends enqueuing), torchlite's kernel
launches and torch ops per call, and the profiler's kernel table of each.

    python bench/gpt2_use_cache.py
"""

import collections
import statistics
import time

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

import torchlite


class Rec(TorchDispatchMode):
    _torchlite_transparent_mode = True

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


torch.manual_seed(0)
m = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval().to("cuda", torch.bfloat16)
ids = torch.randint(0, 50257, (8, 512), device="cuda")
tl = torchlite.compile(m)
tc = torch.compile(m)


def wall(f, n=30):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def host(f, n=15):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e3


with torch.no_grad():
    for uc in (True, False):
        row = []
        for name, fn in (("eager", m), ("torchlite", tl), ("torch.compile", tc)):
            f = lambda fn=fn, uc=uc: fn(ids, use_cache=uc).logits
            ref = m(ids, use_cache=uc).logits.float()
            err = ((f().float() - ref).norm() / ref.norm()).item()
            row.append(f"{name} wall {wall(f):.3f} host {host(f):.3f} ms err {err:.1e}")
        print(f"use_cache={uc}: " + " | ".join(row), flush=True)
    for uc in (True, False):
        c0 = torchlite.counters()["kernel_launches"]
        tl(ids, use_cache=uc)
        c1 = torchlite.counters()["kernel_launches"]
        with Rec() as r:
            out = tl(ids, use_cache=uc)
        print(
            f"torchlite use_cache={uc}: launches/call {c1 - c0}, aten ops/call {len(r.ops)}: {collections.Counter(r.ops).most_common()}",
            flush=True,
        )
        if uc:
            ref = m(ids, use_cache=True)
            l, e = out.past_key_values.layers[0], ref.past_key_values.layers[0]
            print(
                "kv strides tl",
                l.keys.stride(),
                l.values.stride(),
                "eager",
                e.keys.stride(),
                "logits",
                out.logits.stride(),
                ref.logits.stride(),
            )
    print(torchlite.counters(), flush=True)
    from torch.profiler import ProfilerActivity, profile

    for uc in (True, False):
        for name, fn in (("torchlite", tl), ("torch.compile", tc)):
            f = lambda fn=fn, uc=uc: fn(ids, use_cache=uc).logits
            f()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
                for _ in range(5):
                    f()
                torch.cuda.synchronize()
            print(f"== {name} use_cache={uc} (5 calls)")
            print(
                p.key_averages().table(
                    sort_by="cuda_time_total", row_limit=16, max_name_column_width=60
                )
            )
