"""transformers BERT and GPT-2 with small random configs (no downloads): compiled eval forward
equals eager; explain finds graphs. Eager runs take well under a second each."""

import pytest
import torch
from helpers import assert_same

import torchlite

try:
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
except (ImportError, RuntimeError) as exc:  # NOTE: broken optional deps raise either
    pytest.skip(f"transformers unavailable: {exc}", allow_module_level=True)

TOL = {"atol": 1e-4, "rtol": 1e-4}


def _model(config_cls, model_cls, **config):
    """A small random-weight model (seed 0) in eval mode."""
    torch.manual_seed(0)
    return model_cls(config_cls(vocab_size=1000, **config)).eval()


def _bert():
    return _model(
        BertConfig,
        BertModel,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )


def _gpt2():
    return _model(
        GPT2Config,
        GPT2LMHeadModel,
        n_embd=64,
        n_layer=2,
        n_head=2,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )


def _ids(batch=2, seq=16):
    return torch.randint(0, 1000, (batch, seq))


def test_bert_matches_eager():
    model = _bert()
    compiled = torchlite.compile(model)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask)
        for _ in range(2):
            assert_same(compiled(input_ids=ids, attention_mask=mask), expected, **TOL)
        ids2 = _ids()
        assert_same(
            compiled(input_ids=ids2, attention_mask=mask),
            model(input_ids=ids2, attention_mask=mask),
            **TOL,
        )


def test_bert_batch_one_without_mask_matches_eager():
    model = _bert()
    ids = _ids(batch=1, seq=8)
    with torch.no_grad():
        assert_same(torchlite.compile(model)(ids), model(ids), **TOL)


def test_gpt2_lm_head_matches_eager():
    model = _gpt2()
    compiled = torchlite.compile(model)
    ids = _ids()
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=False)
        for _ in range(2):
            assert_same(compiled(input_ids=ids, use_cache=False), expected, **TOL)


def test_gpt2_with_labels_returns_same_loss():
    model = _gpt2()
    ids = _ids(batch=1)
    with torch.no_grad():
        expected = model(input_ids=ids, labels=ids, use_cache=False)
        actual = torchlite.compile(model)(input_ids=ids, labels=ids, use_cache=False)
    assert_same(actual, expected, **TOL)


@pytest.mark.parametrize(
    ("make", "kwargs"), [(_bert, {}), (_gpt2, {"use_cache": False})], ids=["bert", "gpt2"]
)
def test_transformers_explain_finds_graphs(make, kwargs):
    model = make()
    with torch.no_grad():
        report = torchlite.explain(model)(input_ids=_ids(), **kwargs)
    assert report.graph_count >= 1
    assert str(report)
