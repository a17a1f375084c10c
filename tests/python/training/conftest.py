"""The training suite runs with the compiled backward on (it is opt-in: TORCHLITE_COMPILED_BACKWARD)."""

import pytest

import torchlite


@pytest.fixture(autouse=True)
def _compiled_backward_on(monkeypatch):
    monkeypatch.setattr(torchlite.config, "compiled_backward", True)
