"""CPU compiler benchmark: eager vs torchlite vs torch.compile (inductor), one process.

For each case: the median time per call after warmup, the ratios, and the cold compile time
(first call, from empty in-memory and on-disk caches) of torchlite and inductor. The three are
sampled in turns (a round of calls each, then the next round), so a machine whose load drifts
shifts all three alike and the ratios stay comparable.

    python bench/cpu.py [--quick] [--skip-inductor]

--quick uses smaller sizes (for a smoke run); the numbers in the README come from the full run.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

# NOTE: cold compiles need empty caches for both compilers, chosen before torch is imported.
_tmp = tempfile.mkdtemp(prefix="tl_bench_")
os.environ["TORCHLITE_CACHE_DIR"] = os.path.join(_tmp, "torchlite")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_tmp, "inductor")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

import torchlite


def chain6(x):
    return torch.sigmoid(x * 2 + 1) * x - torch.tanh(x)


def softmax_last(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def timed_in_turns(fns, args, rounds=7, budget_s=6.0):
    """Median ms per call of each function, sampled in turns: every round runs each function
    for about budget_s / rounds / len(fns) seconds (at least one call)."""
    for fn in fns:
        fn(*args)
    per_round = budget_s / rounds / len(fns)
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for fn, times in zip(fns, samples):
            start = time.perf_counter()
            while True:
                t = time.perf_counter()
                fn(*args)
                times.append(time.perf_counter() - t)
                if time.perf_counter() - start >= per_round:
                    break
    return [statistics.median(times) * 1e3 for times in samples]


def first_call_s(fn, args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def models(quick):
    cases = []
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        import conftest  # noqa: F401  (lets timm import next to a CPU-only torch)
        import timm

        m = timm.create_model("resnet18", pretrained=False).eval()
        size = 96 if quick else 224
        cases.append(("resnet18 b8", m, (torch.randn(8, 3, size, size),)))
    except Exception as e:  # noqa: BLE001
        print(f"# resnet18 skipped: {e}")
    try:
        import transformers

        cfg = transformers.BertConfig(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
            vocab_size=30522,
        )
        m = transformers.BertModel(cfg).eval()
        seq = 32 if quick else 128
        cases.append((f"BERT-small b8x{seq}", m, (torch.randint(0, 30522, (8, seq)),)))
    except Exception as e:  # noqa: BLE001
        print(f"# BERT skipped: {e}")
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-inductor", action="store_true")
    a = ap.parse_args()
    n = 1 << (20 if a.quick else 24)
    rows = 1024 if a.quick else 4096
    x = torch.randn(n)
    m = torch.randn(rows, 4096)
    w, b = torch.randn(4096), torch.randn(4096)
    cases = [
        (f"6-op pointwise, {n >> 20}M f32", chain6, (x,)),
        (f"softmax {rows}x4096", softmax_last, (m,)),
        (f"layer_norm {rows}x4096", layer_norm, (m, w, b)),
    ] + models(a.quick)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    head = (
        f"{'case':28} {'eager ms':>9} {'torchlite':>10} {'inductor':>9} {'tl/eager':>9} {'tl/ind':>7}"
        f" {'tl cold s':>9} {'ind cold s':>10}"
    )
    print(head)
    with torch.no_grad():
        for name, fn, args in cases:
            tl = torchlite.compile(fn)
            tl_cold = first_call_s(tl, args)
            torch.testing.assert_close(tl(*args), fn(*args), atol=1e-4, rtol=1e-4)
            fns = [fn, tl]
            ind_ms = ind_cold = float("nan")
            if not a.skip_inductor:
                ind = torch.compile(fn)
                ind_cold = first_call_s(ind, args)
                fns.append(ind)
            eager, tl_ms, *rest = timed_in_turns(fns, args)
            if rest:
                ind_ms = rest[0]
            print(
                f"{name:28} {eager:9.2f} {tl_ms:10.2f} {ind_ms:9.2f} {eager / tl_ms:8.2f}x"
                f" {ind_ms / tl_ms:6.2f}x {tl_cold:9.2f} {ind_cold:10.2f}",
                flush=True,
            )
    print("kernels compiled by torchlite:", torchlite.counters()["kernels"])


if __name__ == "__main__":
    main()
