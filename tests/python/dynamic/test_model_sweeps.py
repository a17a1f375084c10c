"""Dynamic-shapes corpus (issue 24's Done-when): small transformers and timm models swept over
batch and sequence/image sizes match eager at every size, and no frame is captured after the
second size (each frame: once exact, once size-generic). The second size changes every swept
dimension at once, so a capture at a later size means a frame captured a third time.

Known causes (named per model below) excuse
only the capture count, naming the ops; every value is checked against eager at every size."""

import pytest
import torch
import torch.nn.functional as F
from helpers import flat_tensors as _flat

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
transformers = pytest.importorskip("transformers")

V = 100


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _sweep(model, make_inputs, sizes):
    """Captures at each size (compiled vs eager checked at every size)."""
    torchlite.reset()
    compiled = torchlite.compile(model)
    frames = []
    for i, (b, s) in enumerate(sizes):
        torch.manual_seed(1000 + i)
        kw = make_inputs(b, s)
        before = torchlite.counters()["frames"]
        with torch.no_grad():
            out, ref = _flat(compiled(**kw)), _flat(model(**kw))
        frames.append(torchlite.counters()["frames"] - before)
        assert len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            torch.testing.assert_close(o, r, atol=1e-4, rtol=1e-4)
    return frames


def _text(cls, cfg, decoder=False):
    model = cls(cfg).eval()

    def make(b, s):
        kw = {"input_ids": torch.randint(1, V, (b, s)), "attention_mask": torch.ones(b, s).long()}
        if decoder:
            kw["decoder_input_ids"] = torch.randint(1, V, (b, s // 2 + 2))
        return kw

    return model, make


def _bert():
    cfg = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        vocab_size=V, max_position_embeddings=128,
    )  # fmt: skip
    return _text(transformers.BertModel, cfg)


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=128, vocab_size=V)
    return _text(transformers.GPT2Model, cfg)


def _llama():
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=128, vocab_size=V,
    )  # fmt: skip
    return _text(transformers.LlamaModel, cfg)


def _roberta():
    cfg = transformers.RobertaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        vocab_size=V, max_position_embeddings=130,
    )  # fmt: skip
    return _text(transformers.RobertaModel, cfg)


def _distilbert():
    cfg = transformers.DistilBertConfig(
        n_layers=2, dim=32, n_heads=2, hidden_dim=64, vocab_size=V, max_position_embeddings=128
    )
    return _text(transformers.DistilBertModel, cfg)


def _mistral():
    cfg = transformers.MistralConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=128, vocab_size=V, sliding_window=None,
    )  # fmt: skip
    return _text(transformers.MistralModel, cfg)


def _t5():
    cfg = transformers.T5Config(
        num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=V
    )
    return _text(transformers.T5Model, cfg, decoder=True)


def _bart():
    cfg = transformers.BartConfig(
        encoder_layers=2, decoder_layers=2, d_model=32, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=128, vocab_size=V,
    )  # fmt: skip
    return _text(transformers.BartModel, cfg, decoder=True)


def _vit():
    cfg = transformers.ViTConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8,
    )  # fmt: skip
    model = transformers.ViTModel(cfg).eval()

    def make(b, s):
        return {"pixel_values": torch.randn(b, 3, s, s), "interpolate_pos_encoding": True}

    return model, make


def _timm(name, **kw):
    timm = pytest.importorskip("timm")
    model = timm.create_model(name, pretrained=False, **kw).eval()
    return model, lambda b, s: {"x": torch.randn(b, 3, s, s)}


def _timm_vit():
    return _timm(
        "vit_tiny_patch16_224", depth=2, embed_dim=48, num_heads=3, img_size=32, patch_size=8,
        dynamic_img_size=True,
    )  # fmt: skip


def _timm_resnet():
    return _timm("resnet18", num_classes=10)


def _timm_convnext():
    return _timm("convnext_atto", num_classes=10)


