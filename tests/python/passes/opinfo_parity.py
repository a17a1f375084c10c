"""Helpers for test_opinfo_parity.py (CPU) and cuda/test_cuda_opinfo_parity.py: which OpInfos
torchlite lowers, and one compiled-vs-eager run of a sample input on a device, classified as
passed through a kernel, through torch only, a graph break, or a failure (a bug)."""

import dataclasses
import math
import re
import types
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

import torchlite

# NOTE: common_methods_invocations imports expecttest (a torch test dependency) through
# common_utils; only its TestCase base class is touched at import time.
try:
    import expecttest  # noqa: F401
except ImportError:  # pragma: no cover - environment dependent
    import sys
    import types
    import unittest

    _stub = types.ModuleType("expecttest")
    _stub.TestCase = unittest.TestCase
    sys.modules["expecttest"] = _stub

from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
from torch.testing._internal.common_methods_invocations import op_db

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool)
# Samples per (op, dtype); the rest are counted as skipped in the table (CI time budget).
MAX_SAMPLES = 8

# OpInfos whose names match a lowering rule but are not the lowered op: torch.masked.*
# are Python compositions over masks; silu "complex" only has complex dtypes.
_EXCLUDED_PREFIXES = ("masked.", "_refs.")

# assert_close's defaults, which OpInfo tolerance overrides only ever raise (torch's
# TestCase.assertEqual takes the max of the two).
_DEFAULT_TOL = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float16: (1e-3, 1e-5),
}


def _rule_names() -> set[str]:
    """Op names that have a lowering rule (the registrations in csrc/passes/lower_*.cpp)."""
    root = Path(__file__).resolve().parents[3] / "csrc" / "passes"
    names: set[str] = set()
    for f in root.glob("lower_*.cpp"):
        text = f.read_text()
        for m in re.finditer(r"t\[\"(\w+)\"\]", text):
            names.add(m.group(1))
        for m in re.finditer(r"for \(const char\* n :\s*\{([^}]*)\}\)", text):
            names.update(re.findall(r"\"(\w+)\"", m.group(1)))
    return names


