"""Convolutions run channels-last: same values as eager and, for every graph output, exactly
eager's strides (a clone restores them where the new layout reaches an output)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlite

# The passes run where kernels are built: CPU graphs need the LLVM code generator.
needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def cl_convs():
    return torchlite.counters()["channels_last_convs"]


@pytest.fixture
def force_channels_last(monkeypatch):
    monkeypatch.setattr(torchlite.config, "channels_last", True)


def two_convs(cin=3, c=8, device="cpu", dtype=torch.float32):
    m = nn.Sequential(
        nn.Conv2d(cin, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, stride=2), nn.Sigmoid()
    )
    return m.eval().to(device=device, dtype=dtype)


def check(fn, *args, atol=None, rtol=None):
    with torch.no_grad():
        got = torchlite.compile(fn)(*args)
        want = fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol)
        assert g.stride() == w.stride()


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 3, 10, 10), (1, 3, 7, 9)])
@pytest.mark.parametrize("input_layout", [torch.contiguous_format, torch.channels_last])
def test_conv_chain_matches_eager_values_and_strides(force_channels_last, shape, input_layout):
    m = two_convs()
    x = torch.randn(shape).contiguous(memory_format=input_layout)
    before = cl_convs()
    check(m, x, atol=1e-5, rtol=1e-4)
    # A channels-last input already runs its convolutions channels-last in eager.
    assert cl_convs() - before == (2 if input_layout == torch.contiguous_format else 0)


@needs_cpu_kernels
def test_outputs_between_convs_and_pooled_keep_eager_strides(force_channels_last):
    c1, c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def f(x):
        a = F.relu(c1(x))
        b = c2(a)
        pooled = F.adaptive_avg_pool2d(b, 1)
        return a, b * 2, pooled, pooled.flatten(1), F.max_pool2d(b, 2)

    check(f, torch.randn(2, 3, 8, 8), atol=1e-5, rtol=1e-4)


@needs_cpu_kernels
def test_conv_bn_relu_resnet_block_folds_and_runs_channels_last(force_channels_last, monkeypatch):
    monkeypatch.setattr(torchlite.config, "fold_batch_norm", True)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)), inplace=True)
            y = self.bn2(self.conv2(y))
            y += x
            return F.relu(y, inplace=True)

    m = Block().eval()
    before = (cl_convs(), torchlite.counters()["batch_norms_folded"])
    check(m, torch.randn(2, 8, 16, 16), atol=1e-5, rtol=1e-4)
    assert cl_convs() - before[0] == 2
    assert torchlite.counters()["batch_norms_folded"] - before[1] == 2


@needs_cpu_kernels
def test_view_that_needs_contiguous_input_keeps_the_eager_layout(force_channels_last):
    m = two_convs()

    def f(x):
        return m(x).view(x.shape[0], -1)  # view() of a channels-last tensor raises

    before = cl_convs()
    check(f, torch.randn(2, 3, 8, 8), atol=1e-5, rtol=1e-4)
    assert cl_convs() == before


def wide_then_narrow(c):
    # The first output is the large activation; a 1x1 conv keeps the second cheap.
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, 4, 1)).eval()


@needs_cpu_kernels
@pytest.mark.parametrize(
    "shape, c, converted",
    [
        ((1, 3, 256, 256), 64, True),  # first output 64x256x256 f32 = 16 MiB: the threshold
        ((2, 3, 181, 190), 64, True),  # 16.8 MB, odd sizes
        ((1, 3, 255, 256), 64, False),  # just under 16 MiB
        ((2, 3, 16, 16), 8, False),  # CI-sized: contiguous is faster there
    ],
)
def test_cpu_f32_graphs_with_large_conv_outputs_run_channels_last_by_default(shape, c, converted):
    assert torchlite.config.channels_last is None  # the device default decides
    m = wide_then_narrow(c)
    x = torch.randn(shape)
    before = cl_convs()
    check(m, x, atol=1e-4, rtol=1e-4)
    assert cl_convs() - before == (2 if converted else 0)


class InvertedResidual(nn.Module):
    """MobileNetV2/EfficientNet's block: 1x1 expansion, depthwise kxk, squeeze-excitation
    (a spatial mean), 1x1 projection, residual add."""

    def __init__(self, c=16, expand=4, k=3):
        super().__init__()
        e = c * expand
        self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw = nn.Conv2d(e, e, k, padding=k // 2, groups=e, bias=False)
        self.bn2 = nn.BatchNorm2d(e)
        self.se_reduce, self.se_expand = nn.Conv2d(e, c // 4, 1), nn.Conv2d(c // 4, e, 1)
        self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.silu(self.bn1(self.expand(x)))
        y = F.silu(self.bn2(self.dw(y)))
        s = self.se_expand(F.silu(self.se_reduce(y.mean((2, 3), keepdim=True))))
        y = y * torch.sigmoid(s)
        return x + self.bn3(self.project(y))


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 16, 16, 16), (1, 16, 9, 7), (3, 16, 2, 2)])
@pytest.mark.parametrize("k", [3, 5])
def test_depthwise_separable_blocks_run_channels_last_by_default(shape, k):
    # CI-sized, far below the byte threshold: the cost model's depthwise convolutions decide
    # (1.5-1.9x faster channels-last on the CPU; efficientnet_b0 1.56x as a whole).
    assert torchlite.config.channels_last is None
    m = nn.Sequential(InvertedResidual(k=k), InvertedResidual(k=k)).eval()
    for p in m.parameters():
        p.data.uniform_(-0.5, 0.5)
    before = cl_convs()
    check(m, torch.randn(shape), atol=1e-4, rtol=1e-4)
    assert cl_convs() - before == 10


@needs_cpu_kernels
def test_dense_and_strided_pointwise_convs_stay_contiguous_at_small_sizes():
    # resnet50's downsampling bottleneck at CI size: dense 3x3 and a strided 1x1 whose weight
    # outweighs its input run faster contiguous.
    m = nn.Sequential(
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.Conv2d(256, 1024, 1, stride=2), nn.ReLU()
    ).eval()
    before = cl_convs()
    check(m, torch.randn(2, 256, 4, 4), atol=1e-4, rtol=1e-4)
    assert cl_convs() == before


@needs_cpu_kernels
def test_single_conv_and_float64_stay_contiguous():
    one = nn.Conv2d(3, 4, 3).eval()
    before = cl_convs()
    check(one, torch.randn(1, 3, 8, 8))
    check(two_convs(dtype=torch.float64), torch.randn(1, 3, 8, 8, dtype=torch.float64))
    assert cl_convs() == before


class PatchEmbed(nn.Module):
    """timm's PatchEmbed: a strided convolution read channels innermost by a layer norm."""

    def __init__(self, c=16, flatten=False):
        super().__init__()
        self.proj = nn.Conv2d(3, c, 4, stride=4)
        self.norm = nn.LayerNorm(c)
        self.flatten = flatten

    def forward(self, x):
        x = self.proj(x)
        x = x.flatten(2).transpose(1, 2) if self.flatten else x.permute(0, 2, 3, 1)
        return self.norm(x) * 2


