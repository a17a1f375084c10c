"""torchlite.explain(fn)(*args): what torchlite captured, where it broke the graph and why."""

import collections
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchlite import _C, _ddp_buckets, _install, config, settings
from torchlite.optimized_module import OptimizedModule


@dataclasses.dataclass(frozen=True)
class BreakReason:
    kind: str  # a stable snake_case kind, listed in docs/graph_breaks.md
    reason: str
    filename: str
    lineno: int
    eager_ops: int = 0  # torch ops CPython ran at the breaking line (measured, see _EagerOps)
    hint: str = ""  # what to change so the code is captured (empty: see the kind's doc row)

    def __str__(self) -> str:
        ops = f" ({self.eager_ops} torch ops ran eagerly there)" if self.eager_ops else ""
        hint = f" Hint: {self.hint}" if self.hint else ""
        return f"{self.filename}:{self.lineno}: {self.kind}: {self.reason}{ops}{hint}"


# Tensor metadata reads and allocations that guards and the runtime make: not ops.
_NOT_OPS = frozenset(
    {
        "__get__",
        "size",
        "stride",
        "dim",
        "data_ptr",
        "empty_strided",
        "numel",
        "storage_offset",
        "is_contiguous",
        "element_size",
        "untyped_storage",
    }
)


def _is_meta(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "meta"
    if isinstance(value, (list, tuple)):
        return any(_is_meta(v) for v in value)
    return False


class _EagerOps(TorchFunctionMode):
    """Counts torch calls on real tensors made by user frames CPython runs, by (file, line).

    NOTE: meta-tensor calls are capture's own; calls from a resume function's frame are its
    graph running (the frame never executes bytecode before its break), so both are skipped.
    Ops fused into torchlite kernels make no torch call at all.
    """

    # NOTE: torchlite's own mode: compiled frames run under it (guards/global_state.cpp).
    _torchlite_transparent_mode = True

    def __init__(self) -> None:
        super().__init__()
        self.at: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        frame = sys._getframe(1)
        code = frame.f_code
        name = getattr(func, "__name__", "")
        if (
            name not in _NOT_OPS
            and not _is_meta(args)
            and "resumed at line" not in getattr(code, "co_qualname", "")
        ):
            self.at[(code.co_filename, frame.f_lineno)] += 1
        return func(*args, **kwargs)


@dataclasses.dataclass
class ExplainOutput:
    graphs: list  # _C.Graph, in capture order
    graph_count: int
    graph_break_count: int
    break_reasons: list[BreakReason]
    guards: list[str]  # one guard set per captured frame
    ops_per_graph: list[int]
    frames: list[dict]  # the raw records from the C++ core
    # "name: why" for each frame that runs eagerly from its next call on (many breaks, tiny
    # graphs between them: faster eagerly)
    eager_frames: list[str] = dataclasses.field(default_factory=list)
    # graphs captured inside DDP's forward and split at its gradient buckets (compiled backward)
    ddp_bucket_splits: list = dataclasses.field(default_factory=list)
    # Under cuda_graphs (mode="reduce-overhead"): per graph, "recorded after a warm-up call"
    # or "not used: <why>"
    cuda_graphs: list[str] = dataclasses.field(default_factory=list)
    # "name: how" for each graph autograd records: "compiled forward and backward", or
    # "op by op: why" (compiled_backward off, or the joint graph could not be built)
    training: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_records(cls, records: list[dict], eager_at=None) -> "ExplainOutput":
        with_graph = [r for r in records if r["graph"] is not None]
        eager_at = eager_at or {}
        breaks = [BreakReason(**r["break"]) for r in records if r["break"] is not None]
        breaks = [
            dataclasses.replace(b, eager_ops=eager_at.get((b.filename, b.lineno), 0))
            for b in breaks
        ]
        return cls(
            graphs=[r["graph"] for r in with_graph],
            graph_count=len(with_graph),
            graph_break_count=len(breaks),
            break_reasons=breaks,
            guards=[r["guards"] for r in records],
            ops_per_graph=[r["ops"] for r in with_graph],
            frames=list(records),
            eager_frames=[
                f"{r['code_name'].split(' (')[0]}: {r['eager_frame']}"
                for r in records
                if r.get("eager_frame")
            ],
            cuda_graphs=[r["cuda_graphs"] for r in with_graph if r.get("cuda_graphs")],
            training=[
                f"{r['code_name'].split(' (')[0]}: {r['training']}"
                for r in records
                if r.get("training")
            ],
        )

    @property
    def breaks_by_kind(self) -> dict[str, int]:
        """Break count per kind, most frequent first."""
        counts = collections.Counter(b.kind for b in self.break_reasons)
        return dict(counts.most_common())

    def __str__(self) -> str:
        lines = [
            f"Graph count: {self.graph_count}",
            f"Graph break count: {self.graph_break_count}",
            f"Op count: {sum(self.ops_per_graph)}",
        ]
        if self.break_reasons:
            lines.append("Breaks by kind:")
            lines += [f"  {kind}: {n}" for kind, n in self.breaks_by_kind.items()]
            lines.append("Break reasons:")
            lines += [f"  {i}. {b}" for i, b in enumerate(self.break_reasons, 1)]
        if self.eager_frames:
            lines.append("Frames run eagerly:")
            lines += [f"  {e}" for e in self.eager_frames]
        lines += [str(s) for s in self.ddp_bucket_splits]
        if self.cuda_graphs:
            lines.append("CUDA graphs:")
            lines += [f"  graph {i}: {c}" for i, c in enumerate(self.cuda_graphs, 1)]
        if self.training:
            lines.append("Training (graphs autograd records):")
            lines += [f"  {t}" for t in self.training]
        for i, r in enumerate(self.frames, 1):
            where = f"{r['code_name']} ({r['filename']}:{r['firstlineno']})"
            lines.append(f"Frame {i}: {where}, {r['ops']} ops, {r['capture_ms']:.2f} ms to capture")
            if r["graph"] is not None:
                lines += ["  " + line for line in str(r["graph"]).splitlines()]
            if r["guards"]:
                lines.append("  Guards:")
                lines += ["    " + line for line in r["guards"].splitlines()]
        return "\n".join(lines)


def _unwrap(fn: Any) -> Any:
    if isinstance(fn, OptimizedModule):
        return fn._orig_mod
    if isinstance(fn, _C.CompiledFunction):
        return fn.__wrapped__
    return fn


def explain(
    fn: Callable, *, mode: str | None = None, options: dict | None = None
) -> Callable[..., ExplainOutput]:
    """Returns a function that runs fn(*args, **kwargs) under torchlite and reports the capture.

    mode and options as torchlite.compile's (e.g. mode="reduce-overhead" reports per graph
    whether CUDA graphs are used, and why not). NOTE: a fresh config (its own cache) and
    recorder, so every frame is traced again even if fn was compiled and called before.
    """
    target = _unwrap(fn)
    settings.resolve(mode, options, "torchlite.explain")  # NOTE: a bad mode raises here

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        _install.sync()
        records: list[dict] = []
        values = settings.resolve(mode, options, "torchlite.explain")
        cfg = _C.make_config(
            None, "torchlite", False, config.cache_size_limit, records, values, mode or "default"
        )
        call = target.__call__ if isinstance(target, torch.nn.Module) else target
        counter = _EagerOps()
        with counter, _ddp_buckets.recording() as splits:
            _C.CompiledFunction(call, cfg)(*args, **kwargs)
        out = ExplainOutput.from_records(records, counter.at)
        out.ddp_bucket_splits = splits
        return out

    return run
