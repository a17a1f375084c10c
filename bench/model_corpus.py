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

# ---------------------------------------------------------------------------------------------
# The wider corpus (bench/models.py --extra only, not CI): more architectures at tiny sizes, CPU.
# One size only (`full` is ignored): a capture-coverage sweep, not a speed benchmark.
# ---------------------------------------------------------------------------------------------

_TINY_TEXT = {
    "vocab_size": _VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    **_SPECIAL,
    "pad_token_id": 1,
}


def _tiny_text(
    name: str,
    cfg_cls: str,
    model_cls: str,
    seq: int = 16,
    mask: bool = True,
    decoder: bool = False,
    **overrides,
) -> ModelSpec:
    """A text model from its config class at _TINY_TEXT sizes; `overrides` replace or add config
    keys (None drops one). transformers maps the common names (hidden_size, ...) onto each
    config's own through its attribute_map."""

    def make(_full: bool, _batch: int | None, _seq: int | None):
        import transformers

        cfg = {**_TINY_TEXT, **overrides}
        cfg = {k: v for k, v in cfg.items() if v is not None}
        config = getattr(transformers, cfg_cls)(**cfg, use_cache=False)
        model = getattr(transformers, model_cls)(config)
        kwargs = {"input_ids": _ids(2, seq)}
        if mask:
            kwargs["attention_mask"] = _padded_mask(2, seq)
        if decoder:
            kwargs["decoder_input_ids"] = _ids(2, seq // 2)
        return model, (), kwargs

    return _tf(name, make)


def _tiny_config_model(
    name: str, cfg_cls: str, model_cls: str, inputs: Callable[[], dict], **cfg
) -> ModelSpec:
    """A non-text transformers model (vision, audio) from its config class and `cfg`."""

    def make(_full: bool, _batch: int | None, _seq: int | None):
        import transformers

        config = getattr(transformers, cfg_cls)(**cfg)
        return getattr(transformers, model_cls)(config), (), inputs()

    return _tf(name, make)


def _pixels(px: int = 32) -> Callable[[], dict]:
    return lambda: {"pixel_values": torch.randn(2, 3, px, px)}


def _waveform() -> dict:
    return {"input_values": torch.randn(2, 1600)}


_ENC_DEC_TINY = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "decoder_start_token_id": 2,
}
_T5_TINY = {"d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4}
_SWIN_TINY = {
    "image_size": 32,
    "patch_size": 4,
    "embed_dim": 16,
    "depths": [1, 1],
    "num_heads": [1, 2],
    "window_size": 2,
}
_MOE_TINY = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
_VIT_TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "image_size": 32,
    "patch_size": 8,
}
_CONV_STAGES_TINY = {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}
_AUDIO_TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "conv_dim": (16, 16),
    "conv_stride": (5, 2),
    "conv_kernel": (10, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
}

