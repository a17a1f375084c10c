"""Whole models on CUDA in bfloat16 (random weights, base configs): compiled eval forward equals
eager within bf16 tolerance. Fused kernels compute in float32 and round once where eager
rounds after every op, so outputs are compared by relative error norm."""

import pytest
import torch

import torchlite

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

# ||compiled - eager|| / ||eager||: bf16 has 8 mantissa bits (0.4% per rounding), and the
# two programs round in different places through dozens of layers.
REL_TOL = 3e-2


def _rel_err(a, e):
    a, e = a.float(), e.float()
    return ((a - e).norm() / e.norm().clamp_min(1e-6)).item()


def _run(model, *inputs, pick=lambda out: out):
    compiled = torchlite.compile(model)
    with torch.no_grad():
        expected = pick(model(*inputs))
        for _ in range(2):
            actual = pick(compiled(*inputs))
    torch.cuda.synchronize()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert torch.isfinite(actual.float()).all()
    err = _rel_err(actual, expected)
    assert err < REL_TOL, f"relative error {err:.4f} >= {REL_TOL}"
    assert torchlite.counters()["kernels"] > 0, "no fused kernel ran"


@pytest.mark.parametrize("name", ["resnet50", "vit_base_patch16_224", "convnext_tiny"])
def test_timm_model_matches_eager_in_bf16(name):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval().to("cuda", torch.bfloat16)
    x = torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
    _run(model, x)


def test_bert_base_matches_eager_in_bf16():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval().to("cuda", torch.bfloat16)
    ids = torch.randint(0, 30522, (2, 128), device="cuda")
    _run(model, ids, pick=lambda out: out.last_hidden_state)


def test_gpt2_matches_eager_in_bf16():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    model = model.to("cuda", torch.bfloat16)
    ids = torch.randint(0, 50257, (2, 128), device="cuda")
    _run(model, ids, pick=lambda out: out.logits)
