"""pytest setup for torchlite: a clean compiler state and seed per test, cuda/slow markers."""

import os

# NOTE: set before transformers/huggingface_hub are imported anywhere: tests never touch the net.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from helpers import fx_checking_backend
from torchvision_compat import work_around_mismatched_torchvision

import torchlite

work_around_mismatched_torchvision()


def pytest_addoption(parser):
    parser.addoption(
        "--fx-backend-check",
        action="store_true",
        help="compile with helpers.fx_checking_backend wherever a test uses torchlite's own "
        "backend: every captured graph must be valid torch.fx code that runs (counter and "
        "kernel assertions of those tests do not hold then)",
    )


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # NOTE: long runs stay out of the README test command (CI's 30-minute budget); a -m
    # expression that names `slow` selects them.
    if item.get_closest_marker("slow") and "slow" not in (item.config.option.markexpr or ""):
        pytest.skip("slow: select with -m slow")


@pytest.fixture(autouse=True)
def _fx_backend_check(request, monkeypatch):
    """With --fx-backend-check, torchlite.compile's default backend checks the fx graphs."""
    if not request.config.getoption("--fx-backend-check"):
        yield
        return
    compile_ = torchlite.compile

    def compile_checked(model=None, **kwargs):
        if kwargs.get("backend", "torchlite") == "torchlite":
            kwargs["backend"] = fx_checking_backend
        return compile_(model, **kwargs)

    monkeypatch.setattr(torchlite, "compile", compile_checked)
    yield


@pytest.fixture(autouse=True)
def _fresh_torchlite():
    """Every test starts with empty compile caches and the same random stream."""
    torchlite.reset()
    torch.manual_seed(0)
    yield
