"""A kernel whose emission key (codegen/cuda/emission_key.h: the lowered kernel and the target,
every number exact) names CUDA code still loaded takes that code without emitting its text
(`_C.cuda_emits()`): a model's repeated layers are emitted once per compile, and a graph
compiled again at sizes seen before emits nothing. Every result is checked against eager, at
lengths that change alignment (odd, prime, multiples of 8), and `config.verify` emits every
reused kernel again and compares its code and launch."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.cuda

TOL = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2},
}


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


class _Layers(torch.nn.Module):
    """Four equal blocks (layer norm, a linear, gelu, a residual add, softmax rows over the
    sequence): each block lowers to the same kernels under other names."""

    def __init__(self, width=64, layers=4, dtype=torch.float32):
        super().__init__()
        self.lins = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(layers))
        self.to(dtype)

    def forward(self, x):
        for lin, norm in zip(self.lins, self.norms):
            h = F.gelu(lin(norm(x)))
            x = x + h * torch.softmax(h.float(), dim=1).to(h.dtype)
        return x


def _call(compiled, model, x, dtype):
    kernels, emits = torchlite.counters()["kernels"], _C.cuda_emits()
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model(x), **TOL[dtype])
    return torchlite.counters()["kernels"] - kernels, _C.cuda_emits() - emits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_repeated_layers_are_emitted_once(dtype):
    model = _Layers(dtype=dtype).cuda()
    kernels, emits = _call(
        torchlite.compile(model), model, torch.randn(2, 9, 64, device="cuda", dtype=dtype), dtype
    )
    assert kernels >= 8, kernels
    # four layers of the same kernels: the first layer's are emitted, the others take them
    assert 0 < emits <= kernels // 2, (emits, kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_length_emits_one_layer_and_matches_eager(dtype):
    model = _Layers(dtype=dtype).cuda()
    compiled = torchlite.compile(model)
    rows = []
    for n in [6, 11, 37, 16, 5, 23, 64, 129, 11]:
        x = torch.randn(3, n, 64, device="cuda", dtype=dtype)
        rows.append(_call(compiled, model, x, dtype))
    # from the second length on, each new length compiles the size-generic graph again: its
    # layers after the first take the first's code
    for kernels, emits in rows[1:-1]:
        assert kernels == 0 or emits <= kernels // 2, rows
    assert rows[-1] == (0, 0), rows  # a length seen before runs its compiled graph


def test_the_same_sizes_in_another_function_emit_nothing():
    model = _Layers().cuda()

    def f(x):
        return model(x)

    def g(x):
        return model(x)

    x = torch.randn(2, 7, 64, device="cuda")
    first = torchlite.compile(f)
    kernels, emits = _call(first, model, x, torch.float32)
    assert emits > 0, emits
    # f's compile keeps its code loaded: g's graph, the same kernels, takes every one of them
    kernels_g, emits_g = _call(torchlite.compile(g), model, x, torch.float32)
    assert emits_g == 0 and kernels_g == kernels, (kernels, emits, kernels_g, emits_g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reused_kernels_are_the_ones_emitting_gives(dtype, monkeypatch):
    # config.verify emits every reused kernel again and raises InternalError on a difference
    monkeypatch.setattr(config, "verify", True)
    model = _Layers(dtype=dtype).cuda()
    compiled = torchlite.compile(model)
    for n in [6, 11, 37, 16, 5]:
        _call(compiled, model, torch.randn(2, n, 64, device="cuda", dtype=dtype), dtype)


def test_a_sweep_of_a_transformers_model_matches_eager_with_reused_kernels():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=100, n_positions=256)
    model = transformers.GPT2Model(cfg).eval().cuda()
    compiled = torchlite.compile(model)
    rows = []
    for n in [7, 12, 29, 16, 41, 9, 200]:
        ids = torch.randint(0, 100, (2, n), device="cuda")
        kernels, emits = torchlite.counters()["kernels"], _C.cuda_emits()
        with torch.no_grad():
            out = compiled(ids).last_hidden_state
            torch.testing.assert_close(out, model(ids).last_hidden_state, atol=1e-4, rtol=1e-4)
        rows.append((torchlite.counters()["kernels"] - kernels, _C.cuda_emits() - emits))
    # every length compiles its graph: four layers' kernels, the first layer's emitted
    assert all(k > 0 and e <= k // 2 for k, e in rows), rows


def test_a_decode_loop_compiles_no_kernel_after_its_first_lengths():
    # a cache grown by one along the sequence and the position it reads: their bounds and first
    # position are dims numbers, so every length runs one text (before: an NVRTC compile each)
    wpe = torch.randn(128, 32, device="cuda")

    def step(past, new):
        kv = torch.cat([past, new], dim=2)
        pos = wpe[past.shape[2] + torch.arange(new.shape[2], device="cuda")]
        return kv * 2, pos + 1

    compiled = torchlite.compile(step)
    past = torch.randn(2, 4, 5, 32, device="cuda")
    compiles = []
    for _ in range(12):
        new = torch.randn(2, 4, 1, 32, device="cuda")
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            out, ref = compiled(past, new), step(past, new)
        torch.testing.assert_close(out, ref)
        compiles.append(torchlite.counters()["nvrtc_compiles"] - before)
        past = ref[0] / 2
    assert sum(compiles[3:]) == 0, compiles


def test_gpt2_generate_at_new_lengths_compiles_almost_nothing():
    transformers = pytest.importorskip("transformers")
    # NOTE: a head size (32) above every length here: lowering shares equal constants, so a
    # cache length equal to another constant of a kernel is another text (one compile)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=128)
    model = transformers.GPT2LMHeadModel(cfg).eval().cuda()
    kw = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    kw["disable_compile"] = True

    def generate(m, n):
        ids = torch.randint(1, 100, (1, n), device="cuda")
        with torch.no_grad():
            return m.generate(ids, **kw), model.generate(ids, **kw)

    compiled = torchlite.compile(model)
    for n in (5, 7):  # lengths 5 to 16; the prompt's graph at two lengths
        out, expected = generate(compiled, n)
        assert torch.equal(out, expected)
    before = torchlite.counters()["nvrtc_compiles"]
    out, expected = generate(compiled, 17)  # lengths 17 to 26, none seen
    assert torch.equal(out, expected)
    # before: the cache cats and the position gather got a new text at every length
    compiles = torchlite.counters()["nvrtc_compiles"] - before
    assert compiles <= 2, compiles


def _repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def test_a_repeat_kv_decode_loop_compiles_no_kernel_after_its_first_lengths():
    # Llama's grouped-query attention copies each cached head n_rep times: the copy divides its
    # linear index by n_rep x length x head size, a divisor that changes every token (before:
    # a literal, an NVRTC compile per token). Now a dims number with its magic multiplier.
    def step(past, new, q):
        kv = torch.cat([past, new], dim=2)
        k = _repeat_kv(kv, 3)
        return kv, (q @ k.transpose(2, 3)).softmax(-1) @ k

    compiled = torchlite.compile(step)
    past = torch.randn(2, 2, 5, 32, device="cuda")
    compiles = []
    for _ in range(10):
        new, q = torch.randn(2, 2, 1, 32, device="cuda"), torch.randn(2, 6, 1, 32, device="cuda")
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            out, ref = compiled(past, new, q), step(past, new, q)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        compiles.append(torchlite.counters()["nvrtc_compiles"] - before)
        past = ref[0]
    assert sum(compiles[3:]) == 0, compiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_runtime_divisors_match_eager_at_lengths_that_change_alignment(dtype):
    # every divisor and modulus of the copy's index math is a dims number here (no model
    # constant): odd, prime and power-of-two lengths, a length past 2^16 (magic multipliers of
    # large divisors), one text for all of them
    def f(x):
        return _repeat_kv(x, 2) * 2 + 1

    compiled = torchlite.compile(f, dynamic=True)
    emits = []
    for n in [3, 7, 16, 31, 64, 127, 257, 70001]:
        x = torch.randn(1, 2, n, 5, device="cuda", dtype=dtype)
        before = torchlite.counters()["nvrtc_compiles"]
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), f(x), **TOL[dtype])
        emits.append(torchlite.counters()["nvrtc_compiles"] - before)
    assert sum(emits[2:]) == 0, emits
