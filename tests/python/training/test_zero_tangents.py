"""An output nothing differentiates (the logits beside a model's loss) gets no materialized zero
gradient: the compiled training step turns autograd's materialization off and runs a backward
compiled with that tangent a constant zero (csrc/passes/partition_joint.h,
with_zero_tangents), one per pattern of missing gradients. Gradients equal eager's; the trace
shows the backward variant without an input for the missing tangent."""

import pytest
import torch
import torch.nn.functional as F
from train_check import compiled_backward_used

import torchlite
from torchlite import config


def loss_and_logits(h, w, t):
    logits = h @ w
    loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), t.view(-1))
    return loss, logits


def _inputs(dtype=torch.float32):
    torch.manual_seed(0)
    h = torch.randn(2, 5, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(8, 11, dtype=dtype, requires_grad=True)
    return h, w, torch.randint(0, 11, (2, 5))


def _grads(fn, pick, inputs):
    h, w, t = inputs
    outs = fn(h, w, t)
    assert isinstance(outs, tuple)
    return outs, torch.autograd.grad(pick(outs), (h, w))


def _placeholders(folder):
    text = (folder / "00_input.txt").read_text()
    return [line for line in text.splitlines() if "placeholder" in line]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "pick,missing",
    [
        (lambda outs: outs[0], "tangent_1"),  # the loss only: no gradient for the logits
        (lambda outs: outs[1].square().sum(), "tangent_0"),  # the logits only
    ],
    ids=["loss", "logits"],
)
def test_a_missing_output_gradient_is_a_constant_zero(monkeypatch, tmp_path, dtype, pick, missing):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    torchlite.reset()
    inputs = _inputs(dtype)
    outs, grads = _grads(torchlite.compile(loss_and_logits), pick, inputs)
    assert compiled_backward_used(outs[0])
    _, expected = _grads(loss_and_logits, pick, inputs)
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)
    (variant,) = tmp_path.glob("run-*/*/backward_zeros0")
    full = variant.parent / "backward"
    assert len(_placeholders(variant)) == len(_placeholders(full)) - 1
    assert not any(f"%{missing} " in p for p in _placeholders(variant))
    assert any(f"%{missing} " in p for p in _placeholders(full))


def test_each_pattern_compiles_once_and_both_gradients_use_the_full_backward(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    torchlite.reset()
    compiled = torchlite.compile(loss_and_logits)
    for _ in range(3):
        inputs = _inputs()
        _, grads = _grads(compiled, lambda outs: outs[0], inputs)
        _, expected = _grads(loss_and_logits, lambda outs: outs[0], inputs)
        for g, e in zip(grads, expected, strict=True):
            torch.testing.assert_close(g, e)
    assert len(list(tmp_path.glob("run-*/*/backward_zeros*"))) == 1
    # both outputs differentiated: the backward compiled with the forward, no new variant
    inputs = _inputs()
    both = lambda outs: outs[0] * 3 + outs[1].sum()
    _, grads = _grads(compiled, both, inputs)
    _, expected = _grads(loss_and_logits, both, inputs)
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)
    assert len(list(tmp_path.glob("run-*/*/backward_zeros*"))) == 1


class _LossAndLogits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 11)

    def forward(self, h, t):
        logits = self.proj(torch.tanh(h))
        return F.cross_entropy(logits.view(-1, 11), t.view(-1)), logits


def test_module_returning_loss_and_logits_trains_as_eager():
    torch.manual_seed(0)
    model = _LossAndLogits()
    eager = _LossAndLogits()
    eager.load_state_dict(model.state_dict())
    compiled = torchlite.compile(model)
    for _ in range(3):
        h, t = torch.randn(3, 4, 8), torch.randint(0, 11, (3, 4))
        loss, logits = compiled(h, t)
        assert compiled_backward_used(loss)
        loss.backward()
        e_loss, e_logits = eager(h, t)
        e_loss.backward()
        torch.testing.assert_close(loss, e_loss)
        torch.testing.assert_close(logits, e_logits)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
