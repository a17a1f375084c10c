"""Cold start: the first call of a fresh process, eager vs torchlite vs torch.compile.

Each case runs in its own process (empty torchlite and inductor disk caches). The clock starts
after `import torch`; it covers `import torchlite` (for the compiled modes) and the first
(compiling) call, and excludes building the model and its inputs (the model's library import
included). `dynamo` says whether `torch._dynamo` was imported by then: importing it alone costs
seconds, and torchlite's capture no longer needs it for the ops it infers in C++
(capture/fast_meta*.cpp).

    python bench/cold_start.py [--cases pointwise,mlp,bert,resnet18,resnet50] [--device cuda]
                               [--modes eager,torchlite,torch.compile] [--warm] [--breakdown]

--warm also runs torchlite a second time on the first run's disk cache. --breakdown runs
torchlite once more under TORCHLITE_TRACE and sums its timings over the graphs: capture, each
pass, building the kernels (code generation, compile, link); "rest" is the remainder of the
first call (guards, the run itself, extern ops' own first-call set-up such as cuDNN handles).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = ["pointwise", "mlp", "bert", "resnet18", "resnet50"]
MODES = ["eager", "torchlite", "torch.compile"]


def build(case):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
    import conftest  # noqa: F401  (lets timm and transformers import next to a CPU-only torch)
    import torch
    import torch.nn.functional as F

    if case == "pointwise":

        def fn(x):
            return torch.sigmoid(x * 2 + 1) * x - torch.tanh(x)

        return fn, (torch.randn(1024, 64),)
    if case == "mlp":

        class MLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(64)
                self.up = torch.nn.Linear(64, 256)
                self.down = torch.nn.Linear(256, 64)

            def forward(self, x):
                return x + self.down(F.gelu(self.up(self.norm(x))))

        return MLP().eval(), (torch.randn(8, 16, 64),)
    if case == "bert":
        import transformers

        cfg = transformers.BertConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            vocab_size=1000,
        )
        return transformers.BertModel(cfg).eval(), (torch.randint(0, 1000, (2, 16)),)
    if case in ("resnet18", "resnet50"):
        try:
            import timm

            model = timm.create_model(case, pretrained=False)
        except ImportError:  # NOTE: torchvision's, where timm is not installed
            import torchvision

            model = getattr(torchvision.models, case)()
        return model.eval(), (torch.randn(1, 3, 64, 64),)
    raise ValueError(case)


def on_device(model, args, device):
    if device == "cpu":
        return model, args
    import torch

    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    return model, tuple(a.to(device) for a in args)


def child(case, mode, device):
    import time

    import torch

    start = time.perf_counter()
    if mode != "eager":
        import torchlite
    imported = time.perf_counter() - start
    model, args = on_device(*build(case), device)
    if device == "cuda":
        torch.cuda.synchronize()
    dynamo_before = "torch._dynamo" in sys.modules
    start = time.perf_counter()
    if mode == "torchlite":
        fn = torchlite.compile(model)
    elif mode == "torch.compile":
        fn = torch.compile(model)
    else:
        fn = model
    with torch.no_grad():
        fn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start + imported
    print(
        json.dumps(
            {
                "seconds": seconds,
                "import": imported,
                "dynamo_before": dynamo_before,
                "dynamo_after": "torch._dynamo" in sys.modules,
            }
        )
    )


def breakdown(trace_dir):
    """Milliseconds by phase, summed over the graphs of a traced run."""
    import glob
    import pathlib
    import re

    out = {"capture": 0.0, "kernels": 0.0}
    for path in glob.glob(os.path.join(trace_dir, "run-*", "*", "capture.txt")):
        m = re.search(r"capture_ms: ([0-9.]+)", pathlib.Path(path).read_text())
        out["capture"] += float(m.group(1)) if m else 0.0
    for path in glob.glob(os.path.join(trace_dir, "run-*", "*", "pipeline.txt")):
        for line in pathlib.Path(path).read_text().splitlines():
            m = re.match(r"\s+\d+_torchlite\.(\w+)\.txt: ran \(([0-9.]+) ms\)", line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
            m = re.match(r"kernels: \d+ built in ([0-9.]+) ms", line)
            if m:
                out["kernels"] += float(m.group(1))
    return out


def run(case, mode, cache, device, trace_dir=None):
    env = dict(os.environ, TORCHLITE_CACHE_DIR=os.path.join(cache, "torchlite"))
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    env.setdefault("HF_HUB_OFFLINE", "1")
    if trace_dir:
        env.update(TORCHLITE_TRACE="1", TORCHLITE_DEBUG_DIR=trace_dir)
    out = subprocess.run(
        [sys.executable, __file__, "--child", case, mode, device],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "MODE", "DEVICE"))
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    print(f"device {a.device}")
    print(
        f"{'case':<10} {'mode':<16} {'first call s':>12} {'import s':>9}  torch._dynamo (before/after)"
    )
    for case in a.cases.split(","):
        with tempfile.TemporaryDirectory(prefix="tl_cold_") as cache:
            modes = a.modes.split(",") + (["torchlite (warm)"] if a.warm else [])
            for mode in modes:
                r = run(case, mode.replace(" (warm)", ""), cache, a.device)
                if "error" in r:
                    print(f"{case:<10} {mode:<16} {'error':>12}  {r['error'][:80]}")
                    continue
                flags = f"{r['dynamo_before']}/{r['dynamo_after']}"
                print(f"{case:<10} {mode:<16} {r['seconds']:12.3f} {r['import']:9.3f}  {flags}")
        if not a.breakdown:
            continue
        with tempfile.TemporaryDirectory(prefix="tl_cold_") as cache:
            trace_dir = os.path.join(cache, "trace")
            r = run(case, "torchlite", cache, a.device, trace_dir)
            if "error" in r:
                print(f"{case:<10} breakdown error: {r['error'][:80]}")
                continue
            ms = breakdown(trace_dir)
            ms["import"] = r["import"] * 1e3
            ms["rest"] = r["seconds"] * 1e3 - sum(ms.values())
            parts = ", ".join(f"{k} {v:.0f}" for k, v in ms.items() if v >= 0.5)
            print(f"{case:<10} traced {r['seconds']:.3f} s = {parts} (ms)")


if __name__ == "__main__":
    main()
