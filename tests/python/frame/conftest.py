"""Fixtures for the frame-layer tests. They use torchlite._C directly, and load
it without the package's __init__ when that cannot import (no torch on 3.12)."""

import importlib.machinery
import importlib.util
import pathlib
import sys

import pytest


def _load_c():
    try:
        from torchlite import _C

        return _C
    except ImportError:
        pass
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


_C = _load_c()


class Marker:
    """Counts as a tensor in the torch-free tests (see _test_set_tensor_types)."""

    def __init__(self, v=0):
        self.v = v


@pytest.fixture
def C():
    _C.reset()
    _C.reset_counters()
    yield _C
    _C.reset()
    _C._test_set_tensor_types(())
    _C._test_use_stub_compiler(0)


@pytest.fixture
def marker_C(C):
    """_C with Marker instances treated like tensors, so no torch is needed, and
    misses cached as graph breaks guarded by argument types (no capture)."""
    C._test_set_tensor_types((Marker,))
    C._test_use_stub_compiler(1)
    return C


@pytest.fixture
def config(C):
    return C.make_config(None, "torchlite", False, 8, None)


@pytest.fixture(name="Marker")
def marker_type():
    return Marker
