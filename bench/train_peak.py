"""What is alive at a training step's peak (CPU): one GPT-2 LM step (forward under bf16
autocast with labels, loss.backward()) profiled with torch.profiler's allocation events; prints
the step's peak above what was allocated before it and the allocations alive at that moment,
largest first, each with the op that made it.

    python bench/train_peak.py [--kinds eager,torchlite,torch.compile] [--layers 2] [--embd 256]
                               [--vocab 50257] [--batch 2] [--seq 256] [--pad] [--top 12]
                               [--backward] [--dropout P]

`--pad` forces torchlite's padded products (`pad_matmuls=True`, on by default only for CUDA
half precision), so the CPU shows the forward and backward graphs a GPU runs around an
unaligned vocabulary. Runs with `TORCHLITE_CPU_POOL_MB=0` (set here) so that kernel outputs are
torch allocations the profiler sees. `--backward` reports the peak within `loss.backward()` above
what was allocated when it started, with the allocations the backward made that are alive then
(a compiled backward that makes every layer's recomputed values at its start shows them all).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["TORCHLITE_CPU_POOL_MB"] = "0"
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torch._C._profiler import _EventType
from torchvision_compat import work_around_mismatched_torchvision

work_around_mismatched_torchvision()

import transformers

import torchlite


def _allocations(prof) -> list[tuple[int, int, int, list[str]]]:
    """(time, address, bytes (negative: a free), enclosing ops) of every CPU allocation."""
    out = []

    def walk(e, chain):
        if e.tag == _EventType.Allocation:
            a = e.extra_fields
            out.append((e.start_time_ns, a.ptr, a.alloc_size, chain))
            return
        for c in e.children:
            walk(c, [*chain, e.name])

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, [])
    out.sort(key=lambda x: x[0])
    return out


_BACKWARD = "train_peak.backward"


def _window(prof, name: str) -> tuple[int, int]:
    """(start, end) in ns of the profiled range `name`."""

    def walk(e):
        if e.name == name:
            return e
        for c in e.children:
            found = walk(c)
            if found is not None:
                return found
        return None

    for root in prof.profiler.kineto_results.experimental_event_tree():
        e = walk(root)
        if e is not None:
            return e.start_time_ns, e.end_time_ns
    raise RuntimeError(f"no profiled range {name}")


def _where(chain: list[str]) -> str:
    keep = [c for c in chain if not c.startswith(("<built-in", "torch/", "<"))]
    return " > ".join((keep or chain)[-3:])


def peak_report(kind: str, args) -> str:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=args.vocab,
        n_embd=args.embd,
        n_layer=args.layers,
        n_head=4,
        n_positions=args.seq,
        attn_pdrop=args.dropout,
        resid_pdrop=args.dropout,
        embd_pdrop=args.dropout,
    )
    model = transformers.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    if kind == "eager":
        fn = model
    elif kind == "torchlite":
        fn = torchlite.compile(model, options={"pad_matmuls": True if args.pad else None})
    else:
        fn = torch.compile(model)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fn(input_ids=ids, labels=ids).loss
        with torch.profiler.record_function(_BACKWARD):
            loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        step()
    live: dict[int, tuple[int, list[str]]] = {}
    now = peak = 0
    at_peak: dict[int, tuple[int, list[str]]] = {}
    events = _allocations(prof)
    if args.backward:
        start, end = _window(prof, _BACKWARD)
        events = [e for e in events if start <= e[0] <= end]
    for _, ptr, size, chain in events:
        if size > 0:
            live[ptr] = (size, chain)
        else:
            live.pop(ptr, None)
        now += size
        if now > peak:
            peak, at_peak = now, dict(live)
    rows = sorted(at_peak.values(), key=lambda v: -v[0])
    what = "backward peak" if args.backward else "step peak"
    lines = [f"{kind}: {what} {peak / 2**20:.1f} MB above the {what.split()[0]}'s start"]
    for size, chain in rows[: args.top]:
        lines.append(f"  {size / 2**20:9.2f} MB  {_where(chain)}")
    rest = rows[args.top :]
    lines.append(f"  {sum(v[0] for v in rest) / 2**20:9.2f} MB  in {len(rest)} more")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="eager,torchlite,torch.compile")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--pad", action="store_true", help="torchlite pads products as on CUDA")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--backward", action="store_true", help="the peak within loss.backward()")
    ap.add_argument("--dropout", type=float, default=0.0, help="GPT-2's dropout (all three)")
    args = ap.parse_args()
    for kind in args.kinds.split(","):
        print(peak_report(kind, args), flush=True)


if __name__ == "__main__":
    main()
