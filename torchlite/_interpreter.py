"""Refuses interpreters the frame layer was not written for, before _C loads.

The C++ core reads CPython's private frame layout (csrc/frame/frame_access.c), which differs per
minor version (docs/internals/python-versions.md), and it relies on the GIL: the hook, the code
cache and the tracer keep state that only the GIL protects.
"""

import sys
import sysconfig

SUPPORTED = ((3, 11), (3, 12), (3, 13))


def check_supported() -> None:
    version = sys.version_info[:2]
    if version not in SUPPORTED:
        raise ImportError(
            f"torchlite supports CPython 3.11 to 3.13; this is {sys.version.split()[0]} "
            f"({sys.executable})"
        )
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise ImportError(
            f"torchlite does not support the free-threaded CPython build ({sys.executable}, "
            "Py_GIL_DISABLED): its frame hook and caches rely on the GIL. Use the default "
            "(GIL) build of the same Python version."
        )
