"""Distributed training step times: eager vs torchlite vs torch.compile, under DDP and FSDP2.

Spawns one process per GPU (NCCL, NVLink multicast off) or per CPU rank (gloo), torchrun
style, and prints one table from rank 0: median step time (forward + backward with its
gradient all-reduces or reduce-scatters + AdamW step), the speedup over eager, peak memory
per GPU, cold compile time, and whether the losses of the warmup steps matched eager's.

    python bench/distributed.py [--device cuda|cpu] [--nprocs 2] [--only ddp,fsdp] [--tiny]
                                [--steps N] [--no-inductor] [--fsdp-layers N] [--profile]

Rows (per GPU): DDP of GPT-2 (124M) under bf16 autocast, batch 8x512: eager DDP,
torchlite.compile(DDP(model)) (eager backward; with +bw the compiled backward split at DDP's
buckets), torch.compile(DDP(model)) (Dynamo's DDPOptimizer). FSDP2 of a Llama-style model
(hidden 4096, SwiGLU 11008, 24 layers: 5.1B parameters, 82 GB of fp32 weights, gradients and
Adam states unsharded, more than one 80 GB GPU), fully_shard per block with bf16 parameters
(MixedPrecisionPolicy), each block compiled, batch 8x512 (--fsdp-batch). `--tiny` shrinks
both models to CPU smoke-test size.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import math
import os
import socket
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))  # llama_block

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from llama_block import Block as LlamaBlock
from llama_block import RMSNorm
from torch.nn.parallel import DistributedDataParallel as DDP
from train import _gpt2, _loss

import torchlite

KINDS = ["eager", "tl op by op", "torchlite", "torch.compile"]


# ---------------------------------------------------------------------------------------------
# A Llama-style decoder (RMSNorm, rotary attention through SDPA, SwiGLU): built on the meta
# device and materialised shard by shard, so a model larger than one GPU never exists whole.
# ---------------------------------------------------------------------------------------------


class Llama(torch.nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, inter: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(LlamaBlock(d, heads, inter) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head_dim = d // heads

    def rotary(self, seq: int, device):
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=device) / self.head_dim))
        angles = torch.outer(torch.arange(seq, device=device, dtype=inv.dtype), inv)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, input_ids, labels):
        x = self.emb(input_ids)
        cos, sin = self.rotary(input_ids.shape[1], input_ids.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())


def _init_(model: torch.nn.Module, seed: int) -> None:
    """Deterministic values for every (local shard of a) parameter: norms 1, others N(0, 0.02)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if name.endswith("norm.weight"):
                local.fill_(1.0)
            else:
                vals = torch.randn(local.shape, generator=g) * 0.02
                local.copy_(vals.to(local.dtype))


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _measure(step, device, steps, profile=False):
    """(median seconds, cold compile seconds, peak MB, warmup losses, profile summary)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    _sync(device)
    t = time.perf_counter()
    losses = [step()]
    _sync(device)
    first = time.perf_counter() - t
    losses += [step() for _ in range(2)]
    times = []
    for _ in range(steps):
        dist.barrier()
        _sync(device)
        t = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t)
    # NOTE: the slowest rank sets the step time
    med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else math.nan
    prof = _profile(step, device) if profile and device.type == "cuda" else None
    return med.item(), max(first - med.item(), 0.0), peak, losses, prof


def _profile(step, device, steps=3):
    """Per step: compute kernel time, communication kernel time, kernel launches.

    Step time minus compute kernel time is what communication and the host add: a step whose
    all-reduces overlap backward spends little more than its compute kernels.
    """
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    dist.barrier()
    _sync(device)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    compute = comm = 0.0
    launches = 0
    # NOTE: key_averages' self device time sits on the kernel rows only (the ops that launch
    # them have none of their own), so the sum counts every kernel once
    for row in prof.key_averages():
        us = row.self_device_time_total
        if us <= 0:
            continue
        if "nccl" in row.key.lower():
            comm += us
        else:
            compute += us
            launches += row.count
    return (
        f"compute kernels {compute / steps / 1e3:7.2f} ms/step, communication kernels"
        f" {comm / steps / 1e3:7.2f} ms/step, {launches // steps} launches/step"
    )


def _stepper(model, call, inputs, device, amp):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = call(**inputs)
        loss = out if isinstance(out, torch.Tensor) else _loss(out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach().float().item()

    return step


def _tokens(bs, seq, vocab, device, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    ids = torch.randint(0, vocab, (bs, seq), generator=g).to(device)
    return {"input_ids": ids, "labels": ids}


def _reset(kind):
    torchlite.reset()
    if kind == "torch.compile":
        torch._dynamo.reset()


def ddp_rows(args, device, rank):
    torch.manual_seed(0)
    base = _gpt2("tiny" if args.tiny else "full").to(device).train()
    bs, seq = (2, 64) if args.tiny else (8, 512)
    inputs = _tokens(bs, seq, base.config.vocab_size, device, rank)
    amp = torch.bfloat16 if device.type == "cuda" else None
    kw = {"device_ids": [device.index]} if device.type == "cuda" else {}
    results = {}
    for kind in args.kinds:
        _reset(kind)
        model = copy.deepcopy(base)
        ddp = DDP(model, **kw)
        if kind == "eager":
            call = ddp
        elif kind in ("torchlite", "tl op by op"):
            call = torchlite.compile(ddp, options={"compiled_backward": kind == "torchlite"})
        else:
            call = torch.compile(ddp)
        results[kind] = _run(functools.partial(_stepper, ddp, call, inputs, device, amp), args)
        del model, ddp, call
        _free(device)
    return results


def _llama(args, device, dtype_params):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if args.tiny:
        cfg = {"vocab": 256, "d": 64, "layers": 2, "heads": 4, "inter": 128}
    else:
        cfg = {"vocab": 32000, "d": 4096, "layers": args.fsdp_layers, "heads": 32, "inter": 11008}
    with torch.device("meta"):
        model = Llama(**cfg)
    mp_policy = MixedPrecisionPolicy(param_dtype=dtype_params, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp_policy)
    fully_shard(model, mp_policy=mp_policy)
    model.to_empty(device=device)
    _init_(model, seed=dist.get_rank())
    return model, cfg["vocab"]


def _compile_blocks(model, kind) -> None:
    """Each block compiled (FSDP2's recommended form for torch.compile as well): the all-gathers
    and reduce-scatters stay in FSDP's hooks around the compiled blocks.

    NOTE: a function of its own so that no loop variable of fsdp_rows keeps a block, and through
    FSDP's state the whole model, alive into the next row."""
    for i, layer in enumerate(model.layers):
        if kind in ("torchlite", "tl op by op"):
            opts = {"compiled_backward": kind == "torchlite"}
            model.layers[i] = torchlite.compile(layer, options=opts)
        elif kind == "torch.compile":
            layer.compile()


def fsdp_rows(args, device, rank):
    dtype_params = torch.bfloat16 if device.type == "cuda" else torch.float32
    bs, seq = (2, 64) if args.tiny else (args.fsdp_batch, 512)
    results = {}
    for kind in args.kinds:
        _reset(kind)
        model, vocab = _llama(args, device, dtype_params)
        inputs = _tokens(bs, seq, vocab, device, rank)
        _compile_blocks(model, kind)
        results[kind] = _run(functools.partial(_stepper, model, model, inputs, device, None), args)
        del model
        _free(device)
    return results


def _run(make_step, args):
    device = make_step.args[3]
    torch.manual_seed(1 + dist.get_rank())  # NOTE: dropout draws the same bits in every row
    try:
        return _measure(make_step(), device, args.steps, args.profile)
    except Exception as e:  # noqa: BLE001 (NOTE: one failing backend must not hide the other rows)
        return e


def _free(device):
    # NOTE: a row's FSDP model is left in reference cycles (its hooks and state): only the
    # cyclic collector frees its parameters and gradients, whenever it next comes round to them.
    # Collected here, each row's peak is its own. (The torchlite row of the FSDP2 table on 2
    # H100s once peaked 19528 MB above torch.compile's: the eager row's parameter shards and
    # gradients, still alive.)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _fmt(kind, r, eager):
    if isinstance(r, Exception):
        return f"  {kind:<14} FAILED: {type(r).__name__}: {str(r).splitlines()[0][:120]}"
    med, cold, peak, losses, prof = r
    ok = not isinstance(eager, Exception)
    speed = f"{eager[0] / med:5.2f}x" if ok else "     "
    match = ok and all(
        abs(a - b) <= 2e-2 * max(1.0, abs(b)) for a, b in zip(losses, eager[3], strict=True)
    )
    mem = "" if math.isnan(peak) else f"  peak {peak:8.0f} MB"
    return (
        f"  {kind:<14} {med * 1e3:9.2f} ms/step  {speed}{mem}  cold compile {cold:6.2f} s"
        f"  losses {'match' if match else 'DIFFER'} ({', '.join(f'{x:.4f}' for x in losses)})"
    ) + (f"\n  {'':<14} {prof}" if prof else "")


def worker(rank, args, init):
    device = torch.device("cuda", rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // args.nprocs))
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=init,
        rank=rank,
        world_size=args.nprocs,
        timeout=datetime.timedelta(minutes=10),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    size = "tiny" if args.tiny else "full"
    tables = []
    if "ddp" in args.only:
        name = f"DDP GPT-2 ({size}) {'bf16 autocast ' if device.type == 'cuda' else ''}per rank"
        tables.append((name, ddp_rows(args, device, rank)))
    if "fsdp" in args.only:
        layers = 2 if args.tiny else args.fsdp_layers
        tables.append(
            (f"FSDP2 Llama-style ({size}, {layers} layers)", fsdp_rows(args, device, rank))
        )
    if rank == 0:
        print(f"torch {torch.__version__}, {args.nprocs} x {device.type}, steps {args.steps}")
        for name, res in tables:
            print(name)
            for kind, r in res.items():
                print(_fmt(kind, r, res.get("eager")), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--only", default="ddp,fsdp")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--tiny", action="store_true", help="CPU smoke-test sizes")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--fsdp-layers", type=int, default=24)
    p.add_argument("--fsdp-batch", type=int, default=8)
    p.add_argument(
        "--profile", action="store_true", help="also print kernel time, communication, launches"
    )
    args = p.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    args.kinds = [
        k for k in args.kinds.split(",") if not (args.no_inductor and k == "torch.compile")
    ]
    if args.device == "cuda" and torch.cuda.device_count() < args.nprocs:
        sys.exit(f"needs {args.nprocs} CUDA GPUs, found {torch.cuda.device_count()}")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NOTE: NVLink multicast off
    init = f"tcp://127.0.0.1:{_free_port()}"
    mp.spawn(worker, args=(args, init), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
