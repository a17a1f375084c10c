"""Capture-coverage sweep over models nobody here chose: a wide sample of timm architectures (one
small variant per timm module, a few more from the big modules) and of transformers model types
(tiny configs built from each type's config class: base models, *ForCausalLM,
*ForSequenceClassification, encoder-decoders, image classifiers), random weights, CPU, float32,
eval forward under torch.no_grad.

For each model: eager vs torchlite.compile (correct within the corpus tolerance, or WRONG), the
frames a second identical call captures again, and torchlite.explain's graph count, break count
and top break reasons. Models already in bench/model_corpus.py are left out (--include-corpus
keeps them).

    python bench/capture_sweep.py [--family timm|transformers|both] [--limit N] [--only NAME,...]
        [--timeout-s S] [--jsonl PATH] [--list]

Each model runs in a worker process that writes one JSON line per model (--jsonl, default
/tmp/capture_sweep.jsonl), so a crash of the interpreter (a segfault) costs that model only: the
driver records it as CRASH and starts a new worker at the next model. A model that runs past
--timeout-s is recorded as TIMEOUT. The table (model, graphs, breaks, 2nd, correct, top break
reason) and the most frequent break reasons over the whole sweep are printed at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.join(_HERE, "..", "tests", "python")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# ---------------------------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------------------------

# NOTE: name fragments of small variants, smallest first: the variant of a timm module picked is
# the one whose best fragment comes first (ties: the shorter name).
_SMALL = (
    "atto",
    "femto",
    "pico",
    "nano",
    "xxtiny",
    "xxs",
    "tiny",
    "xs",
    "small",
    "_s0",
    "_s",
    "b0",
    "_t",
    "050",
    "075",
    "100",
    "18",
    "26",
    "34",
    "50",
)
# timm modules with many distinct architectures: a few more variants each
_BIG_MODULES = {"byobnet": 2, "efficientnet": 2, "vision_transformer": 2, "metaformer": 2}
_MAX_PARAMS = 40e6
# NOTE: pretrained-config names whose variants differ only in weights: drop the tag suffix
_SKIP_TIMM_FRAGMENTS = ("_in21k", "_in22k", "_384", "_448", "_512", "_336", "_gap", "_clip")


_LARGE = ("large", "base", "huge", "giant", "xl", "medium", "big")


def _rank(name: str) -> tuple:
    large = any(f in name for f in _LARGE)
    for i, frag in enumerate(_SMALL):
        if frag in name:
            return (large, i, len(name), name)
    return (large, len(_SMALL), len(name), name)


def timm_sample(corpus_names: set[str]) -> list[str]:
    import timm

    picked = []
    for module in timm.list_modules():
        names = [
            n
            for n in timm.list_models(module=module)
            if n not in corpus_names and not any(f in n for f in _SKIP_TIMM_FRAGMENTS)
        ]
        names.sort(key=_rank)
        # NOTE: distinct architectures first: a second pick shares no prefix (before the first
        # '_') with the first one where possible
        chosen: list[str] = []
        for n in names:
            if len(chosen) >= _BIG_MODULES.get(module, 1):
                break
            if all(n.split("_")[0] != c.split("_")[0] for c in chosen) or len(chosen) == 0:
                chosen.append(n)
        picked += chosen
    return [f"timm:{n}" for n in picked]


# common config keys at tiny sizes; only keys the config class already has are passed
_TINY = {
    "hidden_size": 64,
    "cross_attention_hidden_size": 64,  # a decoder reading an encoder of hidden_size
    "d_model": 64,
    "n_embd": 64,
    "dim": 64,
    "embed_dim": 64,
    "num_hidden_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "num_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "num_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_ff": 128,
    "d_kv": 16,
    "n_inner": 128,
    "max_position_embeddings": 128,
    "image_size": 32,
    "patch_size": 8,
    "num_channels": 3,
    "use_cache": False,
}
_VOCAB = 512
_BACKEND = os.environ.get("CAPTURE_SWEEP_BACKEND", "eager")
_TRAIN = os.environ.get("CAPTURE_SWEEP_TRAIN") == "1"
_RESIZE = os.environ.get("CAPTURE_SWEEP_RESIZE") == "1"
_SEQ = 16
_EXTRA_SEEDS = (1, 2)  # a training row flagged on seed 0 is judged again on these


def transformers_sample(corpus_names: set[str]) -> list[str]:
    from transformers.models.auto import modeling_auto as ma

    skip = corpus_names | {n.replace("-", "_") for n in corpus_names}
    out: list[str] = []
    groups = [
        ("causal", ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
        ("seqcls", ma.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES),
        ("seq2seq", ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
        ("imgcls", ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES),
    ]
    seen: set[str] = set()
    for kind, mapping in groups:
        types = []
        for model_type in sorted(mapping):
            if model_type in skip or model_type in seen:
                continue
            seen.add(model_type)
            types.append(model_type)
        # NOTE: an even spread over the alphabet, at most _PER_KIND[kind] of each kind
        step = max(1, len(types) / _PER_KIND[kind])
        picked = sorted({types[int(i * step)] for i in range(min(len(types), _PER_KIND[kind]))})
        out += [f"tf:{kind}:{t}" for t in picked]
    return out


_PER_KIND = {"causal": 50, "seqcls": 25, "seq2seq": 8, "imgcls": 28}


# ---------------------------------------------------------------------------------------------
# Building one model
# ---------------------------------------------------------------------------------------------


def _build_timm(name: str):
    import timm
    import torch

    kwargs_tries = [{"img_size": 64}, {}]
    last = None
    for extra in kwargs_tries:
        try:
            with torch.device("meta"):
                probe = timm.create_model(name, pretrained=False, **extra)
            params = sum(p.numel() for p in probe.parameters())
            if params > _MAX_PARAMS:
                raise RuntimeError(f"too big: {params / 1e6:.0f}M parameters")
            model = timm.create_model(name, pretrained=False, **extra)
        except TypeError as exc:
            last = exc
            continue
        sizes = [64] if extra else [64, 96, model.pretrained_cfg.get("input_size", (3, 224))[-1]]
        for px in sizes:
            x = torch.randn(2, 3, px, px)
            try:
                with torch.no_grad():
                    model.eval()(x)
                return model, (x,), {}
            except Exception as exc:  # noqa: BLE001  (too small an input for this model)
                last = exc
    raise RuntimeError(f"no working input: {last}")


def _tiny_keys(config) -> dict:
    """The _TINY keys the config (or sub-config) class has, and a small vocabulary where its
    special token ids allow one."""
    keys = set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
    cfg = {k: v for k, v in _TINY.items() if k in keys}
    ids = [getattr(config, k, None) for k in ("pad_token_id", "bos_token_id", "eos_token_id")]
    ids += [getattr(config, "decoder_start_token_id", None)]
    if "vocab_size" in keys and all(i is None or (isinstance(i, int) and i < _VOCAB) for i in ids):
        cfg["vocab_size"] = _VOCAB
    return cfg


def _tiny_config(model_type: str):
    from transformers import AutoConfig, PretrainedConfig

    base = AutoConfig.for_model(model_type)
    cfg = _tiny_keys(base)
    # NOTE: multimodal models nest their towers' configs (text_config, vision_config,
    # audio_config, encoder/decoder): shrunk the same way, or they run at full size (minutes
    # each on the CPU)
    for name in getattr(base, "sub_configs", {}) or {}:
        sub = getattr(base, name, None)
        if isinstance(sub, PretrainedConfig):
            d = sub.to_dict()
            d.update(_tiny_keys(sub))
            cfg[name] = d
    try:
        config = AutoConfig.for_model(model_type, **cfg)
    except Exception:  # noqa: BLE001  (a parent that checks its towers' sizes against its own)
        config = AutoConfig.for_model(
            model_type, **{k: v for k, v in cfg.items() if not isinstance(v, dict)}
        )
    # NOTE: a parent that rejects its towers as dicts (t5gemma's encoder/decoder) still gets
    # them shrunk: set on the towers it built (else 2B parameters a side, ~17 GB, a timeout)
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if isinstance(sub, PretrainedConfig):
            for k, v in _tiny_keys(sub).items():
                setattr(sub, k, v)
    return config


def _build_transformers(kind: str, model_type: str, seed: int = 0):
    import torch
    from transformers.models.auto import modeling_auto as ma

    mapping = {
        "causal": ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "seqcls": ma.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
        "seq2seq": ma.MODEL_MAPPING_NAMES,
        "imgcls": ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
    }[kind]
    import transformers

    cls_name = mapping.get(model_type)
    if isinstance(cls_name, (tuple, list)):
        cls_name = cls_name[0]
    if cls_name is None:
        raise RuntimeError(f"no {kind} class")
    cls = getattr(transformers, cls_name)
    config = _tiny_config(model_type)
    if kind == "seqcls":
        config.num_labels = 3
    if getattr(config, "pad_token_id", None) is None and kind == "seqcls":
        config.pad_token_id = 0
    model = cls(config).eval()
    params = sum(p.numel() for p in model.parameters())
    if params > _MAX_PARAMS:
        raise RuntimeError(f"too big: {params / 1e6:.0f}M parameters")
    vocab = getattr(config, "vocab_size", _VOCAB) or _VOCAB
    g = torch.Generator().manual_seed(seed)
    main = getattr(model, "main_input_name", "input_ids")
    if main == "input_ids":
        ids = torch.randint(4, min(vocab, _VOCAB), (2, _SEQ), generator=g)
        kwargs = {"input_ids": ids}
        mask = torch.ones(2, _SEQ, dtype=torch.long)
        mask[1, _SEQ - 4 :] = 0
        kwargs["attention_mask"] = mask
        if kind == "seq2seq" or getattr(config, "is_encoder_decoder", False):
            kwargs["decoder_input_ids"] = torch.randint(
                4, min(vocab, _VOCAB), (2, _SEQ // 2), generator=g
            )
    elif main == "pixel_values":
        px = getattr(config, "image_size", 32)
        px = px[0] if isinstance(px, (tuple, list)) else px
        kwargs = {"pixel_values": torch.randn(2, getattr(config, "num_channels", 3), px, px)}
    else:
        raise RuntimeError(f"input {main!r} not generated by the sweep")
    tries = [kwargs, {k: v for k, v in kwargs.items() if k != "attention_mask"}]
    last = None
    for kw in tries:
        try:
            with torch.no_grad():
                model(**kw)
            return model, (), kw
        except Exception as exc:  # noqa: BLE001
            last = exc
    raise RuntimeError(f"eager fails: {type(last).__name__}: {last}")


def build(name: str, seed: int = 0):
    """The model (weights drawn after torch.manual_seed(seed)) and inputs drawn from seed."""
    import torch

    torch.manual_seed(seed)
    if name.startswith("timm:"):
        return _build_timm(name[5:])
    _, kind, model_type = name.split(":")
    return _build_transformers(kind, model_type, seed)


# ---------------------------------------------------------------------------------------------
# Worker: one model at a time, one JSON line per model
# ---------------------------------------------------------------------------------------------


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def _without_dropout(model) -> None:
    """Train mode with every dropout at 0 (modules and the float rates transformers' attention
    reads from its modules), so eager and compiled draw nothing and must agree exactly."""
    import torch

    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
        for attr, value in list(vars(m).items()):
            if isinstance(value, float) and "drop" in attr.lower():
                setattr(m, attr, 0.0)


def _loss(out):
    """A scalar from every floating tensor of a model's output (ModelOutput, tuple, tensor)."""
    import torch

    leaves = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.requires_grad:
                leaves.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(out)
    if not leaves:
        raise RuntimeError("no output requires grad")
    return sum(t.to(torch.promote_types(t.dtype, torch.float32)).square().mean() for t in leaves)


