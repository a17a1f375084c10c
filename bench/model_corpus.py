"""The model corpus of bench/models.py and tests/python/models/test_corpus.py: timm image models
and transformers models, all with random weights built offline (no downloads).

Each entry builds `(model, args, kwargs)` for one of two sizes:
- CI size (`full=False`): small images (64-96 px) and shrunk depths/widths where the model class
  takes them, so the whole corpus runs on a 2-core CPU in a few minutes;
- full size (`full=True`): the published configuration at 224 px (timm) or a small but realistic
  configuration (transformers), meant for the GPU machine.

`build(full, batch=, seq=)` overrides the batch size (every model) and the text length (text
models; CLIP's text stops at its 77 positions), for benchmarks at realistic batch sizes.

    from model_corpus import CORPUS, load_model_libs
    load_model_libs()
    model, args, kwargs = CORPUS[0].build(full=False)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

# NOTE: the corpus never touches the network; set before transformers/huggingface_hub import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

# NOTE: appended, not inserted: the workaround is shared with the tests (conftest.py) and lives in
# their folder; appending keeps it from shadowing anything on the path already.
_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
if os.path.abspath(_TESTS) not in map(os.path.abspath, sys.path):
    sys.path.append(_TESTS)
from torchvision_compat import work_around_mismatched_torchvision


def load_model_libs() -> tuple[Any, Any]:
    """(timm or None, transformers or None): whichever of the two imports here."""
    work_around_mismatched_torchvision()
    libs = []
    for name in ("timm", "transformers"):
        try:
            libs.append(importlib.import_module(name))
        except (ImportError, RuntimeError):  # NOTE: a broken torchvision raises RuntimeError
            libs.append(None)
    return libs[0], libs[1]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "timm" or "transformers"
    # make(full, batch, seq): batch/seq None keep the entry's own sizes
    make: Callable[[bool, int | None, int | None], tuple[torch.nn.Module, tuple, dict]]

    def build(
        self, full: bool = False, seed: int = 0, batch: int | None = None, seq: int | None = None
    ) -> tuple[torch.nn.Module, tuple, dict]:
        """(model in eval mode, positional args, keyword args); the same seed gives the same
        weights and inputs."""
        torch.manual_seed(seed)
        model, args, kwargs = self.make(full, batch, seq)
        return model.eval(), args, kwargs


# ---------------------------------------------------------------------------------------------
# timm
# ---------------------------------------------------------------------------------------------


def _timm(
    name: str,
    ci: dict | None = None,
    size: int = 64,
    full_size: int = 224,
    model_name: str | None = None,
    batch: int = 2,
) -> ModelSpec:
    """`ci` holds create_model kwargs that shrink the model for CI (depths, widths, img_size)."""

    def make(full: bool, n: int | None, _seq: int | None):
        import timm

        kwargs = {} if full else dict(ci or {})
        model = timm.create_model(model_name or name, pretrained=False, **kwargs)
        px = full_size if full else size
        return model, (torch.randn(n or batch, 3, px, px),), {}

    return ModelSpec(name, "timm", make)


_VIT_CI = {"img_size": 64, "depth": 2}

TIMM = [
    _timm("resnet18"),
    _timm("resnet50", {"layers": (1, 1, 1, 1)}),
    _timm("resnext50_32x4d", {"layers": (1, 1, 1, 1)}),
    _timm("regnetx_002"),
    _timm("regnety_002"),
    _timm("efficientnet_b0"),
    _timm("mobilenetv3_small_100"),
    _timm("mobilenetv3_large_100"),
    _timm("convnext_atto"),
    _timm("vit_tiny_patch16_224", _VIT_CI),
    _timm("deit_tiny_patch16_224", _VIT_CI),
    _timm("deit_tiny_distilled_patch16_224", _VIT_CI),
    _timm(
        "swin_tiny_patch4_window7_224",
        {
            "img_size": 64,
            "window_size": 4,
            "depths": (1, 1, 1, 1),
            "embed_dim": 32,
            "num_heads": (1, 2, 4, 8),
        },
    ),
    _timm("beit_base_patch16_224", {"img_size": 64, "depth": 2, "embed_dim": 96, "num_heads": 3}),
    _timm("mixer_s16_224", {"img_size": 64}),
    _timm("levit_128s", {"img_size": 64}),
    _timm("ghostnet_100"),
    _timm("densenet121", {"block_config": (2, 2, 2, 2)}),
    _timm("inception_v3", size=96, full_size=299),
    _timm("dla34"),
    _timm("dpn68"),
    _timm("mobilevit_xxs"),
    _timm("poolformer_s12"),
    _timm("cait_xxs24_224", {"img_size": 64, "depth": 2, "depth_token_only": 1}),
    _timm("xcit_nano_12_p16_224", {"img_size": 64, "depth": 2}),
    _timm("pvt_v2_b0"),
    _timm("coat_lite_mini", {"img_size": 64}),
    _timm("rexnet_100"),
    _timm("lcnet_050"),
    _timm("hrnet_w18_small"),
    _timm("res2net50_26w_4s", {"layers": (1, 1, 1, 1)}),
    _timm("resnest14d"),
    _timm("nf_resnet26"),
    _timm("cspdarknet53", {}),
    _timm("repvgg_a0"),
    _timm("edgenext_xx_small"),
    _timm("eva02_tiny_patch14_224", {"img_size": 56, "depth": 2}, size=56),
    _timm("tiny_vit_5m_224"),
    _timm("efficientvit_b0"),
    _timm("fastvit_t8"),
    _timm("mobilenetv4_conv_small"),
]

# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------

_VOCAB = 1000
_SPECIAL = {"bos_token_id": 0, "eos_token_id": 2}


def _ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(3, _VOCAB, (batch, seq))


def _padded_mask(batch: int, seq: int) -> torch.Tensor:
    """All ones except the last row's tail: padding goes through the masking code paths."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        mask[-1, seq - seq // 4 :] = 0
    return mask


