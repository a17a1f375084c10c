"""Distributed cases run by worker.py on every rank: eager DDP/FSDP against torchlite's.

Each case trains an eager copy and a compiled copy of the same model side by side on the same
per-rank batches for a few optimizer steps, asserting on every step that the losses, every
(all-reduced or reduce-scattered) gradient and, after the step, every parameter are equal.
It returns a small JSON-able dict of what the test module asserts on besides.
"""

from __future__ import annotations

import copy
import itertools

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torchlite
from torchlite import _ddp_buckets

VOCAB = 32


def device() -> torch.device:
    """cuda:<rank> under NCCL, else the CPU (gloo)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", dist.get_rank())
    return torch.device("cpu")


def _fsdp_mesh():
    """The mesh fully_shard shards over: the CPU under gloo (fully_shard's default is the GPU's
    mesh whenever one is visible, which put a gloo run's parameters on cuda)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device().type, (dist.get_world_size(),))


def _ddp(module: torch.nn.Module, **kwargs) -> DDP:
    if device().type == "cuda":
        kwargs.setdefault("device_ids", [device().index])
    return DDP(module, **kwargs)


class Block(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyTransformer(torch.nn.Module):
    def __init__(self, d: int = 16, layers: int = 2) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.blocks = torch.nn.Sequential(*[Block(d) for _ in range(layers)])
        self.head = torch.nn.Linear(d, VOCAB)

    def forward(self, idx):
        return self.head(self.blocks(self.emb(idx)))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
        )
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.features(x))


def _batches(model: str, steps: int, dtype: torch.dtype) -> list[tuple]:
    """Per-rank batches (each rank trains on different data): (input, target)."""
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    if model == "transformer":
        batches = [
            (idx, idx.roll(-1, 1).flatten())
            for idx in (torch.randint(0, VOCAB, (2, 8), generator=g) for _ in range(steps))
        ]
    else:
        batches = [
            (
                torch.randn(4, 3, 8, 8, generator=g, dtype=dtype),
                torch.randint(0, 10, (4,), generator=g),
            )
            for _ in range(steps)
        ]
    return [(x.to(device()), t.to(device())) for x, t in batches]


def _model(name: str, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    model = TinyTransformer() if name == "transformer" else ConvNet()
    return model.to(device=device(), dtype=dtype)


def _optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target)


def _grad(p: torch.Tensor) -> torch.Tensor:
    g = p.grad
    return g.full_tensor() if hasattr(g, "full_tensor") else g


def _value(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def _close(actual, expected, what: str) -> None:
    torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}")


def _same_on_every_rank(t: torch.Tensor, what: str) -> None:
    """The gradient was synchronised: rank 0's copy equals every other rank's."""
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t.contiguous())
    for r, other in enumerate(gathered):
        _close(other, gathered[0], f"{what}, rank {r}")


def _check_step(step: int, eager: torch.nn.Module, mine: torch.nn.Module, sync: bool) -> None:
    named = dict(mine.named_parameters())
    for name, p in eager.named_parameters():
        q = named[name]
        where = f"step {step}, {name}"
        _close(_grad(q), _grad(p), f"gradient, {where}")
        if sync:
            _same_on_every_rank(_grad(q), f"gradient, {where}")


def _check_state(step: int, eager: torch.nn.Module, mine: torch.nn.Module) -> None:
    mine_state = mine.state_dict()
    for name, v in eager.state_dict().items():
        _close(_value(mine_state[name]), _value(v), f"after step {step}, {name}")


def _train(eager, ref, compiled, mine, opt_name, batches, *, no_sync_steps=(), before_step=None):
    """Steps both models: `eager` trains `ref`'s parameters, `compiled` trains `mine`'s."""
    opt_e, opt_c = _optimizer(opt_name, ref.parameters()), _optimizer(opt_name, mine.parameters())
    info = {"compiled_backward_used": False, "losses": []}
    counters = torchlite.counters()
    for step, (x, target) in enumerate(batches):
        if before_step is not None:
            before_step(step)
        sync = step not in no_sync_steps
        ctx_e = eager.no_sync() if not sync else torch.enable_grad()
        ctx_c = compiled.no_sync() if not sync else torch.enable_grad()
        with ctx_e:
            loss_e = _loss(eager(x), target)
            loss_e.backward()
        with ctx_c:
            out = compiled(x)
            info["compiled_backward_used"] |= "CompiledTraining" in type(out.grad_fn).__name__
            loss_c = _loss(out, target)
            loss_c.backward()
        _close(loss_c, loss_e, f"loss, step {step}")
        info["losses"].append(loss_c.item())
        _check_step(step, ref, mine, sync)
        if sync:
            opt_e.step()
            opt_c.step()
            opt_e.zero_grad()
            opt_c.zero_grad()
            _check_state(step, ref, mine)
    info.update({k: v - counters[k] for k, v in torchlite.counters().items()})
    return info


def ddp_parity(
    model: str,
    form: str,
    compiled_backward: bool,
    optimizer: str = "sgd",
    dtype: str = "float32",
    steps: int = 3,
    ddp_kwargs: dict | None = None,
    no_sync_steps: tuple = (),
) -> dict:
    """form "ddp_of_compiled": DDP(torchlite.compile(m)); "compiled_ddp": torchlite.compile(DDP(m))."""
    dt = getattr(torch, dtype)
    base = _model(model, dt)
    kw = ddp_kwargs or {}
    eager = _ddp(copy.deepcopy(base), **kw)
    opts = {"compiled_backward": compiled_backward}
    mine = copy.deepcopy(base)
    if form == "ddp_of_compiled":
        compiled = _ddp(torchlite.compile(mine, options=opts), **kw)
    else:
        compiled = torchlite.compile(_ddp(mine, **kw), options=opts)
    batches = _batches(model, steps, dt)
    with _ddp_buckets.recording() as splits:
        info = _train(
            eager, eager.module, compiled, mine, optimizer, batches, no_sync_steps=no_sync_steps
        )
    info["pieces"] = [len(s.pieces) for s in splits]
    info["all_pieces_compiled"] = all(p[3] for s in splits for p in s.pieces)
    return info


