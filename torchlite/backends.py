"""The backend registry behind torchlite.compile(backend=...).

A backend is `backend(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> callable`, the
torch.compile convention; the callable takes the graph inputs positionally and returns the
graph outputs as a tuple. "torchlite" maps to None: the C++ core runs the graph itself.
"""

import functools
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from torchlite import _C, _install, settings

BUILTIN = "torchlite"
_registry: dict[str, Callable | None] = {BUILTIN: None}
_log = logging.getLogger("torchlite")


def register_backend(name: str, fn: Callable | None = None):
    """Registers fn under name; without fn, returns a decorator."""
    if fn is None:
        return functools.partial(register_backend, name)
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_backend: name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"register_backend: backend {name!r} must be callable, got {fn!r}")
    if name in _registry:
        raise ValueError(f"register_backend: a backend named {name!r} is already registered")
    _registry[name] = fn
    return fn


def list_backends() -> list[str]:
    return sorted(_registry)


def _needs(module: str, backend: str) -> None:
    # NOTE: find_spec, not import: torch._inductor takes seconds to import, paid on first use.
    if importlib.util.find_spec(module) is None:
        raise RuntimeError(f"backend {backend!r} needs {module}, which this torch does not have")


def resolve(backend: Any, mode: str | None, options: dict | None) -> tuple[Callable | None, str]:
    """(the callable handed to the C++ core, or None for the builtin runner; a display name)."""
    if isinstance(backend, str):
        if backend not in _registry:
            raise ValueError(
                f"unknown backend {backend!r}; registered backends: {', '.join(list_backends())} "
                "(add one with torchlite.register_backend)"
            )
        fn, name = _registry[backend], backend
        if backend in _REQUIRES:
            _needs(_REQUIRES[backend], backend)
    elif callable(backend):
        fn, name = backend, getattr(backend, "__name__", type(backend).__name__)
    else:
        raise TypeError(
            "backend must be a registered name or a callable backend(gm, example_inputs), "
            f"got {type(backend).__name__}"
        )
    if fn is not None and (mode is not None or options):
        # NOTE: the torch.compile convention: mode/options reach the backend as keywords.
        kwargs = {k: v for k, v in (("mode", mode), ("options", options)) if v}
        fn = functools.partial(fn, **kwargs)
    return fn, name


def eager(gm, example_inputs, **kwargs):
    """Runs the captured graph as the GraphModule's Python code."""
    return gm.forward


def aot_eager(gm, example_inputs, **kwargs):
    """torch's AOTAutograd with eager forward/backward (torch._dynamo's "aot_eager")."""
    try:
        from torch._dynamo import lookup_backend
    except ImportError as e:
        raise RuntimeError(f"backend 'aot_eager' needs torch._dynamo, which failed: {e}") from e
    return lookup_backend("aot_eager")(gm, example_inputs)


def inductor(gm, example_inputs, mode=None, options=None, **kwargs):
    """TorchInductor, configured by mode/options exactly as torch.compile does."""
    try:
        from torch._inductor import list_mode_options
        from torch._inductor.compile_fx import compile_fx
    except ImportError as e:
        raise RuntimeError(f"backend 'inductor' needs torch._inductor, which failed: {e}") from e
    patches = {**(list_mode_options(mode) if mode else {}), **(options or {})}
    return compile_fx(gm, example_inputs, config_patches=patches)


def dynamo_backend(gm, example_inputs, mode=None, options=None, **kwargs):
    """torchlite as a torch.compile backend (entry point torch_dynamo_backends: torchlite).

    Dynamo's graph runs through torchlite's compiler, the same compile_graph as
    torchlite.compile's (passes, kernels on CPU and CUDA), with torch.compile's mode/options
    resolved as torchlite.compile resolves them; torch ops where no kernel applies. Graphs it cannot represent (symbolic shapes, dict outputs, ...) run as
    gm.forward: never wrong, only slower. The callable takes the inputs positionally or as one
    list (the boxed convention), as gm.forward and torch's own backends are called.
    """
    values = settings.resolve(mode, options, api="torch.compile(backend='torchlite')")
    _install.sync()
    output = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    flat = type(output) is tuple and not any(isinstance(o, (tuple, list, dict)) for o in output)
    single = not isinstance(output, (tuple, list, dict))
    if not (flat or single):
        _log.debug("torchlite backend: nested graph output %r; running gm.forward", output)
        return gm.forward
    try:
        graph, extra_inputs = _C.graph_from_fx(gm)
    except _C.Unsupported as e:
        _log.debug("torchlite backend: %s; running gm.forward", e)
        return gm.forward
    compiled = _C.FxCompiled(graph, extra_inputs, values, mode or "default")
    if flat:
        return compiled
    return lambda *args: compiled(*args)[0]


_REQUIRES = {"aot_eager": "torch._dynamo", "inductor": "torch._inductor"}
register_backend("eager", eager)
register_backend("aot_eager", aot_eager)
register_backend("inductor", inductor)