@dataclasses.dataclass(frozen=True)
class _Size:
    """What the text models' configs scale with; every text entry derives its config from one."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    window: int  # local attention window (gpt_neo, mistral)


_CI = _Size(hidden=64, layers=2, heads=2, ffn=128, window=8)
_FULL = _Size(hidden=256, layers=4, heads=4, ffn=1024, window=64)


def _text(
    name: str,
    cfg_cls: str,
    model_cls: str,
    config: Callable[[_Size], dict],
    seq: int = 16,
    mask: bool = True,
    decoder: bool = False,
):
    """An encoder or decoder taking input_ids (+ attention_mask), its config made by `config`
    from _CI or _FULL; `decoder` adds decoder_input_ids for encoder-decoder models."""

    def make(is_full: bool, batch: int | None, n: int | None):
        import transformers

        # NOTE: use_cache=False: a forward pass, not generation; outputs are plain tensors.
        cfg = getattr(transformers, cfg_cls)(**config(_FULL if is_full else _CI), use_cache=False)
        model = getattr(transformers, model_cls)(cfg)
        batch = batch or (4 if is_full else 2)
        n = n or (128 if is_full else seq)
        kwargs = {"input_ids": _ids(batch, n)}
        if mask:
            kwargs["attention_mask"] = _padded_mask(batch, n)
        if decoder:
            kwargs["decoder_input_ids"] = _ids(batch, n // 2)
        return model, (), kwargs

    return _tf(name, make)


def _bert_like(s: _Size, **extra) -> dict:
    return dict(
        {
            "vocab_size": _VOCAB,
            "hidden_size": s.hidden,
            "num_hidden_layers": s.layers,
            "num_attention_heads": s.heads,
            "intermediate_size": s.hidden * 4,
            "max_position_embeddings": 512,
        },
        **extra,
    )


def _llama_like(s: _Size, kv: int, **extra) -> dict:
    return dict(
        vocab_size=_VOCAB,
        hidden_size=s.hidden,
        intermediate_size=s.hidden * 2,
        num_hidden_layers=s.layers,
        num_attention_heads=2 * s.heads,
        num_key_value_heads=kv,
        max_position_embeddings=512,
        **extra,
    )


def _head_dim(s: _Size) -> int:
    """Per-head width for the models that take it explicitly (t5, gemma; 2 * s.heads heads)."""
    return s.hidden // (2 * s.heads)


def _image_input(is_full: bool, batch: int | None, size_ci: int = 32):
    px = 224 if is_full else size_ci
    return torch.randn(batch or (4 if is_full else 2), 3, px, px)


def _vit(is_full: bool, batch: int | None, _seq: int | None):
    import transformers

    cfg = transformers.ViTConfig(
        hidden_size=192 if is_full else 64,
        num_hidden_layers=4 if is_full else 2,
        num_attention_heads=3 if is_full else 2,
        intermediate_size=768 if is_full else 128,
        image_size=224 if is_full else 32,
        patch_size=16 if is_full else 8,
    )
    return transformers.ViTModel(cfg), (), {"pixel_values": _image_input(is_full, batch)}


def _clip(is_full: bool, batch: int | None, seq: int | None):
    import transformers

    s = _FULL if is_full else _CI
    text = dict(
        vocab_size=_VOCAB,
        hidden_size=s.hidden,
        intermediate_size=s.hidden * 2,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        max_position_embeddings=77,
        **_SPECIAL,
    )
    vision = {
        "hidden_size": s.hidden,
        "intermediate_size": s.hidden * 2,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "image_size": 224 if is_full else 32,
        "patch_size": 16 if is_full else 8,
    }
    cfg = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=s.hidden)
    n = min(seq, 77) if seq else (77 if is_full else 12)
    batch = batch or (4 if is_full else 2)
    kwargs = {
        "input_ids": _ids(batch, n),
        "attention_mask": _padded_mask(batch, n),
        "pixel_values": _image_input(is_full, batch),
    }
    return transformers.CLIPModel(cfg), (), kwargs


def _whisper(is_full: bool, batch: int | None, _seq: int | None):
    import transformers

    h, layers = (256, 2) if is_full else (64, 1)
    frames = 3000 if is_full else 64
    cfg = transformers.WhisperConfig(
        vocab_size=_VOCAB,
        num_mel_bins=80,
        d_model=h,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4 if is_full else 2,
        decoder_attention_heads=4 if is_full else 2,
        encoder_ffn_dim=h * 4,
        decoder_ffn_dim=h * 4,
        max_source_positions=frames // 2,
        max_target_positions=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        use_cache=False,
    )
    batch = batch or 2
    kwargs = {"input_features": torch.randn(batch, 80, frames), "decoder_input_ids": _ids(batch, 8)}
    return transformers.WhisperModel(cfg), (), kwargs


def _tf(name: str, make) -> ModelSpec:
    return ModelSpec(name, "transformers", make)


_GPT2 = dict(vocab_size=_VOCAB, n_positions=512, **_SPECIAL)
_ENC_DEC = {
    "vocab_size": _VOCAB,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "max_position_embeddings": 512,
}

TRANSFORMERS = [
    _text("bert", "BertConfig", "BertModel", _bert_like),
    # NOTE: RoBERTa's positions start after its padding index (1): 512 tokens need 514 (the
    # published config); with 512 a 512-token input indexes past the table (a CUDA assert).
    _text(
        "roberta",
        "RobertaConfig",
        "RobertaModel",
        lambda s: _bert_like(s, max_position_embeddings=514),
    ),
    _text(
        "distilbert",
        "DistilBertConfig",
        "DistilBertModel",
        lambda s: {
            "vocab_size": _VOCAB,
            "dim": s.hidden,
            "n_layers": s.layers,
            "n_heads": s.heads,
            "hidden_dim": s.ffn,
        },
    ),
    _text(
        "albert",
        "AlbertConfig",
        "AlbertModel",
        lambda s: _bert_like(s, embedding_size=s.hidden // 2),
    ),
    _text(
        "electra",
        "ElectraConfig",
        "ElectraModel",
        lambda s: _bert_like(s, embedding_size=s.hidden // 2),
    ),
    _text(
        "gpt2",
        "GPT2Config",
        "GPT2LMHeadModel",
        lambda s: dict(_GPT2, n_embd=s.hidden, n_layer=s.layers, n_head=s.heads),
    ),
    _text(
        "gpt_neo",
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        lambda s: dict(
            vocab_size=_VOCAB,
            hidden_size=s.hidden,
            num_layers=s.layers,
            num_heads=s.heads,
            **_SPECIAL,
            attention_types=[[["global", "local"], s.layers // 2]],
            window_size=s.window,
            max_position_embeddings=512,
        ),
    ),
    _text(
        "opt",
        "OPTConfig",
        "OPTForCausalLM",
        lambda s: {
            "vocab_size": _VOCAB,
            "hidden_size": s.hidden,
            "num_hidden_layers": s.layers,
            "num_attention_heads": s.heads,
            "ffn_dim": s.ffn,
            "word_embed_proj_dim": s.hidden,
            "max_position_embeddings": 512,
        },
    ),
    _text("llama", "LlamaConfig", "LlamaForCausalLM", lambda s: _llama_like(s, kv=s.heads)),
    _text(
        "mistral",
        "MistralConfig",
        "MistralForCausalLM",
        lambda s: _llama_like(s, kv=s.heads, sliding_window=s.window),
    ),
    _text("qwen2", "Qwen2Config", "Qwen2ForCausalLM", lambda s: _llama_like(s, kv=s.heads)),
    _text(
        "gemma",
        "GemmaConfig",
        "GemmaForCausalLM",
        lambda s: _llama_like(s, kv=1, head_dim=_head_dim(s)),
    ),
    _text("phi", "PhiConfig", "PhiForCausalLM", lambda s: _llama_like(s, kv=2 * s.heads)),
    _text(
        "t5",
        "T5Config",
        "T5Model",
        lambda s: {
            "vocab_size": _VOCAB,
            "d_model": s.hidden,
            "d_kv": _head_dim(s),
            "d_ff": s.ffn,
            "num_layers": s.layers,
            "num_heads": 2 * s.heads,
            "decoder_start_token_id": 0,
        },
        decoder=True,
    ),
    _text(
        "bart",
        "BartConfig",
        "BartModel",
        lambda s: dict(
            _ENC_DEC,
            d_model=s.hidden,
            encoder_layers=s.layers,
            decoder_layers=s.layers,
            encoder_attention_heads=s.heads,
            decoder_attention_heads=s.heads,
            encoder_ffn_dim=s.ffn,
            decoder_ffn_dim=s.ffn,
        ),
        decoder=True,
    ),
    _tf("vit", _vit),
    _tf("clip", _clip),
    _tf("whisper", _whisper),
]

CORPUS: list[ModelSpec] = TIMM + TRANSFORMERS
BY_NAME = {spec.name: spec for spec in CORPUS}