def ddp_overlap(compiled_backward: bool, steps: int = 2) -> dict:
    """torchlite.compile(DDP(m)) with small buckets: the comm hook runs once per bucket and
    the last layers' bucket is all-reduced before the first layer's gradient exists (overlap).
    Returns the bucket count, the splits explain shows and the events of the last step."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    base = _model("transformer", torch.float64)
    kw = {"bucket_cap_mb": 0.004}
    eager = _ddp(copy.deepcopy(base), **kw)
    mine = copy.deepcopy(base)
    ddp = _ddp(mine, **kw)
    events: list = []

    def hook(state, bucket):
        events.append(f"allreduce {bucket.index()}")
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    mine.emb.weight.register_hook(lambda g: events.append("gradient of emb.weight"))
    compiled = torchlite.compile(ddp, options={"compiled_backward": compiled_backward})
    batches = _batches("transformer", steps, torch.float64)
    with _ddp_buckets.recording() as splits:
        info = _train(
            eager,
            eager.module,
            compiled,
            mine,
            "adamw",
            batches,
            before_step=lambda _: events.clear(),
        )
    info["pieces"] = [len(s.pieces) for s in splits]
    info["all_pieces_compiled"] = all(p[3] for s in splits for p in s.pieces)
    info["events"] = events
    config = torchlite.config.compiled_backward
    torchlite.config.compiled_backward = compiled_backward
    try:
        info["explain"] = str(torchlite.explain(ddp)(batches[0][0]))
    finally:
        torchlite.config.compiled_backward = config
    return info


def fsdp_parity(compile_what: str, compiled_backward: bool, steps: int = 3) -> dict:
    """FSDP2 (fully_shard per block, then the root) of the tiny transformer, eager against
    torchlite.compile of the root module ("root") or of each block ("blocks"). Returns the
    counters after the first step and after the last (graphs captured later would mean the
    gathered parameters changed the guards)."""
    from torch.distributed.fsdp import fully_shard

    def shard(model):
        mesh = _fsdp_mesh()
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    base = _model("transformer", torch.float64)
    ref = shard(copy.deepcopy(base))
    mine = shard(copy.deepcopy(base))
    opts = {"compiled_backward": compiled_backward}
    if compile_what == "root":
        compiled = torchlite.compile(mine, options=opts)
    else:
        for i, block in enumerate(mine.blocks):
            mine.blocks[i] = torchlite.compile(block, options=opts)
        compiled = mine
    graphs_after: list = []
    batches = _batches("transformer", steps, torch.float64)
    info = _train(
        ref,
        ref,
        compiled,
        mine,
        "adamw",
        batches,
        before_step=lambda _: graphs_after.append(torchlite.counters()["graphs"]),
    )
    graphs_after.append(torchlite.counters()["graphs"])
    info["graphs_per_step"] = [b - a for a, b in itertools.pairwise(graphs_after)]
    info["sharded"] = all(hasattr(p, "full_tensor") for p in mine.parameters())
    return info


def fsdp_saved_values(steps: int = 2) -> dict:
    """FSDP2 with each block compiled (compiled backward): what the compiled blocks keep from
    forward to backward. FSDP frees a block's gathered parameters after its forward (their
    storage resized to 0) and gathers them again for its backward, so a compiled block must save
    a parameter by reference: a copy (a transposed or padded weight, a cast) would keep the
    gathered size alive per block until backward. Returns, over the compiled blocks' saved
    tensors after a forward: how many alias a gathered parameter, the bytes those still hold,
    and how many hold a parameter's values (or its transpose's) without aliasing it."""
    from torch.distributed.fsdp import fully_shard
    from torch.multiprocessing.reductions import StorageWeakRef

    model = _model("transformer", torch.float32)
    mesh = _fsdp_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    groups = [block._get_fsdp_state()._fsdp_param_group for block in model.blocks]
    for i, block in enumerate(model.blocks):
        model.blocks[i] = torchlite.compile(block, options={"compiled_backward": True})
    opt = _optimizer("adamw", model.parameters())
    batches = _batches("transformer", steps + 1, torch.float32)
    for x, target in batches[:steps]:
        _loss(model(x), target).backward()
        opt.step()
        opt.zero_grad()
    params = [fp for g in groups for fp in g.fsdp_params]
    gathered = {StorageWeakRef(fp._unsharded_param.untyped_storage()) for fp in params}
    x, target = batches[steps]
    loss = _loss(model(x), target)
    full = [fp.sharded_param.full_tensor().detach() for fp in params]  # NOTE: a collective
    saved, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if "CompiledTraining" in type(fn).__name__:
            saved += [t for t in fn.saved_tensors if isinstance(t, torch.Tensor)]
        stack += [f for f, _ in fn.next_functions]
    aliased = [t for t in saved if StorageWeakRef(t.untyped_storage()) in gathered]
    others = [t for t in saved if StorageWeakRef(t.untyped_storage()) not in gathered]

    def holds(t, w):
        return any(
            t.shape == v.shape and torch.equal(t, v) for v in ([w, w.T] if w.dim() == 2 else [w])
        )

    copies = sum(1 for t in others if any(holds(t, w) for w in full))
    loss.backward()
    opt.zero_grad()
    return {
        "saved": len(saved),
        "aliased": len(aliased),
        "aliased_bytes": sum(t.untyped_storage().nbytes() for t in aliased),
        "copies": copies,
    }
