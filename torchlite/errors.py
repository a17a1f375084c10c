"""Exceptions raised by torchlite.

InternalError means a broken invariant inside torchlite (a bug: please report it with the
message). User mistakes are raised as the standard TypeError/ValueError.
"""

from torchlite import _C

InternalError = _C.InternalError

__all__ = ["InternalError"]