TEXT = [(2, 7), (3, 12), (2, 29), (4, 16), (3, 41), (5, 9)]
IMAGES = [(2, 32), (3, 48), (2, 64), (4, 40), (3, 56)]


# NOTE: what still makes a frame capture again at every size (found with TORCHLITE_LOGS=recompiles);
# the values are checked at every size, only the capture count is excused, naming the cause.
# In-place writes (t5's `buckets += ...`, resnet's ReLU(inplace=True) and `out += shortcut`) are
# size-generic: whether a write overlaps what it reads is decided again at each new size
# (frame/size_generic.cpp; tests/python/dynamic/test_in_place_sizes.py).
SLOW = [pytest.mark.slow]
MODELS = {
    "bert": (_bert, TEXT, [], ""),
    "gpt2": (_gpt2, TEXT, SLOW, ""),
    "llama": (_llama, TEXT, SLOW, ""),
    "mistral": (_mistral, TEXT, SLOW, ""),
    "roberta": (_roberta, TEXT, SLOW, ""),
    "distilbert": (_distilbert, TEXT, SLOW, ""),
    "t5": (_t5, TEXT, SLOW, ""),
    "bart": (_bart, TEXT, SLOW, ""),
    "vit": (_vit, IMAGES, [], ""),
    "timm_vit": (_timm_vit, IMAGES, SLOW, ""),
    "timm_resnet": (_timm_resnet, IMAGES, SLOW, ""),
    "timm_convnext": (_timm_convnext, IMAGES, SLOW, ""),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=m[2], id=n) for n, m in MODELS.items()])
def test_a_batch_and_size_sweep_captures_each_frame_at_most_twice(name):
    make, sizes, _, blocker = MODELS[name]
    model, make_inputs = make()
    frames = _sweep(model, make_inputs, sizes)
    assert frames[0] > 0
    if blocker and frames[2:] != [0] * (len(sizes) - 2):
        pytest.xfail(f"still exact per size: {blocker} (captures per size {frames})")
    assert frames[2:] == [0] * (len(sizes) - 2), frames


def test_a_sweep_without_a_mask_captures_each_frame_at_most_twice():
    """BERT without its attention mask (whose `&` the size-generic check does not know yet):
    at most two captures per frame today."""
    model, make_inputs = _bert()

    def inputs(b, s):
        kw = make_inputs(b, s)
        kw.pop("attention_mask")
        return kw

    frames = _sweep(model, inputs, TEXT)
    assert frames[2:] == [0] * (len(TEXT) - 2), frames


def _in_place_relu(x):
    y = x * 2 - 1
    z = F.relu(y, inplace=True)
    return z * x, z is y


def test_in_place_ops_are_right_at_every_size_in_one_size_generic_entry():
    """An op that writes its first operand returns that tensor at every size (no size read in
    the trace), and a write to a tensor the graph made overlaps nothing it reads at any size:
    one exact entry, then one size-generic entry, each call with eager's values and eager's
    identity of the result (frame/size_generic.cpp refused every write before)."""
    torchlite.reset()
    compiled = torchlite.compile(_in_place_relu)
    frames = []
    for b, t in [(2, 5), (3, 9), (4, 7), (2, 12), (5, 3)]:
        x = torch.randn(b, t)
        before = torchlite.counters()["frames"]
        out, ref = compiled(x.clone()), _in_place_relu(x.clone())
        frames.append(torchlite.counters()["frames"] - before)
        torch.testing.assert_close(out[0], ref[0])
        assert out[1] is ref[1] is True
    assert frames == [1, 1, 0, 0, 0], frames


def _rank_branch(x, mask):
    n = len(mask.shape)
    if isinstance(mask, torch.Tensor) and n == 4:  # transformers' masking_utils
        return x
    return x * n + mask.sum(-1, keepdim=True)


