"""By default a channels-last convolution of a contiguous k x k weight reads a channels-last copy
the graph makes at its start, all of a graph's weights in one grouped launch
(passes/conv_weights.h: convert_conv_weights; passes/group_kernels.h), instead of torch converting
the weight inside every convolution. Always the weight's current values: an in-place update, a
write through `w.data` and a new tensor are seen; training gradients are eager's."""

import copy

import pytest
import torch
from helpers import weight_copies_in_call
from torch import nn

import torchlite

pytestmark = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

CL = torch.channels_last


@pytest.fixture(autouse=True)
def _fresh_counters():
    torchlite.reset_counters()


def count(name):
    return torchlite.counters().get(name, 0)


def net(dtype=torch.float32, k=3):
    """Four k x k convolutions (strided, grouped, no bias), then a depthwise one and a 1x1 (their
    weights are both layouts to torch: never converted)."""
    m = nn.Sequential(
        nn.Conv2d(3, 8, k, padding=k // 2),
        nn.ReLU(),
        nn.Conv2d(8, 16, k, stride=2, padding=k // 2, bias=False),
        nn.BatchNorm2d(16),
        nn.SiLU(),
        nn.Conv2d(16, 16, k, padding=k // 2, groups=4),
        nn.Conv2d(16, 12, (1, k), padding=(0, k // 2)),
        nn.Conv2d(12, 12, k, padding=k // 2, groups=12),
        nn.Conv2d(12, 8, 1),
    )
    return m.eval().to(dtype=dtype)


def image(n=2, px=12, dtype=torch.float32):
    return torch.randn(n, 3, px, px, dtype=dtype).contiguous(memory_format=CL)


def tol(dtype):
    return {"atol": 3e-2, "rtol": 3e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-4}


def launches(f, *args):
    before = count("kernel_launches")
    f(*args)
    return count("kernel_launches") - before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_weights_convert_in_one_launch_and_torch_converts_none(dtype):
    m = net(dtype)
    f = torchlite.compile(m)
    off = torchlite.compile(copy.deepcopy(m), options={"convert_conv_weights": False})
    with torch.no_grad():
        x = image(dtype=dtype)
        torch.testing.assert_close(f(x), m(x), **tol(dtype))
        torch.testing.assert_close(off(x), m(x), **tol(dtype))
        assert count("conv_weights_converted") == 4
        # Eager (and torchlite with the conversion off) has torch convert the four k x k
        # weights inside the convolutions, every call; by default the graph's one launch does.
        assert len(weight_copies_in_call(m, x, m.parameters())) >= 4
        assert weight_copies_in_call(f, x, m.parameters()) == []
        # Four copies grouped into one launch: three fewer than four copy kernels would be.
        assert launches(f, x) == launches(off, x) + 1
        for px in (12, 9):
            x = image(px=px, dtype=dtype)
            torch.testing.assert_close(f(x), m(x), **tol(dtype))


def test_writes_between_calls_are_seen_through_w_data_in_place_and_new_tensors():
    m = net()
    f = torchlite.compile(m)
    x = image()
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        for p in m.parameters():
            p.data.mul_(2)  # `.data` has a version counter of its own: nothing can see it
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m[0].weight.add_(0.5)
        m[5].weight[0].zero_()
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m[2].weight.data = torch.randn(16, 8, 3, 3)
        m[6].weight = nn.Parameter(torch.randn(12, 16, 1, 3))
        m[7].weight.data.mul_(-1)
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m.load_state_dict(net().state_dict())
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))


def test_weight_arguments_and_shared_weights_convert_once_per_call():
    conv = nn.Conv2d(4, 4, 3, padding=1).eval()

    def shared(x):
        return conv(torch.relu(conv(x)))

    def argument(x, w, v):
        return torch.conv2d(torch.relu(torch.conv2d(x, w, padding=1)), v, padding=1)

    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=CL)
    with torch.no_grad():
        torch.testing.assert_close(torchlite.compile(shared)(x), shared(x))
        assert count("conv_weights_converted") == 2
        g = torchlite.compile(argument)
        for _ in range(2):
            w, v = torch.randn(4, 4, 3, 3), torch.randn(4, 4, 3, 3)
            torch.testing.assert_close(g(x, w, v), argument(x, w, v))
            assert weight_copies_in_call(lambda x, w=w, v=v: g(x, w, v), x, [w]) == []
    assert count("conv_weights_converted") == 4


def test_contiguous_graph_converts_nothing():
    m = net()
    f = torchlite.compile(m, options={"channels_last": False})
    with torch.no_grad():
        x = torch.randn(2, 3, 12, 12)
        torch.testing.assert_close(f(x), m(x))
    assert count("conv_weights_converted") == 0


def test_forced_channels_last_converts_the_weights_too():
    m = net()
    f = torchlite.compile(m, options={"channels_last": True})
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 12, 12)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
            assert weight_copies_in_call(f, x, m.parameters()) == []
    assert count("conv_weights_converted") == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_gradients_match_eager_with_weights_converted(dtype):
    torch.manual_seed(0)
    m = net(dtype).train()
    ref = copy.deepcopy(m)
    f = torchlite.compile(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x = image(dtype=dtype)
        torch.testing.assert_close(f(x), ref(x), **tol(dtype))
        f(x).float().square().mean().backward()
        ref(x).float().square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            grad_tol = tol(dtype) if dtype != torch.float32 else {"atol": 1e-4, "rtol": 1e-3}
            torch.testing.assert_close(p.grad, q.grad, **grad_tol)
            assert p.grad.is_contiguous() == q.grad.is_contiguous()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        with torch.no_grad():
            m[0].weight.data.mul_(1.5)  # a write the version counter does not see
            ref[0].weight.data.mul_(1.5)
    # The first convolution reads the channels-last input itself (the later ones read values
    # whose metadata is the meta kernel's contiguous layout: left to torch).
    assert count("conv_weights_converted") >= 1


def test_timm_resnet18_matches_eager_and_torch_converts_no_weight():
    timm = pytest.importorskip("timm")
    m = timm.create_model("resnet18", pretrained=False).eval()
    f = torchlite.compile(m)
    with torch.no_grad():
        x = torch.randn(1, 3, 32, 32).contiguous(memory_format=CL)
        torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-3)
        m.layer1[0].conv1.weight.data.mul_(0.5)
        torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-3)
        assert weight_copies_in_call(f, x, m.parameters()) == []
    assert count("conv_weights_converted") >= 15
