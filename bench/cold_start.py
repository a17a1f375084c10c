"""Cold start: the first call of a fresh process, eager vs torchlite vs torch.compile.

Each case runs in its own process (empty torchlite and inductor disk caches). The clock starts
after `import torch`, torchlite and the model's library are imported and the model and inputs
are built, and stops when the first (compiling) call returns. `dynamo` says whether
`torch._dynamo` was imported by then: importing it alone costs seconds, and torchlite's capture
no longer needs it for the ops it infers in C++ (capture/fast_meta*.cpp).

    python bench/cold_start.py [--cases pointwise,mlp,bert,resnet18] [--modes eager,torchlite]
                               [--warm]

--warm also runs torchlite a second time on the first run's disk cache.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = ["pointwise", "mlp", "bert", "resnet18"]
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
    if case == "resnet18":
        import timm

        return timm.create_model("resnet18", pretrained=False).eval(), (torch.randn(1, 3, 64, 64),)
    raise ValueError(case)


def child(case, mode):
    import time

    import torch

    import torchlite

    model, args = build(case)
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
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "dynamo_before": dynamo_before,
                "dynamo_after": "torch._dynamo" in sys.modules,
            }
        )
    )


def run(case, mode, cache):
    env = dict(os.environ, TORCHLITE_CACHE_DIR=os.path.join(cache, "torchlite"))
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    env.setdefault("HF_HUB_OFFLINE", "1")
    out = subprocess.run(
        [sys.executable, __file__, "--child", case, mode],
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
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "MODE"))
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    print(f"{'case':<10} {'mode':<16} {'first call s':>12}  torch._dynamo imported (before/after)")
    for case in a.cases.split(","):
        with tempfile.TemporaryDirectory(prefix="tl_cold_") as cache:
            modes = a.modes.split(",") + (["torchlite (warm)"] if a.warm else [])
            for mode in modes:
                r = run(case, mode.replace(" (warm)", ""), cache)
                if "error" in r:
                    print(f"{case:<10} {mode:<16} {'error':>12}  {r['error'][:80]}")
                    continue
                flags = f"{r['dynamo_before']}/{r['dynamo_after']}"
                print(f"{case:<10} {mode:<16} {r['seconds']:12.3f}  {flags}")


if __name__ == "__main__":
    main()
