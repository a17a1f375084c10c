"""The nn.Module returned by torchlite.compile(module).

It owns nothing: parameters, buffers, submodules, hooks and attributes all stay on the
original module (`_orig_mod`), so state_dict keys, parameter objects and train/eval state are
exactly the original's. Calling it runs `_orig_mod.__call__` (hooks included) under torchlite.
The original's own methods reached through it (`compiled.generate(...)`) run with the module
calls they make compiled (`_calling_compiled`).

NOTE: rejected alternatives: registering `_orig_mod` as a submodule (torch's OptimizedModule)
prefixes every state_dict key with "_orig_mod."; patching `mod.forward` in place changes the
user's module; a shallow copy of the module desynchronises `training` and new attributes.
"""

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

# Methods of nn.Module that must not be forwarded: the wrapper's own identity and call path.
_OWN = {"forward", "_call_impl", "_wrapped_call_impl", "_get_name", "extra_repr"}


class OptimizedModule(torch.nn.Module):
    """`wrap_call(f)` returns f run under torchlite (compiled, or disabled)."""

    def __init__(self, mod: torch.nn.Module, wrap_call: Callable[[Callable], Callable]):
        # NOTE: no nn.Module.__init__: its attributes (hook dicts, _parameters...) must be read
        # from the original module, which __getattr__ does for every name missing here.
        d = self.__dict__
        d["_orig_mod"] = mod
        d["_wrap_call"] = wrap_call
        d["forward"] = wrap_call(mod.__call__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        orig = self.__dict__["_orig_mod"]
        value = getattr(orig, name)
        if isinstance(value, types.MethodType) and value.__self__ is orig:
            return self._calling_compiled(value)
        return value

    def _calling_compiled(self, method: types.MethodType) -> Callable:
        """`method` (a method of the original module's class, such as transformers' generate())
        run so that the module calls it makes (`self(...)`) run compiled, as torch's
        Module.compile() does: the original's `_compiled_call_impl` is set for the call and
        restored after it (the original module stays uncompiled outside)."""
        d = self.__dict__
        if "_call_impl_compiled" not in d:
            d["_call_impl_compiled"] = d["_wrap_call"](d["_orig_mod"]._call_impl)
        compiled_call = d["_call_impl_compiled"]
        orig_dict = d["_orig_mod"].__dict__

        @functools.wraps(method)
        def run(*args: Any, **kwargs: Any) -> Any:
            missing = object()
            before = orig_dict.get("_compiled_call_impl", missing)
            orig_dict["_compiled_call_impl"] = compiled_call
            try:
                return method(*args, **kwargs)
            finally:
                if before is missing:
                    orig_dict.pop("_compiled_call_impl", None)
                else:
                    orig_dict["_compiled_call_impl"] = before

        return run

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__:
            self.__dict__[name] = value
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        self._orig_mod.training = mode

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(object.__dir__(self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._orig_mod!r})"

    def __reduce_ex__(self, protocol: int):
        # copy.deepcopy / pickle rebuild the wrapper around a copy of the original.
        return (type(self), (self._orig_mod, self._wrap_call))


def _forwarder(name: str) -> Callable:
    def method(self, *args, **kwargs):
        orig = self.__dict__["_orig_mod"]
        out = getattr(orig, name)(*args, **kwargs)
        # train(), eval(), to(), cuda()... return the module itself: keep returning the wrapper.
        return self if out is orig else out

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Forwards to the original module's {name}()."
    return method


for _name, _value in vars(torch.nn.Module).items():
    if callable(_value) and not _name.startswith("__") and _name not in _OWN:
        setattr(OptimizedModule, _name, _forwarder(_name))
