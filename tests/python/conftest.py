"""pytest setup for torchlite: a clean compiler state and seed per test, cuda/slow markers."""

import os

# NOTE: set before transformers/huggingface_hub are imported anywhere: tests never touch the net.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from torchvision_compat import work_around_mismatched_torchvision

import torchlite

work_around_mismatched_torchvision()


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _fresh_torchlite():
    """Every test starts with empty compile caches and the same random stream."""
    torchlite.reset()
    torch.manual_seed(0)
    yield
