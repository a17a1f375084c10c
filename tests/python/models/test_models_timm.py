"""timm image models (random weights): compiled eval forward equals eager; explain finds graphs.

Eager time on the 2-core dev machine is well under a second each, so they are not marked slow.
"""

import pytest
import torch
from helpers import assert_same

import torchlite

try:
    import timm
except (ImportError, RuntimeError) as exc:  # NOTE: a broken torchvision raises RuntimeError
    pytest.skip(f"timm unavailable: {exc}", allow_module_level=True)

MODELS = [
    # name, create_model kwargs, input shape
    ("resnet18", {}, (2, 3, 64, 64)),
    ("vit_tiny_patch16_224", {"img_size": 64}, (2, 3, 64, 64)),
]
# NOTE: resnet18 at this size is the corpus's (tests/python/models/test_corpus.py); here it runs
# at batch one below, with a fresh input too.
MATCHES = [m for m in MODELS if m[0] != "resnet18"]


def _model(name, kwargs):
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **kwargs).eval()


@pytest.mark.parametrize(("name", "kwargs", "shape"), MATCHES, ids=[m[0] for m in MATCHES])
def test_timm_model_matches_eager(name, kwargs, shape):
    model = _model(name, kwargs)
    x = torch.randn(shape)
    compiled = torchlite.compile(model)
    with torch.no_grad():
        expected = model(x)
        for _ in range(2):
            assert_same(compiled(x), expected, atol=1e-4, rtol=1e-4)
        x2 = torch.randn(shape)
        assert_same(compiled(x2), model(x2), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("name", "kwargs", "shape"), MODELS, ids=[m[0] for m in MODELS])
def test_timm_model_explain_finds_graphs(name, kwargs, shape):
    model = _model(name, kwargs)
    with torch.no_grad():
        report = torchlite.explain(model)(torch.randn(shape))
    assert report.graph_count >= 1
    assert str(report)


def test_resnet18_batch_one_matches_eager():
    model = _model("resnet18", {})
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for x in (torch.randn(1, 3, 96, 96), torch.randn(1, 3, 96, 96)):
            assert_same(compiled(x), model(x), atol=1e-4, rtol=1e-4)
