"""Dynamic shapes on the GPU (docs/internals/dynamic-shapes.md): CUDA kernels take their sizes at
run time, so once a frame is dynamic a new batch size or sequence length compiles no CUDA program
(counters()["nvrtc_compiles"] stays put) and captures nothing (size-generic entries serve CUDA
inputs too). Every size is checked against eager, at odd lengths that change alignment."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlite
from torchlite import config

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    """A fresh disk cache per test: a program NVRTC did not compile in this test cannot come from
    disk, so the compile counts below mean what they say."""
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


def _sweep(fn, make_args, sizes, dynamic=None, atol=1e-4, rtol=1e-4):
    """Runs `fn` compiled at each size against eager; returns, per call, the CUDA programs NVRTC
    compiled and the frames captured."""
    compiled = torchlite.compile(fn, dynamic=dynamic)
    compiles, frames = [], []
    for n in sizes:
        args = make_args(n)
        before = dict(torchlite.counters())
        with torch.no_grad():
            out = compiled(*args)
            torch.cuda.synchronize()
            torch.testing.assert_close(out, fn(*args), atol=atol, rtol=rtol)
        after = torchlite.counters()
        compiles.append(after["nvrtc_compiles"] - before["nvrtc_compiles"])
        frames.append(after["frames"] - before["frames"])
    return compiles, frames


def _cuda(*shape):
    return torch.randn(*shape, device="cuda")


def _pointwise(x):
    return (x * 2 + 1).relu() - x.sigmoid()


def _rows_sum(x):
    return (x * x).sum(-1) + 1


def _softmax_rows(x):
    return torch.softmax(x * 0.5, dim=-1)


def _layer_norm_rows(x):
    return F.layer_norm(x, (x.shape[-1],)) * 2


def _view_heads(x):
    b, s, h = x.shape
    return (x.view(b, s, 2, h // 2) + 1).exp().sum(-1)


W = None


def _matmul_epilogue(x):
    return F.gelu(x @ W + 1)


# Odd lengths, not multiples of 8: the row counts (and numels) change alignment.
SEQ_LENS = [8, 13, 37, 64, 5, 101, 3]

# The changing dimension is a row count or a numel, never a reduced row's length (the text
# follows a row's length: warp lanes a row, vector entry, row cache).
CASES = {
    "pointwise": (_pointwise, lambda n: (_cuda(3, n, 16),)),
    "pointwise_odd_numel": (_pointwise, lambda n: (_cuda(n, 7, 9),)),
    "rows_sum": (_rows_sum, lambda n: (_cuda(n, 48),)),
    "softmax_rows": (_softmax_rows, lambda n: (_cuda(2, n, 40),)),
    "layer_norm_rows": (_layer_norm_rows, lambda n: (_cuda(2, n, 64),)),
    "view_heads": (_view_heads, lambda n: (_cuda(2, n, 32),)),
    "matmul_epilogue": (_matmul_epilogue, lambda n: (_cuda(n, 24),)),
}


@pytest.mark.parametrize("case", CASES)
def test_new_sizes_compile_no_cuda_program_and_capture_nothing(case):
    global W
    W = _cuda(24, 40)
    fn, make_args = CASES[case]
    compiles, frames = _sweep(fn, make_args, SEQ_LENS)
    assert compiles[0] > 0  # the first call's own kernels (constant sizes)
    assert compiles[1] > 0  # a recompile: kernels with runtime sizes
    assert compiles[2:] == [0] * (len(SEQ_LENS) - 2), compiles
    assert sum(frames) == 2, frames


def test_dynamic_true_compiles_once_for_every_size():
    compiles, frames = _sweep(_pointwise, lambda n: (_cuda(4, n),), [9, 30, 17, 1000], dynamic=True)
    assert compiles[0] > 0 and compiles[1:] == [0, 0, 0], compiles
    assert frames == [1, 0, 0, 0], frames


def test_dynamic_false_compiles_for_every_size():
    compiles, frames = _sweep(_pointwise, lambda n: (_cuda(4, n),), [9, 30, 17], dynamic=False)
    assert all(c > 0 for c in compiles), compiles
    assert frames == [1, 1, 1], frames


def test_row_lengths_that_change_the_text_stay_correct():
    # A softmax over a changing row length: warp lanes a row, the vector entry and the row
    # cache follow the length, so some lengths compile another text; every one is right.
    compiles, frames = _sweep(
        _softmax_rows, lambda n: (_cuda(6, n),), [8, 13, 37, 64, 5, 101, 300, 2000, 4097]
    )
    assert sum(frames) == 2, frames
    assert sum(compiles[2:]) < len(compiles) - 2, compiles  # not one compile per length


def test_half_types_at_odd_lengths():
    for dtype in (torch.float16, torch.bfloat16):
        torchlite.reset()
        _sweep(
            lambda x: F.layer_norm(x * 2, (64,)).relu() + x,
            lambda n, dtype=dtype: (torch.randn(2, n, 64, device="cuda", dtype=dtype),),
            [8, 13, 37, 5, 101],
            atol=2e-2,
            rtol=2e-2,
        )


def test_sizes_zero_and_one_are_specialised_and_correct():
    sizes = [4, 6, 1, 7, 0, 9, 1]
    compiles, _ = _sweep(_rows_sum, lambda n: (_cuda(n, 5),), sizes, dynamic=True)
    assert compiles[1] == 0 and compiles[3] == 0 and compiles[5] == 0, compiles


class _Attention(nn.Module):
    """nanoGPT-style attention: sizes read from the input, views built from them."""

    def __init__(self, c=64, nh=4):
        super().__init__()
        self.nh = nh
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q = q.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        k = k.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        v = v.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


def test_an_attention_block_sweep_compiles_twice_on_the_gpu():
    model = _Attention().cuda().eval()
    compiles, frames = _sweep(model, lambda n: (_cuda(2, n, 64),), [8, 13, 37, 64, 5, 101])
    assert sum(frames) == 2, frames
    assert compiles[2:] == [0] * (len(compiles) - 2), compiles


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(100, 32)
        self.wpe = nn.Embedding(256, 32)

    def forward(self, ids):
        pos = torch.arange(ids.size(1), device=ids.device)
        return (self.wte(ids) + self.wpe(pos)).relu()


def test_gathers_take_their_sizes_at_run_time_too():
    # An embedding's gather and positions from arange (index math): one program for every length.
    model = _Embed().cuda()
    compiles, frames = _sweep(
        model, lambda n: (torch.randint(0, 100, (2, n), device="cuda"),), [8, 13, 37, 64, 5, 101]
    )
    assert sum(frames) == 2, frames
    assert compiles[2:] == [0] * (len(compiles) - 2), compiles


def _break_between_graphs(x):
    y = (x * 2 + 1).relu()
    print(end="")  # a graph break
    return y.softmax(-1) + x.sum(-1, keepdim=True)


def test_a_graph_break_sweep_captures_and_compiles_each_side_twice():
    compiles, frames = _sweep(_break_between_graphs, lambda n: (_cuda(n, 40),), SEQ_LENS)
    assert frames[:2] == [2, 2] and frames[2:] == [0] * (len(SEQ_LENS) - 2), frames
    assert compiles[2:] == [0] * (len(SEQ_LENS) - 2), compiles


def _hf_model(name):
    transformers = pytest.importorskip("transformers")
    if name == "gpt2":
        cfg = transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=256, attn_pdrop=0.0
        )
        return transformers.GPT2Model(cfg).eval().cuda()
    cfg = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=100,
        max_position_embeddings=256,
    )
    return transformers.BertModel(cfg).eval().cuda()


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_sweep_captures_and_compiles_nothing_after_the_second_length(name):
    model = _hf_model(name)
    compiled = torchlite.compile(model)
    compiles, frames = [], []
    for seq in [5, 9, 13, 17, 22, 30, 41, 50]:
        ids = torch.randint(0, 100, (2, seq), device="cuda")
        before = dict(torchlite.counters())
        with torch.no_grad():
            out = compiled(ids).last_hidden_state
            ref = model(ids).last_hidden_state
        torch.cuda.synchronize()
        after = torchlite.counters()
        compiles.append(after["nvrtc_compiles"] - before["nvrtc_compiles"])
        frames.append(after["frames"] - before["frames"])
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert frames[2:] == [0] * 6, frames
    assert compiles[2:] == [0] * 6, compiles
