"""torchlite.compile and torchlite.disable: wrapping user code so the C++ frame hook sees it."""

import copyreg
import functools
import inspect
import reprlib
from collections.abc import Callable
from typing import Any

import torch

from torchlite import _C, _install, _optimizer, backends, config, settings
from torchlite.optimized_module import OptimizedModule

MODES = (None, *settings.PRESETS)


def _check_options(fullgraph, dynamic, mode, options) -> None:
    if not isinstance(fullgraph, bool):
        raise TypeError(f"torchlite.compile: fullgraph must be a bool, got {fullgraph!r}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"torchlite.compile: dynamic must be None or a bool, got {dynamic!r}")
    if mode not in MODES:
        raise ValueError(
            f"torchlite.compile: unknown mode {mode!r}; valid modes: {', '.join(map(repr, MODES))}"
        )
    if options is not None and not isinstance(options, dict):
        raise TypeError(
            f"torchlite.compile: options must be a dict or None, got {type(options).__name__}"
        )
    if mode is not None and options:
        raise ValueError("torchlite.compile: give either mode or options, not both")


def _check_callable(obj: Any, api: str) -> None:
    if not callable(obj):
        raise TypeError(
            f"{api} expects a function or an nn.Module, got {type(obj).__name__} "
            f"object {reprlib.repr(obj)}, which is not callable"
        )


def _check_not_generator(obj: Any, api: str) -> None:
    # NOTE: the frame hook never enters generator or coroutine frames (docs/internals/frame.md).
    for kind, test in (
        ("generator function", inspect.isgeneratorfunction),
        ("coroutine function", inspect.iscoroutinefunction),
        ("async generator function", inspect.isasyncgenfunction),
    ):
        if test(obj):
            name = getattr(obj, "__qualname__", repr(obj))
            raise TypeError(
                f"{api}: {name} is a {kind} and cannot be compiled; "
                "compile the code that consumes it instead"
            )


def _copy_metadata(wrapper: Any, fn: Callable) -> Any:
    # NOTE: not functools.update_wrapper: the C++ wrapper sets __wrapped__ itself.
    for attr in functools.WRAPPER_ASSIGNMENTS:
        if hasattr(fn, attr):
            setattr(wrapper, attr, getattr(fn, attr))
    for k, v in getattr(fn, "__dict__", {}).items():
        if k != "__wrapped__":
            wrapper.__dict__.setdefault(k, v)
    return wrapper


def _wrap(obj: Any, wrap_call: Callable[[Callable], Callable]) -> Any:
    if isinstance(obj, torch.nn.Module):
        return OptimizedModule(obj, wrap_call)
    return _copy_metadata(wrap_call(obj), obj)


class _CompileCall:
    """The wrap_call of one torchlite.compile'd object: runs a callable under torchlite with the
    config made from compile()'s arguments. An object, not a closure, so a compiled module
    pickles (torch.save): the arguments travel and the config is made again on load."""

    def __init__(self, args: dict):
        self.args = args
        backend_fn, backend_name = backends.resolve(args["backend"], args["mode"], args["options"])
        # NOTE: mode/options of another backend are that backend's (torch.compile's convention).
        builtin = backend_fn is None
        values = settings.resolve(args["mode"], args["options"] if builtin else None)
        self.cfg = _C.make_config(
            backend_fn,
            backend_name,
            args["fullgraph"],
            values["cache_size_limit"],
            None,
            values,
            (args["mode"] or "default") if builtin else "default",
            args.get("dynamic"),
        )

    def __call__(self, f: Callable) -> Any:
        return _C.CompiledFunction(f, self.cfg)

    def __reduce__(self):
        return (_CompileCall, (self.args,))


def _reduce_compiled_function(f: Any) -> str:
    # NOTE: as a plain function: pickled by reference to its module-level name, and shared (not
    # copied) by copy.deepcopy, as torch.compile's function wrappers are.
    name = getattr(f, "__qualname__", None)
    if not isinstance(name, str):
        raise TypeError(f"cannot pickle {f!r}: the compiled callable has no __qualname__")
    return name


copyreg.pickle(_C.CompiledFunction, _reduce_compiled_function)
copyreg.pickle(_C.DisabledFunction, _reduce_compiled_function)


def compile(
    model_or_fn: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable = "torchlite",
    mode: str | None = None,
    options: dict | None = None,
    disable: bool = False,
) -> Any:
    """Compiles a function or nn.Module; same signature and forms as torch.compile.

    `@torchlite.compile`, `@torchlite.compile(fullgraph=True)`, `torchlite.compile(fn)` and
    `torchlite.compile(module)` (an nn.Module sharing the original's state). `dynamic`: None
    (default) compiles for the first call's sizes and, once a frame recompiles or an input is
    marked (torchlite.mark_dynamic), builds CPU kernels that take their sizes at run time, so
    later sizes reuse them; True does so from the first call; False never
    (docs/internals/dynamic-shapes.md). For the
    torchlite backend, `options` sets compile-scope settings ({"channels_last": False}, see
    torchlite.settings.table()) and `mode` selects a preset of them.
    """
    _check_options(fullgraph, dynamic, mode, options)
    args = {
        "fullgraph": fullgraph,
        "dynamic": dynamic,
        "backend": backend,
        "mode": mode,
        "options": options,
    }
    # NOTE: a bad backend, mode or option fails here, before anything is wrapped.
    backend_fn, _ = backends.resolve(backend, mode, options)
    settings.resolve(mode, options if backend_fn is None else None)

    def wrap(obj: Any) -> Any:
        _check_callable(obj, "torchlite.compile")
        _check_not_generator(obj, "torchlite.compile")
        if disable or config.disable:
            return obj
        _install.sync()
        if backend == "torchlite" and _optimizer.optimizer_of(obj) is not None:
            return _optimizer.CompiledOptimizerStep(
                obj, _optimizer.optimizer_of(obj), mode, options
            )
        return _wrap(obj, _CompileCall(args))

    return wrap if model_or_fn is None else wrap(model_or_fn)


def disable(fn: Any = None) -> Any:
    """Runs fn (a function or nn.Module) eagerly even when called from compiled code."""
    if fn is None:
        return disable
    _check_callable(fn, "torchlite.disable")
    return _wrap(fn, _C.DisabledFunction)
