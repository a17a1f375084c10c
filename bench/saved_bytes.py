"""What a GPT-2 training step's forward saves for backward (CPU): torchlite's partition next to
AOTAutograd's min-cut partitioner (inductor's decompositions) for the same model, dropout on.

    python bench/saved_bytes.py [--layers 2] [--embd 256] [--batch 4] [--seq 256] [--dropout 0.1]
                                [--autocast] [--no-matmul-inputs] [--list] [--no-aot]

Prints each side's saved values (name, dtype, shape, bytes with --list) and their total bytes;
"activations" leaves out graph inputs (parameters, the token ids) and views of them, which cost
no memory of their own. AOTAutograd may split the step into several graphs (the loss apart):
their saved values are summed.
"""

from __future__ import annotations

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch
from torchvision_compat import work_around_mismatched_torchvision

work_around_mismatched_torchvision()

import transformers

import torchlite
from torchlite import _C, _training


def _model(args):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=1000,
        n_embd=args.embd,
        n_layer=args.layers,
        n_head=4,
        n_positions=args.seq,
        attn_pdrop=args.dropout,
        resid_pdrop=args.dropout,
        embd_pdrop=args.dropout,
    )
    return transformers.GPT2LMHeadModel(cfg).train()


def _loss(fn, ids, autocast):
    if autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(input_ids=ids, labels=ids).loss
    return fn(input_ids=ids, labels=ids).loss


def _is_view(target) -> bool:
    return str(target).rstrip(">").split(" ")[-1] in (
        "t",
        "view",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
    )


def torchlite_saved(args, ids) -> list[tuple[str, torch.dtype, tuple, int, bool]]:
    """(name, dtype, shape, bytes, is an input or a view of one) of each saved value."""
    torchlite.reset()
    with _training.recording_joint_traces() as joints:
        _loss(torchlite.compile(_model(args)), ids, args.autocast).backward()
    rows = []
    for joint in joints:
        if joint.graph is None:
            print(f"torchlite: a graph runs op by op: {joint.reason}")
            continue
        _, _, saved, _ = _C.partition_joint(
            joint.graph, joint.num_primals, joint.num_forward_outputs, True, args.matmul_inputs
        )
        nodes = {n["name"]: n for n in joint.graph.nodes()}
        inputs = set()
        for n in joint.graph.nodes():
            args_ = [a for a in n["args"] if isinstance(a, _C.NodeRef)]
            if n["op"] == "placeholder" or (
                _is_view(n["target"]) and args_ and args_[0].name in inputs
            ):
                inputs.add(n["name"])
        for s in saved:
            meta = nodes[s]["meta"]
            shape = tuple(meta["shape"])
            size = meta["dtype"].itemsize
            for d in shape:
                size *= d
            rows.append((s, meta["dtype"], shape, size, s in inputs))
    return rows


def aot_saved(args, ids) -> list[tuple[str, torch.dtype, tuple, int, bool]]:
    def run(backend):
        _loss(torch.compile(_model(args), backend=backend), ids, args.autocast).backward()

    return _training.aot_autograd_saved(run)


def report(title: str, rows, show: bool) -> None:
    act = [r for r in rows if not r[4]]
    print(
        f"{title}: {len(rows)} saved, {sum(r[3] for r in rows) / 1e6:.3f} MB; activations "
        f"{len(act)}, {sum(r[3] for r in act) / 1e6:.3f} MB"
    )
    if show:
        for name, dtype, shape, size, is_input in rows:
            tag = " (input)" if is_input else ""
            print(f"    {name:28s} {dtype!s:16s} {shape!s:22s} {size:>12d}{tag}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--autocast", action="store_true", help="CPU bf16 autocast")
    ap.add_argument(
        "--no-matmul-inputs",
        dest="matmul_inputs",
        action="store_false",
        help="torchlite: recompute_matmul_inputs off",
    )
    ap.add_argument("--list", action="store_true", help="every saved value")
    ap.add_argument("--no-aot", action="store_true")
    args = ap.parse_args()
    ids = torch.randint(0, 1000, (args.batch, args.seq))
    report("torchlite", torchlite_saved(args, ids), args.list)
    if not args.no_aot:
        report("AOTAutograd min cut", aot_saved(args, ids), args.list)


if __name__ == "__main__":
    main()
