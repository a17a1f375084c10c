"""A count derived from sizes (a mean's or variance's divisor, a layer or RMS norm over a dynamic
axis, a global average pool) reaches a kernel as an integer constant cast to the float type
(passes/lowering.h RuleCtx::count): with runtime sizes it is a dims number, so a sweep over
lengths compiles no CPU kernel after the second length (before: a float literal, an LLVM compile
per length). Every result is checked against eager."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

# NOTE: no length equal to a model constant (4, 3): a literal there, one more compile.
_LENGTHS = [6, 9, 11, 13, 19, 23, 29]


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


def _mean(x):
    return x.mean(1) * 2


def _var_std(x):
    return x.var(1) + x.std(1, correction=0)


def _var_mean(x):
    var, mean = torch.var_mean(x, 1)
    return var * torch.var_mean(x, 1, correction=0)[1] + mean


def _layer_norm_over_length(x):
    return F.layer_norm(x.transpose(1, 2), (x.shape[1],)) + 1


def _rms_norm_over_length(x):
    return F.rms_norm(x.transpose(1, 2), (x.shape[1],))


def _global_pool(x):
    return F.adaptive_avg_pool2d(x.view(x.shape[0], 1, x.shape[1], 4).relu(), 1)


def _derived_factory_times_mean(x):
    return torch.full((x.shape[0], x.shape[1] + 1), 2.0) * x.sum(-1).mean()


@pytest.mark.parametrize(
    "fn",
    [
        _mean,
        _var_std,
        _var_mean,
        _layer_norm_over_length,
        _rms_norm_over_length,
        _global_pool,
        _derived_factory_times_mean,
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_count_over_a_dynamic_length_compiles_no_cpu_kernel_after_the_second_length(fn, dtype):
    compiled = torchlite.compile(fn)
    counts = []
    for n in _LENGTHS:
        x = torch.randn(3, n, 4, dtype=dtype) * 3 + 1
        before = _C.llvm_compiles()
        with torch.no_grad():
            out = compiled(x)
        counts.append(_C.llvm_compiles() - before)
        torch.testing.assert_close(out, fn(x))
    assert sum(counts[2:]) == 0, counts
