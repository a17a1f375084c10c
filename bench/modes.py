"""torch.compile's modes side by side: eager, torchlite and torch.compile for `default`,
`reduce-overhead` (CUDA graphs) and `max-autotune`, one process, one CUDA GPU.

Per row: step time (median of timed batches after warm-up; "1-step ms": the median of single
calls synchronised on both sides), peak memory allocated and
reserved during the timed steps, and compile time (the first three calls: capture, compile,
warm-up and, with CUDA graphs, recording). Models have random weights, in bf16:
GPT-2 small (transformers) at 1x32 and 8x512 tokens, resnet50 (timm) at batch 1 and 64, and a
training step of BERT-base MLM at 8x128 tokens (forward, loss.backward(), AdamW; torchlite with
the compiled backward, whose forward and backward CUDA graphs record; dropout off, as random
ops are not recorded; rel err compares the first step's loss with eager's).

    python bench/modes.py [--models gpt2-1x32,resnet50-64] [--modes default,reduce-overhead]
                          [--impls eager,torchlite,torch] [--in-process] [--budget-s 300]
                          [--torch-max-autotune-s 240] [--torch-max-share 0.5]
                          [--step-budget-s 3] [--rounds 3]

Rows run cheapest first: eager and torchlite for every model, then torch.compile's default
and reduce-overhead, then torch.compile's max-autotune (it benchmarks Triton configurations
for minutes per model). With --budget-s, rows not started within it print "skipped
(budget)"; --torch-max-share of it (default half) is kept for torch.compile's max-autotune
rows, which split what is left of it evenly, so every model gets one (a step time, or
"compile > N s" where its compile took longer than its share; a share under 30 s is skipped). torch.compile's
max-autotune always runs in its own process (and process group: its compile workers are
stopped with it), stopped after --torch-max-autotune-s or its share (0: skipped), where its
compile time is printed and its step is timed once (a short timing budget). A markdown
summary of every row follows the table.

Each row runs in a fresh process (cold compile, memory counted from zero: compiled models'
caches are released lazily, so rows sharing a process see each other's leftovers);
--in-process runs them all in this one (faster: models are built once and copied per row;
memory columns then approximate). With --in-process, --rounds N (N > 1) keeps every row's
compiled function and times the rows again N - 1 times, in reversed then original order, after
all of them ran (outside --budget-s; rows are then not reset between, so every compiled
model stays in memory); a row's step ms is the median of its N timings, and every timing is
printed.
Rows timed one after another in one process drifted with their place in the run (GPT-2 1x32 on
an H100: max-autotune 0.60 ms after reduce-overhead's 0.56 in one run, even with it in separate
processes), so compare modes with rounds, or without --in-process.
"""

import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import torch

import torchlite

MODES = ["default", "reduce-overhead", "max-autotune"]


def gpt2(batch: int, tokens: int):
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    model = model.to("cuda", torch.bfloat16)
    ids = torch.randint(0, 50257, (batch, tokens), device="cuda")

    def stepper(model):
        def step(fn):
            return fn(ids, use_cache=False).logits

        return step

    return model, stepper


def resnet50(batch: int):
    import timm

    torch.manual_seed(0)
    model = timm.create_model("resnet50", pretrained=False).eval().to("cuda", torch.bfloat16)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)

    def stepper(model):
        def step(fn):
            return fn(x)

        return step

    return model, stepper


