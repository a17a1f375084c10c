"""Per-call overhead and capture time: eager vs torchlite vs torch.compile(backend="eager").

One process, CPU, under two minutes:
  (a) a two-op function on an 8-element tensor and (b) a four-input function (b2: under
      no_grad(), b3: writing an argument in place): the median per-call time of many timed
      batches after warmup, i.e. the cost of the compiled-call path;
  (d) a tiny pre-norm transformer block (layer norms, linears, SDPA, GELU, residuals) under
      no_grad, where host time dominates: per-call time of eager, torchlite and torch.compile
      (inductor, default mode) on --device (on CUDA each batch of calls ends in a synchronize);
  (e) a tiny GPT-2 (transformers, 12 layers, n_embd 64, 1x8 tokens) called with use_cache=True
      (it returns a DynamicCache of 24 key/value tensors) and use_cache=False, in that order on
      one compiled model: per-call time of eager, torchlite and torch.compile, and torchlite's
      kernel launches and torch ops per call (the ops a TorchDispatchMode sees);
  (c) the first call of resnet18 (timm; a local ResNet-18 when timm cannot be imported):
      capture (+ one forward) from a cold cache, torchlite.reset() / torch._dynamo.reset() before.

    python bench/overhead.py [--samples 200] [--inner 50] [--device cpu|cuda] [--only-block]
                             [--only-gpt2]
"""

import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchlite


def two_ops(x):
    return (x * 2 + 1).relu()


def four_inputs(a, b, c, d):
    return (a + b) * c - d


def four_inputs_in_place(a, b, c, d):
    a.copy_(b)  # NOTE: a graph that writes an argument guards how its inputs share storage
    return a * c - d


def four_inputs_no_grad(a, b, c, d):
    with torch.no_grad():
        return (a + b) * c - d


class TinyBlock(nn.Module):
    """A pre-norm transformer block at sizes where each op takes about as long to call as to
    compute: 6 extern ops (4 linears, SDPA, the output projection) with fused kernels between."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def per_call_us(fn, args, samples: int, inner: int, budget_s: float = 2.0, sync=None) -> float:
    """Median over timed batches of `inner` calls, in microseconds per call.

    NOTE: batches, not single calls, so the timer's own cost is negligible; fewer batches
    when the call is slow, so the whole run stays within its time budget.
    """
    start = time.perf_counter_ns()
    for _ in range(100):
        fn(*args)
    est_s = (time.perf_counter_ns() - start) / 1e9 / 100
    inner = max(1, min(inner, int(budget_s / 5 / est_s)))
    samples = max(5, min(samples, int(budget_s / (est_s * inner))))
    times = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn(*args)
        if sync:
            sync()
        times.append((time.perf_counter_ns() - start) / inner)
    return statistics.median(times) / 1e3


def basic_block(c_in, c_out, stride):
    body = nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
        nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
        nn.BatchNorm2d(c_out),
    )
    down = None
    if stride != 1 or c_in != c_out:
        down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
    return body, down


class Block(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.body, self.down = basic_block(c_in, c_out, stride)

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return torch.relu(self.body(x) + skip)


class LocalResNet18(nn.Module):
    """torchvision/timm ResNet-18 layout, for machines where timm does not import."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        widths, layers, c_in = (64, 128, 256, 512), [], 64
        for i, w in enumerate(widths):
            layers += [Block(c_in, w, 1 if i == 0 else 2), Block(w, w, 1)]
            c_in = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18() -> tuple[nn.Module, str]:
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        from torchvision_compat import work_around_mismatched_torchvision

        work_around_mismatched_torchvision()  # a CUDA torchvision next to a CPU-only torch
        import timm

        return timm.create_model("resnet18", pretrained=False), "timm resnet18"
    except (ImportError, RuntimeError) as e:  # NOTE: a broken torchvision raises RuntimeError
        return LocalResNet18(), f"local ResNet-18 (timm failed: {type(e).__name__})"


def first_call_s(fn, args) -> float:
    start = time.perf_counter_ns()
    with torch.no_grad():
        fn(*args)
    return (time.perf_counter_ns() - start) / 1e9


def row(name, unit, eager, tl, tc):
    ratio = (lambda v: f"{v / eager:8.2f}x") if eager else (lambda v: "       -")
    e = f"{eager:12.2f}" if eager else f"{'-':>12}"
    print(f"{name:34} {unit:8} {e} {tl:12.2f} {tc:14.2f} {ratio(tl)} {ratio(tc)}  {tc / tl:8.2f}x")


