"""Model corpus benchmark: every timm / transformers model of bench/model_corpus.py, random
weights, eval forward under torch.no_grad: eager vs torchlite vs torch.compile (inductor, default
mode), all in one process.

One row per model: torchlite correct vs eager, graphs and graph breaks per forward
(torchlite.explain), kernels torchlite compiled, the time per forward of eager, torchlite and
torch.compile (sampled in turns, as bench/gpu.py does: the GPU machine's host speed drifts), the
ratios torchlite/eager and torchlite/torch.compile (above 1 = torchlite faster), the cold compile
(first call: capture + compile + one forward) of torchlite and of torch.compile, and the most
frequent break reason. Then a summary: correct, one-graph and geomean ratios per family.

    python bench/models.py [--full] [--device cpu|cuda] [--only NAME[,NAME...]] [--runs N]
        [--precision fp32|bf16|autocast] [--batch N] [--seq N] [--no-torch-compile]
        [--budget-s S] [--profile] [--extra | --extra-only]

--extra adds the wider corpus (model_corpus.EXTRA: more timm and transformers architectures at
tiny sizes, a CPU coverage sweep, not run by CI); --extra-only runs just that. The "2nd" column
counts the frames captured again by a second identical call (0 when the guards are stable);
--runs 0 skips the timings (a coverage sweep).

CI-sized configurations by default (small images, tiny hidden sizes); --full builds the
published sizes (for the GPU machine), where --batch/--seq default to 32 images and 8 x 512
tokens. --precision bf16 casts model and inputs to bfloat16 (model.to), autocast runs the float32
model under torch.autocast(bfloat16); either is checked against a float32 eager reference: a
compiled result is correct when its relative error (L2, worst output) is at most twice eager's
own bf16 error or 1e-2. --budget-s stops before starting a model once fewer than --reserve-s
seconds are left, and interrupts a model still running at the limit, then prints what it has.
--profile times one call of each under torch.profiler (CUDA) and writes, for models where
torchlite is slower than torch.compile, their top kernels to <report>.profile.txt (--profile-top N:
every row, N kernels each).

The report is printed and written to bench/models_report.txt (--report PATH to change,
--report '' for none) after every model, so a run killed from outside still leaves its rows.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import math
import os
import signal
import statistics
import sys
import tempfile
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
# NOTE: a bench/ script named like a package would shadow it (a cuda.py here broke torch's
# import of cuda-python), so bench/ leaves sys.path and model_corpus is loaded by file path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

# NOTE: cold compiles are measured from empty on-disk caches of both compilers (set before torch
# is imported); within the process each compiler's in-memory state is warm after the first model.
_TMP = tempfile.mkdtemp(prefix="tl_models_")
os.environ.setdefault("TORCHLITE_CACHE_DIR", os.path.join(_TMP, "torchlite"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))

import torch

_spec = importlib.util.spec_from_file_location(
    "model_corpus", os.path.join(_HERE, "model_corpus.py")
)
model_corpus = importlib.util.module_from_spec(_spec)
sys.modules["model_corpus"] = model_corpus
_spec.loader.exec_module(model_corpus)
CORPUS = model_corpus.CORPUS
EXTRA = model_corpus.EXTRA
model_corpus.load_model_libs()

from helpers import assert_same, model_tolerance

import torchlite

NAN = float("nan")


class BudgetExceeded(BaseException):
    """Raised by the --budget-s alarm; a BaseException so model code's `except Exception` in
    between does not swallow it."""


def _to(value, device, dtype=None):
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device, dtype)
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_to(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    return value


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _float_leaves(value, path="out"):
    """(path, tensor) for every floating-point tensor in an output (tuples, lists, dicts and
    ModelOutputs, which are dicts)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield path, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _float_leaves(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _float_leaves(v, f"{path}[{k!r}]")


def rel_error(actual, reference) -> float:
    """The worst relative L2 error over the float outputs, in float64 (random-weight logits reach
    1e9); NaN/inf where the reference is finite counts as infinite error."""
    ref = dict(_float_leaves(reference))
    got = dict(_float_leaves(actual))
    if ref.keys() != got.keys():
        return math.inf
    worst = 0.0
    for key, r in ref.items():
        a, r = got[key].detach().double(), r.detach().double()
        if a.shape != r.shape:
            return math.inf
        finite = torch.isfinite(r)
        if not torch.isfinite(a[finite]).all():
            return math.inf
        a, r = a[finite], r[finite]
        worst = max(worst, ((a - r).norm() / r.norm().clamp_min(1e-30)).item())
    return worst


def bf16_correct(err: float, eager_err: float) -> bool:
    return err <= max(2 * eager_err, 1e-2)


class Timer:
    """Time per call of several functions, sampled in turns so that host-speed drift hits all of
    them alike: CUDA events around `iters` back-to-back calls on the GPU, perf_counter on CPU."""

    def __init__(self, device: str, rounds: int, round_s: float = 0.05):
        self.device, self.rounds, self.round_s = device, rounds, round_s

    def _once_ms(self, fn, iters: int) -> float:
        if self.device.startswith("cuda"):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / iters
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) * 1e3 / iters

    def median_ms(self, fns) -> list[float]:
        for fn in fns:
            fn()
        # NOTE: enough calls per sample that launch gaps and clock reads do not dominate, few
        # enough that big models keep the run short.
        first = min(self._once_ms(fn, 1) for fn in fns)
        iters = max(1, min(20, round(self.round_s * 1e3 / max(first, 1e-3))))
        samples = [[] for _ in fns]
        for _ in range(self.rounds):
            for i, fn in enumerate(fns):
                samples[i].append(self._once_ms(fn, iters))
        return [statistics.median(s) for s in samples]


