"""The bucket split on its own, in one process: a fake active DDP module makes every graph
captured with the compiled backward split at small buckets; forward values and gradients must
equal eager's (views, shape constants, batch-norm statistics and several outputs crossing pieces)."""

import types

import pytest
import torch
from helpers import fresh_like

import torchlite
from torchlite import _ddp_buckets


@pytest.fixture
def fake_ddp(monkeypatch):
    ddp = types.SimpleNamespace(bucket_bytes_cap=500)
    ddp._bucket_config = types.SimpleNamespace(first_bucket_bytes_cap=300)
    monkeypatch.setattr(_ddp_buckets, "active_ddp", lambda: ddp)
    monkeypatch.setattr(torchlite.config, "compiled_backward", True)
    return ddp


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
        self.scale = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        skip = x
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x)) + 0.5 * skip
            if i == 1:
                skip = x.view(-1, 2, 4).flip(-1).reshape(x.shape)  # a view crossing a piece
        return x * self.scale, skip.sum(-1)


class ConvBn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.Conv2d(4, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
        )
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


def _check(model, x):
    eager = model
    mine = torchlite.compile(__import__("copy").deepcopy(model))
    for _ in range(2):
        x = fresh_like(x)
        out_e, out_m = eager(x), mine(x)
        out_e = out_e if isinstance(out_e, tuple) else (out_e,)
        out_m = out_m if isinstance(out_m, tuple) else (out_m,)
        torch.testing.assert_close(out_m, out_e)
        sum(o.square().sum() for o in out_e).backward()
        sum(o.square().sum() for o in out_m).backward()
        for (name, p), q in zip(eager.named_parameters(), mine.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, msg=lambda m, n=name: f"{n}: {m}")
        for (name, b), c in zip(eager.named_buffers(), mine.buffers(), strict=True):
            torch.testing.assert_close(c, b, msg=lambda m, n=name: f"{n}: {m}")
    return out_m


@pytest.mark.parametrize(
    ("make", "x"),
    [(Mlp, torch.randn(3, 8)), (ConvBn, torch.randn(2, 3, 6, 6))],
    ids=["mlp_views_shapes_two_outputs", "conv_batch_norm_stats"],
)
def test_pieces_compute_what_eager_computes(fake_ddp, make, x):
    model = make()
    with _ddp_buckets.recording() as splits:
        out = _check(model, x)
    assert len(splits) == 1 and len(splits[0].pieces) >= 2, splits
    assert "CompiledTraining" in type(out[0].grad_fn).__name__
    assert all(piece[3] for piece in splits[0].pieces), splits  # each a compiled backward
    # every parameter counted in exactly one piece
    counted = [p for piece in splits[0].pieces for p in piece[1]]
    assert len(counted) == len(set(counted)) == len(list(model.parameters()))


def test_explain_shows_the_split(fake_ddp):
    text = str(torchlite.explain(Mlp())(torch.randn(3, 8)))
    assert "DDP bucket split:" in text and "piece 2:" in text, text


def test_no_split_without_an_active_ddp_module(monkeypatch):
    monkeypatch.setattr(torchlite.config, "compiled_backward", True)
    with _ddp_buckets.recording() as splits:
        _check(Mlp(), torch.randn(3, 8))
    assert splits == []


def test_no_split_when_the_graph_fits_one_bucket(fake_ddp):
    fake_ddp.bucket_bytes_cap = fake_ddp._bucket_config.first_bucket_bytes_cap = 1 << 20
    with _ddp_buckets.recording() as splits:
        _check(Mlp(), torch.randn(3, 8))
    assert splits == []
