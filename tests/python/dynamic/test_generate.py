"""transformers' generate() through torchlite.compile(model) (issue 24, part 5): greedy tokens
equal eager's, and the decoding loop stops capturing. With the dynamic KV cache the cache grows
by one token a step: the prefill captures, the first decoding step captures once more (a new
size: the frame turns size-generic), and no later step captures. With StaticCache the same: the
prefill fills the cache lazily (attribute writes, an in-place counter update, then
`index_copy_`), whose indices are checked before the graph's first effect instead of breaking
the graph (capture/index_bounds.h). A second generate() of the same shapes captures nothing."""

import pytest
import torch
from helpers import tiny_llama_config

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _gpt2():
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=128,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama():
    cfg = tiny_llama_config(
        transformers, vocab_size=128, max_position_embeddings=128, bos_token_id=0, eos_token_id=0
    )
    return transformers.LlamaForCausalLM(cfg).eval()


class _CapturesPerStep(transformers.LogitsProcessor):
    """Records torchlite's capture count at each decoding step (called once per new token)."""

    def __init__(self):
        self.frames = []

    def __call__(self, input_ids, scores):
        self.frames.append(torchlite.counters()["frames"])
        return scores


def _generate(model, ids, cache, tokens=32, **kw):
    args = dict(max_new_tokens=tokens, do_sample=False, pad_token_id=0, eos_token_id=None, **kw)
    if cache == "static":
        args["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(ids, **args)


_MODELS = [pytest.param(_gpt2, marks=pytest.mark.slow), _llama]


@pytest.mark.parametrize("make", _MODELS, ids=["gpt2", "llama"])
def test_generate_with_the_dynamic_cache_compiles_at_most_three_graphs(make):
    torch.manual_seed(0)
    model = make()
    ids = torch.randint(1, 128, (1, 7))
    expected = _generate(model, ids, "dynamic")
    compiled = torchlite.compile(model)
    counter = _CapturesPerStep()
    start, graphs = torchlite.counters()["frames"], torchlite.counters()["graphs"]
    out = _generate(compiled, ids, "dynamic", logits_processor=[counter])
    steps = [f - start for f in counter.frames]
    assert torch.equal(out, expected)
    assert len(steps) == 32
    # NOTE: captures by the end of each step: the prefill's graph, then the first step's
    # size-generic one (2). GPT-2's outer `can_return_tuple` wrapper pops `return_dict` from
    # `kwargs` and returns the cache read from it: it stays in the graph's frame.
    assert steps[-1] <= 3, steps
    assert torchlite.counters()["graphs"] - graphs <= 3
    assert steps[2:] == [steps[1]] * 30, steps
    again = torchlite.counters()["frames"]
    assert torch.equal(_generate(compiled, ids, "dynamic"), expected)
    assert torchlite.counters()["frames"] == again


@pytest.mark.slow
@pytest.mark.parametrize("make", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_generate_at_new_prompt_lengths_captures_the_prefill_once_more(make):
    torch.manual_seed(0)
    model = make()
    compiled = torchlite.compile(model)
    _generate(compiled, torch.randint(1, 128, (1, 7)), "dynamic")
    # NOTE: prompts of other lengths: the prefill's entry was exact, so the second length
    # captures its prefill once more (size-generic), and a third length captures nothing.
    for length, most in ((11, 1), (5, 0)):
        ids = torch.randint(1, 128, (1, length))
        before = torchlite.counters()["frames"]
        assert torch.equal(_generate(compiled, ids, "dynamic"), _generate(model, ids, "dynamic"))
        assert torchlite.counters()["frames"] - before <= most, length


@pytest.mark.parametrize("make", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_generate_with_a_static_cache_compiles_at_most_three_graphs(make):
    torch.manual_seed(0)
    model = make()
    ids = torch.randint(1, 128, (1, 7))
    expected = _generate(model, ids, "static")
    compiled = torchlite.compile(model)
    counter = _CapturesPerStep()
    start, graphs = torchlite.counters()["frames"], torchlite.counters()["graphs"]
    out = _generate(compiled, ids, "static", logits_processor=[counter])
    steps = [f - start for f in counter.frames]
    assert torch.equal(out, expected)
    # NOTE: before the cache's lazy fill was checked first (capture/index_bounds.h), the
    # prefill broke every frame of its stack: ~40 captures.
    assert steps[-1] <= 3, steps
    assert torchlite.counters()["graphs"] - graphs <= 3
    assert steps[2:] == [steps[1]] * 30, steps
    again = torchlite.counters()["frames"]
    assert torch.equal(_generate(compiled, ids, "static"), expected)
    assert torchlite.counters()["frames"] == again


def test_methods_reached_through_the_compiled_module_leave_the_original_uncompiled():
    model = _gpt2()
    compiled = torchlite.compile(model)
    ids = torch.randint(1, 128, (1, 5))
    start = torchlite.counters()["frames"]
    _generate(compiled, ids, "dynamic", tokens=3)
    assert torchlite.counters()["frames"] > start
    assert "_compiled_call_impl" not in model.__dict__
    now = torchlite.counters()["frames"]
    _generate(model, torch.randint(1, 128, (2, 9)), "dynamic", tokens=3)  # the original: eager
    assert torchlite.counters()["frames"] == now


def test_llama_generate_at_new_prompt_lengths_compiles_no_cpu_kernel_after_the_second():
    # the decode step's cache cats held their bound and clamp as literals: an LLVM compile per
    # new length (6 per generate() of 4 tokens); now dims numbers (runtime_constants.h)
    torch.manual_seed(0)
    model = _llama()
    compiled = torchlite.compile(model)
    compiles = []
    for length in (5, 9, 23, 14, 31, 40, 57, 66):
        ids = torch.randint(1, 128, (1, length))
        before = _C.llvm_compiles()
        out = _generate(compiled, ids, "dynamic", tokens=4)
        compiles.append(_C.llvm_compiles() - before)
        assert torch.equal(out, _generate(model, ids, "dynamic", tokens=4)), length
    assert compiles[0] > 0 and sum(compiles[2:]) == 0, compiles


def test_a_second_static_cache_generate_of_a_fresh_model_captures_nothing():
    # generate() sets model._previous_max_cache_length; the compiled module's wrapper sets
    # _compiled_call_impl for the call and removes it after, so from the second call on the
    # two keys of model.__dict__ came in the other order and its DICT_VERSION guard failed (both
    # frames captured again: 4 captures in 3 calls)
    torch.manual_seed(0)
    model = _llama()
    compiled = torchlite.compile(model)
    ids = torch.randint(1, 128, (1, 7))
    frames = []
    for _ in range(3):
        before = torchlite.counters()["frames"]
        out = _generate(compiled, ids, "static", tokens=6)
        frames.append(torchlite.counters()["frames"] - before)
    assert torch.equal(out, _generate(model, ids, "static", tokens=6))
    assert frames == [2, 0, 0], frames
