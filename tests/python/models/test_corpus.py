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


def test_entries_run_only_with_slow_are_covered_by_entries_in_ci():
    names = {s.name for s in CORPUS}
    assert set(_COVERED_BY) <= names
    for covered_by in _COVERED_BY.values():
        first = covered_by.split()[0].rstrip(",")
        assert first in names and first not in _COVERED_BY, covered_by


def test_every_builder_takes_what_build_passes():
    # NOTE: the wider corpus (bench/models.py --extra) is not run in CI; its builders once took
    # one argument where ModelSpec.build passes three, and every extra model raised TypeError.
    for spec in CORPUS + _CORPUS.EXTRA:
        inspect.signature(spec.make).bind(False, None, None)


# NOTE: CI time (the corpus is the costliest folder): architectures another entry already covers
# run only with -m slow; bench/models.py runs them all.
_COVERED_BY = {
    "mobilenetv3_large_100": "mobilenetv3_small_100 (the same blocks)",
    "regnety_002": "regnetx_002 and efficientnet_b0 (its squeeze-excitation)",
    "deit_tiny_distilled_patch16_224": "deit_tiny_patch16_224 (plus a distillation token)",
    "resnext50_32x4d": "resnet50 and regnetx_002 (grouped convolutions)",
    "tiny_vit_5m_224": "efficientvit_b0, fastvit_t8, levit_128s (conv-attention hybrids)",
    "dpn68": "resnet18 and densenet121 (the residual and dense paths it joins)",
}


def _param(spec):
    marks = [pytest.mark.slow] if spec.name in _COVERED_BY else []
    return pytest.param(spec, id=spec.name, marks=marks)


@pytest.mark.parametrize("spec", [_param(s) for s in CORPUS])
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
