"""Where a training step's time and memory go: one BERT MLM or GPT-2 LM step (forward under
bf16 autocast, loss.backward(), AdamW) profiled eagerly, through torchlite (with and without the
compiled backward) and through torch.compile.

    python bench/profile_train.py [--device cuda|cpu] [--model bert|gpt2|llama] [--out DIR]
                                  [--kinds eager,torchlite,...]

Per kind it prints the median step time, peak memory, the forward's host and device time, the
memory held after the forward, and what autograd saved for backward by dtype and shape (the
compiled backward's saves are not seen by saved-tensor hooks: under them it runs the captured
graph eagerly, so read its row's "memory after forward" instead). Into --out it writes
torch.profiler tables (by self device time, by call count, by input shape) and, for torchlite
kinds, explain()'s graphs and breaks. Per kind it also sorts the step's device kernels into
matmuls, attention, torch's own kernels (ops torchlite or inductor left unfused), generated
kernels and copies, with counts and device time, and prints the host time of the forward,
backward and optimizer regions. `--device cuda` profiles BERT-base or GPT-2 at 8x512; `cpu`
tiny configs, to check the script itself. `--model llama` is one GPU's share of
bench/distributed.py's FSDP2 row: 4 of its Llama-style blocks (d 4096) with bf16 parameters at
8x512, each block compiled on its own as FSDP2 compiles them.
"""

from __future__ import annotations

import argparse
import collections
import copy
import gc
import importlib.util
import os
import re
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torchvision_compat import work_around_mismatched_torchvision

work_around_mismatched_torchvision()

import torchlite

KINDS = ("eager", "tl op by op", "torchlite", "torch.compile")


def _load(name: str):
    """A sibling bench script as a module (this folder is not on sys.path)."""
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", os.path.join(_HERE, f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(device: str, name: str):
    """(model, batch, sequence length, vocabulary size)."""
    size = "full" if device == "cuda" else "small"
    batch, seq = (8, 512) if device == "cuda" else (2, 64)
    if name == "llama":
        dist = _load("distributed")
        if device == "cuda":
            cfg = {"vocab": 32000, "d": 4096, "layers": 4, "heads": 32, "inter": 11008}
        else:
            cfg = {"vocab": 256, "d": 64, "layers": 2, "heads": 4, "inter": 128}
        model = dist.Llama(**cfg).to(torch.bfloat16 if device == "cuda" else torch.float32)
        return model, batch, seq, cfg["vocab"]
    train = _load("train")  # NOTE: the configs bench/train.py times
    if name == "gpt2":
        model = train._gpt2(size)
        return model, batch, seq, model.config.vocab_size
    import transformers

    cfg = train.bert_config(size)
    return transformers.BertForMaskedLM(cfg), batch, seq, cfg.vocab_size


_MATMUL = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|sm90_|sm80_|wgmma", re.IGNORECASE)
_ATTENTION = re.compile(r"flash|fmha|attention|efficient_attention", re.IGNORECASE)


def kernel_category(name: str) -> str:
    """Which family a device kernel belongs to, by its name."""
    if name.startswith(("Memcpy", "Memset")):
        return "copy/memset"
    if _ATTENTION.search(name):
        return "attention"
    if _MATMUL.search(name):
        return "matmul"
    if name.startswith("triton"):
        return "generated (triton)"
    if "at::native" in name or "at::" in name or "elementwise_kernel" in name:
        return "torch kernels"
    return "generated (torchlite)"


def _annotation(name: str) -> bool:
    """A record_function range shown on the device timeline (this script's regions, inductor's
    `## Call CompiledFxGraph ##`, the optimizer's step), not a kernel."""
    return name in ("forward", "backward", "optimizer") or name.startswith(("##", "Optimizer."))


def kernel_summary(prof) -> str:
    """Device kernels of one profiled step by family: count and device time, and the torch
    kernels (unfused ops) by name."""
    count: collections.Counter = collections.Counter()
    busy: collections.Counter = collections.Counter()
    torch_kernels: collections.Counter = collections.Counter()
    torch_time: collections.Counter = collections.Counter()
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or _annotation(e.name):
            continue
        cat = kernel_category(e.name)
        count[cat] += 1
        busy[cat] += e.device_time_total
        if cat == "torch kernels":
            short = re.sub(r"<.*", "", e.name)[:90]
            torch_kernels[short] += 1
            torch_time[short] += e.device_time_total
    lines = [
        f"    {cat:<24} {count[cat]:5d} kernels {busy[cat] / 1e3:8.2f} ms"
        for cat in sorted(count, key=lambda c: -busy[c])
    ]
    lines += [
        f"      torch {torch_time[k] / 1e3:7.2f} ms x{c:<4d} {k}"
        for k, c in sorted(torch_kernels.items(), key=lambda kv: -torch_time[kv[0]])[:25]
    ]
    return "\n".join(lines)


def region_host_times(prof) -> str:
    """Host (CPU) time of the step's record_function regions."""
    want = ("forward", "backward", "optimizer")
    got: dict[str, float] = {}
    for e in prof.key_averages():
        if e.key in want:  # NOTE: each region is also listed as a device-side annotation
            got[e.key] = max(got.get(e.key, 0.0), e.cpu_time_total / 1e3)
    return ", ".join(f"{k} {got.get(k, float('nan')):.2f} ms" for k in want)