def _judge_failure(row: dict, exc: Exception) -> None:
    """A failed comparison is WRONG, any other exception ERROR (with its traceback)."""
    row["error"] = _short(exc)
    if isinstance(exc, AssertionError):
        row["correct"] = "WRONG"
    else:
        row["correct"] = "ERROR"
        row["traceback"] = traceback.format_exc()[-3000:]


def _leaves(x) -> list:
    """The tensors of a nested output (ModelOutput, tuple, tensor), in order."""
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _leaves(v)]
    return []


def _error(x, truth, floor: float = 0.0) -> float:
    """Largest difference from the float64 result, relative to that result's largest entry
    (or `floor` where larger: a gradient that is 0 but for rounding)."""
    if not truth.numel():
        return 0.0
    scale = max(float(truth.abs().max()), floor)
    return float((x.double() - truth).abs().max()) / max(scale, 1e-30)


def run_train(name: str, model, args, kwargs) -> dict:
    """--train: two training steps of torchlite.compile(model) (outputs, parameter gradients,
    accumulated, and floating buffers such as batch-norm running statistics) against eager's,
    from the same weights. NOTE: each value is measured against a float64 eager run and may
    be off by at most 8x eager float32's own error (plus 1e-5 of its scale), the gradients of
    all parameters together (their norm) too; a single gradient may be off by up to half its
    largest entry: a bias gradient sums terms that nearly cancel (train-mode batch norm at batch
    2), and in a deep network float32 rounding moves it by percents (mobileone_s1: eager
    float32 1.9e-3 of the largest entry on average and compiled 1.6x that, one compiled bias
    9e-2 where eager had 1.9e-3; dpn92: a batch-norm bias 0.26 where eager had 0.028); a wrong
    formula is off by the whole value. Without a float64
    run (an op without float64), 1% of the largest entry."""
    import copy

    import torch

    import torchlite

    row = {"name": name, "correct": "-", "graphs": None, "breaks": None, "second": None}
    _without_dropout(model)
    ref = copy.deepcopy(model)
    truth = copy.deepcopy(model).double()
    args64 = [a.double() if a.is_floating_point() else a for a in args]
    kwargs64 = {k: v.double() if v.is_floating_point() else v for k, v in kwargs.items()}
    torchlite.reset()
    report = torchlite.explain(copy.deepcopy(model))(*args, **kwargs)
    row["graphs"], row["breaks"] = report.graph_count, report.graph_break_count
    row["reasons"] = [
        [b.kind, b.reason[:160], f"{os.path.basename(b.filename)}:{b.lineno}"]
        for b in report.break_reasons
    ]
    torchlite.reset()
    compiled = torchlite.compile(model)

    total = {"mine": 0.0, "eager": 0.0, "truth": 0.0}  # squared norms over all gradients

    def check(what, got, want, want64, grad=False, floor=0.0):
        assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        if not want.is_floating_point():
            assert torch.equal(got, want), f"{what}: differs"
            return
        if want64 is None:
            scale = float(want.abs().max()) if want.numel() else 1.0
            torch.testing.assert_close(got, want, atol=1e-2 * max(scale, 1e-6), rtol=1e-2)
            return
        t = want64.detach()
        if not (torch.isfinite(want).all() and torch.isfinite(t).all()):
            # NaN/inf in eager or in float64 (canine): the same places and close values
            torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2, equal_nan=True)
            return
        mine, eager = _error(got.detach(), t, floor), _error(want.detach(), t, floor)
        bound = max(8 * eager + 1e-5, 0.5) if grad else 8 * eager + 1e-5
        assert mine <= bound, (
            f"{what}: {mine:.2e} of its largest entry from float64, eager float32 {eager:.2e}"
        )
        if grad:
            total["mine"] += float((got.detach().double() - t).square().sum())
            total["eager"] += float((want.detach().double() - t).square().sum())
            total["truth"] += float(t.square().sum())

    try:
        for step in range(2):  # the second step: the cached graphs, grads accumulated
            # NOTE: one seed for eager and compiled: a model that samples in training (phimoe's
            # router) draws the same numbers in both (torchlite draws eager's bits).
            torch.manual_seed(1000 + step)
            expected = ref(*args, **kwargs)
            _loss(expected).backward()
            torch.manual_seed(1000 + step)
            got = compiled(*args, **kwargs)
            _loss(got).backward()
            outs64 = None
            if truth is not None:
                try:
                    expected64 = truth(*args64, **kwargs64)
                    _loss(expected64).backward()
                    outs64 = _leaves(expected64)
                except Exception:  # noqa: BLE001  (an op without float64: no truth)
                    truth = None
            for i, (g, e) in enumerate(zip(_leaves(got), _leaves(expected), strict=True)):
                check(f"step{step}.out{i}", g, e, outs64[i] if outs64 else None)
            named64 = dict(truth.named_parameters()) if truth is not None else {}
            # NOTE: a gradient that is 0 in exact arithmetic (cait's talking-heads bias before a
            # softmax) is measured against 1e-3 of the model's largest gradient instead.
            floor = 1e-3 * max(
                (
                    float(p.grad.abs().max())
                    for p in named64.values()
                    if p.grad is not None and p.grad.numel()
                ),
                default=0.0,
            )
            for (pname, p), (_, q) in zip(
                model.named_parameters(), ref.named_parameters(), strict=True
            ):
                if q.grad is None:
                    assert p.grad is None, f"{pname}: a gradient where eager has none"
                    continue
                assert p.grad is not None, f"{pname}: no gradient (eager has one)"
                t = named64[pname].grad if pname in named64 else None
                check(f"step{step} grad {pname}", p.grad, q.grad, t, grad=True, floor=floor)
            if total["truth"] > 0:
                mine, eager = (total[k] ** 0.5 / total["truth"] ** 0.5 for k in ("mine", "eager"))
                assert mine <= 8 * eager + 1e-6, (
                    f"step{step} gradients (all, norm): {mine:.2e} from float64, eager {eager:.2e}"
                )
            total.update(mine=0.0, eager=0.0, truth=0.0)
            bufs64 = dict(truth.named_buffers()) if truth is not None else {}
            for (bname, b), (_, c) in zip(model.named_buffers(), ref.named_buffers(), strict=True):
                # NOTE: a running mean that is 0 but for rounding (hgnet_v2) against 1e-3
                check(f"step{step} buffer {bname}", b, c, bufs64.get(bname), floor=1e-3)
        row["second"] = 0
        row["correct"] = "ok"
    except Exception as exc:  # noqa: BLE001
        _judge_failure(row, exc)
    return row


