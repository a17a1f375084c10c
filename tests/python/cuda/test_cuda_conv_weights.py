"""CUDA half-precision convolutions run channels-last; their k x k weight parameters are converted
to channels-last once per parameter version (passes/conv_weights.h), not by cuDNN in every call.
Results follow in-place updates and replacements, also under CUDA graphs (a replayed graph must
read the parameter itself)."""

import pytest
import torch
from helpers import weight_copies_in_call
from torch import nn

import torchlite

pytestmark = pytest.mark.cuda

CL = torch.channels_last
TOL = {"atol": 3e-2, "rtol": 3e-2}


@pytest.fixture(autouse=True)
def _fresh_counters(monkeypatch):
    # NOTE: the cache is opt-in (writes through w.data bypass the version counter it checks).
    monkeypatch.setattr(torchlite.config, "cache_conv_weights", True)
    torchlite.reset_counters()


def net(dtype=torch.bfloat16, device="cuda"):
    m = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False),
        nn.SiLU(),
        nn.Conv2d(64, 64, 5, padding=2, groups=64),
        nn.Conv2d(64, 32, 1),
    )
    return m.eval().to(device=device, dtype=dtype)


def image(n=4, px=32, dtype=torch.bfloat16):
    return torch.randn(n, 3, px, px, device="cuda", dtype=dtype)


def assert_follows(got, want):
    """Relative L2 error under 1e-2: bf16 rounding of large outputs differs from eager's in single
    elements by an ulp (0.3 on values near 100), a stale weight gives an error near 1."""
    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert err < 1e-2, err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_net_copies_no_weight_after_the_first_call(dtype):
    m = net(dtype)
    f = torchlite.compile(m)
    with torch.no_grad():
        x = image(dtype=dtype)
        torch.testing.assert_close(f(x), m(x), **TOL)
        # Eager on a channels-last input converts every k x k weight inside cuDNN's call.
        assert len(weight_copies_in_call(m, x.contiguous(memory_format=CL), m.parameters())) >= 3
        copies = torchlite.counters()["conv_weight_copies"]
        x = image(dtype=dtype)
        torch.testing.assert_close(f(x), m(x), **TOL)
        assert weight_copies_in_call(f, x, m.parameters()) == []
    # NOTE: the two dense 3x3 weights; the depthwise 64x1x5x5 one is channels-last to torch
    # already (strides equal either way), so nothing is copied for it.
    assert torchlite.counters()["conv_weights_cached"] == 2
    assert torchlite.counters()["conv_weight_copies"] == copies


def test_updates_and_replacements_between_calls_are_seen():
    m = net()
    f = torchlite.compile(m)
    x = image()
    with torch.no_grad():
        f(x)
        m[0].weight.mul_(2)
        assert_follows(f(x), m(x))
        m[3].weight = nn.Parameter(torch.randn_like(m[3].weight))
        assert_follows(f(x), m(x))
        m[5].weight.data = torch.randn_like(m[5].weight)
        assert_follows(f(x), m(x))


def test_cuda_graphs_replay_reads_the_updated_weight():
    m = net()
    f = torchlite.compile(m, mode="reduce-overhead")
    x = image()
    with torch.no_grad():
        for step in range(4):
            assert_follows(f(x), m(x))
            m[0].weight.add_(0.25)
            m[3].weight.mul_(0.5)
            assert_follows(f(x), m(x))
    assert torchlite.counters()["cuda_graph_replays"] >= 1


def test_timm_resnet18_bf16_matches_eager_with_cached_weights():
    timm = pytest.importorskip("timm")
    m = (
        timm.create_model("resnet18", pretrained=False)
        .eval()
        .to(device="cuda", dtype=torch.bfloat16)
    )
    f = torchlite.compile(m)
    with torch.no_grad():
        x = image(n=8, px=64)
        torch.testing.assert_close(f(x).float(), m(x).float(), atol=5e-2, rtol=5e-2)
        assert weight_copies_in_call(f, x, m.parameters()) == []
    assert torchlite.counters()["conv_weights_cached"] >= 15