class SavedTensors:
    """What autograd saves for backward during one forward (saved-tensor hooks)."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        nbytes = t.numel() * t.element_size()
        self.items.append((str(t.dtype), tuple(t.shape), nbytes, t.untyped_storage().data_ptr()))
        return t

    def report(self) -> str:
        by_dtype: collections.Counter = collections.Counter()
        count: collections.Counter = collections.Counter()
        storages: dict[int, int] = {}
        for dtype, _, nbytes, ptr in self.items:
            by_dtype[dtype] += nbytes
            count[dtype] += 1
            storages[ptr] = max(storages.get(ptr, 0), nbytes)
        shapes = collections.Counter((d, s) for d, s, _, _ in self.items)
        mb = 2**20
        return (
            f"saved {len(self.items)} tensors, {sum(by_dtype.values()) / mb:.0f} MB "
            f"({sum(storages.values()) / mb:.0f} MB of distinct storages); "
            + ", ".join(f"{d}: {count[d]} / {b / mb:.0f} MB" for d, b in by_dtype.items())
            + "\n    most saved shapes: "
            + "; ".join(f"{d} {s} x{c}" for (d, s), c in shapes.most_common(20))
        )


def profile_kind(kind, base, inputs, device, out_dir, log):
    torchlite.reset()
    model = copy.deepcopy(base)
    options = {"compiled_backward": kind == "torchlite"}
    per_block = hasattr(model, "layers")  # NOTE: the Llama blocks, compiled one by one as FSDP2's
    step_model = model
    if kind == "torch.compile":
        torch._dynamo.reset()
        if per_block:
            for layer in model.layers:
                layer.compile()
        else:
            step_model = torch.compile(model)
    elif kind != "eager":
        if per_block:
            for i, layer in enumerate(model.layers):
                model.layers[i] = torchlite.compile(layer, options=options)
        else:
            step_model = torchlite.compile(model, options=options)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cuda = device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def forward():
        with torch.autocast(device, dtype=torch.bfloat16):
            out = step_model(**inputs)
        return out if isinstance(out, torch.Tensor) else out.loss

    def step(saved=None):
        with record_function("forward"):
            if saved is None:
                loss = forward()
            else:
                with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
                    loss = forward()
        opt.zero_grad(set_to_none=True)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()

    t = time.perf_counter()
    step()
    sync()
    cold = time.perf_counter() - t
    for _ in range(3):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(5):
        sync()
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    sync()
    t = time.perf_counter()
    loss = forward()
    host = time.perf_counter() - t
    sync()
    fwd = time.perf_counter() - t
    held = torch.cuda.memory_allocated() / 2**20 if cuda else float("nan")
    del loss
    saved = SavedTensors()
    step(saved)
    log(
        f"== {kind}: step median {statistics.median(times) * 1e3:.2f} ms, cold {cold:.1f} s, "
        f"peak {peak:.0f} MB; forward {fwd * 1e3:.2f} ms ({host * 1e3:.2f} ms host), "
        f"memory after forward {held:.0f} MB"
    )
    log("  " + saved.report())
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        sync()
    averages = prof.key_averages()
    launched = [
        e
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not _annotation(e.name)
    ]
    busy = sum(e.device_time_total for e in launched) / 1e3
    log(f"  device events in one step: {len(launched)}; self device time {busy:.2f} ms")
    log(f"  host time by region: {region_host_times(prof)}")
    if cuda:
        log(kernel_summary(prof))
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", kind)
    with open(os.path.join(out_dir, f"prof_{name}.txt"), "w") as f:
        f.writelines(
            averages.table(sort_by=sort, row_limit=80, max_name_column_width=90) + "\n\n"
            for sort in ("self_device_time_total", "count")
        )
        shaped = prof.key_averages(group_by_input_shape=True)
        f.write(
            shaped.table(
                sort_by="self_device_time_total",
                row_limit=60,
                max_name_column_width=60,
                max_shapes_column_width=100,
            )
        )
    if kind not in ("eager", "torch.compile"):
        torchlite.reset()
        with torch.autocast(device, dtype=torch.bfloat16):
            ex = torchlite.explain(model, options=options)(**inputs)
        log(
            f"  explain: {ex.graph_count} graphs, {ex.graph_break_count} breaks "
            f"{ex.breaks_by_kind}, ops per graph {ex.ops_per_graph}; {ex.training}"
        )
        with open(os.path.join(out_dir, f"explain_{name}.txt"), "w") as f:
            f.write(str(ex) + "\n")
            f.writelines("\n\nGRAPH\n" + str(g) for g in ex.graphs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--out", default=".")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--model", default="bert", choices=["bert", "gpt2", "llama"])
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)
        with open(os.path.join(args.out, "summary.txt"), "a") as summary:
            summary.write(line + "\n")

    torch.manual_seed(0)
    model, batch, seq, vocab = _model(args.device, args.model)
    base = model.to(args.device).train()
    ids = torch.randint(0, vocab, (batch, seq), device=args.device)
    inputs = {"input_ids": ids, "labels": ids}
    for kind in args.kinds.split(","):
        profile_kind(kind, base, inputs, args.device, args.out, log)
        gc.collect()  # NOTE: the kind's optimizer is in reference cycles: not in the next peak
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
