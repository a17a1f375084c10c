"""Dynamic shapes, layer 1 (docs/internals/dynamic-shapes.md): CPU kernels that take their sizes
at run time, so a new batch size or sequence length reuses the kernels LLVM already compiled.
Every size is checked against eager."""

import logging

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    """A fresh disk cache per test: a kernel not compiled in this test cannot come from disk, so
    the LLVM compile counts below mean what they say."""
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _pointwise(x):
    return (x * 2 + 1).relu() - x.sigmoid()


def _row_sum(x):
    return (x * x).sum(-1) + 1


def _softmax_rows(x):
    return torch.softmax(x * 0.5, dim=-1)


def _layer_norm_rows(x):
    return F.layer_norm(x, (x.shape[-1],)) * 2


def _view_heads(x):
    b, s, h = x.shape
    return (x.view(b, s, 2, h // 2).transpose(1, 2) + 1).exp()


def _reshape_transposed(x):
    b, s, h = x.shape
    return (x.view(b, s, 2, h // 2).transpose(1, 2) + 1).reshape(b * 2, s, h // 2).exp()


def _matmul_epilogue(x, w):
    return F.gelu(x @ w + 1)


def _sweep(fn, make_args, sizes, dynamic=None):
    """Runs `fn` compiled at each size, checks it against eager; returns the LLVM compiles
    each call caused."""
    compiled = torchlite.compile(fn, dynamic=dynamic)
    compiles = []
    for n in sizes:
        args = make_args(n)
        before = _C.llvm_compiles()
        out = compiled(*args)
        compiles.append(_C.llvm_compiles() - before)
        torch.testing.assert_close(out, fn(*args), atol=1e-5, rtol=1e-5)
    return compiles


# Last dims that are not 0 or 1 and change alignment (odd lengths, not multiples of 8).
SEQ_LENS = [8, 13, 37, 64, 5, 101]

CASES = {
    "pointwise": (_pointwise, lambda n: (torch.randn(3, n, 16),)),
    "row_sum": (_row_sum, lambda n: (torch.randn(4, n),)),
    "softmax_rows": (_softmax_rows, lambda n: (torch.randn(2, 3, n),)),
    "layer_norm_rows": (_layer_norm_rows, lambda n: (torch.randn(2, n, 24),)),
    "view_heads": (_view_heads, lambda n: (torch.randn(2, n, 8),)),
    "matmul_epilogue": (_matmul_epilogue, lambda n: (torch.randn(n, 12), torch.randn(12, 20))),
    "batch_sizes": (_pointwise, lambda n: (torch.randn(n, 7, 9),)),
}


@pytest.mark.parametrize("case", CASES)
def test_sizes_after_the_second_reuse_the_compiled_kernels(case):
    fn, make_args = CASES[case]
    compiles = _sweep(fn, make_args, SEQ_LENS)
    assert compiles[0] > 0  # constant sizes: the first call's own kernels
    assert compiles[1] > 0  # a recompile: kernels with runtime sizes
    assert compiles[2:] == [0] * (len(SEQ_LENS) - 2), compiles


def test_dynamic_true_takes_runtime_sizes_from_the_first_call():
    compiles = _sweep(_softmax_rows, lambda n: (torch.randn(3, n),), [9, 30, 17], dynamic=True)
    assert compiles[0] > 0 and compiles[1:] == [0, 0], compiles


def test_dynamic_false_compiles_kernels_for_every_size():
    compiles = _sweep(_softmax_rows, lambda n: (torch.randn(3, n),), [9, 30, 17], dynamic=False)
    assert all(c > 0 for c in compiles), compiles


def test_sizes_zero_and_one_are_specialised_and_correct():
    # Size 1 drops an axis and 0 runs nothing: both get their own kernels, never a wrong one.
    sizes = [4, 6, 1, 7, 0, 9, 1]
    compiles = _sweep(_row_sum, lambda n: (torch.randn(n, 5),), sizes, dynamic=True)
    assert compiles[1] == 0 and compiles[3] == 0 and compiles[5] == 0, compiles


def test_a_mean_over_a_changing_dim_stays_correct():
    # The divisor is a constant in the kernel, so these kernels differ per size (not shared).
    _sweep(lambda x: x.mean(-1) * 3, lambda n: (torch.randn(5, n),), [6, 11, 3, 40], dynamic=True)


def test_a_reshape_of_a_transposed_view_stays_correct():
    # A gather whose index math divides by sizes: the divisors' magic numbers come from the dims
    # (codegen/cpu Emitter::magic_divide), so no kernel compiles after the second size (before:
    # literal divisors, a compile per size).
    compiles = _sweep(_reshape_transposed, lambda n: (torch.randn(2, n, 8),), [13, 37, 6, 21])
    assert compiles[2:] == [0, 0], compiles


def test_torchlite_mark_dynamic_makes_the_first_compile_dynamic():
    def make(n):
        x = torch.randn(n, 10)
        torchlite.mark_dynamic(x, 0)
        return (x,)

    compiles = _sweep(_row_sum, make, [6, 22, 15])
    assert compiles[1:] == [0, 0], compiles


def test_torch_dynamo_mark_dynamic_and_maybe_mark_dynamic_are_honoured():
    import torch._dynamo

    for mark in (torch._dynamo.mark_dynamic, torch._dynamo.maybe_mark_dynamic):
        torchlite.reset()

        def make(n, mark=mark):
            x = torch.randn(3, n)
            mark(x, 1)
            return (x,)

        compiles = _sweep(_softmax_rows, make, [10, 21, 33])
        assert compiles[1:] == [0, 0], (mark, compiles)


def test_mark_dynamic_range_violation_names_the_dimension():
    compiled = torchlite.compile(_row_sum)
    x = torch.randn(4, 6)
    torchlite.mark_dynamic(x, 0, min=2, max=8)
    torch.testing.assert_close(compiled(x), _row_sum(x))
    y = torch.randn(16, 6)
    torchlite.mark_dynamic(y, 0, min=2, max=8)
    with pytest.raises(ValueError, match=r"L\['x'\]\.size\(0\) is 16, outside the range"):
        compiled(y)


def test_mark_static_removes_a_dynamic_mark_and_bad_dims_are_errors():
    x = torch.randn(3, 4)
    torchlite.mark_dynamic(x, [0, 1], min=1, max=9)
    torchlite.mark_static(x, 1)
    assert x._dynamo_dynamic_indices == {0} and x._dynamo_static_indices == {1}
    assert {r.dim for r in x._dynamo_dynamic_range} == {0}
    with pytest.raises(ValueError, match="dim 2 is not a dimension"):
        torchlite.mark_dynamic(x, 2)
    with pytest.raises(ValueError, match="min=5 is greater than max=2"):
        torchlite.mark_dynamic(x, 0, min=5, max=2)


def test_trace_shows_kernels_with_runtime_sizes(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    _sweep(_pointwise, lambda n: (torch.randn(2, n),), [5, 6])
    lowered = sorted(tmp_path.glob("run-*/*/lowered.txt"))
    texts = [p.read_text() for p in lowered]
    assert sum("sizes=runtime" in t for t in texts) == 1, texts


def test_recompiles_log_says_kernels_take_runtime_sizes(monkeypatch, caplog):
    monkeypatch.setattr(config, "logs", "recompiles")
    with caplog.at_level(logging.INFO, logger="torchlite"):
        _sweep(_pointwise, lambda n: (torch.randn(2, n),), [5, 6])
    messages = [r.getMessage() for r in caplog.records]
    assert any("kernels take their sizes at run time (automatic" in m for m in messages), messages


@pytest.mark.parametrize("dynamic", [None, False])
def test_a_sweep_past_the_cache_size_limit_stays_compiled_unless_dynamic_is_false(dynamic):
    before = torchlite.counters()["eager_fallbacks"]
    sizes = list(range(3, 3 + 2 * config.cache_size_limit))
    compiles = _sweep(_softmax_rows, lambda n: (torch.randn(2, n),), sizes, dynamic=dynamic)
    fallbacks = torchlite.counters()["eager_fallbacks"] - before
    if dynamic is None:
        assert fallbacks == 0 and compiles[2:] == [0] * (len(sizes) - 2), compiles
    else:
        assert fallbacks > 0  # today's behaviour: past the limit the frame runs eagerly
