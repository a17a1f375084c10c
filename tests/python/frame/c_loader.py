"""Loads torchlite._C without the package's __init__ (which imports torch), for
the frame tests on an interpreter without torch and for their subprocesses."""

import importlib.machinery
import importlib.util
import pathlib
import sys


def load_c_without_torch():
    """Loads torchlite/_C*.so from sys.path by file, as torchlite._C."""
    for entry in sys.path:
        pkg = pathlib.Path(entry or ".") / "torchlite"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = pkg / ("_C" + suffix)
            if path.is_file():
                spec = importlib.util.spec_from_file_location("torchlite._C", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                sys.modules["torchlite._C"] = mod
                return mod
    raise ImportError("torchlite._C not found on sys.path")
