"""pytest setup for torchlite: a clean compiler state and seed per test, cuda/slow markers."""

import glob
import importlib.util
import os
import sys
import types

# NOTE: set before transformers/huggingface_hub are imported anywhere: tests never touch the net.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

import torchlite


def _work_around_mismatched_torchvision():
    """Lets timm/transformers import when torchvision's C ops cannot load.

    NOTE: a torchvision wheel built for CUDA next to a CPU-only torch fails at import time
    (`operator torchvision::nms does not exist`) while registering fake kernels for ops whose
    library never loaded. timm imports torchvision unconditionally. Pre-seeding that one
    registration module lets the pure-Python rest of torchvision import; the models under test
    never call torchvision's C ops.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so"))
    if not libs:
        return
    try:
        torch.ops.load_library(libs[0])
    except OSError:
        name = "torchvision._meta_registrations"
        sys.modules.setdefault(name, types.ModuleType(name))


_work_around_mismatched_torchvision()


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _fresh_torchlite():
    """Every test starts with empty compile caches and the same random stream."""
    torchlite.reset()
    torch.manual_seed(0)
    yield
