"""A graph captured inside DistributedDataParallel's forward, split at its gradient buckets.

DDP all-reduces a bucket of gradients as soon as autograd has produced every gradient in it.
A graph with one compiled backward hands all its parameters' gradients to autograd at the very
end of that backward, so no all-reduce could start before the whole backward is done. Split
where DDP's buckets end (parameter bytes counted in reverse order of use, `bucket_bytes_cap`
each, the first bucket DDP's smaller first cap), each piece gets its own compiled backward:
the last piece's gradients are all-reduced while the earlier pieces' backward still runs.
Dynamo's DDPOptimizer does the same for torch.compile.

csrc/python/bind_training.cpp calls `split_at_buckets` before it traces a joint graph and
compiles each piece through compile_graph (a piece that cannot have a compiled backward runs
op by op under torch's autograd, which is still correct).

NOTE: rejected: one compiled backward that calls DDP's hooks itself as gradients become
ready: the reducer's hooks are autograd's (AccumulateGrad post hooks), and calling them out of
band would bypass its bookkeeping (unused parameters, no_sync, static graphs).
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from torchlite import _C
from torchlite.fx_interop import graph_to_module

_state = threading.local()  # .compiling: pieces are not split again; .records: explain's list


@dataclasses.dataclass(frozen=True)
class BucketSplit:
    """One graph split at DDP's buckets, as explain shows it. Pieces in graph order, each
    (op count, parameter sources, parameter bytes, has a compiled backward: else the piece
    runs op by op under torch's autograd, TORCHLITE_TRACE's bucket_pieceN/ says why)."""

    bucket_bytes_cap: int
    first_bucket_bytes_cap: int
    pieces: tuple[tuple[int, tuple[str, ...], int, bool], ...]

    def __str__(self) -> str:
        head = (
            f"DDP bucket split: {len(self.pieces)} pieces (bucket_bytes_cap "
            f"{self.bucket_bytes_cap}, first bucket {self.first_bucket_bytes_cap}), each with "
            "its own backward so bucket all-reduces overlap the rest of backward:"
        )
        lines = [head]
        for i, (ops, params, nbytes, compiled) in enumerate(self.pieces):
            how = "compiled backward" if compiled else "backward op by op"
            lines.append(f"  piece {i}: {ops} ops, {len(params)} parameters, {nbytes} bytes, {how}")
        return "\n".join(lines)


class _Bucket:
    def __init__(self) -> None:
        self.nodes: list[fx.Node] = []
        self.params: list[str] = []
        self.nbytes = 0

    def has_external_output(self) -> bool:
        mine = set(self.nodes)
        return any(u not in mine for n in self.nodes for u in n.users)


def active_ddp() -> Any:
    """The DistributedDataParallel module whose forward is running, or None."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel._get_active_ddp_module()


def _caps(ddp: Any) -> tuple[int, int]:
    cap = int(ddp.bucket_bytes_cap)
    config = getattr(ddp, "_bucket_config", None)
    first = getattr(config, "first_bucket_bytes_cap", None)
    if first is None:
        first = min(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, cap)
    return cap, int(first)


def _gradient_input_bytes(node: fx.Node) -> int:
    """Bytes of a placeholder whose gradient autograd hands to DDP (a parameter), else 0."""
    meta = node.meta.get("torchlite")
    if node.op != "placeholder" or not meta or not meta["requires_grad"]:
        return 0
    numel = 1
    for s in meta["shape"]:
        numel *= s
    return numel * meta["dtype"].itemsize