def first_call_s(fn, device) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def _top_reason(breaks) -> str:
    if not breaks:
        return ""
    counts = collections.Counter(f"{b.kind}: {b.reason}" for b in breaks)
    reason, n = counts.most_common(1)[0]
    first = next(b for b in breaks if f"{b.kind}: {b.reason}" == reason)
    where = f"{os.path.basename(first.filename)}:{first.lineno}"
    return f"{reason} ({where}, x{n})"


def _short_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


def profile_kernels(fn, device, top=8):
    """(kernel launches per call, total kernel ms, [(ms, calls, name)] of the top kernels) of one
    call under torch.profiler; None off CUDA."""
    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        _sync(device)
    kernels = collections.defaultdict(lambda: [0.0, 0])
    launches = 0
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels[ev.name]
            k[0] += ev.device_time_total / 1e3 if hasattr(ev, "device_time_total") else 0.0
            k[1] += 1
            launches += 1
    ranked = sorted(((ms, n, name) for name, (ms, n) in kernels.items()), reverse=True)
    return launches, sum(ms for ms, _, _ in ranked), ranked[:top]


class Precision:
    """How a model and its inputs are run: fp32, bf16 (model.to) or autocast (bf16)."""

    def __init__(self, name: str, device: str):
        self.name, self.device = name, device

    def prepare(self, model, args, kwargs):
        """(model, args, kwargs) on the device, in this precision's dtype."""
        dtype = torch.bfloat16 if self.name == "bf16" else None
        if dtype is not None:
            model = model.to(self.device, dtype)
        else:
            model = model.to(self.device)
        return model, _to(args, self.device, dtype), _to(kwargs, self.device, dtype)

    def context(self):
        if self.name == "autocast":
            return torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16)
        return contextlib.nullcontext()


def new_row(spec) -> dict:
    return {
        "name": spec.name,
        "family": spec.family,
        "correct": "-",
        "graphs": "-",
        "breaks": "-",
        "kernels": "-",
        "reason": "",
        "eager_ms": NAN,
        "tl_ms": NAN,
        "tc_ms": NAN,
        "tl_cold_s": NAN,
        "tc_cold_s": NAN,
        "err": NAN,
        "tc_err": NAN,
        "launches": "",
        "one_graph": False,
        "second": "-",
        "error": "",
    }


