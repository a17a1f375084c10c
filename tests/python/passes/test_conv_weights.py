"""A channels-last convolution with a contiguous k x k weight parameter reads a channels-last copy
of the weight made once per parameter version (passes/conv_weights.h, runtime/weight_layouts.h),
not one torch makes inside every call: no weight copy after the first call, and results that
follow the weight when it is updated in place, replaced or given new data between calls."""

import gc

import pytest
import torch
from helpers import weight_copies_in_call
from torch import nn

import torchlite

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
pytestmark = needs_cpu_kernels

CL = torch.channels_last


@pytest.fixture(autouse=True)
def _fresh_counters(monkeypatch):
    # NOTE: the cache is opt-in (writes through w.data bypass the version counter it checks).
    monkeypatch.setattr(torchlite.config, "cache_conv_weights", True)
    torchlite.reset_counters()


def count(name):
    return torchlite.counters().get(name, 0)


def net(dtype=torch.float32, device="cpu"):
    """3x3, strided 3x3, grouped 3x3 and 1x1 convolutions (the 1x1 weight is both layouts)."""
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.SiLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=4),
        nn.Conv2d(16, 8, 1),
    )
    return m.eval().to(device=device, dtype=dtype)


def image(n=2, px=12, dtype=torch.float32, device="cpu"):
    return torch.randn(n, 3, px, px, dtype=dtype, device=device).contiguous(memory_format=CL)


def tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-4}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_second_call_copies_no_weight_and_matches_eager(dtype):
    m = net(dtype)
    f = torchlite.compile(m)
    with torch.no_grad():
        x = image(dtype=dtype)
        torch.testing.assert_close(f(x), m(x), **tol(dtype))
        # Eager converts the three k x k weights in every call; the compiled call in none.
        assert len(weight_copies_in_call(m, x, m.parameters())) >= 3
        copies = count("conv_weight_copies")
        for px in (12, 12):
            x = image(px=px, dtype=dtype)
            torch.testing.assert_close(f(x), m(x), **tol(dtype))
        assert weight_copies_in_call(f, x, m.parameters()) == []
        assert count("conv_weight_copies") == copies
    assert count("conv_weights_cached") >= 3


def test_contiguous_input_forced_channels_last_copies_each_weight_once(monkeypatch):
    monkeypatch.setattr(torchlite.config, "channels_last", True)
    m = net()
    f = torchlite.compile(m)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 3, 12, 12)
            torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
    assert count("conv_weights_cached") == 3
    assert count("conv_weight_copies") == 3


def test_weight_updated_in_place_between_calls_is_seen():
    m = net()
    f = torchlite.compile(m)
    x = image()
    with torch.no_grad():
        f(x)
        m[0].weight.mul_(2)
        m[2].weight.add_(0.5)
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        copies = count("conv_weight_copies")
        m[5].weight[0].zero_()  # through a view: the view shares the parameter's version counter
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        assert count("conv_weight_copies") == copies + 1


def test_optimizer_step_between_inference_calls_is_seen():
    m = net()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    f = torchlite.compile(m)
    x = image()
    for _ in range(2):
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m(x).square().sum().backward()  # eager training step, outside the compiled graph
        opt.step()
        opt.zero_grad()


def test_weight_replaced_or_given_new_data_is_seen():
    m = net()
    f = torchlite.compile(m)
    x = image()
    with torch.no_grad():
        f(x)
        m[0].weight = nn.Parameter(torch.randn(8, 3, 3, 3))
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m[2].weight.data = torch.randn(16, 8, 3, 3)
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        # Emptied, then new data that may land at the old address, same version counter.
        m[5].weight.data = torch.empty(0)
        m[5].weight.data = torch.randn(16, 4, 3, 3)
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))
        m.load_state_dict(net().state_dict())
        torch.testing.assert_close(f(x), m(x), **tol(torch.float32))


def test_shared_weight_is_copied_once_and_arguments_are_not_cached():
    conv = nn.Conv2d(4, 4, 3, padding=1).eval()

    def shared(x):
        return conv(torch.relu(conv(x)))

    def argument(x, w):
        return torch.conv2d(torch.relu(torch.conv2d(x, w, padding=1)), w, padding=1)

    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=CL)
    with torch.no_grad():
        torch.testing.assert_close(torchlite.compile(shared)(x), shared(x))
        assert count("conv_weights_cached") == 2 and torchlite._C.weight_layouts_cached() >= 1
        w = torch.randn(4, 4, 3, 3)
        torch.testing.assert_close(torchlite.compile(argument)(x, w), argument(x, w))
    assert count("conv_weights_cached") == 2
    assert count("conv_weight_copies") == 1


def test_cached_copies_die_with_their_module_and_on_reset():
    m = net()
    with torch.no_grad():
        torchlite.compile(m)(image())
    held = torchlite._C.weight_layouts_cached()
    assert held >= 3
    del m
    torchlite.reset()
    gc.collect()
    assert torchlite._C.weight_layouts_cached() == held - 3 or held - 3 < 0
    m = net()
    with torch.no_grad():
        torchlite.compile(m)(image())
    assert torchlite._C.weight_layouts_cached() >= 3
    torchlite.reset()
    assert torchlite._C.weight_layouts_cached() == 0


def test_training_graphs_keep_the_parameter_and_its_gradient_layout(monkeypatch):
    monkeypatch.setattr(torchlite.config, "channels_last", True)
    m = net().train()
    ref = net().train()
    ref.load_state_dict(m.state_dict())
    x = image()
    torchlite.compile(m)(x).sum().backward()
    ref(x).sum().backward()
    assert count("conv_weights_cached") == 0
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
        for layout in (torch.contiguous_format, CL):
            assert p.grad.is_contiguous(memory_format=layout) == q.grad.is_contiguous(
                memory_format=layout
            )


def test_setting_off_leaves_the_weights_to_torch(monkeypatch):
    monkeypatch.setattr(torchlite.config, "cache_conv_weights", False)
    m = net()
    x = image()
    with torch.no_grad():
        torch.testing.assert_close(torchlite.compile(m)(x), m(x))
    assert count("conv_weights_cached") == 0


def test_timm_resnet18_channels_last_input_copies_no_weight_after_the_first_call():
    timm = pytest.importorskip("timm")
    m = timm.create_model("resnet18", pretrained=False).eval()
    f = torchlite.compile(m)
    with torch.no_grad():
        x = torch.randn(1, 3, 32, 32).contiguous(memory_format=CL)
        torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-3)
        m.layer1[0].conv1.weight.mul_(0.5)
        torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-3)
        assert weight_copies_in_call(f, x, m.parameters()) == []
    assert count("conv_weights_cached") >= 15


def test_by_default_a_write_through_w_data_is_seen(monkeypatch):
    # NOTE: `.data` is a tensor with a version counter of its own, so the cache cannot see
    # `w.data.mul_(2)`: that is why it is opt-in. With the defaults, the write must show.
    monkeypatch.undo()
    assert torchlite.config.cache_conv_weights is False
    m = net()
    x = image()
    f = torchlite.compile(m)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
        for p in m.parameters():
            p.data.mul_(2)
        torch.testing.assert_close(f(x), m(x))
    assert count("conv_weights_cached") == 0