@needs_cpu_kernels
@pytest.mark.parametrize("flatten", [False, True])
def test_a_single_conv_read_channels_innermost_runs_channels_last(force_channels_last, flatten):
    m = PatchEmbed(flatten=flatten).eval()
    before = cl_convs()
    check(m, torch.randn(2, 3, 16, 20), atol=1e-4, rtol=1e-4)
    assert cl_convs() - before == 1
    # a single convolution read in its own layout gains nothing from the input's conversion
    one = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    before = cl_convs()
    check(one, torch.randn(1, 3, 8, 8))
    assert cl_convs() == before


@needs_cpu_kernels
def test_grad_mode_graphs_are_left_alone(force_channels_last):
    m = two_convs()
    x = torch.randn(1, 3, 8, 8)
    before = cl_convs()
    got = torchlite.compile(m)(x)
    torch.testing.assert_close(got, m(x))
    assert cl_convs() == before


@needs_cpu_kernels
def test_timm_resnet18_small_matches_eager(force_channels_last):
    timm = pytest.importorskip("timm")
    m = timm.create_model("resnet18", pretrained=False).eval()
    before = cl_convs()
    check(m, torch.randn(2, 3, 64, 64), atol=1e-4, rtol=1e-3)
    assert cl_convs() - before >= 20


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_half_conv_chain_runs_channels_last(dtype, force_channels_last):
    m = two_convs(device="cuda", dtype=dtype)
    x = torch.randn(4, 3, 32, 32, device="cuda", dtype=dtype)
    before = cl_convs()
    check(m, x, atol=2e-2, rtol=2e-2)
    assert cl_convs() - before == 2


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_resnet18_matches_eager_strides(dtype, force_channels_last, monkeypatch):
    monkeypatch.setattr(torchlite.config, "fold_batch_norm", True)
    timm = pytest.importorskip("timm")
    m = timm.create_model("resnet18", pretrained=False).eval().to(device="cuda", dtype=dtype)
    x = torch.randn(4, 3, 64, 64, device="cuda", dtype=dtype)
    before = (cl_convs(), torchlite.counters()["batch_norms_folded"])
    check(m, x, atol=5e-2, rtol=5e-2)
    assert cl_convs() - before[0] >= 20
    assert torchlite.counters()["batch_norms_folded"] - before[1] == 20
