"""A batch norm's backward at the sizes that split its statistics (long N x H x W rows of few
channels: resnet's stages at batch 32 on the GPU) runs in few kernels, and its gradients equal
eager's.

Backward of conv -> batch norm -> ReLU: the ReLU gradient, one kernel for both per-channel
sums (sum(dy) and sum(dy * (x - mean)), partials per image), one fold of both sums that also
computes the weight and bias gradients, and the input gradient (9 kernels on 63e75f0: the two
folds ran apart, their epilogues as kernels of their own behind a reshape, and the partials
read a view cutting N in two, so the ReLU gradient and x - mean were kernels writing full-size
values). The same fusion serves the CUDA emitter: the kernels of the formula written out, emitted
as CUDA C and compiled by NVRTC without a GPU."""

import pytest
import torch
from helpers import nvrtc_missing
from train_check import compiled_backward_used

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class ConvBnRelu(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
        with torch.no_grad():
            self.bn.weight.normal_(1, 0.2)
            self.bn.bias.normal_(0, 0.2)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _model(c, dtype, channels_last):
    torch.manual_seed(0)
    model = ConvBnRelu(c).to(dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _input(n, c, hw, dtype, channels_last):
    x = torch.randn(n, c, hw, hw, dtype=dtype) * 2 + 0.5
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _grads(model, x, g):
    x = x.detach().clone().requires_grad_()
    out = model(x)
    out.backward(g)
    grads = [x.grad] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out, grads


def _backward_launches(compiled, model, x, g) -> int:
    """Generated kernel launches of one warm backward."""
    for _ in range(2):
        _grads(compiled, x, g)
    out = compiled(x.detach().clone().requires_grad_())
    assert compiled_backward_used(out)
    torchlite.reset_counters()
    out.backward(g)
    launches = torchlite.counters()["kernel_launches"]
    model.zero_grad(set_to_none=True)
    return launches


# (batch, channels, height and width): statistics split a part per image (4 x 64 x 64 = 16384
# points a channel), split through a view cutting N (64 images of 16 x 16: parts of 256 points
# are too short to be a part each), and rows short enough to stay whole.
SPLIT_PER_IMAGE = (4, 8, 64)
SPLIT_THROUGH_VIEW = (64, 8, 16)
WHOLE = (2, 8, 9)


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [SPLIT_PER_IMAGE, SPLIT_THROUGH_VIEW, WHOLE, (3, 5, 80)])
def test_gradients_match_eager(shape, dtype, channels_last):
    n, c, hw = shape
    model = _model(c, dtype, channels_last)
    x = _input(n, c, hw, dtype, channels_last)
    g = torch.randn(n, c, hw, hw, dtype=dtype)
    torch.manual_seed(0)
    out_e, expected = _grads(model, x, g)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torchlite.reset()
    compiled = torchlite.compile(model)
    # NOTE: float32 statistic sums in another order than eager's kernels (partials per image)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}
    for _ in range(2):  # the second call runs the cached executables
        model.load_state_dict(state)
        out, got = _grads(compiled, x, g)
        assert compiled_backward_used(out)
        torch.testing.assert_close(out, out_e, **tol)
        names = ["x"] + [name for name, _ in model.named_parameters()]
        for name, a, e in zip(names, got, expected, strict=True):
            torch.testing.assert_close(a, e, **tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize(
    "shape,most",
    [
        # ReLU gradient, both sums' partials, one fold (and the weight and bias gradients), dx
        (SPLIT_PER_IMAGE, 4),
        # ReLU gradient, x - mean and dy * (x - mean) (read through the view), both partials,
        # one fold, dx
        (SPLIT_THROUGH_VIEW, 5),
        # ReLU gradient, both sums (and their epilogues), dx
        (WHOLE, 3),
    ],
)
def test_backward_kernels(shape, most, channels_last):
    n, c, hw = shape
    model = _model(c, torch.float32, channels_last)
    x = _input(n, c, hw, torch.float32, channels_last)
    g = torch.randn(n, c, hw, hw)
    torchlite.reset()
    launches = _backward_launches(torchlite.compile(model), model, x, g)
    assert launches <= most, launches


def bn_relu_backward(x, g, mean, invstd, w):
    """torch's batch-norm (training) backward formula after a ReLU, written out."""
    y = torch.relu((x - mean[:, None, None]) * (invstd * w)[:, None, None])
    dy = torch.where(y <= 0, 0, g)
    n = x.numel() / x.shape[1]
    sum_dy = dy.sum((0, 2, 3))
    xmu = x - mean[:, None, None]
    sum_dy_xmu = (dy * xmu).sum((0, 2, 3))
    k = sum_dy_xmu / n * invstd * invstd
    dx = (dy - xmu * k[:, None, None] - (sum_dy / n)[:, None, None]) * (invstd * w)[:, None, None]
    return dx, sum_dy_xmu * invstd, sum_dy


def _formula_inputs(n, c, hw, channels_last=False):
    torch.manual_seed(0)
    x = _input(n, c, hw, torch.float32, channels_last)
    g = _input(n, c, hw, torch.float32, channels_last)
    return x, g, torch.randn(c) * 0.1, torch.rand(c) + 0.5, torch.randn(c)


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_written_out_backward_matches_eager_in_cpu_kernels(channels_last):
    args = _formula_inputs(*SPLIT_PER_IMAGE, channels_last)
    expected = bn_relu_backward(*args)
    torchlite.reset()
    got = torchlite.compile(bn_relu_backward)(*args)
    for a, e in zip(got, expected, strict=True):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


_MISSING = nvrtc_missing()


@pytest.mark.skipif(bool(_MISSING), reason=f"NVRTC not loadable: {_MISSING}")
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_written_out_backward_is_four_cuda_kernels(channels_last):
    # the shape of resnet50's first stage at batch 32 (64 channels of 32 x 56 x 56 points)
    args = _formula_inputs(32, 64, 56, channels_last)
    torchlite.reset()
    (graph,) = torchlite.explain(bn_relu_backward)(*args).graphs
    kernels = _C.cuda_kernel_sources(graph, "compute_90", True)
    # the ReLU gradient, both sums' partials (a row per image and channel), one fold of both
    # with the weight gradient, the input gradient
    assert len(kernels) <= 4, [name for name, *_ in kernels]
    for name, source, ptx, _ in kernels:
        assert ptx, name
        assert f"void {name}" in source or name in source
