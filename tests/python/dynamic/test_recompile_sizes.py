"""Automatic dynamic shapes take runtime sizes only for a new size: a frame captured again at the
sizes it already ran (a kwarg flag such as transformers' `use_cache`, another branch of a
constant) keeps constant-size kernels, which are faster (GPT-2 bf16 8x512 on an H100: its
add + layer norm kernel 16.4 us with runtime sizes, 7.6 us without). A later new size still
gets runtime sizes. Every result is checked against eager."""

import pytest
import torch

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def _private_dirs(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path / "trace"))


def _runtime_size_graphs(tmp_path):
    """How many captured graphs have kernels that take their sizes at run time, of how many."""
    texts = [p.read_text() for p in sorted(tmp_path.glob("trace/run-*/*/lowered.txt"))]
    return sum("sizes=runtime" in t for t in texts), len(texts)


def _flagged(x, w, scale=True):
    y = torch.layer_norm(x @ w + 1, (w.shape[1],))
    return y * 2 if scale else y.relu()


@pytest.mark.parametrize("shape", [(4, 16), (3, 5, 24)])
def test_a_flag_recompile_at_the_same_sizes_keeps_constant_sizes(tmp_path, shape):
    torchlite.reset()
    compiled = torchlite.compile(_flagged)
    w = torch.randn(shape[-1], 32)
    for scale in (True, False, True, False):
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x, w, scale=scale), _flagged(x, w, scale=scale))
    assert _runtime_size_graphs(tmp_path) == (0, 2)
    # A new size after that still makes the frame dynamic.
    bigger = (shape[0] + 3, *shape[1:])
    for scale in (True, False):
        x = torch.randn(bigger)
        torch.testing.assert_close(compiled(x, w, scale=scale), _flagged(x, w, scale=scale))
    runtime, graphs = _runtime_size_graphs(tmp_path)
    assert runtime >= 1 and graphs > 2, (runtime, graphs)


def test_a_new_size_first_then_a_flag_recompile():
    """The old order of events still goes dynamic: a new size is a new size."""
    torchlite.reset()
    compiled = torchlite.compile(_flagged)
    w = torch.randn(16, 8)
    # NOTE: counters are process-wide and reset() keeps them: count this test's fallbacks only.
    fallbacks = torchlite.counters()["eager_fallbacks"]
    for rows, scale in ((4, True), (6, True), (9, True), (9, False), (4, False)):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(compiled(x, w, scale=scale), _flagged(x, w, scale=scale))
    assert torchlite.counters()["eager_fallbacks"] == fallbacks


def test_gpt2_use_cache_false_after_true_keeps_constant_sizes(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, attn_pdrop=0.0
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    torchlite.reset()
    compiled = torchlite.compile(model)
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        for use_cache in (True, False, True):
            out, ref = compiled(ids, use_cache=use_cache), model(ids, use_cache=use_cache)
            torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
            if use_cache:
                assert type(out.past_key_values) is type(ref.past_key_values)
                for got, want in zip(out.past_key_values.layers, ref.past_key_values.layers):
                    for a, b in ((got.keys, want.keys), (got.values, want.values)):
                        assert a.stride() == b.stride()
                        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
            else:
                assert out.past_key_values is None and ref.past_key_values is None
    runtime, graphs = _runtime_size_graphs(tmp_path)
    assert graphs >= 2 and runtime == 0, (runtime, graphs)