def _judged_over_seeds(name: str, row: dict) -> dict:
    """A training row flagged WRONG on seed 0 is run again on two more seeds (weights and
    inputs). NOTE: float32 rounding in deep networks flips ReLU and max-pool decisions, and
    on some draws eager float32 itself lands 400x farther from float64 than on others
    (legacy_xception: 1.4e-5 to 5.5e-3 of the largest gradient), so one seed's 8x-eager bound
    can flag correct code; a wrong formula or a wrong kernel fails every seed. The row is
    correct when both other seeds pass, and keeps seed 0's message."""
    if row["correct"] != "WRONG":
        return row
    errors = []
    for seed in _EXTRA_SEEDS:
        try:
            model, args, kwargs = build(name, seed)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"seed {seed}: {_short(exc)}")
            continue
        again = run_train(name, model, args, kwargs)
        if again["correct"] != "ok":
            errors.append(f"seed {seed}: {again.get('error', again['correct'])}")
    if errors:
        row["error"] = " | ".join([row.get("error", "")] + errors)[:600]
    else:
        row["correct"] = "ok"
        row["seed0"] = row.pop("error", "")
    return row


def run_model(name: str) -> dict:
    import torch
    from helpers import assert_same, model_tolerance

    import torchlite
    from torchlite import _C, _install, backends, settings
    from torchlite.explain import ExplainOutput

    row = {"name": name, "correct": "-", "graphs": None, "breaks": None, "second": None}
    try:
        model, args, kwargs = build(name)
    except Exception as exc:  # noqa: BLE001
        row["correct"] = "skip"
        row["error"] = _short(exc)
        return row
    if _TRAIN:
        return _judged_over_seeds(name, run_train(name, model, args, kwargs))
    with torch.no_grad():
        expected = model(*args, **kwargs)
        torchlite.reset()
        # NOTE: torchlite.explain's own recipe (a config that records every capture), so one
        # trace gives both the compiled result and the report; --backend eager runs the captured
        # graphs op by op (capture coverage without kernel compiles, which dominate the time).
        records: list[dict] = []
        backend_fn, backend_name = (None, "torchlite")
        if _BACKEND != "torchlite":
            backend_fn, backend_name = backends.resolve(_BACKEND, None, None)
        _install.sync()
        values = settings.resolve(None, None, "capture_sweep")
        cfg = _C.make_config(backend_fn, backend_name, False, 8, records, values, "default")
        compiled = _C.CompiledFunction(model.__call__, cfg)
        try:
            t0 = time.perf_counter()
            got = compiled(*args, **kwargs)
            row["first_call_s"] = round(time.perf_counter() - t0, 1)
            assert_same(got, expected, **model_tolerance(expected))
            first = len(records)
            # NOTE: per graph "N kernels" or "op by op: why" (a model whose graphs all run op by
            # op is not checked through a single kernel), and the passes + kernel build time.
            graphs = [r for r in records if r["graph"] is not None]
            row["kernels"] = [r.get("kernels", "?") for r in graphs]
            row["compile_s"] = round(sum(int(r.get("compile_ms", 0)) for r in graphs) / 1e3, 1)
            report = ExplainOutput.from_records(list(records))
            row["graphs"], row["breaks"] = report.graph_count, report.graph_break_count
            row["reasons"] = [
                [b.kind, b.reason[:160], f"{os.path.basename(b.filename)}:{b.lineno}"]
                for b in report.break_reasons
            ]
            row["eager_frames"] = report.eager_frames
            assert_same(compiled(*args, **kwargs), expected, **model_tolerance(expected))
            row["second"] = len(records) - first
            row["correct"] = "ok"
            if _RESIZE:
                _check_resized(row, model, compiled, args, kwargs, records)
        except Exception as exc:  # noqa: BLE001
            _judge_failure(row, exc)
    return row