def _buckets(gm: fx.GraphModule, cap: int, first_cap: int) -> list[_Bucket]:
    """Nodes assigned to buckets walking backwards, as DDP fills its buckets (a bucket closes
    once full and once one of its values is used after it, so no piece is without outputs)."""
    buckets = [_Bucket()]
    counted: set[fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        limit = first_cap if len(buckets) == 1 else cap
        if buckets[0].nbytes >= limit and buckets[0].has_external_output():
            buckets.insert(0, _Bucket())
        for arg in node.all_input_nodes:
            nbytes = _gradient_input_bytes(arg)
            if nbytes and arg not in counted:
                counted.add(arg)
                buckets[0].nbytes += nbytes
                buckets[0].params.append(arg.meta.get("stack_trace") or arg.name)
        buckets[0].nodes.append(node)
    if len(buckets) > 1 and buckets[0].nbytes == 0:
        # NOTE: a preamble without parameters (embedding lookups of inputs) joins the next piece
        buckets[1].nodes.extend(buckets.pop(0).nodes)
    return buckets


def _inline_constants(split: fx.GraphModule) -> None:
    """split_module passes every non-module attribute to a piece as an input; a non-tensor one
    (a torch.Size from graph_to_module) goes back into the piece as a constant, since a piece's
    compiled backward takes tensors only."""
    for call in split.graph.nodes:
        if call.op != "call_module":
            continue
        sub = getattr(split, call.target)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        first_op = next(n for n in sub.graph.nodes if n.op != "placeholder")
        args = []
        for ph, arg in zip(placeholders, call.args, strict=True):
            value = getattr(split, arg.target, None) if arg.op == "get_attr" else None
            if value is None or isinstance(value, torch.Tensor):
                args.append(arg)
                continue
            setattr(sub, arg.target, value)
            with sub.graph.inserting_before(first_op), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # NOTE: fx warns of attributes not tensors
                const = sub.graph.get_attr(arg.target)
            const.meta = dict(ph.meta)
            ph.replace_all_uses_with(const)
            sub.graph.erase_node(ph)
        call.args = tuple(args)
        sub.recompile()
    split.graph.eliminate_dead_code()
    split.recompile()


def _piece_runner(submod: fx.GraphModule, converted: tuple, compile_piece: Callable) -> tuple:
    graph, extras = converted
    fn = compile_piece(graph)
    compiled = hasattr(fn, "backward_half")  # NOTE: _training.make_training_function's
    output = next(n for n in submod.graph.nodes if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    if extras:
        extras = tuple(extras)
        inner = fn

        def fn(*args):
            return inner(*args, *extras)

    if single:
        tupled = fn

        def fn(*args):
            return tupled(*args)[0]

    return fn, compiled


def split_at_buckets(graph: Any, compile_piece: Callable) -> Callable | None:
    """The graph's stitched pieces when it is captured inside DDP's forward and spans more
    than one of its buckets, else None. `compile_piece(graph)` compiles one piece."""
    if getattr(_state, "compiling", False):
        return None
    ddp = active_ddp()
    inputs = [n["meta"] for n in graph.nodes() if n["op"] == "placeholder"]
    if ddp is None or any(m is None for m in inputs):
        return None  # NOTE: non-tensor inputs: no compiled backward to split (_training.py)
    gm = graph_to_module(graph)
    cap, first_cap = _caps(ddp)
    buckets = _buckets(gm, cap, first_cap)
    if len(buckets) < 2:
        return None
    part = {node: i for i, b in enumerate(buckets) for node in b.nodes}
    split = fx.passes.split_module.split_module(gm, None, lambda node: part[node])
    _inline_constants(split)
    devices = {m["device"] for m in inputs}
    device = devices.pop() if len(devices) == 1 else None
    names = [f"submod_{i}" for i in range(len(buckets))]  # NOTE: split_module's names
    try:
        converted = [_C.graph_from_fx(getattr(split, n), device=device) for n in names]
    except _C.Unsupported:
        return None  # NOTE: one compiled backward for the whole graph: correct, no overlap
    _state.compiling = True
    compiled = []
    try:
        for name, conv in zip(names, converted, strict=True):
            run, has_backward = _piece_runner(getattr(split, name), conv, compile_piece)
            compiled.append(has_backward)
            delattr(split, name)  # NOTE: a plain attribute now; the stitched code calls it
            setattr(split, name, run)
    finally:
        _state.compiling = False
    _record(BucketSplit(cap, first_cap, _describe(buckets, compiled)))
    return split.forward


def _describe(buckets: list[_Bucket], compiled: list[bool]) -> tuple:
    return tuple(
        (
            sum(1 for n in b.nodes if n.op.startswith("call")),
            tuple(reversed(b.params)),
            b.nbytes,
            c,
        )
        for b, c in zip(buckets, compiled, strict=True)
    )


def _record(split: BucketSplit) -> None:
    records = getattr(_state, "records", None)
    if records is not None:
        records.append(split)


class recording:
    """Collects the BucketSplits made while it is entered (torchlite.explain)."""

    def __enter__(self) -> list[BucketSplit]:
        self.outer = getattr(_state, "records", None)
        _state.records = []
        return _state.records

    def __exit__(self, *exc: object) -> None:
        _state.records = self.outer
