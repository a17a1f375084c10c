"""Small hand-written models (no third-party model code): an MLP, a CNN and a transformer
encoder, compiled whole-model in eval mode and compared with eager."""

import torch
from helpers import assert_same
from torch import nn

import torchlite


class _Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class _TinyLm(nn.Module):
    def __init__(self, vocab=50, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 2, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids) + self.pos[:, : ids.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.out(self.norm(self.encoder(h, mask=mask, is_causal=True)))


def _compare(model, *inputs):
    model.eval()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for _ in range(2):
            assert_same(compiled(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
    return compiled


def test_mlp_matches_eager():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    _compare(model, torch.randn(8, 16))


def test_cnn_matches_eager():
    _compare(_Cnn(), torch.randn(2, 3, 16, 16))


def test_tiny_transformer_lm_matches_eager():
    _compare(_TinyLm(), torch.randint(0, 50, (2, 12)))


def test_mlp_training_step_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    ref = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    ref.load_state_dict(model.state_dict())
    compiled = torchlite.compile(model)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for m in (compiled, ref):
        nn.functional.mse_loss(m(x), y).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def test_explain_of_model_reports_graphs():
    report = torchlite.explain(_Cnn().eval())(torch.randn(1, 3, 16, 16))
    assert report.graph_count >= 1
