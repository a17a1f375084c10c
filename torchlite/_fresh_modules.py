"""nn.Modules built inside compiled code and still live at a graph break (`act = nn.GELU()` before
a `print`): the code after the break gets a new copy of the module the trace built, one per call,
as eager builds one per call (csrc/capture/context.cpp, lower_fresh_module).

The trace's module holds no tensors (capture refuses one that does), only constants, callables
and other modules built the same way: those modules and the containers the module keeps them in
are copied; everything else (functions, classes, a shared callable object) is the same object in
the copy, as in an eager instance built from the same arguments.
"""

import collections
import types

import torch


def clone_fresh_module(template, _values=()):
    """A new module with the state of `template` (made by the trace, kept by its entry)."""
    memo = {}

    def clone(value):
        key = id(value)
        if key in memo:
            return memo[key]
        if isinstance(value, torch.nn.Module):
            new = object.__new__(type(value))
            memo[key] = new
            state = {name: clone(item) for name, item in value.__dict__.items()}
            new.__dict__.update(state)
            return new
        kind = type(value)
        if kind in (dict, collections.OrderedDict):
            out = kind()
            memo[key] = out
            for name, item in value.items():
                out[name] = clone(item)
            return out
        if kind is list:
            out = []
            memo[key] = out
            out.extend(clone(item) for item in value)
            return out
        if kind is set:
            out = {clone(item) for item in value}
            memo[key] = out
            return out
        if kind is tuple:
            return tuple(clone(item) for item in value)
        if kind is types.MethodType and isinstance(value.__self__, torch.nn.Module):
            return types.MethodType(value.__func__, clone(value.__self__))
        return value

    return clone(template)