def test_len_of_a_shape_is_its_rank_and_pins_no_size():
    """`len(mask.shape)` is the rank: it pinned every size of the mask (the trace relied on
    `s0 == 2`), so every batch size captured bert/gpt2/llama's mask frame again."""
    torchlite.reset()
    compiled = torchlite.compile(_rank_branch)
    frames = []
    for b, t in [(2, 5), (3, 9), (4, 7), (2, 12), (5, 3)]:
        x, mask = torch.randn(b, t), torch.ones(b, t)
        before = torchlite.counters()["frames"]
        torch.testing.assert_close(compiled(x, mask), _rank_branch(x, mask))
        frames.append(torchlite.counters()["frames"] - before)
    assert frames[2:] == [0, 0, 0], frames


def _divisible_patches(x):
    b, c, h, w = x.shape
    torch._assert(h % 8 == 0, "Input height should be divisible by 8")
    return x.reshape(b, c, h // 8, 8, w).sum(3)


def test_a_modulus_assert_is_a_relation_and_a_failing_size_raises_eagers_error():
    """`torch._assert(h % 8 == 0, ...)` guards `s % 8 == 0`, not the size: one size-generic
    entry serves every multiple of 8, and a size breaking the relation captures again and
    raises eager's assertion."""
    torchlite.reset()
    compiled = torchlite.compile(_divisible_patches)
    frames = []
    for h in (16, 24, 40, 64, 8):
        x = torch.randn(2, 3, h, 5)
        before = torchlite.counters()["frames"]
        torch.testing.assert_close(compiled(x), _divisible_patches(x))
        frames.append(torchlite.counters()["frames"] - before)
    assert frames[2:] == [0, 0, 0], frames
    with pytest.raises(AssertionError, match="divisible by 8"):
        compiled(torch.randn(2, 3, 12, 5))


class _PatchRows(torch.nn.Module):
    patch_size = (8, 8)

    def forward(self, x):
        b, c, h, w = x.shape
        torch._assert(
            h % self.patch_size[0] == 0,
            f"Input height ({h}) should be divisible by patch size ({self.patch_size[0]}).",
        )
        return x.reshape(b, c, h // 8, 8, w).sum(3)


def _named_height(x):
    h = x.shape[2]
    return x * 2, str.upper(f"h{h}")


def _tensor_assert_message(x):
    h = x.shape[2]
    torch._assert(x.sum() > -1e9, f"sum at height {h}")
    return x + h


def test_an_assert_message_formatting_a_size_pins_nothing_while_the_assert_holds():
    """timm's patch_embed: `_assert(H % p == 0, f"Input height ({H}) ...")` builds its message
    before the call; formatting H pinned the size (`s2 == 48`), so every image size captured
    again. The message is never read while the guarded relation holds; a size where it fails
    captures again and raises eager's error with that size in it."""
    torchlite.reset()
    model = _PatchRows()
    compiled = torchlite.compile(model)
    frames = []
    for h in (16, 24, 40, 64, 8):
        x = torch.randn(2, 3, h, 5)
        before = torchlite.counters()["frames"]
        torch.testing.assert_close(compiled(x), model(x))
        frames.append(torchlite.counters()["frames"] - before)
    assert frames[2:] == [0, 0, 0], frames
    with pytest.raises(AssertionError, match=r"Input height \(12\) should be divisible"):
        compiled(torch.randn(2, 3, 12, 5))


@pytest.mark.parametrize("fn", [_named_height, _tensor_assert_message])
def test_an_f_string_of_a_size_read_by_any_other_call_keeps_its_value(fn):
    """Anything else that takes such a string (a function's result, the message of a check on
    a tensor's value) reads it: its value is right at every size."""
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for h in (16, 24, 40, 64, 8):
        x = torch.randn(2, 3, h, 5)
        out, ref = compiled(x), fn(x)
        torch.testing.assert_close(
            out[0] if isinstance(out, tuple) else out, ref[0] if isinstance(ref, tuple) else ref
        )
        if isinstance(ref, tuple):
            assert out[1] == ref[1]
