"""The bench/models.py corpus at CI size: every timm and transformers model (random weights,
eval, no_grad) compiled whole-model gives the eager result, on the first and the cached call.

Correctness only; graphs, breaks and timings are bench/models.py's job.
"""

import importlib.util
import os
import sys

import pytest
import torch
from helpers import assert_same

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


def _scale(out) -> float:
    """The largest magnitude among the output's tensors (ModelOutput, tuple or tensor)."""
    if isinstance(out, torch.Tensor):
        return out.detach().abs().max().item() if out.numel() and out.is_floating_point() else 0.0
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return max((_scale(o) for o in out), default=0.0)
    return 0.0


def _tolerance(expected) -> dict:
    """1e-4, the absolute part against the output's scale: inception_v3's random-weight logits
    reach 1e9, and a channels-last convolution (oneDNN's NHWC algorithm, which eager also runs
    for channels-last tensors) moves them by 2e-6 of that, as eager in that layout does."""
    return {"atol": 1e-4 * max(1.0, _scale(expected)), "rtol": 1e-4}


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in CORPUS])
def test_corpus_model_matches_eager(spec):
    if not _AVAILABLE[spec.family]:
        pytest.skip(f"{spec.family} unavailable")
    model, args, kwargs = spec.build(full=False)
    compiled = torchlite.compile(model)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        for _ in range(2):
            assert_same(compiled(*args, **kwargs), expected, **_tolerance(expected))
