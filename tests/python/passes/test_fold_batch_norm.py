"""Inference batch norm folded into the convolution before it: same values as eager, folded
weights recomputed per call (in-place parameter updates stay visible), and no fold where it would
change semantics (training mode, a convolution read twice, autograd)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlite

# The passes run where kernels are built: CPU graphs need the LLVM code generator.
needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def enable_fold(monkeypatch):
    """The pass is opt-in (torchlite.config.fold_batch_norm, TORCHLITE_FOLD_BATCH_NORM=1)."""
    monkeypatch.setattr(torchlite.config, "fold_batch_norm", True)


@needs_cpu_kernels
def test_fold_is_off_by_default(monkeypatch):
    monkeypatch.setattr(torchlite.config, "fold_batch_norm", False)
    m = conv_bn_relu(3, 8)
    before = folded()
    with torch.no_grad():
        torchlite.compile(m)(torch.randn(2, 3, 8, 8))
    assert folded() == before


def folded():
    return torchlite.counters()["batch_norms_folded"]


def randomize_bn(model):
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            if m.affine:
                m.weight.data.uniform_(0.5, 2)
                m.bias.data.uniform_(-1, 1)
    return model


def check(model, x, expect_folded, atol=None, rtol=None):
    before = folded()
    with torch.no_grad():
        got = torchlite.compile(model)(x)
        want = model(x)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
    assert got.stride() == want.stride()
    if expect_folded is not None:
        assert folded() - before == expect_folded


def conv_bn_relu(cin, cout, **conv_kw):
    bias = conv_kw.pop("bias", True)
    affine = conv_kw.pop("affine", True)
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, bias=bias, **conv_kw),
        nn.BatchNorm2d(cout, affine=affine),
        nn.ReLU(),
    )


@pytest.mark.parametrize(
    "conv_kw",
    [
        {"padding": 1},
        {"stride": 2, "padding": 0, "bias": False},
        {"padding": 2, "dilation": 2, "affine": False},
        {"padding": 1, "groups": 4, "bias": False, "affine": False},
    ],
)
@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 4, 16, 16), (1, 4, 24, 20)])
def test_conv_bn_relu_matches_eager(conv_kw, shape):
    m = randomize_bn(conv_bn_relu(4, 8, **conv_kw)).eval()
    check(m, torch.randn(shape), expect_folded=1, atol=1e-5, rtol=1e-4)


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_float_dtypes_fold(dtype):
    m = randomize_bn(conv_bn_relu(4, 8, padding=1)).eval().to(dtype)
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {}
    check(m, torch.randn(2, 4, 8, 8, dtype=dtype), expect_folded=1, **tol)


@needs_cpu_kernels
def test_conv1d_and_conv3d_fold():
    m1 = randomize_bn(nn.Sequential(nn.Conv1d(4, 6, 3), nn.BatchNorm1d(6))).eval()
    check(m1, torch.randn(2, 4, 40), expect_folded=1, atol=1e-5, rtol=1e-4)
    m3 = randomize_bn(nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.BatchNorm3d(4))).eval()
    check(m3, torch.randn(1, 2, 5, 5, 5), expect_folded=1, atol=1e-5, rtol=1e-4)


@needs_cpu_kernels
def test_functional_forms_fold():
    w, b = torch.randn(6, 3, 3, 3), torch.randn(6)
    mean, var = torch.randn(6), torch.rand(6) + 0.5
    gamma, beta = torch.rand(6) + 0.5, torch.randn(6)

    def f_functional(x):
        return F.batch_norm(F.conv2d(x, w, b), mean, var, gamma, beta, False, 0.1, 1e-3)

    def f_torch(x):
        return torch.batch_norm(F.conv2d(x, w), gamma, None, mean, var, False, 0.1, 1e-5, True)

    def f_aten(x):
        y = torch.ops.aten._native_batch_norm_legit_no_training(
            F.conv2d(x, w, b), gamma, beta, mean, var, 0.1, 1e-5
        )
        return y[0]

    x = torch.randn(2, 3, 12, 12)
    for f in (f_functional, f_torch, f_aten):
        check(f, x, expect_folded=1, atol=1e-5, rtol=1e-4)


@needs_cpu_kernels
def test_conv_with_two_users_is_not_folded():
    conv, bn = nn.Conv2d(3, 4, 3), randomize_bn(nn.BatchNorm2d(4)).eval()

    def f(x):
        y = conv(x)
        return bn(y) + y

    check(f, torch.randn(2, 3, 8, 8), expect_folded=0, atol=1e-5, rtol=1e-4)


@needs_cpu_kernels
def test_training_mode_batch_norm_is_not_folded():
    m = conv_bn_relu(3, 4, padding=1).train()
    x = torch.randn(4, 3, 8, 8)
    ref = conv_bn_relu(3, 4, padding=1).train()
    ref.load_state_dict(m.state_dict())
    before = folded()
    with torch.no_grad():
        got = torchlite.compile(m)(x)
        want = ref(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    assert folded() == before


@needs_cpu_kernels
def test_grad_mode_with_trainable_parameters_is_not_folded():
    m = randomize_bn(conv_bn_relu(3, 4, padding=1)).eval()
    x = torch.randn(2, 3, 8, 8)
    before = folded()
    got = torchlite.compile(m)(x)
    torch.testing.assert_close(got, m(x))
    assert got.requires_grad
    assert folded() == before


@needs_cpu_kernels
def test_parameters_mutated_in_place_between_calls_stay_correct():
    m = randomize_bn(conv_bn_relu(3, 4, padding=1)).eval()
    before = folded()
    c = torchlite.compile(m)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        m[0].weight.mul_(-2)
        m[0].bias.add_(1)
        m[1].running_mean.add_(0.5)
        m[1].running_var.mul_(3)
        m[1].weight.mul_(0.5)
        m[1].bias.sub_(2)
        torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-4)
    assert folded() - before == 1


@needs_cpu_kernels
def test_folded_weights_are_one_small_kernel_pair_per_batch_norm():
    from torchlite import _C

    m = randomize_bn(conv_bn_relu(3, 4, padding=1)).eval()
    with torch.no_grad():
        graph = torchlite.explain(m)(torch.randn(1, 3, 8, 8)).graphs[0]
    s = _C.partition_summary(graph)
    assert s["extern_ops"] == ["torch.conv2d"]
    assert not any("batch_norm" in " ".join(members) for members in s["members"])
    assert s["kernel_count"] <= 4  # [C] scale/bias, the weight, relu (+ a layout copy)


@needs_cpu_kernels
def test_timm_resnet18_small_matches_eager():
    timm = pytest.importorskip("timm")
    m = randomize_bn(timm.create_model("resnet18", pretrained=False)).eval()
    before = folded()
    check(m, torch.randn(2, 3, 64, 64), expect_folded=None, atol=1e-4, rtol=1e-3)
    assert folded() > before  # on the CPU only where W is small next to the activation


@needs_cpu_kernels
def test_cpu_skips_folds_whose_weight_outgrows_the_activation():
    m = randomize_bn(conv_bn_relu(64, 64, padding=1)).eval()
    check(m, torch.randn(1, 64, 4, 4), expect_folded=0, atol=1e-4, rtol=1e-4)
