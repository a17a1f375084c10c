"""Per-call host time of compiled transformers forwards on CUDA: torchlite (and torch.compile,
inductor default mode) side by side, one process.

For text models at bf16 8 x 512 a call is short enough that what the host does per call (guards,
allocation, argument packing, launches) decides the speed. Per model: `call` is the median time of
a call that ends in a synchronize; `host` is the median time the host spends issuing one call when
calls go back to back (the batch's wall time before its final synchronize, per call), i.e. what a
host-bound call costs.

    python bench/host_time.py [--only bert,roberta] [--batch 8] [--seq 512] [--no-torch-compile]
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
sys.path.insert(0, os.path.dirname(__file__))
from model_corpus import CORPUS, load_model_libs

import torchlite


def measure(fn, kwargs, reps: int = 7, inner: int = 10) -> tuple[float, float]:
    """(median synchronized call ms, median host issue us per call)."""
    with torch.no_grad():
        for _ in range(3):
            fn(**kwargs)
        torch.cuda.synchronize()
        calls, hosts = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(**kwargs)
            torch.cuda.synchronize()
            calls.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn(**kwargs)
            hosts.append((time.perf_counter() - t0) / inner * 1e6)
            torch.cuda.synchronize()
    return statistics.median(calls), statistics.median(hosts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="bert,roberta,albert,electra,gpt_neo,bart")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--no-torch-compile", action="store_true")
    a = ap.parse_args()
    load_model_libs()
    specs = {s.name: s for s in CORPUS}
    print(f"torchlite {torchlite.__file__}, torch {torch.__version__}")
    for name in a.only.split(","):
        model, args, kwargs = specs[name].build(full=True, batch=a.batch, seq=a.seq)
        assert not args
        model = model.cuda().to(torch.bfloat16)
        kwargs = {k: v.cuda() if torch.is_tensor(v) else v for k, v in kwargs.items()}
        row = [name]
        tl = torchlite.compile(model)
        call, host = measure(tl, kwargs)
        before = torchlite.counters()["kernel_launches"]
        with torch.no_grad():
            tl(**kwargs)
        launches = torchlite.counters()["kernel_launches"] - before
        row.append(f"torchlite call {call:.3f} ms host {host:.0f} us")
        if not a.no_torch_compile:
            tc = torch.compile(model)
            call_c, host_c = measure(tc, kwargs)
            row.append(f"torch.compile call {call_c:.3f} ms host {host_c:.0f} us")
        print(" | ".join(row), f"(torchlite launches a call: {launches})", flush=True)
        torchlite.reset()
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
