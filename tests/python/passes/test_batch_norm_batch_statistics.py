"""Training-mode batch norm without running statistics (nf-resnet's weight standardization,
`BatchNorm2d(track_running_stats=False)`): lowered as a fused reduction instead of torch's two
batch-norm kernels, values equal eager's; one value per channel still raises eager's error, and
batch norms that update running statistics stay extern."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check, check_module

import torchlite
from torchlite import _C


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


def standardized_conv(x, w, gain):
    # NOTE: timm's ScaledStdConv2d: the weight normalised per output channel
    ws = F.batch_norm(
        w.reshape(1, w.shape[0], -1), None, None, weight=gain, training=True, eps=1e-6
    )
    return F.conv2d(x, ws.reshape_as(w), padding=1).relu()


def batch_stats(x, w, b):
    return F.silu(F.batch_norm(x, None, None, w, b, training=True, momentum=0.0, eps=1e-3))


@pytest.mark.parametrize("shape", [(4, 8, 5, 5), (3, 5, 7), (2, 16, 3, 3, 3), (6, 4)])
def test_batch_statistics_match_eager(shape):
    c = shape[1]
    x = torch.randn(*shape) * 3 + 1
    check(batch_stats, x, torch.randn(c), torch.randn(c))
    if len(shape) == 4:
        check(
            batch_stats, x.to(memory_format=torch.channels_last), torch.randn(c), None, fresh=False
        )


def test_batch_statistics_bfloat16_match_eager():
    x = torch.randn(4, 8, 6, 6, dtype=torch.bfloat16)
    w, b = torch.randn(8, dtype=torch.bfloat16), torch.randn(8, dtype=torch.bfloat16)
    check(batch_stats, x, w, b, atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(not _C.has_llvm, reason="no LLVM: CPU graphs run op by op")
def test_batch_statistics_lower_into_one_kernel_with_their_epilogue():
    s = summary(batch_stats, torch.randn(4, 8, 5, 5), torch.randn(8), torch.randn(8))
    assert s["extern_ops"] == [] and s["kernel_count"] == 1, s


def test_weight_standardized_convolution_matches_eager():
    w = torch.randn(6, 3, 3, 3)
    check(standardized_conv, torch.randn(2, 3, 8, 8), w, torch.rand(6) + 0.5, atol=1e-4, rtol=1e-4)


def test_untracked_batch_norm_module_in_training_and_eval_matches_eager():
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8, track_running_stats=False)
    )
    check_module(m.train(), torch.randn(2, 3, 9, 9), atol=1e-4, rtol=1e-4)
    check_module(m.eval(), torch.randn(2, 3, 9, 9), atol=1e-4, rtol=1e-4)


def test_one_value_per_channel_raises_eagers_error():
    fn = torchlite.compile(lambda x: F.batch_norm(x, None, None, training=True))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        fn(torch.randn(1, 4))


def test_batch_norm_updating_running_statistics_stays_extern_and_updates_them():
    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True, momentum=0.3) * 2

    x = torch.randn(4, 3, 5, 5)
    rm, rv = torch.zeros(3), torch.ones(3)
    rm2, rv2 = rm.clone(), rv.clone()
    out = torchlite.compile(f)(x, rm, rv)
    torch.testing.assert_close(out, f(x, rm2, rv2))
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)
    assert "torch.nn.functional.batch_norm" in summary(f, x, rm.clone(), rv.clone())["extern_ops"]
