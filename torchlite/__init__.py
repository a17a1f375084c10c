"""torchlite: torch.compile rebuilt around a C++ core.

model = torchlite.compile(model)       # or @torchlite.compile on a function
"""

from torchlite._interpreter import check_supported as _check_supported

_check_supported()

from torchlite import (
    _C,  # noqa: F401
    cache,
    config,
)
from torchlite.backends import list_backends, register_backend
from torchlite.compiler import compile, disable
from torchlite.dynamic import mark_dynamic, mark_static
from torchlite.errors import InternalError, Unsupported
from torchlite.explain import BreakReason, ExplainOutput, explain
from torchlite.optimized_module import OptimizedModule
from torchlite.state import counters, reset, reset_counters

__all__ = [
    "BreakReason",
    "ExplainOutput",
    "InternalError",
    "OptimizedModule",
    "Unsupported",
    "cache",
    "compile",
    "config",
    "counters",
    "disable",
    "explain",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "register_backend",
    "reset",
    "reset_counters",
]
