"""A user's torch.autograd.Function in a graph autograd records (csrc/capture/autograd_function.cpp).

The captured graph calls `apply_custom_function(Fn, *args)`, which is `Fn.apply(*args)`: run op
by op, autograd records the user's Function with its own backward; in a compiled training graph
the joint trace (torchlite/_training.py) runs it on meta tensors under its recording dispatch
mode, so the Function's forward lands in the compiled forward and the user's backward (not a
derivative of the forward) in the compiled backward.
"""

import torch


class UnsupportedFunction(RuntimeError):
    """The Function does something a graph node cannot stand for; capture breaks the graph."""


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def apply_custom_function(fn: type, *args):
    """`fn.apply(*args)`; on meta tensors (capture and the joint trace) it also checks that the
    results are new tensors (no input or view of one: autograd's view and in-place tracking,
    `mark_dirty`) and that no input was written in place."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not any(t.device.type == "meta" for t in tensors):
        return fn.apply(*args)
    versions = [t._version for t in tensors]
    out = fn.apply(*args)
    name = fn.__name__
    for o in out if isinstance(out, tuple) else (out,):
        if o is None:
            continue
        if not isinstance(o, torch.Tensor):
            raise UnsupportedFunction(f"{name}.forward returns a {type(o).__name__}")
        if any(_storage(o) == _storage(t) for t in tensors):
            raise UnsupportedFunction(f"{name}.forward returns an input or a view of one")
    if [t._version for t in tensors] != versions:
        raise UnsupportedFunction(f"{name}.forward writes an input in place")
    return out
