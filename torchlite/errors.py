"""Exceptions raised by torchlite.

InternalError means a broken invariant inside torchlite (a bug: please report it with the
message). User mistakes are raised as the standard TypeError/ValueError.
"""

from torchlite import _C

InternalError = _C.InternalError
# Raised by compile(..., fullgraph=True) at a graph break; a RuntimeError subclass.
Unsupported = _C.Unsupported

__all__ = ["InternalError", "Unsupported"]
