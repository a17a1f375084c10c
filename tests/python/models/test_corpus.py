"""The bench/models.py corpus at CI size: every timm and transformers model (random weights,
eval, no_grad) compiled whole-model gives the eager result, on the first and the cached call,
and the second identical call captures nothing again.

Correctness only; graphs, breaks and timings are bench/models.py's job.
"""

import importlib.util
import inspect
import os
import sys

import pytest
import torch
from helpers import assert_counters_delta, assert_same, counters, model_tolerance

import torchlite


def _load_corpus():
    # NOTE: by file path, not bench/ on sys.path: bench/ scripts would shadow real packages.
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "model_corpus.py")
    spec = importlib.util.spec_from_file_location("model_corpus", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_corpus"] = module
    spec.loader.exec_module(module)
    return module


_CORPUS = _load_corpus()
CORPUS = _CORPUS.CORPUS
_TIMM, _TRANSFORMERS = _CORPUS.load_model_libs()
_AVAILABLE = {"timm": _TIMM is not None, "transformers": _TRANSFORMERS is not None}


def test_every_builder_takes_what_build_passes():
    # NOTE: the wider corpus (bench/models.py --extra) is not run in CI; its builders once took
    # one argument where ModelSpec.build passes three, and every extra model raised TypeError.
    for spec in CORPUS + _CORPUS.EXTRA:
        inspect.signature(spec.make).bind(False, None, None)


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in CORPUS])
def test_corpus_model_matches_eager(spec):
    if not _AVAILABLE[spec.family]:
        pytest.skip(f"{spec.family} unavailable")
    model, args, kwargs = spec.build(full=False)
    compiled = torchlite.compile(model)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert_same(compiled(*args, **kwargs), expected, **model_tolerance(expected))
        # The second identical call hits the cache: no frame is captured again (issue 22).
        before = counters()
        assert_same(compiled(*args, **kwargs), expected, **model_tolerance(expected))
        assert_counters_delta(before, counters(), frames=0, graphs=0, recompiles=0)
