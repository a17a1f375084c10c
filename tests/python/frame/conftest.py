"""Fixtures for the frame-layer tests. They use torchlite._C directly, and load
it without the package's __init__ when that cannot import (no torch on 3.12)."""

import pytest
from c_loader import load_c_without_torch


def _load_c():
    try:
        from torchlite import _C

        return _C
    except ImportError:
        return load_c_without_torch()


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
