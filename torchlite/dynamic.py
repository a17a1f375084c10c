"""mark_dynamic / mark_static: the tensor markings torch._dynamo uses, set without importing
torch._dynamo (its import patches nn.Module.__init__), so torch's own markings and these are one
thing and both are honoured (docs/internals/dynamic-shapes.md)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class DimRange(NamedTuple):
    """One mark_dynamic range: the fields torch._dynamo's _DimRange has."""

    dim: int
    min: int | None
    max: int | None


def _dims(t: torch.Tensor, index, api: str) -> list[int]:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"torchlite.{api} expects a tensor, got {type(t).__name__}")
    dims = [index] if isinstance(index, int) else list(index)
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or not -t.dim() <= d < t.dim():
            raise ValueError(
                f"torchlite.{api}: dim {d!r} is not a dimension of a tensor of rank {t.dim()}"
            )
    return [d % t.dim() for d in dims]


def mark_dynamic(t: torch.Tensor, index, *, min: int | None = None, max: int | None = None):
    """Marks dimension(s) `index` of `t` dynamic: the frame that receives `t` compiles kernels
    that take their sizes at run time from its first call. With `min`/`max`, a call whose size
    is outside [min, max] raises a ValueError naming the dimension."""
    dims = _dims(t, index, "mark_dynamic")
    if min is not None and max is not None and min > max:
        raise ValueError(f"torchlite.mark_dynamic: min={min} is greater than max={max}")
    for d in dims:
        if not hasattr(t, "_dynamo_dynamic_indices"):
            t._dynamo_dynamic_indices = set()
            t._dynamo_dynamic_range = set()
        t._dynamo_dynamic_indices.add(d)
        t._dynamo_dynamic_range.add(DimRange(d, min, max))


def mark_static(t: torch.Tensor, index=None):
    """Marks dimension(s) `index` (all when None) of `t` static, as torch._dynamo.mark_static.
    A static dimension is never dynamic: marking it removes an earlier mark_dynamic of it."""
    dims = list(range(t.dim())) if index is None else _dims(t, index, "mark_static")
    if not hasattr(t, "_dynamo_static_indices"):
        t._dynamo_static_indices = set()
    for d in dims:
        t._dynamo_static_indices.add(d)
        for name in ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices"):
            getattr(t, name, set()).discard(d)
        ranges = getattr(t, "_dynamo_dynamic_range", None)
        if ranges:
            for r in [r for r in ranges if r.dim == d]:
                ranges.discard(r)