def run_one(spec, opts, timer, profile_log, row):
    """Fills `row` (new_row) as it goes, so an interrupted model still shows what it got."""
    device, precision = opts.device, Precision(opts.precision, opts.device)
    try:
        model, args, kwargs = spec.build(opts.full, batch=opts.batch, seq=opts.seq)
        reference = None
        if opts.precision != "fp32":
            # NOTE: the float32 eager result is the reference both bf16 runs are judged by.
            model32, a32, k32 = model.to(device), _to(args, device), _to(kwargs, device)
            with torch.no_grad():
                reference = model32(*a32, **k32)
            del model32, a32, k32
        model, args, kwargs = precision.prepare(model, args, kwargs)
    except BudgetExceeded:
        raise
    except Exception as exc:  # noqa: BLE001  (a model that cannot be built is reported)
        row["correct"] = "build-error"
        row["error"] = _short_error(exc)
        return row

    def caller(fn):
        def call():
            with precision.context():
                return fn(*args, **kwargs)

        return call

    eager = caller(model)
    with torch.no_grad():
        try:
            expected = eager()
        except Exception as exc:  # noqa: BLE001  (a bad config fails in eager: reported)
            row["correct"] = "eager-error"
            row["error"] = _short_error(exc)
            return row
        eager_err = rel_error(expected, reference) if reference is not None else 0.0

        def check(out) -> float:
            if reference is None:
                assert_same(out, expected, **model_tolerance(expected))
                return rel_error(out, expected)
            err = rel_error(out, reference)
            if not bf16_correct(err, eager_err):
                raise AssertionError(
                    f"relative error {err:.2e} vs float32 eager; eager bf16's own {eager_err:.2e}"
                )
            return err

        torchlite.reset()
        torchlite.reset_counters()
        compiled = caller(torchlite.compile(model))
        try:
            row["tl_cold_s"] = first_call_s(compiled, device)
            row["kernels"] = torchlite.counters()["kernels"]
            row["err"] = check(compiled())
            frames = torchlite.counters()["frames"]
            # NOTE: the second identical call runs from the cache; frames it captures again are
            # unstable guards.
            row["err"] = check(compiled())
            row["second"] = torchlite.counters()["frames"] - frames
            row["correct"] = "ok"
        except (BudgetExceeded, KeyboardInterrupt):
            raise
        except AssertionError as exc:
            row["correct"] = "WRONG"
            row["error"] = _short_error(exc)
        except Exception as exc:  # noqa: BLE001
            row["correct"] = "CRASH"
            row["error"] = _short_error(exc)
            if os.environ.get("MODELS_TRACEBACK"):
                traceback.print_exc()
        try:
            with precision.context():
                report = torchlite.explain(model)(*args, **kwargs)
            row["graphs"], row["breaks"] = report.graph_count, report.graph_break_count
            row["reason"] = _top_reason(report.break_reasons)
            row["one_graph"] = report.graph_count == 1 and report.graph_break_count == 0
        except BudgetExceeded:
            raise
        except Exception as exc:  # noqa: BLE001
            row["reason"] = f"explain failed: {_short_error(exc)}"
        if opts.runs <= 0:  # NOTE: --runs 0: a coverage sweep, no timings
            return row

        fns, names = [eager], ["eager"]
        if row["correct"] == "ok":
            fns.append(compiled)
            names.append("torchlite")
        if opts.torch_compile:
            torch._dynamo.reset()
            inductor = caller(torch.compile(model))
            try:
                row["tc_cold_s"] = first_call_s(inductor, device)
                row["tc_err"] = rel_error(inductor(), expected if reference is None else reference)
                fns.append(inductor)
                names.append("torch.compile")
            except BudgetExceeded:
                raise
            except Exception as exc:  # noqa: BLE001
                row["error"] += f" [torch.compile failed: {_short_error(exc)}]"
        times = dict(zip(names, timer.median_ms(fns)))
        row["eager_ms"] = times["eager"]
        row["tl_ms"] = times.get("torchlite", NAN)
        row["tc_ms"] = times.get("torch.compile", NAN)
        if opts.profile:
            top = opts.profile_top or 8
            profiles = {n: profile_kernels(f, device, top) for n, f in zip(names, fns)}
            row["launches"] = "/".join(str(p[0]) for p in profiles.values() if p)
            slower = row["tl_ms"] > row["tc_ms"]  # NOTE: False when either is NaN
            if profile_log is not None and (slower or opts.profile_top):
                profile_log.write(f"## {spec.name}: {_format_row(row)}\n")
                for n, p in profiles.items():
                    if p is None:
                        continue
                    profile_log.write(f"  {n}: {p[0]} kernels, {p[1]:.3f} ms of kernel time\n")
                    for ms, calls, kname in p[2]:
                        profile_log.write(f"    {ms:8.3f} ms {calls:4d}x  {kname[:150]}\n")
                profile_log.flush()
        if opts.torch_compile:
            torch._dynamo.reset()
    return row


def _ratio(num, den) -> float:
    return num / den if not (math.isnan(num) or math.isnan(den)) and den else NAN


def _fmt(x, spec) -> str:
    return (
        format(x, spec) if not math.isnan(x) else format("-", spec.split(".")[0].rstrip("f") + "s")
    )


