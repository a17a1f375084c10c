"""One launch (two worker processes) runs the cases of every selected test module here."""

import pathlib

import pytest
from launch import run_cases

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="session")
def results(request):
    """{case name: per-rank results} for the CASES of every collected module of this folder:
    starting the two interpreters costs more than the cases, so they start once."""
    # NOTE: modules of other folders may define CASES of their own
    modules = {
        item.module
        for item in request.session.items
        if pathlib.Path(item.module.__file__).parent == HERE and hasattr(item.module, "CASES")
    }
    cases = [c for m in sorted(modules, key=lambda m: m.__name__) for c in m.CASES]
    return run_cases(cases)
