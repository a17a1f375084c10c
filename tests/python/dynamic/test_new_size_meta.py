"""A new size's compile takes the meta results of the nodes its passes insert from capture's
C++ shape rules (passes/graph_rewrite.h `set_meta_call`), as its replay does, not from torch's
meta kernels: those of pointwise ops are Python (torch._refs, torch._prims), ~0.1-1 ms a call,
and move_reshapes inserts one per op of a chain it moves (a tanh GELU under a merging view: the
6-layer transformers GPT-2's move_reshapes took ~20 ms at each new length on the CPU, now ~7).
Counted with a profiler: calls into torch's Python meta machinery during a call that compiles a
new size (791 for the block below before this change, none now); results equal eager's."""

import collections
import sys

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

W1 = torch.randn(32, 16)
W2 = torch.randn(16, 32)


def _gelu_block(x):
    b, t, c = x.shape
    h = F.linear(x, W1)
    h = 0.5 * h * (1.0 + torch.tanh(0.79788456 * (h + 0.044715 * h * h * h)))
    return F.linear(h.view(b * t, -1), W2).view(b, t, c) + x


_META_FILES = ("torch/_refs", "torch/_prims", "_meta_registrations", "torch/_decomp")


def _python_meta_calls(call):
    calls = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and any(f in frame.f_code.co_filename for f in _META_FILES):
            calls[frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        out = call()
    finally:
        sys.setprofile(None)
    return out, calls


@pytest.fixture(autouse=True)
def _fresh():
    torchlite.reset()
    yield
    torchlite.reset()


@pytest.mark.parametrize("batch", [2, 3])
def test_a_new_sizes_compile_runs_no_python_meta_kernel(batch):
    compiled = torchlite.compile(_gelu_block)
    with torch.no_grad():
        for t in (5, 7):  # the exact entry, then the size-generic one
            compiled(torch.randn(batch, t, 16))
        for t in (9, 2, 31):
            x = torch.randn(batch, t, 16)
            before = torchlite.counters()["size_instances"]
            out, calls = _python_meta_calls(lambda x=x: compiled(x))
            assert torchlite.counters()["size_instances"] == before + 1  # compiled in this call
            assert not calls, calls.most_common(5)
            torch.testing.assert_close(out, _gelu_block(x))


def _gqa_block(x, wq, wk, wv, wo):
    # Llama's attention without its rotary embedding: 4 query heads over 2 key/value heads
    b, t, _ = x.shape
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    q = F.linear(h, wq).view(b, t, 4, 8).transpose(1, 2)
    k = F.linear(h, wk).view(b, t, 2, 8).transpose(1, 2)
    v = F.linear(h, wv).view(b, t, 2, 8).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.35, enable_gqa=True)
    return F.linear(o.transpose(1, 2).reshape(b, t, 32), wo) + x


@pytest.mark.parametrize("batch", [1, 3])
def test_grouped_query_attention_at_a_new_size_runs_no_python_meta_kernel(batch):
    """enable_gqa=True SDPA at a new length: capture's C++ rule answers its meta result
    (torch's meta path for it is Python: ~1.8 ms a call, per layer at every new length)."""
    ws = [torch.randn(32, 32) * 0.2, torch.randn(16, 32) * 0.2, torch.randn(16, 32) * 0.2]
    ws.append(torch.randn(32, 32) * 0.2)
    compiled = torchlite.compile(_gqa_block)
    with torch.no_grad():
        for t in (5, 7):  # the exact entry, then the size-generic one
            x = torch.randn(batch, t, 32)
            torch.testing.assert_close(compiled(x, *ws), _gqa_block(x, *ws))
        for t in (9, 2, 31, 12):
            x = torch.randn(batch, t, 32)
            before = torchlite.counters()["size_instances"]
            out, calls = _python_meta_calls(lambda x=x: compiled(x, *ws))
            assert torchlite.counters()["size_instances"] == before + 1  # compiled in this call
            assert not calls, calls.most_common(5)
            torch.testing.assert_close(out, _gqa_block(x, *ws))


def test_a_llama_sweep_runs_no_python_attention_meta_per_new_length():
    """transformers' Llama (sdpa attention: enable_gqa=True, is_causal=True): at every new
    length no layer's attention runs torch's Python meta path (its math path's safe_softmax
    decomposition is its mark), and results equal eager."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=128, vocab_size=100,
    )  # fmt: skip
    model = transformers.LlamaModel(cfg).eval()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for i, t in enumerate((5, 7, 9, 13)):
            ids = torch.randint(1, 100, (2, t))
            before = torchlite.counters()["size_instances"]
            out, calls = _python_meta_calls(lambda ids=ids: compiled(input_ids=ids))
            ref = model(input_ids=ids).last_hidden_state
            torch.testing.assert_close(out.last_hidden_state, ref, atol=1e-4, rtol=1e-4)
            if i >= 2:  # after the exact and the size-generic captures
                assert torchlite.counters()["size_instances"] > before
                assert calls["safe_softmax"] == 0, calls.most_common(5)