def _format_row(r) -> str:
    return (
        f"{r['name']:32s} {r['family'][:5]:5s} {r['correct']:11s} {r['graphs']!s:>3s} "
        f"{r['breaks']!s:>3s} {r['second']!s:>3s} {r['kernels']!s:>4s} {_fmt(r['eager_ms'], '9.2f')} "
        f"{_fmt(r['tl_ms'], '9.2f')} {_fmt(r['tc_ms'], '9.2f')} "
        f"{_fmt(_ratio(r['eager_ms'], r['tl_ms']), '7.2f')} "
        f"{_fmt(_ratio(r['tc_ms'], r['tl_ms']), '7.2f')} "
        f"{_fmt(_ratio(r['eager_ms'], r['tc_ms']), '7.2f')} "
        f"{_fmt(r['tl_cold_s'], '7.2f')} {_fmt(r['tc_cold_s'], '7.2f')} "
        f"{_fmt(r['err'], '8.1e')} {_fmt(r['tc_err'], '8.1e')} {r['launches']:>13s}  {r['reason']}"
    )


HEADER = (
    f"{'model':32s} {'fam':5s} {'correct':11s} {'gr':>3s} {'brk':>3s} {'2nd':>3s} {'kern':>4s} "
    f"{'eager ms':>9s} {'tl ms':>9s} {'tc ms':>9s} {'tl/eag':>7s} {'tl/tc':>7s} {'tc/eag':>7s} "
    f"{'tl cold':>7s} {'tc cold':>7s} {'tl err':>8s} {'tc err':>8s} {'launch e/tl/tc':>13s}"
    "  top break reason"
)


