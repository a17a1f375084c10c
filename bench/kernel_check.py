"""No kernel slower than eager's: times every kernel torchlite generates for a program against
the eager ops it replaces, on the same inputs, and reports each kernel that loses, with its IR.

Each captured graph goes through a checking backend: the graph is partitioned as torchlite
partitions it, every fused kernel's member ops become a GraphModule of their own (inputs: the
values the kernel reads, recorded from one eager run of the whole graph), and that module is
timed eagerly and compiled by torchlite (the same pipeline, so the same kernel), in turns.

    python bench/kernel_check.py [--device cuda|cpu] [--quick] [--tolerance 1.05] [--only NAME]

Exits with status 1 when a kernel is slower than its eager ops by more than --tolerance. From
Python: `check_kernels(fn, args)` returns the rows (used by bench/gpu.py --kernel-check).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from timing import cuda_ms
from torch import fx

import torchlite
from torchlite import _C

BF16 = torch.bfloat16


def _ms(fn, args, cuda, iters):
    if cuda:
        return cuda_ms(fn, args, iters)
    t = time.perf_counter()
    for _ in range(iters):
        fn(*args)
    return (time.perf_counter() - t) * 1e3 / iters


def timed_pair(a, b, args, cuda, rounds=5, iters=10):
    """Median ms of `a` and `b`, sampled in turns (the host's speed drifts)."""
    for fn in (a, b):
        for _ in range(2):
            fn(*args)
    sa, sb = [], []
    for _ in range(rounds):
        sa.append(_ms(a, args, cuda, iters))
        sb.append(_ms(b, args, cuda, iters))
    return statistics.median(sa), statistics.median(sb)


class _Recorder(fx.Interpreter):
    """Runs a GraphModule eagerly and keeps every node's value."""

    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def _subgraph(gm, members, values):
    """The member nodes of one kernel as a GraphModule over the values they read from outside."""
    keep = set(members)
    g, env, inputs = fx.Graph(), {}, []
    ordered = [n for n in gm.graph.nodes if n.name in keep and n.op != "output"]
    for n in ordered:
        for i in n.all_input_nodes:
            if i.name not in keep and i.name not in env:
                env[i.name] = g.placeholder(f"in_{len(inputs)}")
                inputs.append(values[i.name])
                # NOTE: real values as examples: the meta tensors of torchlite's own export
                # report the meta device, on which no kernel is compiled.
                env[i.name].meta = {"example_value": values[i.name]}
        env[n.name] = g.node_copy(n, lambda a: env[a.name])
        env[n.name].meta = {"example_value": values[n.name]}
    outs = [env[n.name] for n in ordered if any(u.name not in keep for u in n.users)]
    g.output(tuple(outs))
    return fx.GraphModule(gm, g), inputs


def _check_graph(gm, example_inputs, rows):
    graph, _ = _C.graph_from_fx(gm)
    summary = _C.partition_summary(graph)
    # NOTE: the torchlite graph names nodes by target, fx by unique name: calls match in order.
    calls = ("call_function", "call_method")
    fx_calls = [n.name for n in gm.graph.nodes if n.op in calls]
    tl_calls = [n["name"] for n in graph.nodes() if n["op"] in calls]
    to_fx = dict(zip(tl_calls, fx_calls))
    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*example_inputs)
    for ir, members in zip(summary["kernels"], summary["members"]):
        sub, inputs = _subgraph(gm, [to_fx.get(m, m) for m in members], rec.values)
        if not inputs or not any(isinstance(v, torch.Tensor) for v in inputs):
            continue
        cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs)
        sub_graph, extras = _C.graph_from_fx(sub)
        compiled = _C.FxCompiled(sub_graph, extras)
        with torch.no_grad():
            eager_ms, kernel_ms = timed_pair(sub, compiled, inputs, cuda)
        rows.append(
            {
                "kernel": ir.splitlines()[0].split(" reduce")[0].removeprefix("kernel "),
                "ops": len(members),
                "eager_ms": eager_ms,
                "kernel_ms": kernel_ms,
                "kernels": compiled.kernel_count,
                "ir": ir,
            }
        )