def lowered_opinfos() -> list:
    rules = _rule_names()
    out = []
    for op in op_db:
        if op.name.startswith(_EXCLUDED_PREFIXES) or op.name.split(".")[-1] not in rules:
            continue
        if not any(d in op.supported_dtypes("cpu") for d in DTYPES):
            continue
        out.append(op)
    return out


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def override_tolerances(op, dtype, device: str = "cpu") -> tuple[float, float]:
    """(rtol, atol) the OpInfo's tolerance overrides for `device` set for tests run at `dtype`
    (toleranceOverride, else precisionOverride as atol); 0 where it sets none."""
    rtol = atol = 0.0
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, device):
            continue
        if getattr(info, "dtypes", None) is not None and dtype not in info.dtypes:
            continue
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                rtol, atol = max(rtol, dec.d[dtype].rtol), max(atol, dec.d[dtype].atol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol = max(atol, dec.d[dtype])
    return rtol, atol


def tolerances(override: tuple[float, float], out_dtype) -> tuple[float, float]:
    """As torch's TestCase.assertEqual: assert_close's defaults for the compared tensors'
    dtype (an int input's sin is compared as float32), raised by the test's overrides."""
    rtol, atol = _DEFAULT_TOL.get(out_dtype, (0.0, 0.0))
    return max(rtol, override[0]), max(atol, override[1])


@dataclasses.dataclass
class Stats:
    cases: int = 0
    kernel: int = 0
    extern: int = 0
    graph_break: int = 0
    failed: int = 0
    skipped: int = 0


def _describe(sample) -> str:
    def one(x):
        if isinstance(x, torch.Tensor):
            s = f"{tuple(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
            return s if x.is_contiguous() else s + f"@{x.stride()}"
        return repr(x)

    args = [one(sample.input)] + [one(a) for a in sample.args]
    args += [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(args) + ")"


def _compare(actual, expected, override) -> None:
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"output structure {a_spec} != eager {e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        if not isinstance(e, torch.Tensor):
            both_nan = (
                isinstance(a, float) and isinstance(e, float) and math.isnan(a) and math.isnan(e)
            )
            assert a == e or both_nan, f"{a!r} != eager {e!r}"
            continue
        assert isinstance(a, torch.Tensor), f"got {type(a).__name__}, eager gave a tensor"
        rtol, atol = tolerances(override, e.dtype)
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        # Strides of eager's output, ignoring size-1 axes (their stride is arbitrary).
        if e.numel() > 1:
            a_st = [s for s, n in zip(a.stride(), a.shape) if n != 1]
            e_st = [s for s, n in zip(e.stride(), e.shape) if n != 1]
            assert a_st == e_st, f"strides {a.stride()} != eager {e.stride()}"


def _as_user_function(fn):
    """OpInfo wraps method-only ops in lambdas defined in torch/testing/_internal (e.g.
    `lambda x, *a, **k: x.bfloat16(*a, **k)`). torchlite treats Python functions from torch's
    files as opaque torch calls (a graph break for these), so the same code is re-homed in this
    file, as a user would write it."""
    if not isinstance(fn, types.FunctionType) or "testing/_internal" not in fn.__code__.co_filename:
        return fn
    user = types.FunctionType(
        fn.__code__.replace(co_filename=__file__),
        fn.__globals__,
        fn.__name__,
        fn.__defaults__,
        fn.__closure__,
    )
    user.__kwdefaults__ = fn.__kwdefaults__
    return user


# View ops alone stay extern (a kernel never stores a view); each of their samples also runs
# with a pointwise consumer (`* 2`), so the view folds into that kernel's index map.
VIEW_OPS = {"view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze"}
VIEW_OPS |= {"unsqueeze", "permute", "transpose", "t", "expand", "expand_as", "broadcast_to"}
VIEW_OPS |= {"contiguous", "narrow", "select", "diagonal", "split"}
VIEW_OPS |= {"split_with_sizes", "chunk", "unbind", "tensor_split"}


def _times_two(r):
    """The consumer: `* 2` on the view, or on each piece of a split."""
    if isinstance(r, (tuple, list)):
        return [t * 2 for t in r]
    return r * 2


def run_case(op, dtype, sample, consumer=False, device: str = "cpu") -> tuple[str, str]:
    """Runs one sample eagerly and compiled. Returns (outcome, message), outcome one of
    kernel / extern / break / failed."""
    fn = _as_user_function(op.op)
    if consumer:
        view = fn
        fn = lambda *a, **k: _times_two(view(*a, **k))
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    with torch.no_grad():
        torch.manual_seed(0)
        expected = fn(*args, **kwargs)
        torchlite.reset()
        torchlite.reset_counters()
        compiled = torchlite.compile(lambda *a, **k: fn(*a, **k), fullgraph=False)
        torch.manual_seed(0)
        try:
            actual = compiled(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any error is a failed case
            return "failed", f"{_describe(sample)}: raised {type(e).__name__}: {e}"
    counters = torchlite.counters()
    try:
        _compare(actual, expected, override_tolerances(op, dtype, device))
    except AssertionError as e:
        where = "kernel" if counters["kernels"] else "extern"
        return "failed", f"{_describe(sample)} [{where}]: {e}"
    if counters["graph_breaks"]:
        return "break", ""
    return ("kernel" if counters["kernels"] else "extern"), ""


def run_op(op, device: str = "cpu", dtypes=DTYPES) -> tuple[Stats, list[str]]:
    """Every `device` sample (first MAX_SAMPLES) of each of `dtypes` the op supports there."""
    stats, failures = Stats(), []
    supported = op.supported_dtypes(device)
    for dtype in dtypes:
        if dtype not in supported:
            continue
        samples = list(op.sample_inputs(device, dtype))
        stats.skipped += max(0, len(samples) - MAX_SAMPLES)
        variants = (False, True) if op.name in VIEW_OPS else (False,)
        for i, sample in enumerate(samples[:MAX_SAMPLES]):
            for consumer in variants:
                outcome, msg = run_case(op, dtype, sample, consumer, device)
                stats.cases += 1
                if outcome == "break":
                    stats.graph_break += 1
                else:
                    setattr(stats, outcome, getattr(stats, outcome) + 1)
                if outcome == "failed":
                    tag = " (* 2)" if consumer else ""
                    failures.append(f"{str(dtype).removeprefix('torch.')} sample {i}{tag} {msg}")
    return stats, failures


def check_op(op, results: dict[str, Stats], device: str = "cpu", dtypes=DTYPES) -> None:
    """The body of a parity test: runs the op on `device`, records its Stats in `results` (for
    print_table) and fails listing every failed case."""
    stats, failures = run_op(op, device, dtypes)
    results[op_id(op)] = stats
    assert not failures, f"{op_id(op)}: {len(failures)} failed case(s):\n" + "\n".join(failures)


def print_table(results: dict[str, Stats], capsys, title: str) -> None:
    """The last test of a parity module: prints the table, fails if any case failed."""
    if not results:
        pytest.skip("no op ran in this session")
    with capsys.disabled():
        print(f"\n{title} (first {MAX_SAMPLES} samples per op and dtype):")
        print(format_table(results))
    assert sum(s.failed for s in results.values()) == 0


def format_table(results: dict[str, Stats]) -> str:
    header = ("op", "cases", "kernel", "extern", "break", "failed", "skipped")
    rows = [
        (name, s.cases, s.kernel, s.extern, s.graph_break, s.failed, s.skipped)
        for name, s in sorted(results.items())
    ]
    total = Stats()
    for s in results.values():
        for f in dataclasses.fields(Stats):
            setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
    rows.append(
        (
            "TOTAL",
            total.cases,
            total.kernel,
            total.extern,
            total.graph_break,
            total.failed,
            total.skipped,
        )
    )
    width = max(len(r[0]) for r in rows + [header])
    line = lambda r: f"{r[0]:<{width}} " + " ".join(f"{v:>7}" for v in r[1:])
    return "\n".join([line(header)] + [line(r) for r in rows])