def _geomean(values) -> float:
    values = [v for v in values if not math.isnan(v) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else NAN


def summary(rows, skipped) -> list[str]:
    lines = []
    for family in ("timm", "transformers"):
        fam = [r for r in rows if r["family"] == family]
        if not fam:
            continue
        ok = sum(r["correct"] == "ok" for r in fam)
        one = sum(r["one_graph"] for r in fam)
        again = sum(isinstance(r["second"], int) and r["second"] > 0 for r in fam)
        vs_eager = _geomean(_ratio(r["eager_ms"], r["tl_ms"]) for r in fam)
        vs_tc = _geomean(_ratio(r["tc_ms"], r["tl_ms"]) for r in fam)
        below = sum(_ratio(r["tc_ms"], r["tl_ms"]) < 0.95 for r in fam)
        lines.append(
            f"{family:12s}: {ok}/{len(fam)} correct, {one}/{len(fam)} "
            f"({100 * one / len(fam):.0f}%) captured in one graph per forward; geomean "
            f"torchlite {vs_eager:.2f}x eager, {vs_tc:.2f}x torch.compile "
            f"({below} below 0.95x torch.compile); {again} capture again on a second call"
        )
    if rows:
        lines.append(
            f"all         : geomean torchlite "
            f"{_geomean(_ratio(r['eager_ms'], r['tl_ms']) for r in rows):.2f}x eager, "
            f"{_geomean(_ratio(r['tc_ms'], r['tl_ms']) for r in rows):.2f}x torch.compile; "
            f"torch.compile {_geomean(_ratio(r['eager_ms'], r['tc_ms']) for r in rows):.2f}x "
            f"eager; cold compile median torchlite "
            f"{_median(r['tl_cold_s'] for r in rows):.2f} s, torch.compile "
            f"{_median(r['tc_cold_s'] for r in rows):.2f} s"
        )
    if skipped:
        lines.append(f"Not run (--budget-s): {', '.join(skipped)}")
    reasons = collections.Counter()
    for r in rows:
        if r["reason"] and not r["reason"].startswith("explain failed"):
            reasons[r["reason"].split(" (")[0]] += 1
    if reasons:
        lines.append("Top break reasons (models whose most frequent break it is):")
        lines += [f"  {n:3d}  {reason}" for reason, n in reasons.most_common(10)]
    errors = [r for r in rows if r["error"]]
    if errors:
        lines.append("Failures:")
        lines += [f"  {r['name']}: {r['correct']}: {r['error']}" for r in errors]
    return lines


def _median(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else NAN


def _on_alarm(signum, frame):
    raise BudgetExceeded


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="published sizes (GPU machine)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", default="", help="comma-separated model names or families")
    parser.add_argument(
        "--runs", type=int, default=5, help="timed rounds per model (median); 0: no timings"
    )
    parser.add_argument("--precision", choices=("fp32", "bf16", "autocast"), default="fp32")
    parser.add_argument("--batch", type=int, default=None, help="batch (--full: 32 / 8)")
    parser.add_argument("--seq", type=int, default=None, help="text length (--full: 512)")
    parser.add_argument(
        "--no-torch-compile",
        dest="torch_compile",
        action="store_false",
        help="skip the torch.compile column (it costs 10-60 s of compile per model)",
    )
    parser.add_argument("--budget-s", type=float, default=0, help="stop cleanly by then (0: none)")
    parser.add_argument(
        "--reserve-s", type=float, default=60, help="start no model with less than this left"
    )
    parser.add_argument("--profile", action="store_true", help="kernel counts, profile slow rows")
    parser.add_argument(
        "--profile-top",
        type=int,
        default=0,
        help="with --profile: this many top kernels of every row (0: 8, slow rows only)",
    )
    parser.add_argument("--report", default=os.path.join(_HERE, "models_report.txt"))
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--extra", action="store_true", help="add the wider corpus (EXTRA)")
    which.add_argument("--extra-only", action="store_true", help="only the wider corpus")
    opts = parser.parse_args(argv)
    start = time.monotonic()

    wanted = [n for n in opts.only.split(",") if n]
    pool = EXTRA if opts.extra_only else CORPUS + EXTRA if opts.extra else CORPUS
    unknown = set(wanted) - {s.name for s in pool} - {s.family for s in pool}
    if unknown:
        parser.error(f"unknown model(s): {', '.join(sorted(unknown))}")
    if wanted:  # NOTE: in the order given, so a budgeted run does the important ones first
        specs = [s for w in wanted for s in pool if s.name == w or s.family == w]
    else:
        specs = list(pool)
    if opts.full:
        opts.seq = opts.seq or 512
    vision_batch = opts.batch or (32 if opts.full else None)
    text_batch = opts.batch or (8 if opts.full else None)

    if opts.device.startswith("cuda") and opts.precision == "fp32":
        # NOTE: the check is float32 against eager at 1e-4; TF32 convolutions/matmuls amplify
        # last-bit differences of fused kernels into ~1e-2 through deep nets (measured: three
        # timm models "wrong" with TF32, exact-enough without), so compare in true float32.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    if opts.budget_s:
        signal.signal(signal.SIGALRM, _on_alarm)
    size = "full" if opts.full else "CI-size"
    head = [
        (
            f"# bench/models.py: {len(specs)} models, {size} configs, device={opts.device}"
            f"{' (' + torch.cuda.get_device_name() + ')' if opts.device.startswith('cuda') else ''}"
            f", {opts.precision}, batch {vision_batch or 'default'} (vision) / "
            f"{text_batch or 'default'}x{opts.seq or 'default'} (text), torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, median of {opts.runs} rounds sampled in turns"
        ),
        (
            "# tl/eag, tl/tc, tc/eag: speed ratios (above 1: the first is faster); cold: first "
            "call (capture + compile + run) in s; err: relative L2 error vs eager (float32 eager "
            "for bf16); kern: kernels torchlite compiled; launch: kernels per call (--profile)"
        ),
        HEADER,
    ]
    print("\n".join(head), flush=True)
    profile_log = None
    if opts.profile and opts.report:
        profile_log = open(opts.report + ".profile.txt", "w")  # noqa: SIM115
    timer = Timer(opts.device, opts.runs)
    rows, lines, skipped = [], list(head), []

    def write_report(tail=()):
        if opts.report:
            with open(opts.report, "w") as f:
                f.write("\n".join(lines + list(tail)) + "\n")

    for i, spec in enumerate(specs):
        left = opts.budget_s - (time.monotonic() - start) if opts.budget_s else math.inf
        if left < opts.reserve_s:
            skipped = [s.name for s in specs[i:]]
            break
        opts.batch = vision_batch if spec.family == "timm" else text_batch
        if opts.budget_s:
            signal.alarm(max(1, int(left)))
        row = new_row(spec)
        try:
            run_one(spec, opts, timer, profile_log, row)
        except BudgetExceeded:
            skipped = [s.name for s in specs[i + 1 :]]
            row["correct"] = "interrupted"
            row["error"] = "interrupted at --budget-s"
            lines.append(_format_row(row))
            print(lines[-1], flush=True)
            rows.append(row)
            break
        finally:
            signal.alarm(0)
        rows.append(row)
        lines.append(_format_row(row))
        print(lines[-1], flush=True)
        write_report()
        if opts.device.startswith("cuda"):
            torch.cuda.empty_cache()
    tail = ["", *summary(rows, skipped), f"# wall time {time.monotonic() - start:.0f} s"]
    print("\n".join(tail), flush=True)
    write_report(tail)
    if profile_log is not None:
        profile_log.close()
    return 0 if rows and all(r["correct"] == "ok" for r in rows) and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