def check_kernels(fn, args):
    """Rows (kernel, ops, eager_ms, kernel_ms, kernels, ir), one per generated kernel of `fn`."""
    rows = []

    def backend(gm, example_inputs):
        _check_graph(gm, example_inputs, rows)
        return gm

    torchlite.reset()
    with torch.no_grad():
        torchlite.compile(fn, backend=backend)(*args)
    torchlite.reset()
    return rows


def report(name, rows, tolerance, out=sys.stdout):
    """Prints the rows; returns the losers (kernel_ms > tolerance x eager_ms)."""
    losers = []
    for r in rows:
        ratio = r["eager_ms"] / r["kernel_ms"] if r["kernel_ms"] > 0 else float("inf")
        flag = "LOSES" if r["kernel_ms"] > tolerance * r["eager_ms"] else ""
        if r["kernels"] == 0:
            flag = "NOT COMPILED (ran op by op)"
        print(
            f"{name:24s} {r['kernel']:44s} {r['ops']:3d} ops  eager {r['eager_ms']:8.4f} ms  "
            f"kernel {r['kernel_ms']:8.4f} ms  {ratio:5.2f}x {flag}",
            file=out,
        )
        if flag:
            losers.append(r)
    for r in losers:
        print(f"# {name}: {r['kernel']} loses to eager; its IR:\n{r['ir']}", file=out)
    return losers


def _cases(device, quick):
    dt = BF16 if device == "cuda" else torch.float32
    n = 8 if quick or device == "cpu" else 64
    hw = 28 if quick or device == "cpu" else 112

    def cl(*shape):
        return torch.randn(*shape, device=device, dtype=dt).to(memory_format=torch.channels_last)

    def se_pool(x):
        return F.silu(x).mean((2, 3), keepdim=True)

    def bn_stats(x):
        v, m = torch.var_mean(x, (0, 2, 3), keepdim=True, correction=0)
        return F.silu((x - m) * torch.rsqrt(v + 1e-5))

    def ln(x):
        return F.layer_norm(x, x.shape[-1:])

    rows = 4096 if device == "cuda" else 256
    yield "se_pool_cl", se_pool, (cl(n, 32, hw, hw),)
    yield "bn_stats_silu_cl", bn_stats, (cl(n, 32, hw, hw),)
    yield "column_sum", lambda x: x.sum(0), (torch.randn(rows * 8, 64, device=device, dtype=dt),)
    yield "layer_norm", ln, (torch.randn(rows, 1024, device=device, dtype=dt),)
    yield "softmax", lambda x: torch.softmax(x, -1), (torch.randn(rows, 2048, device=device),)
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        from torchvision_compat import work_around_mismatched_torchvision

        work_around_mismatched_torchvision()
        import timm

        for model in ("efficientnet_b0", "mobilenetv3_large_100"):
            m = timm.create_model(model, pretrained=False).eval().to(device, dt)
            m = m.to(memory_format=torch.channels_last)
            yield (
                model,
                m,
                (cl(n, 3, 224 if device == "cuda" else 64, 224 if device == "cuda" else 64),),
            )
    except Exception as e:  # noqa: BLE001 - optional models
        print(f"# timm models skipped: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tolerance", type=float, default=1.05)
    p.add_argument("--only")
    a = p.parse_args()
    losers = []
    for name, fn, args in _cases(a.device, a.quick):
        if a.only and a.only != name:
            continue
        losers += report(name, check_kernels(fn, args), a.tolerance)
    print(f"# {len(losers)} kernel(s) slower than their eager ops (tolerance {a.tolerance}x)")
    return 1 if losers else 0


if __name__ == "__main__":
    sys.exit(main())
