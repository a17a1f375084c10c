"""A graph compiled again for new sizes lowers to kernels the CPU JIT already linked: it finds
them from the lowered kernel (codegen/cpu/emission_key.h) and emits no LLVM module for them
(`_C.llvm_emits()`), and kernels repeated inside one graph are emitted once. Every size is
checked against eager, and `config.verify` checks each reuse against the text emitting gives."""

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
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _pointwise(x):
    return (x * 2 + 1).relu() - x.sigmoid()


def _softmax_rows(x):
    return torch.softmax(x * 0.5, dim=-1) + x.amax(-1, keepdim=True)


def _layer_norm_block(x, w):
    h = F.layer_norm(x, (x.shape[-1],)) @ w
    return F.gelu(h).sum(-1)


def _attention(x):
    b, t, c = x.shape
    q = x.view(b, t, 2, c // 2).transpose(1, 2)
    att = (q @ q.transpose(-2, -1)) * (1.0 / (c // 2) ** 0.5)
    mask = torch.ones(t, t).tril()
    att = att.masked_fill(mask == 0, float("-inf")).softmax(-1)
    return (att @ q).transpose(1, 2).reshape(b, t, c).tanh()


CASES = {
    "pointwise": (_pointwise, lambda n: (torch.randn(3, n, 5),)),
    "softmax_rows": (_softmax_rows, lambda n: (torch.randn(2, n, 2 * n + 1),)),
    "layer_norm_block": (_layer_norm_block, lambda n: (torch.randn(2, n, 24), torch.randn(24, 9))),
    "attention": (_attention, lambda n: (torch.randn(2, n, 16),)),
}
# Lengths that change alignment (odd, prime, a multiple of 8); never 0 or 1 (specialised).
LENGTHS = [6, 11, 37, 16, 5, 23, 64]


def _sweep(fn, make_args, lengths):
    """Runs `fn` compiled at each length against eager; returns the LLVM modules each call
    emitted and the ones LLVM compiled."""
    compiled = torchlite.compile(fn)
    emits, compiles = [], []
    for n in lengths:
        args = make_args(n)
        emitted, built = _C.llvm_emits(), _C.llvm_compiles()
        with torch.no_grad():
            out = compiled(*args)
        emits.append(_C.llvm_emits() - emitted)
        compiles.append(_C.llvm_compiles() - built)
        torch.testing.assert_close(out, fn(*args), atol=1e-5, rtol=1e-5)
    return emits, compiles


@pytest.mark.parametrize("case", list(CASES))
def test_a_new_length_emits_no_kernel_it_already_linked(case):
    fn, make_args = CASES[case]
    emits, compiles = _sweep(fn, make_args, LENGTHS)
    assert emits[0] > 0, emits
    # The second length compiles the kernels with runtime sizes; from then on a length emits
    # only the kernels whose code holds its sizes (attention's reshape of a transposed view:
    # index math that divides by sizes keeps them in the code on the CPU), each one LLVM then
    # compiles.
    assert emits[2:] == compiles[2:], (emits, compiles)
    if case != "attention":
        assert emits[2:] == [0] * (len(LENGTHS) - 2), emits
    else:
        assert max(emits[2:]) <= 1, emits


@pytest.mark.parametrize("case", list(CASES))
def test_reused_kernels_are_the_ones_emitting_gives(case, monkeypatch):
    # config.verify emits every reused kernel again and raises InternalError on a difference.
    monkeypatch.setattr(config, "verify", True)
    fn, make_args = CASES[case]
    _sweep(fn, make_args, LENGTHS[:5])


def _layers(x, ws):
    for w in ws:
        x = F.layer_norm(torch.tanh(x @ w) + x, (x.shape[-1],))
    return x


def test_kernels_repeated_in_one_graph_are_emitted_once():
    ws = [torch.randn(12, 12) for _ in range(4)]
    x = torch.randn(5, 12)
    compiled = torchlite.compile(_layers)
    kernels, emits = torchlite.counters()["kernels"], _C.llvm_emits()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, ws), _layers(x, ws), atol=1e-5, rtol=1e-5)
    kernels = torchlite.counters()["kernels"] - kernels
    emits = _C.llvm_emits() - emits
    assert kernels >= 4, kernels
    # Four layers of the same kernels: the first layer's are emitted, the rest take them.
    assert emits <= kernels // 2, (emits, kernels)


def test_a_static_kernel_is_reused_only_at_its_own_sizes():
    # dynamic=False: the sizes are in the code, so a new length emits (and compiles) again,
    # and a length seen before emits nothing.
    compiled = torchlite.compile(_softmax_rows, dynamic=False)
    emits = []
    for n in [6, 9, 6]:
        x = torch.randn(2, n, 7)
        before = _C.llvm_emits()
        torch.testing.assert_close(compiled(x), _softmax_rows(x), atol=1e-5, rtol=1e-5)
        emits.append(_C.llvm_emits() - before)
    assert emits[0] > 0 and emits[1] > 0, emits
    assert emits[2] == 0, emits


def test_the_same_kernel_in_another_function_is_not_emitted_again():
    def f(x):
        return (x * 3 - 1).exp()

    def g(x):
        return (x * 3 - 1).exp()

    x = torch.randn(4, 9)
    torch.testing.assert_close(torchlite.compile(f)(x), f(x))
    before = _C.llvm_emits()
    compiled_g = torchlite.compile(g)
    torch.testing.assert_close(compiled_g(x), g(x))
    assert _C.llvm_emits() == before


def test_position_embeddings_gathered_by_a_coordinate_compile_once_for_all_lengths():
    # GPT-2's `wte(ids) + wpe(arange(t))`: a gather at a coordinate times a row stride, no
    # division by a size, takes its sizes at run time (before: one LLVM compile a length).
    wte, wpe = torch.nn.Embedding(50, 12), torch.nn.Embedding(64, 12)

    def embed(ids):
        return wte(ids) + wpe(torch.arange(ids.shape[1]))

    compiled = torchlite.compile(embed)
    compiles = []
    for batch, t in [(2, 5), (2, 9), (2, 17), (3, 11), (2, 33), (5, 7)]:
        ids = torch.randint(0, 50, (batch, t))
        before = _C.llvm_compiles()
        with torch.no_grad():
            out = compiled(ids)
            torch.testing.assert_close(out, embed(ids))
        compiles.append(_C.llvm_compiles() - before)
    assert compiles[2:] == [0] * 4, compiles


def test_a_bert_length_sweep_emits_no_kernel_after_the_second_length():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=128,
    )
    model = transformers.BertModel(cfg).eval()
    compiled = torchlite.compile(model)
    emits, compiles = [], []
    for seq in [7, 12, 29, 16, 41, 9]:
        ids = torch.randint(0, 100, (2, seq))
        emitted, built = _C.llvm_emits(), _C.llvm_compiles()
        with torch.no_grad():
            out = compiled(ids).last_hidden_state
        emits.append(_C.llvm_emits() - emitted)
        compiles.append(_C.llvm_compiles() - built)
        with torch.no_grad():
            torch.testing.assert_close(out, model(ids).last_hidden_state, atol=1e-4, rtol=1e-4)
    assert emits[0] > 0, emits
    # Every later length lowers to the same 8 kernels: none is emitted (before: all 8).
    assert emits[2:] == [0] * 4 and compiles[2:] == [0] * 4, (emits, compiles)
