"""Many unseen lengths after a frame's size-generic entry exists (issue 24: an unseen length's
first call): each new length is served by one compile for its sizes (a size instance), with no
capture, and every call equals eager's values (float32, fresh inputs). A second call at a length
compiles nothing. Models: transformers GPT-2, Llama and BERT over sequence lengths, a conv net
over batch sizes."""

import pytest
import torch
import torch.nn.functional as F
from helpers import flat_tensors as _flat
from helpers import tiny_llama_config

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

WARM = (5, 9)  # the exact entry, then the size-generic one
NEW = (6, 7, 11, 12, 13, 17, 20, 31)


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _check(model, make_inputs):
    torchlite.reset()
    compiled = torchlite.compile(model)

    def call(n, seed):
        torch.manual_seed(seed)
        args = make_inputs(n)
        with torch.no_grad():
            out, ref = _flat(compiled(*args)), _flat(model(*args))
        assert len(out) == len(ref) > 0
        for o, r in zip(out, ref, strict=True):
            torch.testing.assert_close(o, r, atol=1e-4, rtol=1e-4)

    for i, n in enumerate(WARM):
        call(n, i)
    for i, n in enumerate(NEW):
        before = dict(torchlite.counters())
        call(n, 100 + i)
        after = dict(torchlite.counters())
        assert after["frames"] == before["frames"], f"size {n} was captured again"
        assert after["size_instances"] > before["size_instances"], f"size {n}: no instance"
        call(n, 200 + i)  # NOTE: same sizes, fresh values: served by the instance just made
        again = dict(torchlite.counters())
        assert again["size_instances"] == after["size_instances"], f"size {n} compiled twice"
        assert again["frames"] == after["frames"]


def _ids(n):
    return (torch.randint(0, 100, (2, n)),)


def test_gpt2_new_lengths_equal_eager_without_capture():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)
    _check(transformers.GPT2Model(cfg).eval(), _ids)


def test_llama_new_lengths_equal_eager_without_capture():
    transformers = pytest.importorskip("transformers")
    cfg = tiny_llama_config(transformers)
    _check(transformers.LlamaModel(cfg).eval(), _ids)


def test_bert_new_lengths_equal_eager_without_capture():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        vocab_size=100,
        max_position_embeddings=64,
    )
    _check(transformers.BertModel(cfg).eval(), _ids)


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.c1(x))
        y = F.gelu(self.c2(y)) + y
        return self.fc(y.mean((2, 3))).softmax(-1)


def test_conv_net_new_batch_sizes_equal_eager_without_capture():
    _check(_ConvNet().eval(), lambda b: (torch.randn(b, 3, 10, 10),))


def test_a_decision_that_reads_a_size_is_taken_again_at_each_new_length():
    # NOTE: split_reductions splits a column sum whose rows are long (passes/split_reductions.h):
    # two kernels from some length on, one below it. A new length's instance must decide again
    # (a reuse of another length's lowered program would keep the other choice).
    def f(x):
        return (x * 2 + 1).sum(0)

    torchlite.reset()
    compiled = torchlite.compile(f)
    launches = {}
    for n in (64, 96, 40000, 100, 65536, 50):
        x = torch.randn(n, 2)
        before = dict(torchlite.counters())
        torch.testing.assert_close(compiled(x), f(x), rtol=1e-4, atol=1e-3)
        middle = dict(torchlite.counters())
        compiled(x)
        after = dict(torchlite.counters())
        launches[n] = after["kernel_launches"] - middle["kernel_launches"]
        if n not in (64, 96):
            assert middle["frames"] == before["frames"], f"length {n} was captured again"
            assert middle["size_instances"] == before["size_instances"] + 1
    assert launches[40000] == launches[65536] == 2, launches
    assert launches[100] == launches[50] == launches[64] == 1, launches
