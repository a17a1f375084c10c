"""A user's torch.autograd.Function in a graph autograd records (csrc/capture/autograd_function.cpp).

The captured graph calls `apply_custom_function(Fn, *args)`, which is `Fn.apply(*args)`: run op
by op, autograd records the user's Function with its own backward; in a compiled training graph
the joint trace (torchlite/_training.py) runs it on meta tensors under its recording dispatch
mode, so the Function's forward lands in the compiled forward and the user's backward (not a
derivative of the forward) in the compiled backward.
"""

import builtins
import dis
import types

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


# Values a Function's code may read from its module without a guard: they name code, not data.
_CODE_KINDS = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodDescriptorType,
    staticmethod,
    classmethod,
)
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _code_of(fn):
    fn = getattr(fn, "__func__", fn)
    while hasattr(fn, "__wrapped__"):  # once_differentiable, functools.wraps decorators
        fn = fn.__wrapped__
    return fn if isinstance(fn, types.FunctionType) else None


def state_reads(cls: type) -> list | str:
    """The module globals the Function's forward, setup_context and backward read that hold
    data, as (globals dict, name, value): compiled, their values at the first call would be
    fixed in the graph, so the caller guards each one by value. NOTE: a global holding a
    mutable value (a tensor, a list, an object) or a closure cell cannot be guarded that way:
    the reason is returned instead (the call breaks the graph and runs eagerly)."""
    reads = []
    for attr in ("forward", "setup_context", "backward"):
        fn = _code_of(getattr(cls, attr, None))
        if fn is None:
            continue
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if not isinstance(value, _CODE_KINDS):
                return (
                    f"{cls.__name__}.{attr} reads a closure variable holding a "
                    f"{type(value).__name__}"
                )
        for code in _codes(fn.__code__):
            for ins in dis.get_instructions(code):
                if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
                    continue
                name = ins.argval
                if name in fn.__globals__:
                    value = fn.__globals__[name]
                elif hasattr(builtins, name):
                    continue
                else:
                    continue  # NameError at run time, as in eager
                if isinstance(value, _CODE_KINDS) or value is torch:
                    continue
                if isinstance(value, _SCALARS):
                    reads.append((fn.__globals__, name, value))
                    continue
                return (
                    f"{cls.__name__}.{attr} reads the global {name!r}, a "
                    f"{type(value).__name__}, whose value compiled code would fix"
                )
    return reads
