"""The model corpus of bench/models.py and tests/python/models/test_corpus.py: timm image models
and transformers models, all with random weights built offline (no downloads).

Each entry builds `(model, args, kwargs)` for one of two sizes:
- CI size (`full=False`): small images (64-96 px) and shrunk depths/widths where the model class
  takes them, so the whole corpus runs on a 2-core CPU in a few minutes;
- full size (`full=True`): the published configuration at 224 px (timm) or a small but realistic
  configuration (transformers), meant for the GPU machine.

    from model_corpus import CORPUS, load_model_libs
    load_model_libs()
    model, args, kwargs = CORPUS[0].build(full=False)
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from typing import Any

# NOTE: the corpus never touches the network; set before transformers/huggingface_hub import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch


def _work_around_mismatched_torchvision() -> None:
    """Lets timm import when torchvision's C ops cannot load (same as tests/python/conftest.py).

    NOTE: a CUDA torchvision wheel next to a CPU-only torch fails while registering fake kernels
    for ops whose library never loaded; pre-seeding that registration module lets the pure-Python
    rest import. The corpus never calls torchvision's C ops.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so"))
    if not libs:
        return
    try:
        torch.ops.load_library(libs[0])
    except OSError:
        name = "torchvision._meta_registrations"
        sys.modules.setdefault(name, types.ModuleType(name))


def load_model_libs() -> tuple[Any, Any]:
    """(timm or None, transformers or None): whichever of the two imports here."""
    _work_around_mismatched_torchvision()
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
    make: Callable[[bool], tuple[torch.nn.Module, tuple, dict]]

    def build(self, full: bool = False, seed: int = 0) -> tuple[torch.nn.Module, tuple, dict]:
        """(model in eval mode, positional args, keyword args); the same seed gives the same
        weights and inputs."""
        torch.manual_seed(seed)
        model, args, kwargs = self.make(full)
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

    def make(full: bool):
        import timm

        kwargs = {} if full else dict(ci or {})
        model = timm.create_model(model_name or name, pretrained=False, **kwargs)
        px = full_size if full else size
        return model, (torch.randn(batch, 3, px, px),), {}

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


def _text(
    cfg_cls: str,
    model_cls: str,
    ci: dict,
    full: dict,
    seq: int = 16,
    mask: bool = True,
    decoder: bool = False,
):
    """An encoder or decoder taking input_ids (+ attention_mask); `decoder` adds
    decoder_input_ids for encoder-decoder models."""

    def make(is_full: bool):
        import transformers

        # NOTE: use_cache=False: a forward pass, not generation; outputs are plain tensors.
        cfg = getattr(transformers, cfg_cls)(**(full if is_full else ci), use_cache=False)
        model = getattr(transformers, model_cls)(cfg)
        batch, n = (4, 128) if is_full else (2, seq)
        kwargs = {"input_ids": _ids(batch, n)}
        if mask:
            kwargs["attention_mask"] = _padded_mask(batch, n)
        if decoder:
            kwargs["decoder_input_ids"] = _ids(batch, n // 2)
        return model, (), kwargs

    return make


def _bert_like(hidden: int, layers: int, heads: int, **extra) -> dict:
    return dict(
        vocab_size=_VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 4,
        max_position_embeddings=512,
        **extra,
    )


_BERT_CI = _bert_like(64, 2, 2)
_BERT_FULL = _bert_like(256, 4, 4)


def _llama_like(hidden: int, layers: int, heads: int, kv: int, **extra) -> dict:
    return dict(
        vocab_size=_VOCAB,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=512,
        **extra,
    )


def _image_input(is_full: bool, size_ci: int = 32):
    px = 224 if is_full else size_ci
    return torch.randn(4 if is_full else 2, 3, px, px)


def _vit(is_full: bool):
    import transformers

    cfg = transformers.ViTConfig(
        hidden_size=192 if is_full else 64,
        num_hidden_layers=4 if is_full else 2,
        num_attention_heads=3 if is_full else 2,
        intermediate_size=768 if is_full else 128,
        image_size=224 if is_full else 32,
        patch_size=16 if is_full else 8,
    )
    return transformers.ViTModel(cfg), (), {"pixel_values": _image_input(is_full)}


def _clip(is_full: bool):
    import transformers

    h, layers = (256, 4) if is_full else (64, 2)
    text = dict(
        vocab_size=_VOCAB,
        hidden_size=h,
        intermediate_size=h * 2,
        num_hidden_layers=layers,
        num_attention_heads=4 if is_full else 2,
        max_position_embeddings=77,
        **_SPECIAL,
    )
    vision = {
        "hidden_size": h,
        "intermediate_size": h * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": 4 if is_full else 2,
        "image_size": 224 if is_full else 32,
        "patch_size": 16 if is_full else 8,
    }
    cfg = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=h)
    batch, n = (4, 77) if is_full else (2, 12)
    kwargs = {
        "input_ids": _ids(batch, n),
        "attention_mask": _padded_mask(batch, n),
        "pixel_values": _image_input(is_full),
    }
    return transformers.CLIPModel(cfg), (), kwargs


