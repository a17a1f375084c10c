"""Under trace, the first size instances of a size-generic entry dump their pipeline (issue 24,
nineteenth slice in docs/internals/dynamic-shapes.md): each new size's passes, lowered kernels
and symbol values, to compare what two sizes decided. A new length of a transformer lowers to the
same program with other numbers; a length that flips a size-reading decision (a split reduction's
split, a length equal to a model constant) lowers to another, and every call equals eager's."""

import pathlib
import re

import pytest
import torch
from helpers import tiny_llama_config

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def _trace(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path / "debug"))


def _sweep(model, make_inputs, sizes):
    """Calls the compiled model at each size (values checked against eager's), returns the
    instance folders the trace wrote, oldest first."""
    torchlite.reset()
    compiled = torchlite.compile(model)
    for i, n in enumerate(sizes):
        torch.manual_seed(i)
        args = make_inputs(n)
        with torch.no_grad():
            out, ref = compiled(*args), model(*args)
        out = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)
        ref = ref[0] if isinstance(ref, tuple) else getattr(ref, "last_hidden_state", ref)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    found = pathlib.Path(config.debug_dir).glob("run-*/*_size_instance/sizes.txt")
    return sorted((p.parent for p in found), key=lambda p: int(p.name.split("_", 1)[0]))


def _program(folder):
    """The lowered kernels of an instance with every number taken out: what its decisions
    made, whatever the sizes."""
    return re.sub(r"\d+", "N", (folder / "lowered.txt").read_text())


def test_new_lengths_of_gpt2_lower_to_one_program_and_only_the_first_four_are_traced():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)
    model = transformers.GPT2Model(cfg).eval()
    folders = _sweep(model, lambda n: (torch.randint(0, 100, (2, n)),), (5, 9, 6, 7, 11, 13, 17))
    assert len(folders) == 4, folders  # NOTE: 5 new lengths, a bound of 4
    symbols = [(f / "sizes.txt").read_text().splitlines()[0] for f in folders]
    assert len(set(symbols)) == 4, symbols  # NOTE: lengths 6, 7, 11, 13
    assert all(f"={n}" in s for n, s in zip((6, 7, 11, 13), symbols, strict=True)), symbols
    assert "kernel " in (folders[0] / "lowered.txt").read_text()
    assert len({_program(f) for f in folders}) == 1


def test_a_split_that_changes_with_the_length_shows_in_the_instances_programs():
    def f(x):
        return (x * 2 + 1).sum(0)

    folders = _sweep(f, lambda n: (torch.randn(n, 2),), (64, 96, 100, 40000))
    assert len(folders) == 2, folders
    assert _program(folders[0]) != _program(folders[1])


def test_a_length_equal_to_a_model_constant_lowers_to_another_program():
    # NOTE: 32 is the hidden size: an axis of that length is taken for a model constant
    # (pipeline::mark_static_axes), a kernel text of its own; 31 and 33 share one program.
    transformers = pytest.importorskip("transformers")
    cfg = tiny_llama_config(transformers)
    model = transformers.LlamaModel(cfg).eval()
    folders = _sweep(model, lambda n: (torch.randint(0, 100, (2, n)),), (5, 9, 31, 32, 33))
    assert len(folders) == 3, folders
    at31, at32, at33 = (_program(f) for f in folders)
    assert at31 == at33 != at32