def bert_train(batch: int, tokens: int):
    import transformers

    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig()).to("cuda", torch.bfloat16)
    model.eval()  # NOTE: dropout off; gradients flow as in train mode (no batch norm)
    ids = torch.randint(0, 30522, (batch, tokens), device="cuda")

    def stepper(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step(fn):
            # NOTE: torch.compile's CUDA graphs need the step marked in training (else its
            # outputs of the last step are overwritten while still in use); a no-op otherwise.
            torch.compiler.cudagraph_mark_step_begin()
            loss = fn(input_ids=ids, labels=ids).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            # NOTE: a copy: torch.compile's CUDA graphs overwrite the loss at the next step,
            # and the first step's loss is compared with eager's after three steps (it raised
            # "accessing tensor output of CUDAGraphs that has been overwritten").
            return loss.detach().clone()

        return step

    return model, stepper


TRAINING = {"bert-train-8x128"}

MODELS = {
    "gpt2-1x32": lambda: gpt2(1, 32),
    "gpt2-8x512": lambda: gpt2(8, 512),
    "resnet50-1": lambda: resnet50(1),
    "resnet50-64": lambda: resnet50(64),
    "bert-train-8x128": lambda: bert_train(8, 128),
}

_BUILT: dict = {}  # --in-process: each model built once (random init is seconds), copied per row


def build(name: str):
    """A fresh copy of the model and its step maker (the same weights on every call)."""
    import copy

    if name not in _BUILT:
        _BUILT[name] = MODELS[name]()
    model, stepper = _BUILT[name]
    return copy.deepcopy(model), stepper


def step_ms(step, fn, budget_s: float = 3.0) -> float:
    """Median ms per call over timed batches (synchronised per batch)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    step(fn)
    torch.cuda.synchronize()
    est = max(time.perf_counter() - start, 1e-5)
    inner = max(1, min(50, int(0.2 / est)))
    samples = max(5, min(30, int(budget_s / (est * inner))))
    times = []
    for _ in range(samples):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(inner):
            step(fn)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / inner * 1e3)
    return statistics.median(times)


def single_step_ms(step, fn, steps: int = 20) -> float:
    """Median ms of one call synchronised on both sides: the CPU cannot run ahead of the GPU.
    NOTE: a training step under CUDA graphs once measured 7.5 ms this way against 18.3 ms in
    step_ms's batches (BERT-base 8x128, H100), not yet explained; both columns are printed."""
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(fn)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def make(impl: str, mode: str, model):
    if impl == "eager":
        return model
    if impl == "torchlite":
        torchlite.config.compiled_backward = True  # NOTE: a mode and options do not combine
        return torchlite.compile(model, mode=mode)
    return torch.compile(model, mode=mode)


def reset() -> None:
    torchlite.reset()
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run_one(name: str, impl: str, mode: str, budget_s: float = 3.0, keep=None) -> dict:
    """One row. `keep`: a list the row's (step, compiled function, training) goes to, for
    later rounds; the row then does not reset torchlite and torch._dynamo (that would drop
    the compiled functions kept)."""
    # NOTE: memory is counted above what earlier rows left (a compiled function's caches go
    # lazily), so rows compare what each one adds.
    if keep is None:
        reset()
    base, base_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    model, stepper = build(name)
    step = stepper(model)
    training = name in TRAINING
    with torch.no_grad() if not training else contextlib.nullcontext():
        if training:
            eager_model, eager_stepper = build(name)  # the same weights
            expected = eager_stepper(eager_model)(eager_model).float()
            del eager_model, eager_stepper
        else:
            expected = step(model).float()
        fn = make(impl, mode, model)
        torch.cuda.synchronize()
        start = time.perf_counter()
        outs = [step(fn) for _ in range(3)]
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        out = outs[0] if training else outs[-1]  # a training step changes the weights
        err = ((out.float() - expected).norm() / expected.norm().clamp_min(1e-6)).item()
        del out, outs, expected
        torch.cuda.reset_peak_memory_stats()
        ms = step_ms(step, fn, budget_s)
        ms_single = single_step_ms(step, fn, 20 if budget_s >= 1 else 5)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        reserved = (torch.cuda.max_memory_reserved() - base_reserved) / 2**20
    counters = torchlite.counters() if impl == "torchlite" else {}
    if keep is not None:
        keep.append((step, fn, training))
    del fn, model, step
    if keep is None:
        reset()
    return {
        "ms": ms,
        "ms_single": ms_single,
        "peak_mb": peak,
        "reserved_mb": reserved,
        "compile_s": compile_s,
        "rel_err": err,
        "replays": counters.get("cuda_graph_replays", 0),
    }


def more_rounds(kept: dict, results: dict, rounds: int, budget_s: float) -> None:
    """Times every kept row `rounds - 1` more times, reversed order first (a row timed last in
    the first round is timed first in the second); each row's "ms" becomes the median of its
    timings, all of them in "rounds_ms"."""
    order = list(kept)
    for r in range(1, rounds):
        order.reverse()
        for key in order:
            step, fn, training = kept[key]
            try:
                with torch.no_grad() if not training else contextlib.nullcontext():
                    results[key]["rounds_ms"].append(step_ms(step, fn, budget_s))
            except Exception as e:  # noqa: BLE001 (the rows' first timings still stand)
                print(f"{' '.join(key)}: round {r + 1} FAILED: {type(e).__name__}: {e}"[:300])
    for key in kept:
        results[key]["ms"] = statistics.median(results[key]["rounds_ms"])


def row_in_subprocess(name: str, impl: str, mode: str, budget_s: float, timeout: float) -> dict:
    # NOTE: a process group of its own: torch.compile's compile workers are its children, and
    # on a timeout they would otherwise keep compiling beside the next rows.
    proc = subprocess.Popen(
        [sys.executable, __file__, "--row", name, impl, mode, str(budget_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(stderr.strip().splitlines()[-1] if stderr.strip() else "failed")
    return json.loads(stdout.strip().splitlines()[-1])


def plan(models, modes, impls) -> list:
    """Rows, cheapest first: eager and torchlite of every model, then torch.compile's default
    and reduce-overhead, then its max-autotune (minutes a model)."""
    first = [
        (name, impl, "-" if impl == "eager" else mode)
        for name in models
        for impl in impls
        if impl != "torch"
        for mode in (modes if impl != "eager" else modes[:1])
    ]
    torch_rows = [(n, "torch", m) for n in models for m in modes if m != "max-autotune"]
    torch_rows += [(n, "torch", m) for n in models for m in modes if m == "max-autotune"]
    return first + (torch_rows if "torch" in impls else [])


def markdown(models, modes, results) -> str:
    """One line per model and mode: step ms (compile s) of each, peak MB, torchlite/torch."""
    lines = [
        (
            "| model | mode | eager ms | torchlite ms (compile s) | torch.compile ms (compile s) "
            "| tl / tc | peak MB eager / tl / tc |"
        ),
        "|---|---|---|---|---|---|---|",
    ]

    def cell(r, key="ms"):
        if r is None:
            return "—"
        if "note" in r:
            return r["note"] if key == "ms" else "—"
        return f"{r[key]:.3f} ({r['compile_s']:.1f} s)" if key == "ms" else f"{r[key]:.0f}"

    for name in models:
        eager = results.get((name, "eager", "-"))
        for mode in modes:
            tl, tc = results.get((name, "torchlite", mode)), results.get((name, "torch", mode))
            ratio = (
                f"{tl['ms'] / tc['ms']:.2f}x"
                if tl and tc and "ms" in tl and "ms" in tc and tc["ms"] > 0
                else "—"
            )
            peaks = " / ".join(cell(r, "peak_mb") for r in (eager, tl, tc))
            e = f"{eager['ms']:.3f}" if eager and "ms" in eager else "—"
            lines.append(f"| {name} | {mode} | {e} | {cell(tl)} | {cell(tc)} | {ratio} | {peaks} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--row":
        print(json.dumps(run_one(*sys.argv[2:5], float(sys.argv[5]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--impls", default="eager,torchlite,torch")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--budget-s", type=float, default=0, help="0: no limit")
    parser.add_argument("--torch-max-autotune-s", type=float, default=600)
    parser.add_argument(
        "--torch-max-share",
        type=float,
        default=0.5,
        help="with --budget-s: the part of it kept for torch.compile's max-autotune rows",
    )
    parser.add_argument("--step-budget-s", type=float, default=3.0)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --in-process: timings of each row, the later ones after every row ran "
        "(not counted in --budget-s)",
    )
    args = parser.parse_args()
    models, modes = args.models.split(","), args.modes.split(",")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = (
        f"{'model':<16} {'mode':<16} {'impl':<10} {'step ms':>9} {'1-step ms':>10} "
        f"{'peak MB':>9} {'reserved MB':>12} {'compile s':>10} {'rel err':>8} {'replays':>8}"
    )
    print(header)
    began = time.perf_counter()
    results = {}
    kept = {} if args.in_process and args.rounds > 1 else None
    rows = plan(models, modes, args.impls.split(","))
    is_torch_max = [impl == "torch" and mode == "max-autotune" for _, impl, mode in rows]
    # NOTE: torch.compile's max-autotune rows run last and take minutes each: without a share
    # kept for them the rows before used the budget up, and most models had none.
    reserved = (
        min(args.budget_s * args.torch_max_share, sum(is_torch_max) * args.torch_max_autotune_s)
        if args.budget_s and args.torch_max_autotune_s > 0
        else 0.0
    )
    for i, (name, impl, mode) in enumerate(rows):
        row = f"{name:<16} {mode:<16} {impl:<10}"
        torch_max = is_torch_max[i]
        left = args.budget_s - (time.perf_counter() - began) if args.budget_s else 1e9
        if torch_max:
            left /= sum(is_torch_max[i:])  # an even share of what is left
        else:
            left -= reserved
        if left <= 0 or (torch_max and min(left, args.torch_max_autotune_s) < 30):
            results[(name, impl, mode)] = {"note": "skipped (budget)"}
            print(f"{row} skipped (budget)", flush=True)
            continue
        torchlite.reset_counters()
        try:
            if torch_max:
                # NOTE: its own process, to stop it; timed once (its compile is the story)
                timeout = min(left, args.torch_max_autotune_s)
                try:
                    r = row_in_subprocess(name, impl, mode, 0.5, timeout)
                except subprocess.TimeoutExpired:
                    results[(name, impl, mode)] = {"note": f"compile > {timeout:.0f} s"}
                    print(f"{row} stopped: compile took more than {timeout:.0f} s", flush=True)
                    continue
            elif args.in_process:
                keep = [] if kept is not None else None
                r = run_one(name, impl, mode, args.step_budget_s, keep)
                if keep:
                    kept[(name, impl, mode)] = keep[0]
                    r["rounds_ms"] = [r["ms"]]
            else:
                r = row_in_subprocess(name, impl, mode, args.step_budget_s, 900)
        except Exception as e:  # noqa: BLE001 (a failing row must not hide the others)
            results[(name, impl, mode)] = {"note": "failed"}
            print(f"{row} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            reset()
            continue
        results[(name, impl, mode)] = r
        print(
            f"{row} {r['ms']:9.3f} {r['ms_single']:10.3f} {r['peak_mb']:9.0f} "
            f"{r['reserved_mb']:12.0f} "
            f"{r['compile_s']:10.2f} {r['rel_err']:8.4f} {r['replays']:8d}",
            flush=True,
        )
    if kept:
        more_rounds(kept, results, args.rounds, args.step_budget_s)
        print(f"\n# step ms in {args.rounds} rounds (round 1 in the table's order, then reversed)")
        for (name, impl, mode), r in results.items():
            if "rounds_ms" in r:
                times = " ".join(f"{t:9.3f}" for t in r["rounds_ms"])
                print(f"{name:<16} {mode:<16} {impl:<10} median {r['ms']:9.3f}: {times}")
    print(f"\n# {time.perf_counter() - began:.0f} s\n")
    print(markdown(models, modes, results))


if __name__ == "__main__":
    main()
