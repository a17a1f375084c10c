"""The training suite runs with the compiled backward on (the default), also where the environment
turns it off (TORCHLITE_COMPILED_BACKWARD=0)."""

import pytest

import torchlite


@pytest.fixture(autouse=True)
def _compiled_backward_on(monkeypatch):
    monkeypatch.setattr(torchlite.config, "compiled_backward", True)