def block_case(a) -> None:
    """(d): the tiny block at two sizes, compiled outputs checked against eager first."""
    sync = torch.cuda.synchronize if a.device == "cuda" else None
    for batch, seq in ((1, 16), (4, 64)):
        model = TinyBlock().to(a.device).eval()
        x = torch.randn(batch, seq, 64, device=a.device)
        with torch.no_grad():
            torchlite.reset()
            torch._dynamo.reset()
            fns = [model, torchlite.compile(model), torch.compile(model)]
            want = model(x)
            for f in fns[1:]:
                torch.testing.assert_close(f(x), want, rtol=1e-4, atol=1e-4)
            us = [per_call_us(f, (x,), a.samples, a.inner, sync=sync) for f in fns]
        row(f"(d) tiny block {batch}x{seq}x64, {a.device}", "us/call", *us)


class _CountOps(TorchDispatchMode):
    _torchlite_transparent_mode = True  # NOTE: else the compiled frame runs eagerly under a mode

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def gpt2_case(a) -> None:
    """(e): use_cache=True then False on one compiled tiny GPT-2, checked against eager first."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        from torchvision_compat import work_around_mismatched_torchvision

        work_around_mismatched_torchvision()
        import transformers
    except (ImportError, RuntimeError) as e:
        print(f"(e) skipped: transformers failed ({type(e).__name__})")
        return
    sync = torch.cuda.synchronize if a.device == "cuda" else None
    cfg = transformers.GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=512, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).to(a.device).eval()
    ids = torch.randint(0, 512, (1, 8), device=a.device)
    torchlite.reset()
    torch._dynamo.reset()
    fns = [model, torchlite.compile(model), torch.compile(model)]
    with torch.no_grad():
        for use_cache in (True, False):
            want = model(ids, use_cache=use_cache).logits
            for f in fns[1:]:
                torch.testing.assert_close(f(ids, use_cache=use_cache).logits, want)
        for use_cache in (True, False):
            us = [
                per_call_us(
                    lambda f=f, u=use_cache: f(ids, use_cache=u), (), a.samples, a.inner, sync=sync
                )
                for f in fns
            ]
            row(f"(e) tiny GPT-2 use_cache={use_cache}", "us/call", *us)
            before = torchlite.counters()["kernel_launches"]
            fns[1](ids, use_cache=use_cache)
            launches = torchlite.counters()["kernel_launches"] - before
            with _CountOps() as count:
                fns[1](ids, use_cache=use_cache)
            print(f"    torchlite: {launches} kernel launches, {count.ops} torch ops a call")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--inner", type=int, default=50)
    p.add_argument("--skip-model", action="store_true")
    p.add_argument("--device", default="cpu", help="device of the block case (d)")
    p.add_argument("--only-block", action="store_true", help="only the block case (d)")
    p.add_argument("--only-gpt2", action="store_true", help="only the GPT-2 case (e)")
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print(
        f"{'case':34} {'unit':8} {'eager':>12} {'torchlite':>12} {'torch.compile':>14} "
        f"{'tl/eager':>9} {'tc/eager':>9}  {'tc/tl':>9}"
    )
    cases = [
        ("(a) (x * 2 + 1).relu(), 8 elems", two_ops, (torch.randn(8),)),
        ("(b) (a + b) * c - d, 4 inputs", four_inputs, tuple(torch.randn(8) for _ in range(4))),
        ("(b2) (b) under no_grad()", four_inputs_no_grad, tuple(torch.randn(8) for _ in range(4))),
        (
            "(b3) a.copy_(b); a * c - d",
            four_inputs_in_place,
            tuple(torch.randn(8) for _ in range(4)),
        ),
    ]
    if a.only_gpt2:
        gpt2_case(a)
        return
    for name, fn, args in [] if a.only_block else cases:
        eager = per_call_us(fn, args, a.samples, a.inner)
        tl = per_call_us(torchlite.compile(fn), args, a.samples, a.inner)
        torch._dynamo.reset()
        tc = per_call_us(torch.compile(fn, backend="eager"), args, a.samples, a.inner)
        row(name, "us/call", eager, tl, tc)
    block_case(a)
    if not a.only_block:
        gpt2_case(a)
    if a.skip_model or a.only_block:
        return
    model, label = resnet18()
    model.eval()
    x = (torch.randn(1, 3, 224, 224),)
    torchlite.reset()
    torchlite.reset_counters()
    tl = first_call_s(torchlite.compile(model), x)
    c = torchlite.counters()
    torch._dynamo.reset()
    tc = first_call_s(torch.compile(model, backend="eager"), x)
    eager = first_call_s(model, x)
    row("(c) resnet18, first call", "s", eager, tl, tc)
    print(
        f"    {label}; torchlite: {c['graphs']} graph(s), {c['graph_breaks']} break(s), "
        f"capture {c['capture_ns'] / 1e9:.2f} s"
    )


if __name__ == "__main__":
    main()
