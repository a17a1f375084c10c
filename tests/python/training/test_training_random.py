"""Random ops (training-mode dropout, rand*) inside compiled graphs, forward-only and with the
compiled backward: they draw from torch's generator as eager does (the joint graph keeps the
ATen random ops torch picks for the real device), so torch.manual_seed reproduces a compiled
run bit for bit, the keep rate and scaling are dropout's, and gradients use the forward's mask."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from train_check import compiled_backward_used

import torchlite


def _drop_and_rand(x, w):
    h = F.dropout((x @ w).relu(), 0.3, training=True)
    return h, torch.rand_like(h), h * 2 + torch.randn_like(h)


def _inputs(requires_grad=False):
    torch.manual_seed(0)
    return torch.randn(16, 8), torch.randn(8, 32).requires_grad_(requires_grad)


def _seeded(fn, seed, *args):
    torch.manual_seed(seed)
    return fn(*args)


@pytest.mark.parametrize("mode", ["no_grad", "grad"])
def test_random_ops_draw_eagers_bits_and_manual_seed_reproduces_them(mode):
    x, w = _inputs(requires_grad=mode == "grad")
    compiled = torchlite.compile(_drop_and_rand)
    with torch.set_grad_enabled(mode == "grad"):
        first = _seeded(compiled, 3, x, w)
        again = _seeded(compiled, 3, x, w)
        other = _seeded(compiled, 4, x, w)
        eager = _seeded(_drop_and_rand, 3, x, w)
    if mode == "grad":
        assert compiled_backward_used(first[0])
    for c, a, e in zip(first, again, eager, strict=True):
        torch.testing.assert_close(c, e, rtol=0, atol=0)
        torch.testing.assert_close(c, a, rtol=0, atol=0)
    assert not torch.equal(first[1], other[1])
    assert not torch.equal(first[0] != 0, other[0] != 0)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keep_rate_and_scaling(p):
    def fn(x):
        return F.dropout(x, p, training=True)

    x = torch.ones(200, 500, requires_grad=True)
    torch.manual_seed(0)
    out = torchlite.compile(fn)(x)
    assert compiled_backward_used(out)
    kept = out != 0
    # NOTE: 100k draws: the keep rate's standard deviation is below 0.0016
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    g = torch.randn_like(out)
    out.backward(g)
    # the gradient flows through exactly the kept elements, scaled like them
    torch.testing.assert_close(x.grad, g * kept / (1 - p))


def test_gradients_use_the_forwards_mask_and_match_eager():
    x, w = _inputs(requires_grad=True)
    ref_w = w.detach().clone().requires_grad_()
    compiled = torchlite.compile(_drop_and_rand)
    outs = _seeded(compiled, 7, x, w)
    eager = _seeded(_drop_and_rand, 7, x, ref_w)
    assert compiled_backward_used(outs[2])
    outs[2].square().sum().backward()
    eager[2].square().sum().backward()
    torch.testing.assert_close(w.grad, ref_w.grad, rtol=1e-5, atol=1e-5)


class _DropoutMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(8, 32), nn.GELU(), nn.Dropout(0.25), nn.Linear(32, 32), nn.Dropout(0.1)
        )
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.net(x).tanh())


def test_training_steps_with_dropout_match_eager_when_seeded_alike():
    torch.manual_seed(0)
    eager = _DropoutMlp()
    compiled_model = _DropoutMlp()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torchlite.compile(compiled_model)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_c = torch.optim.AdamW(compiled_model.parameters(), lr=1e-2)
    ex = torchlite.explain(compiled_model)(torch.randn(6, 8))
    assert ex.graph_break_count == 0
    assert ex.training == [
        f"{type(compiled_model).__name__}.forward: compiled forward and backward"
    ]
    for step in range(3):
        x = torch.randn(6, 8)
        for model, opt in ((eager, opt_e), (compiled, opt_c)):
            torch.manual_seed(100 + step)
            out = model(x)
            if model is compiled:
                assert compiled_backward_used(out)
            opt.zero_grad()
            out.square().mean().backward()
            opt.step()
        for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters(), strict=True):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=f"{name}, step {step}")


def test_eval_mode_dropout_is_the_identity():
    model = _DropoutMlp().eval()
    x = torch.randn(5, 8)
    out = torchlite.compile(model)(x)
    torch.testing.assert_close(out, model(x))
