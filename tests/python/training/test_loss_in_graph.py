"""The loss a model computes from its labels joins the training graph: transformers' GPT-2 and
BERT MLM steps with dropout on are one graph with the compiled forward and backward, the loss's
class targets checked before the graph's first effect (csrc/capture/index_bounds.h) on the CPU
and left to the kernels' device asserts on CUDA (csrc/capture/effect_order.cpp). Losses,
gradients and parameters match eager over three steps."""

import pytest
import torch
from torch import nn
from train_check import compiled_backward_used, train_parity

import torchlite

transformers = pytest.importorskip("transformers")


class _WithLabels(nn.Module):
    """model(input_ids=ids, labels=ids).loss: the loss computed inside the model's forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, labels=ids).loss


def _gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg)


def _bert():
    cfg = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    return transformers.BertForMaskedLM(cfg)


_MODELS = {"gpt2": _gpt2, "bert": _bert}


def _ids(device="cpu"):
    return torch.randint(0, 100, (2, 12), device=device)


@pytest.mark.parametrize("name", list(_MODELS))
def test_loss_from_labels_with_dropout_is_one_training_graph(name):
    torch.manual_seed(0)
    model = _WithLabels(_MODELS[name]()).train()
    report = torchlite.explain(model)(_ids())
    # NOTE: before, the loss broke at effect_order (cross_entropy after dropout and the output
    # collector's global): GPT-2 6 graphs/4 breaks; BERT broke at CrossEntropyLoss() instead.
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert "compiled forward and backward" in str(report.training)


@pytest.mark.parametrize("name", list(_MODELS))
def test_loss_from_labels_with_dropout_trains_like_eager(name):
    torch.manual_seed(0)
    out = train_parity(
        _WithLabels(_MODELS[name]()).train(),
        lambda: (_ids(),),
        lambda loss: loss,
        optimizer="sgd",
        rtol=1e-3,
        atol=1e-4,
        seed_each_step=True,
    )
    assert compiled_backward_used(out)


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(_MODELS))
def test_loss_from_labels_is_one_graph_without_a_bounds_check_on_cuda(name):
    torch.manual_seed(0)
    model = _WithLabels(_MODELS[name]()).cuda().train()
    report = torchlite.explain(model)(_ids("cuda"))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    # NOTE: CUDA's loss kernels check targets with device asserts: no host check (a sync).
    assert "check_index_bounds" not in str(report)
    out = train_parity(
        _WithLabels(_MODELS[name]()).train(),
        lambda: (_ids("cuda"),),
        lambda loss: loss,
        optimizer="sgd",
        rtol=1e-3,
        atol=1e-4,
        device="cuda",
        seed_each_step=True,
    )
    assert compiled_backward_used(out)


def _logits_loss(x, w, t, reduction, ignore_index):
    logits = x @ w
    return torch.nn.functional.cross_entropy(
        logits.float().view(-1, logits.shape[-1]), t, reduction=reduction, ignore_index=ignore_index
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(2, 3, 8, 13), (3, 5, 7, 40)])
def test_cross_entropy_as_logsumexp_minus_the_target_logit_matches_eager(dtype, reduction, shape):
    """The loss of a log_softmax is computed from the logits (logsumexp minus the target's
    logit, torchlite/_training.py::_nll_loss_of_log_softmax), with ignored targets among them."""
    b, s, k, c = shape
    args = [torch.randn(b, s, k, dtype=dtype), torch.randn(k, c, dtype=dtype)]
    t = torch.randint(0, c, (b * s,))
    t[::3] = -100
    leaves = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    torchlite.reset()
    out = torchlite.compile(_logits_loss)(*leaves, t, reduction, -100)
    assert compiled_backward_used(out)
    expected = _logits_loss(*ref, t, reduction, -100)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out, expected, **tol)
    out.backward()
    expected.backward()
    for a, r in zip(leaves, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad, **tol)


def test_cross_entropy_with_every_target_ignored_is_nan_as_in_eager():
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    t = torch.full((6,), -100)
    torchlite.reset()
    out = torchlite.compile(_logits_loss)(x.requires_grad_(), w, t, "mean", -100)
    assert torch.isnan(out) and torch.isnan(_logits_loss(x, w, t, "mean", -100))