EXTRA_TRANSFORMERS = [
    # encoders
    _tiny_text("deberta", "DebertaConfig", "DebertaModel"),
    _tiny_text("deberta_v2", "DebertaV2Config", "DebertaV2Model"),
    _tiny_text("mpnet", "MPNetConfig", "MPNetModel"),
    _tiny_text("xlm_roberta", "XLMRobertaConfig", "XLMRobertaModel"),
    _tiny_text("ernie", "ErnieConfig", "ErnieModel"),
    _tiny_text("squeezebert", "SqueezeBertConfig", "SqueezeBertModel", embedding_size=64),
    _tiny_text("convbert", "ConvBertConfig", "ConvBertModel", embedding_size=64),
    _tiny_text(
        "funnel",
        "FunnelConfig",
        "FunnelModel",
        block_sizes=[1, 1],
        d_model=64,
        n_head=4,
        d_head=16,
        num_hidden_layers=None,
    ),
    _tiny_text(
        "mobilebert",
        "MobileBertConfig",
        "MobileBertModel",
        embedding_size=32,
        intra_bottleneck_size=32,
        num_feedforward_networks=1,
    ),
    _tiny_text("roformer", "RoFormerConfig", "RoFormerModel", embedding_size=64),
    _tiny_text("megatron_bert", "MegatronBertConfig", "MegatronBertModel"),
    _tiny_text(
        "xlnet",
        "XLNetConfig",
        "XLNetModel",
        d_model=64,
        n_layer=2,
        n_head=4,
        d_inner=128,
        hidden_size=None,
        num_hidden_layers=None,
        num_attention_heads=None,
        max_position_embeddings=None,
    ),
    _tiny_text("big_bird", "BigBirdConfig", "BigBirdModel", attention_type="original_full"),
    _tiny_text("data2vec_text", "Data2VecTextConfig", "Data2VecTextModel"),
    _tiny_text("esm", "EsmConfig", "EsmModel", position_embedding_type="rotary"),
    _tiny_text("longformer", "LongformerConfig", "LongformerModel", attention_window=8),
    _tiny_text("splinter", "SplinterConfig", "SplinterModel"),
    _tiny_text("fnet", "FNetConfig", "FNetModel", mask=False),
    # decoders
    _tiny_text("gptj", "GPTJConfig", "GPTJForCausalLM", rotary_dim=8),
    _tiny_text("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM"),
    _tiny_text("bloom", "BloomConfig", "BloomForCausalLM"),
    _tiny_text("falcon", "FalconConfig", "FalconForCausalLM"),
    _tiny_text("codegen", "CodeGenConfig", "CodeGenForCausalLM", rotary_dim=8, n_ctx=512),
    _tiny_text("mpt", "MptConfig", "MptForCausalLM", d_model=64, n_heads=4, n_layers=2),
    _tiny_text("stablelm", "StableLmConfig", "StableLmForCausalLM", num_key_value_heads=4),
    _tiny_text(
        "mixtral", "MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2, num_local_experts=4
    ),
    _tiny_text(
        "qwen2_moe",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        num_key_value_heads=2,
        shared_expert_intermediate_size=64,
        **_MOE_TINY,
    ),
    _tiny_text("qwen3", "Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16),
    _tiny_text(
        "qwen3_moe",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        num_key_value_heads=2,
        head_dim=16,
        **_MOE_TINY,
    ),
    _tiny_text("phi3", "Phi3Config", "Phi3ForCausalLM", num_key_value_heads=4),
    _tiny_text(
        "gemma2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=8,
    ),
    _tiny_text(
        "gemma3",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=8,
    ),
    _tiny_text("olmo", "OlmoConfig", "OlmoForCausalLM"),
    _tiny_text("olmo2", "Olmo2Config", "Olmo2ForCausalLM"),
    _tiny_text("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2),
    _tiny_text("cohere", "CohereConfig", "CohereForCausalLM", num_key_value_heads=2),
    _tiny_text("persimmon", "PersimmonConfig", "PersimmonForCausalLM"),
    _tiny_text("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM"),
    _tiny_text("biogpt", "BioGptConfig", "BioGptForCausalLM"),
    _tiny_text("xglm", "XGLMConfig", "XGLMForCausalLM", d_model=64, ffn_dim=128),
    _tiny_text("ctrl", "CTRLConfig", "CTRLLMHeadModel", dff=128),
    _tiny_text("granite", "GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2),
    _tiny_text("glm", "GlmConfig", "GlmForCausalLM", num_key_value_heads=2, head_dim=16),
    _tiny_text("helium", "HeliumConfig", "HeliumForCausalLM", num_key_value_heads=2, head_dim=16),
    _tiny_text(
        "deepseek_v3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        num_key_value_heads=4,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
    ),
    # encoder-decoders
    _tiny_text("mbart", "MBartConfig", "MBartModel", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("pegasus", "PegasusConfig", "PegasusModel", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("marian", "MarianConfig", "MarianModel", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("blenderbot", "BlenderbotConfig", "BlenderbotModel", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("m2m_100", "M2M100Config", "M2M100Model", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("plbart", "PLBartConfig", "PLBartModel", decoder=True, **_ENC_DEC_TINY),
    _tiny_text("mt5", "MT5Config", "MT5Model", decoder=True, **_T5_TINY),
    _tiny_text("longt5", "LongT5Config", "LongT5Model", decoder=True, **_T5_TINY),
    _tiny_text(
        "led",
        "LEDConfig",
        "LEDModel",
        decoder=True,
        attention_window=8,
        max_encoder_position_embeddings=512,
        max_decoder_position_embeddings=512,
        **_ENC_DEC_TINY,
    ),
    # vision, audio
    _tiny_config_model("deit", "DeiTConfig", "DeiTModel", _pixels(), **_VIT_TINY),
    _tiny_config_model("beit", "BeitConfig", "BeitModel", _pixels(), **_VIT_TINY),
    _tiny_config_model("dinov2", "Dinov2Config", "Dinov2Model", _pixels(), **_VIT_TINY),
    _tiny_config_model(
        "yolos",
        "YolosConfig",
        "YolosModel",
        _pixels(),
        **{**_VIT_TINY, "image_size": [32, 32]},
        num_detection_tokens=4,
    ),
    _tiny_config_model(
        "siglip_vision", "SiglipVisionConfig", "SiglipVisionModel", _pixels(), **_VIT_TINY
    ),
    # conv stages of one shape: (name, class prefix, extra config)
    *(
        _tiny_config_model(name, f"{cls}Config", f"{cls}Model", _pixels(), **_CONV_STAGES_TINY, **x)
        for name, cls, x in [
            ("convnext", "ConvNext", {}),
            ("convnextv2", "ConvNextV2", {}),
            ("resnet", "ResNet", {"embedding_size": 16}),
            ("regnet", "RegNet", {"embedding_size": 16, "groups_width": 8}),
        ]
    ),
    _tiny_config_model(
        "swin",
        "SwinConfig",
        "SwinModel",
        _pixels(),
        **_SWIN_TINY,
    ),
    _tiny_config_model(
        "segformer",
        "SegformerConfig",
        "SegformerModel",
        _pixels(),
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        decoder_hidden_size=32,
    ),
    _tiny_config_model(
        "mobilevit", "MobileViTConfig", "MobileViTModel", _pixels(64), image_size=64
    ),
    *(
        _tiny_config_model(name, f"{cls}Config", f"{cls}Model", _waveform, **_AUDIO_TINY)
        for name, cls in [("wav2vec2", "Wav2Vec2"), ("hubert", "Hubert")]
    ),
    # added in the nineteenth session (none of these families was in the corpus)
    _tiny_text("mamba", "MambaConfig", "MambaForCausalLM", mask=False, state_size=8),
    _tiny_text(
        "rwkv",
        "RwkvConfig",
        "RwkvForCausalLM",
        mask=False,
        attention_hidden_size=64,
        context_length=64,
    ),
    _tiny_text("layoutlm", "LayoutLMConfig", "LayoutLMModel"),
    _tiny_text(
        "rembert",
        "RemBertConfig",
        "RemBertModel",
        input_embedding_size=32,
        output_embedding_size=64,
    ),
    _tiny_text("ibert", "IBertConfig", "IBertModel"),
    _tiny_text("modernbert", "ModernBertConfig", "ModernBertModel", local_attention=8),
    _tiny_text("olmoe", "OlmoeConfig", "OlmoeForCausalLM", num_experts=4, num_experts_per_tok=2),
    _tiny_text("umt5", "UMT5Config", "UMT5Model", decoder=True, **_T5_TINY),
    _tiny_config_model(
        "vit_mae",
        "ViTMAEConfig",
        "ViTMAEModel",
        # NOTE: the random patch masking takes its noise as an input: same draw in both runs
        lambda: {"pixel_values": torch.randn(2, 3, 32, 32), "noise": torch.rand(2, 16)},
        **_VIT_TINY,
    ),
    _tiny_config_model(
        "swinv2",
        "Swinv2Config",
        "Swinv2Model",
        _pixels(),
        **_SWIN_TINY,
    ),
]

_VIT_EXTRA = {"img_size": 64, "depth": 2}

EXTRA_TIMM = [
    _timm("mobilenetv2_050"),
    _timm("mnasnet_small"),
    _timm("spnasnet_100"),
    _timm("fbnetc_100"),
    _timm("hardcorenas_a"),
    _timm("efficientnet_lite0"),
    _timm("tf_efficientnet_b0"),
    _timm("gernet_s"),
    _timm("selecsls42b"),
    _timm("skresnet18"),
    _timm("seresnet18", {}),
    _timm("ecaresnet26t"),
    _timm("resnetv2_50", {"layers": (1, 1, 1, 1)}),
    _timm("regnetz_b16"),
    _timm("ese_vovnet19b_dw"),
    _timm("mobileone_s0"),
    _timm("ghostnetv2_100"),
    _timm("repghostnet_050"),
    _timm("hgnetv2_b0"),
    _timm("starnet_s1"),
    _timm("inception_next_tiny", {}),
    _timm("convit_tiny", _VIT_EXTRA),
    _timm("pit_ti_224", {"img_size": 64}),
    _timm("visformer_tiny", {"img_size": 64}),
    _timm("gmlp_ti16_224", {"img_size": 64}),
    _timm("resmlp_12_224", {"img_size": 64}),
    _timm("mixnet_s"),
    _timm("efficientformerv2_s0", {"img_size": 64}),
    _timm("davit_tiny", {"depths": (1, 1, 1, 1)}),
    _timm("focalnet_tiny_srf", {}),
    _timm("gcvit_xxtiny", {"img_size": 64}),
    _timm("mvitv2_tiny", {"img_size": 64}),
    _timm("coatnet_nano_rw_224", {"img_size": 64}),
    _timm("sequencer2d_s", {"layers": (1, 1, 1, 1)}),
    # added in the nineteenth session (none of these families was in the corpus)
    _timm("nf_regnet_b0"),
    _timm("repvit_m1"),
    _timm("botnet26t_256", {"img_size": 64}),
    _timm("efficientvit_m0", {"img_size": 64}),
    _timm("mobilevitv2_050"),
    _timm("deit3_small_patch16_224", _VIT_EXTRA),
    _timm("cs3darknet_s"),
    _timm("tinynet_a"),
    # added in the twentieth session (bench/capture_sweep.py): the rope grid of DINOv3 builds its
    # coordinates with `torch.arange(..., device=None)`
    _timm("vit_tiny_patch16_dinov3_qkvb", _VIT_EXTRA),
]

EXTRA: list[ModelSpec] = EXTRA_TIMM + EXTRA_TRANSFORMERS
BY_NAME = {spec.name: spec for spec in CORPUS + EXTRA}
