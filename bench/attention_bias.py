"""Attention with an additive float bias on CUDA (passes/attention_products.h): per shape, the
GPU time of eager SDPA (the backend torch picks, named), torchlite by default (decomposes only
calls torch runs on its math path), torchlite decomposing every call (decompose_attention=True:
two batched products around one generated softmax kernel), torchlite with the decomposition off
(torch's SDPA call), torch's efficient-attention kernel called directly (when its constraints
hold), and torch.compile (--tc), sampled in turns; the relative L2 error of eager, the
decomposition and efficient attention against float64. The heads are merged after the
attention, as models do (a returned SDPA result keeps torch's call).

    python bench/attention_bias.py [--tc] [--only NAME[,NAME]]
"""

import argparse
import os
import statistics
import sys
import tempfile
import warnings

_tmp = tempfile.mkdtemp(prefix="tl_attn_")
os.environ.setdefault("TORCHLITE_CACHE_DIR", os.path.join(_tmp, "torchlite"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_tmp, "inductor"))

import torch
import torch.nn.functional as F
from timing import cuda_ms

import torchlite

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32

# name: (batch, heads, q length, k length, head dim, mask shape, dtype[, mask dtype])
CASES = {
    "t5-encoder": (8, 8, 512, 512, 32, (8, 8, 512, 512), BF16),
    "t5-cross": (8, 8, 256, 512, 32, (8, 8, 256, 512), BF16),
    "alibi-1xH": (8, 12, 1024, 1024, 64, (1, 12, 1024, 1024), BF16),
    "swin-window": (2048, 3, 49, 49, 32, (1, 3, 49, 49), BF16),
    "padding-f16": (16, 12, 512, 512, 64, (16, 1, 1, 512), F16),
    "bias-f32": (8, 8, 512, 512, 32, (1, 8, 512, 512), F32),
    "f32-mask-bf16": (8, 8, 512, 512, 32, (8, 8, 512, 512), BF16, F32),
    "head-20-bf16": (8, 8, 512, 512, 20, (8, 8, 512, 512), BF16),
}


def attention(q, k, v, mask):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).flatten(2)


def inputs(case):
    b, h, lq, lk, d, mshape, dtype, *mdtype = CASES[case]

    def heads(n):  # a linear's output viewed per head, as models make q, k and v
        return torch.randn(b, n, h, d, device="cuda", dtype=dtype).transpose(1, 2)

    mask = torch.randn(mshape, device="cuda", dtype=mdtype[0] if mdtype else dtype)
    return heads(lq), heads(lk), heads(lk), mask


def efficient(q, k, v, mask):
    bias = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, False)[0]
    return out.transpose(1, 2).flatten(2)


def picked_backend(q, k, v, mask):
    params = torch.backends.cuda.SDPAParams(q, k, v, mask, 0.0, False, False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, can in (
            ("cudnn", torch.backends.cuda.can_use_cudnn_attention),
            ("flash", torch.backends.cuda.can_use_flash_attention),
            ("efficient", torch.backends.cuda.can_use_efficient_attention),
        ):
            if can(params, True):
                return name, ""
    return "math", " | ".join(str(w.message)[:90] for w in caught[:3])


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--tc", action="store_true", help="torch.compile too")
    parser.add_argument("--only", default="")
    opts = parser.parse_args(argv)
    names = [n for n in opts.only.split(",") if n] or list(CASES)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; ms per call, median of 5")
    print(
        f"{'case':14} {'eager':>8} {'tl':>8} {'tl-all':>8} {'tl-off':>8} {'effic':>8} {'tc':>8}"
        "  errors (eager/tl-all/effic)  eager backend (attentions decomposed: tl, tl-all)"
    )
    for name in names:
        args = inputs(name)
        backend, why = picked_backend(*args)
        torchlite.reset()
        torchlite.reset_counters()
        with torch.no_grad():
            tl = torchlite.compile(attention)
            tl(*args)
            decomposed = torchlite.counters()["attentions_decomposed"]
            every = {"decompose_attention": True}
            tl_all = torchlite.compile(lambda q, k, v, m: attention(q, k, v, m), options=every)
            tl_all(*args)
            all_decomposed = torchlite.counters()["attentions_decomposed"] - decomposed
            off = {"decompose_attention": False}
            tl_off = torchlite.compile(lambda q, k, v, m: attention(q, k, v, m), options=off)
            tl_off(*args)
            fns = {"eager": attention, "tl": tl, "tl-all": tl_all, "tl-off": tl_off}
            try:
                efficient(*args)
                fns["effic"] = efficient
            except RuntimeError as e:
                why += f" | efficient call: {str(e)[:80]}"
            if opts.tc:
                tc = torch.compile(attention)
                tc(*args)
                fns["tc"] = tc
            ref = attention(*(a.double() for a in args))
            errs = [
                rel_err(fns[k](*args), ref) if k in fns else float("nan")
                for k in ("eager", "tl-all", "effic")
            ]
            for fn in fns.values():
                fn(*args)
            samples = {k: [] for k in fns}
            for _ in range(5):
                for k, fn in fns.items():
                    samples[k].append(cuda_ms(fn, args))
        ms = {k: statistics.median(v) for k, v in samples.items()}
        cells = " ".join(
            f"{ms[k]:8.3f}" if k in ms else f"{'-':>8}"
            for k in ("eager", "tl", "tl-all", "tl-off", "effic", "tc")
        )
        print(
            f"{name:14} {cells}  {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}  {backend}"
            f" ({decomposed}, {all_decomposed}){' ' + why if why else ''}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