def _resized(x):
    """One more batch row (the first, repeated) and, for token ids and masks, 2 fewer positions."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return x
    x = torch.cat([x, x[:1]])
    if x.dim() == 2 and not x.is_floating_point() and x.shape[1] > 4:
        x = x[:, :-2].contiguous()
    return x


def _check_resized(row: dict, model, compiled, args, kwargs, records) -> None:
    """--resize: a third call at new sizes (batch + 1, sequence - 2) against eager's: the
    kernels that take their sizes at run time, or the ones compiled again for these sizes."""
    from helpers import assert_same, model_tolerance

    args2 = [_resized(a) for a in args]
    kwargs2 = {k: _resized(v) for k, v in kwargs.items()}
    try:
        expected = model(*args2, **kwargs2)
    except Exception as exc:  # noqa: BLE001
        row["resized"] = f"eager fails: {_short(exc)[:80]}"
        return
    before = len(records)
    got = compiled(*args2, **kwargs2)
    row["resized_captures"] = len(records) - before
    try:
        assert_same(got, expected, **model_tolerance(expected))
    except AssertionError as exc:
        raise AssertionError(f"new sizes: {exc}") from None
    row["resized"] = "ok"


def worker(names: list[str], out_path: str, timeout_s: int) -> None:
    sys.path.insert(0, _TESTS)
    from torchvision_compat import work_around_mismatched_torchvision

    work_around_mismatched_torchvision()

    class Timeout(BaseException):
        pass

    def on_alarm(*_):
        raise Timeout

    signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "a") as out:
        for name in names:
            out.write(json.dumps({"name": name, "started": True}) + "\n")
            out.flush()
            t = time.perf_counter()
            signal.alarm(timeout_s)
            try:
                row = run_model(name)
            except Timeout:
                row = {"name": name, "correct": "TIMEOUT"}
            finally:
                signal.alarm(0)
            row["seconds"] = round(time.perf_counter() - t, 1)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(_format(row), flush=True)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def read_rows(path: str) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("started"):
                rows.setdefault(row["name"], {"name": row["name"], "correct": "CRASH"})
            else:
                rows[row["name"]] = row
    return rows


def _top(row: dict, n: int = 1) -> str:
    reasons = row.get("reasons") or []
    counts = collections.Counter(f"{k}: {r}" for k, r, _ in reasons)
    return "; ".join(f"{r} (x{c})" for r, c in counts.most_common(n))[:140]


def _format(row: dict) -> str:
    g = "-" if row.get("graphs") is None else row["graphs"]
    b = "-" if row.get("breaks") is None else row["breaks"]
    s = "-" if row.get("second") is None else row["second"]
    tail = row.get("error", "") if row["correct"] not in ("ok",) else _top(row)
    if row.get("seed0"):
        tail = f"seeds 1, 2 ok; seed 0: {row['seed0']}"
    k = "-"
    if row.get("kernels") is not None:
        k = f"{sum(1 for x in row['kernels'] if not x.startswith('op by op'))}/{len(row['kernels'])}"
    c = "-" if row.get("compile_s") is None else f"{row['compile_s']:.1f}"
    return (
        f"{row['name']:44s} {g!s:>4s} {b!s:>4s} {s!s:>3s} {k:>5s} {c:>6s} {row['correct']:8s} "
        f"{tail[:160]}"
    )


def report(rows: list[dict]) -> str:
    head = f"{'model':44s} {'gr':>4s} {'brk':>4s} {'2nd':>3s} {'krn':>5s} {'comp_s':>6s} "
    lines = [head + f"{'correct':8s} top break / error"]
    lines += [_format(r) for r in rows]
    ran = [r for r in rows if r["correct"] not in ("skip",)]
    for fam in ("timm:", "tf:"):
        sub = [r for r in ran if r["name"].startswith(fam)]
        if not sub:
            continue
        ok = [r for r in sub if r["correct"] == "ok"]
        one = [r for r in ok if r.get("graphs") == 1 and r.get("breaks") == 0]
        bad = collections.Counter(r["correct"] for r in sub if r["correct"] != "ok")
        unstable = [r for r in ok if r.get("second")]
        lines.append(
            f"{fam[:-1]}: {len(sub)} ran, {len(ok)} correct, {len(one)} one graph, "
            f"{len(unstable)} recapture on a 2nd call, other: {dict(bad)}"
        )
        resized = [r for r in sub if r.get("resized")]
        if resized:
            lines.append(
                f"  new sizes (--resize): {sum(r['resized'] == 'ok' for r in resized)} correct "
                f"of {len(resized)} checked, "
                f"{sum(r['resized'].startswith('eager fails') for r in resized)} eager fails"
            )
        judged = [r for r in ok if r.get("kernels")]
        if judged:
            # --backend torchlite: graphs that ran fused kernels, and slow compiles
            fused = [r for r in judged if all(not x.startswith("op by op") for x in r["kernels"])]
            none = [
                r["name"] for r in judged if all(x.startswith("op by op") for x in r["kernels"])
            ]
            slow = [f"{r['name']} {r['compile_s']}" for r in judged if r["compile_s"] > 30]
            lines.append(
                f"  kernels in every graph: {len(fused)}/{len(judged)}; op by op only: "
                f"{none or 'none'}; passes + kernel builds > 30 s: {slow or 'none'}; "
                f"total {sum(r['compile_s'] for r in judged):.0f} s"
            )
    kinds = collections.Counter()
    reasons = collections.Counter()
    models_per_reason = collections.defaultdict(set)
    for r in ran:
        for k, why, _ in r.get("reasons") or []:
            kinds[k] += 1
            key = f"{k}: {why[:100]}"
            reasons[key] += 1
            models_per_reason[key].add(r["name"])
    lines.append("Breaks by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    lines.append("Most frequent break reasons (breaks, models):")
    ranked = sorted(reasons, key=lambda k: (-len(models_per_reason[k]), -reasons[k]))
    for key in ranked[:25]:
        names = sorted(models_per_reason[key])
        lines.append(f"  {reasons[key]:4d} {len(names):3d}  {key}  [{', '.join(names[:4])}]")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--family", choices=("timm", "transformers", "both"), default="both")
    p.add_argument("--limit", type=int, default=0, help="at most N models per family")
    p.add_argument("--only", default="", help="comma-separated names (timm:NAME, tf:KIND:TYPE)")
    p.add_argument("--timeout-s", type=int, default=240)
    p.add_argument("--jsonl", default="/tmp/capture_sweep.jsonl")
    p.add_argument("--fresh", action="store_true", help="start over (else resume the jsonl)")
    p.add_argument("--list", action="store_true", help="print the sample and exit")
    p.add_argument("--include-corpus", action="store_true")
    p.add_argument(
        "--backend",
        default="eager",
        help="eager: captured graphs run op by op (default, fast); torchlite: compiled kernels",
    )
    p.add_argument(
        "--train",
        action="store_true",
        help="a training step instead (train mode, dropout 0, compiled forward and backward "
        "through torchlite.compile): outputs, gradients and buffers against eager's",
    )
    p.add_argument(
        "--resize",
        action="store_true",
        help="(eval) a third call at new sizes: batch + 1, token ids and masks 2 shorter",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts, rest = p.parse_known_args()
    if opts.worker:
        worker(rest, opts.jsonl, opts.timeout_s)
        return

    sys.path.insert(0, _TESTS)
    from torchvision_compat import work_around_mismatched_torchvision

    work_around_mismatched_torchvision()
    if opts.only:
        names = opts.only.split(",")
    else:
        corpus: set[str] = set()
        if not opts.include_corpus:
            import importlib.util

            spec = importlib.util.spec_from_file_location(
                "model_corpus", os.path.join(_HERE, "model_corpus.py")
            )
            mc = importlib.util.module_from_spec(spec)
            sys.modules["model_corpus"] = mc
            spec.loader.exec_module(mc)
            corpus = set(mc.BY_NAME)
        names = []
        if opts.family in ("timm", "both"):
            got = timm_sample(corpus)
            names += got[: opts.limit] if opts.limit else got
        if opts.family in ("transformers", "both"):
            got = transformers_sample(corpus)
            names += got[: opts.limit] if opts.limit else got
    if opts.list:
        print("\n".join(names))
        return
    os.environ["CAPTURE_SWEEP_BACKEND"] = opts.backend
    os.environ["CAPTURE_SWEEP_TRAIN"] = "1" if opts.train else "0"
    os.environ["CAPTURE_SWEEP_RESIZE"] = "1" if opts.resize else "0"
    if opts.fresh and os.path.exists(opts.jsonl):
        os.remove(opts.jsonl)
    while True:
        done = read_rows(opts.jsonl)
        todo = [n for n in names if n not in done]
        if not todo:
            break
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--jsonl", opts.jsonl]
        cmd += ["--timeout-s", str(opts.timeout_s), *todo]
        subprocess.run(cmd, check=False)
    rows = read_rows(opts.jsonl)
    print(report([rows[n] for n in names if n in rows]))


if __name__ == "__main__":
    main()
