"""Training step benchmark: eager vs torchlite vs torch.compile, one process.

One row per model: median step time (forward + loss.backward() + AdamW step), the speedup over
eager (torchlite rows: the model compiled with the compiled backward (the default) and with it
off ("tl op by op": graphs autograd records run op by op), and the whole step compiled, its
AdamW step included), peak memory (CUDA: torch.cuda.max_memory_allocated) and the cold compile
time (first step minus a warm step), and whether the compiled losses matched eager's over the
warmup steps.

    python bench/train.py [--device cpu|cuda] [--only NAME[,NAME...]] [--steps N] [--no-inductor]
                          [--kinds eager,torchlite,...] [--cpu-time]

`--cpu-time` (CPU rows) times the process's CPU time on one thread instead of the wall clock:
with tiny tensors that is the host cost per step, and it holds on a loaded machine.

CPU rows use CI-sized models (seconds); `--device cuda` runs the issue's rows: resnet50 fp32
bs32 and bf16 autocast bs64, BERT-base MLM bf16 8x512 (dropout on), GPT-2 bf16 8x512 with
labels, ViT-B/16 bf16 bs64.
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torchvision_compat import work_around_mismatched_torchvision

work_around_mismatched_torchvision()

import torchlite


def _timm(name, **kw):
    import timm

    return timm.create_model(name, pretrained=False, **kw)


def bert_config(size: str):
    """BERT-base ("full") or a tiny BERT for CPU runs; bench/profile_train.py uses it too."""
    import transformers

    if size == "full":
        return transformers.BertConfig()
    return transformers.BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )


def _bert(size: str):
    import transformers

    return transformers.BertForMaskedLM(bert_config(size))


def _gpt2(size: str):
    import transformers

    if size == "full":
        cfg = transformers.GPT2Config()
    else:
        cfg = transformers.GPT2Config(
            vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128
        )
    return transformers.GPT2LMHeadModel(cfg)


def _image_batch(bs, px):
    return lambda dev: {"x": torch.randn(bs, 3, px, px, device=dev)}


def _tokens(bs, seq, vocab, labels=True):
    def make(dev):
        ids = torch.randint(0, vocab, (bs, seq), device=dev)
        return {"input_ids": ids, "labels": ids} if labels else {"input_ids": ids}

    return make


# name -> (build model, make inputs, autocast dtype or None)
CPU_ROWS = {
    "resnet18 fp32 bs4 64px": (
        lambda: _timm("resnet18", num_classes=10),
        _image_batch(4, 64),
        None,
    ),
    "vit_tiny fp32 bs4 32px": (
        lambda: _timm("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=4, num_classes=10),
        _image_batch(4, 32),
        None,
    ),
    "bert tiny MLM fp32 4x64": (lambda: _bert("tiny"), _tokens(4, 64, 1000), None),
    "gpt2 tiny fp32 4x64": (lambda: _gpt2("tiny"), _tokens(4, 64, 1000), None),
}

CUDA_ROWS = {
    "resnet50 fp32 bs32": (lambda: _timm("resnet50"), _image_batch(32, 224), None),
    "resnet50 bf16 autocast bs64": (
        lambda: _timm("resnet50"),
        _image_batch(64, 224),
        torch.bfloat16,
    ),
    "BERT-base MLM bf16 8x512": (lambda: _bert("full"), _tokens(8, 512, 30522), torch.bfloat16),
    "GPT-2 bf16 8x512": (lambda: _gpt2("full"), _tokens(8, 512, 50257), torch.bfloat16),
    "ViT-B/16 bf16 bs64": (
        lambda: _timm("vit_base_patch16_224"),
        _image_batch(64, 224),
        torch.bfloat16,
    ),
}


def _loss(out):
    if hasattr(out, "loss") and out.loss is not None:
        return out.loss
    logits = out.logits if hasattr(out, "logits") else out
    return logits.float().square().mean()


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


class Runner:
    """One model copy with its optimizer, stepping through a given callable."""

    def __init__(self, model, step_model, device, amp):
        self.model = model
        self.step_model = step_model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.device = device
        self.amp = amp

    def step(self, inputs):
        # NOTE: no `with nullcontext()`: compiled whole ("tl step"), a with-block on it is a
        # break that leaves the rest of the step, opt.step() included, to CPython.
        if self.amp is None:
            loss = _loss(self.step_model(**inputs))
        else:
            with torch.autocast(self.device, dtype=self.amp):
                loss = _loss(self.step_model(**inputs))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


_clock = time.perf_counter


def _measure(runner, inputs, device, steps):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    _sync(device)
    t = _clock()
    first_loss = runner.step(inputs)
    _sync(device)
    first = _clock() - t
    losses = [first_loss]
    for _ in range(2):
        losses.append(runner.step(inputs))
    times = []
    for _ in range(steps):
        _sync(device)
        t = _clock()
        runner.step(inputs)
        _sync(device)
        times.append(_clock() - t)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    return med, max(first - med, 0.0), peak, [float(x) for x in losses]


KINDS = ["eager", "torchlite", "tl op by op", "tl step", "torch.compile"]


def bench_row(name, build, make_inputs, amp, device, steps, kinds):
    torch.manual_seed(0)
    base = build().to(device).train()
    inputs = make_inputs(device)
    results = {}
    # NOTE: "torchlite" is the default (compiled forward and backward); "tl op by op" turns the
    # compiled backward off (graphs autograd records run op by op through torch's autograd);
    # "tl step" compiles the whole step (forward, backward, zero_grad, AdamW's step) as one
    # function, so opt.step() runs torchlite's compiled optimizer step.
    for kind in kinds:
        model = copy.deepcopy(base)
        if kind in ("eager", "tl step"):
            torchlite.reset()
            step_model = model
        elif kind in ("torchlite", "tl op by op"):
            torchlite.reset()
            step_model = torchlite.compile(
                model, options={"compiled_backward": kind == "torchlite"}
            )
        else:
            torch._dynamo.reset()
            step_model = torch.compile(model)
        torch.manual_seed(1)
        runner = Runner(model, step_model, device, amp)
        if kind == "tl step":
            runner.step = torchlite.compile(runner.step)
        try:
            results[kind] = _measure(runner, inputs, device, steps)
        except Exception as e:  # noqa: BLE001 (NOTE: one failing backend must not hide the other rows)
            results[kind] = e
        del model, step_model, runner
        # NOTE: an optimizer (and an FSDP/DDP model) is left in reference cycles: collected
        # here, its parameters, gradients and states are not in the next row's peak.
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return results


def _fmt(kind, r, eager_ms, eager_losses):
    if isinstance(r, Exception):
        return f"  {kind:<14} FAILED: {type(r).__name__}: {str(r).splitlines()[0][:100]}"
    med, cold, peak, losses = r
    ms = med * 1e3
    match = all(abs(a - b) <= 1e-2 * max(1.0, abs(b)) for a, b in zip(losses, eager_losses))
    speed = f"{eager_ms / ms:5.2f}x" if eager_ms else "     "
    mem = "" if math.isnan(peak) else f"  peak {peak:8.0f} MB"
    return (
        f"  {kind:<14} {ms:9.2f} ms/step  {speed}{mem}  cold compile {cold:6.2f} s"
        f"  losses {'match' if match else 'DIFFER'}"
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--only", default="")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    p.add_argument("--cpu-time", action="store_true", help="CPU rows: process CPU time, 1 thread")
    args = p.parse_args()
    global _clock
    if args.cpu_time:
        if args.device != "cpu":
            p.error("--cpu-time times CPU rows only")
        torch.set_num_threads(1)
        _clock = time.process_time
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.no_inductor:
        kinds = [k for k in kinds if k != "torch.compile"]
    unknown = set(kinds) - set(KINDS)
    if unknown or "eager" not in kinds:
        p.error(f"--kinds: unknown {sorted(unknown)} (eager must be among them)")
    rows = CUDA_ROWS if args.device == "cuda" else CPU_ROWS
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}")
    for name, (build, make_inputs, amp) in rows.items():
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        res = bench_row(name, build, make_inputs, amp, args.device, args.steps, kinds)
        print(name)
        eager = res["eager"]
        eager_ms = None if isinstance(eager, Exception) else eager[0] * 1e3
        eager_losses = [] if isinstance(eager, Exception) else eager[3]
        for kind, r in res.items():
            print(_fmt(kind, r, eager_ms, eager_losses), flush=True)


if __name__ == "__main__":
    main()