def _whisper(is_full: bool):
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
    batch = 2
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
    _tf("bert", _text("BertConfig", "BertModel", _BERT_CI, _BERT_FULL)),
    _tf("roberta", _text("RobertaConfig", "RobertaModel", _BERT_CI, _BERT_FULL)),
    _tf(
        "distilbert",
        _text(
            "DistilBertConfig",
            "DistilBertModel",
            {"vocab_size": _VOCAB, "dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},
            {"vocab_size": _VOCAB, "dim": 256, "n_layers": 4, "n_heads": 4, "hidden_dim": 1024},
        ),
    ),
    _tf(
        "albert",
        _text(
            "AlbertConfig",
            "AlbertModel",
            dict(_BERT_CI, embedding_size=32),
            dict(_BERT_FULL, embedding_size=128),
        ),
    ),
    _tf(
        "electra",
        _text(
            "ElectraConfig",
            "ElectraModel",
            dict(_BERT_CI, embedding_size=32),
            dict(_BERT_FULL, embedding_size=128),
        ),
    ),
    _tf(
        "gpt2",
        _text(
            "GPT2Config",
            "GPT2LMHeadModel",
            dict(_GPT2, n_embd=64, n_layer=2, n_head=2),
            dict(_GPT2, n_embd=256, n_layer=4, n_head=4),
        ),
    ),
    _tf(
        "gpt_neo",
        _text(
            "GPTNeoConfig",
            "GPTNeoForCausalLM",
            dict(
                vocab_size=_VOCAB,
                hidden_size=64,
                num_layers=2,
                num_heads=2,
                **_SPECIAL,
                attention_types=[[["global", "local"], 1]],
                window_size=8,
                max_position_embeddings=512,
            ),
            dict(
                vocab_size=_VOCAB,
                hidden_size=256,
                num_layers=4,
                num_heads=4,
                **_SPECIAL,
                attention_types=[[["global", "local"], 2]],
                window_size=64,
                max_position_embeddings=512,
            ),
        ),
    ),
    _tf(
        "opt",
        _text(
            "OPTConfig",
            "OPTForCausalLM",
            {
                "vocab_size": _VOCAB,
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "ffn_dim": 128,
                "word_embed_proj_dim": 64,
                "max_position_embeddings": 512,
            },
            {
                "vocab_size": _VOCAB,
                "hidden_size": 256,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "ffn_dim": 1024,
                "word_embed_proj_dim": 256,
                "max_position_embeddings": 512,
            },
        ),
    ),
    _tf(
        "llama",
        _text(
            "LlamaConfig", "LlamaForCausalLM", _llama_like(64, 2, 4, 2), _llama_like(256, 4, 8, 4)
        ),
    ),
    _tf(
        "mistral",
        _text(
            "MistralConfig",
            "MistralForCausalLM",
            _llama_like(64, 2, 4, 2, sliding_window=8),
            _llama_like(256, 4, 8, 4, sliding_window=64),
        ),
    ),
    _tf(
        "qwen2",
        _text(
            "Qwen2Config", "Qwen2ForCausalLM", _llama_like(64, 2, 4, 2), _llama_like(256, 4, 8, 4)
        ),
    ),
    _tf(
        "gemma",
        _text(
            "GemmaConfig",
            "GemmaForCausalLM",
            _llama_like(64, 2, 4, 1, head_dim=16),
            _llama_like(256, 4, 8, 1, head_dim=32),
        ),
    ),
    _tf(
        "phi",
        _text("PhiConfig", "PhiForCausalLM", _llama_like(64, 2, 4, 4), _llama_like(256, 4, 8, 8)),
    ),
    _tf(
        "t5",
        _text(
            "T5Config",
            "T5Model",
            {
                "vocab_size": _VOCAB,
                "d_model": 64,
                "d_kv": 16,
                "d_ff": 128,
                "num_layers": 2,
                "num_heads": 4,
                "decoder_start_token_id": 0,
            },
            {
                "vocab_size": _VOCAB,
                "d_model": 256,
                "d_kv": 32,
                "d_ff": 1024,
                "num_layers": 4,
                "num_heads": 8,
                "decoder_start_token_id": 0,
            },
            decoder=True,
        ),
    ),
    _tf(
        "bart",
        _text(
            "BartConfig",
            "BartModel",
            dict(
                _ENC_DEC,
                d_model=64,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
            ),
            dict(
                _ENC_DEC,
                d_model=256,
                encoder_layers=4,
                decoder_layers=4,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=1024,
                decoder_ffn_dim=1024,
            ),
            decoder=True,
        ),
    ),
    _tf("vit", _vit),
    _tf("clip", _clip),
    _tf("whisper", _whisper),
]

CORPUS: list[ModelSpec] = TIMM + TRANSFORMERS
BY_NAME = {spec.name: spec for spec in CORPUS}
