"""By default CUDA channels-last convolutions read channels-last copies of their k x k weights that
the graph makes at its start, all of them in one grouped launch (passes/conv_weights.h:
convert_conv_weights), not cuDNN converting each weight in its call. Always the current values
(writes through `w.data` included), under CUDA graphs too; training gradients are eager's."""

import copy

import pytest
import torch
from helpers import weight_copies_in_call
from torch import nn

import torchlite

pytestmark = pytest.mark.cuda

CL = torch.channels_last


@pytest.fixture(autouse=True)
def _fresh_counters():
    torchlite.reset_counters()


def count(name):
    return torchlite.counters().get(name, 0)


def net(dtype=torch.bfloat16):
    m = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False),
        nn.SiLU(),
        nn.Conv2d(64, 64, 5, padding=2, groups=64),
        nn.Conv2d(64, 48, (1, 7), padding=(0, 3)),
        nn.Conv2d(48, 32, 1),
    )
    return m.eval().to(device="cuda", dtype=dtype)


def image(n=4, px=32, dtype=torch.bfloat16):
    return torch.randn(n, 3, px, px, device="cuda", dtype=dtype).contiguous(memory_format=CL)


def assert_follows(got, want, bound=1e-2):
    """Relative L2 error: rounding differs by an ulp in single elements, a stale weight gives an
    error near 1."""
    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert err < bound, err


def launches(f, x):
    before = count("kernel_launches")
    f(x)
    return count("kernel_launches") - before


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_weights_convert_in_one_launch(dtype):
    m = net(dtype)
    f = torchlite.compile(m)
    off = torchlite.compile(copy.deepcopy(m), options={"convert_conv_weights": False})
    with torch.no_grad():
        x = image(dtype=dtype)
        assert_follows(f(x), m(x))
        assert_follows(off(x), m(x))
        # Three k x k weights; the depthwise one (64 x 1 x 5 x 5) and the 1x1 are channels-last
        # to torch already.
        assert count("conv_weights_converted") == 3
        assert len(weight_copies_in_call(m, x, m.parameters())) >= 3
        assert weight_copies_in_call(f, x, m.parameters()) == []
        assert launches(f, x) == launches(off, x) + 1
        x = image(n=2, px=20, dtype=dtype)
        assert_follows(f(x), m(x))


def test_writes_through_w_data_and_new_tensors_are_seen():
    m = net()
    f = torchlite.compile(m)
    x = image()
    with torch.no_grad():
        assert_follows(f(x), m(x))
        for p in m.parameters():
            p.data.mul_(-1.5)
        assert_follows(f(x), m(x))
        m[3].weight = nn.Parameter(torch.randn_like(m[3].weight))
        m[5].weight.data = torch.randn_like(m[5].weight)
        assert_follows(f(x), m(x))


def test_cuda_graphs_replay_reads_the_written_weight():
    m = net()
    f = torchlite.compile(m, mode="reduce-overhead")
    x = image()
    with torch.no_grad():
        for _ in range(4):
            assert_follows(f(x), m(x))
            m[0].weight.data.add_(0.25)
            m[3].weight.data.mul_(0.5)
            assert_follows(f(x), m(x))
    assert count("cuda_graph_replays") >= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_gradients_match_eager(dtype):
    torch.manual_seed(0)
    m = net(dtype).train()
    ref = copy.deepcopy(m)
    f = torchlite.compile(m)
    for _ in range(2):
        x = image(dtype=dtype)
        assert_follows(f(x), ref(x), 2e-2)
        f(x).float().square().mean().backward()
        ref(x).float().square().mean().backward()
        # NOTE: the first convolution's bias feeds a training batch norm, which subtracts its
        # mean: its gradient is 0 up to rounding in both runs, so its error is measured against
        # the largest gradient's scale, not its own (relative to its own: 1.2-1.8, noise over noise).
        scale = max(q.grad.float().norm().item() for q in ref.parameters())
        for p, q in zip(m.parameters(), ref.parameters()):
            err = (p.grad.float() - q.grad.float()).norm().item()
            assert err < 3e-2 * max(q.grad.float().norm().item(), 1e-3 * scale), err
            p.grad = q.grad = None
    assert count("conv_weights_converted") >= 1


def test_timm_resnet50_bf16_matches_eager_with_one_conversion_launch():
    timm = pytest.importorskip("timm")
    m = timm.create_model("resnet50", pretrained=False).eval().to("cuda", torch.bfloat16)
    f = torchlite.compile(m)
    with torch.no_grad():
        x = image(n=8, px=64)
        assert_follows(f(x), m(x), 2e-2)
        assert weight_copies_in_call(f, x, m.parameters()) == []
    assert count("conv_weights_converted") >= 17
