"""Runs tests/python under an AddressSanitizer build of `_C`, one pytest process per folder.

Build `_C` with TORCHLITE_SANITIZE=address in the checkout given as --tree (README, settings),
then e.g. `python tests/asan_suite.py passes api cache` and, beside it, a second stream
`python tests/asan_suite.py capture conformance training`. Per folder it writes to --out a
pytest log, a junit file and a progress file; each line of the summary log (--log) is a
folder's outcome. The sanitizer's reports go to files (--out/reports/asan.PID), not to
stderr: pytest captures file descriptor 2, so a report written there dies with the process.
When a process dies before its session ends (an ASan report halts it), the test it was in is
recorded as `crashed` and the rest of that folder's tests run in a new process.

Loaded into pytest with `-p asan_suite`, this module is the plugin that writes the progress
file (START/END lines, flushed), so a process killed mid-test still says where it was.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

# Tests that cannot run under ASan, with the reason.
DESELECT = {
    "tests/python/passes/test_cpu_pool_pressure.py::"
    "test_pool_under_an_address_space_limit_keeps_little_and_retries_failed_allocations": (
        "RLIMIT_AS in a child: ASan's shadow memory reserves terabytes of address space"
    ),
}

# ---------------------------------------------------------------------------------------------
# pytest plugin (-p asan_suite)
# ---------------------------------------------------------------------------------------------

_progress = None
_outcomes: dict = {}


def _write(line: str) -> None:
    _progress.write(line + "\n")
    _progress.flush()


def pytest_configure(config):
    global _progress
    path = os.environ.get("ASAN_SUITE_PROGRESS")
    if path:
        _progress = open(path, "a", buffering=1)  # noqa: SIM115 (open for the session)


def pytest_collection_modifyitems(session, config, items):
    if _progress:
        Path(_progress.name + ".collected").write_text("".join(it.nodeid + "\n" for it in items))


def pytest_runtest_logstart(nodeid, location):
    if _progress:
        _outcomes[nodeid] = None
        _write("START " + nodeid)


def pytest_runtest_logreport(report):
    if not _progress:
        return
    xfail = hasattr(report, "wasxfail")
    if report.failed:
        _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and _outcomes.get(report.nodeid) is None:
        _outcomes[report.nodeid] = "xfailed" if xfail else "skipped"
    elif report.when == "call" and report.passed and _outcomes.get(report.nodeid) is None:
        _outcomes[report.nodeid] = "xpassed" if xfail else "passed"


def pytest_runtest_logfinish(nodeid, location):
    if _progress:
        _write(f"END {_outcomes.get(nodeid)} {nodeid}")


def pytest_sessionfinish(session, exitstatus):
    if _progress:
        _write(f"SESSIONFINISH {exitstatus}")


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _runtime_preload() -> str:
    """libasan first (the interpreter is not instrumented), and libstdc++ with it: without it
    ASan aborts at the first C++ throw (`real___cxa_throw != 0`)."""
    return " ".join(
        subprocess.check_output(["gcc", f"-print-file-name={n}"], text=True).strip()
        for n in ("libasan.so", "libstdc++.so")
    )


def _is_error_report(path: str) -> bool:
    return "ERROR: AddressSanitizer" in Path(path).read_text(errors="replace")


def _run_folder(folder: str, tree: Path, out: Path, env: dict, log) -> dict:
    progress = out / f"{folder}.progress"
    for p in (progress, Path(f"{progress}.collected")):
        p.unlink(missing_ok=True)
    env = dict(env, ASAN_SUITE_PROGRESS=str(progress))
    args, collected, began = [f"tests/python/{folder}"], None, time.monotonic()
    for attempt in range(1, 10_000):
        before = set(glob.glob(str(out / "reports" / "*")))
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "asan_suite"]
        cmd += ["-rA", "-v", "--junitxml", str(out / f"{folder}.{attempt}.xml")]
        for test in DESELECT:
            cmd += ["--deselect", test]
        with open(out / f"{folder}.{attempt}.log", "w") as f:
            rc = subprocess.call(cmd + args, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT)
        if collected is None and Path(f"{progress}.collected").exists():
            collected = Path(f"{progress}.collected").read_text().splitlines()
        lines = progress.read_text().splitlines() if progress.exists() else []
        finished = any(line.startswith("SESSIONFINISH") for line in lines[-2:])
        new = sorted(set(glob.glob(str(out / "reports" / "*"))) - before)
        errors = [p for p in new if _is_error_report(p)]
        # NOTE: files without an error hold warnings only (makecontext/swapcontext: c_stack.cpp
        # tells ASan about its stack switches).
        log(
            f"{folder} attempt {attempt}: rc={rc} finished={finished} "
            f"error_reports={errors} warning_files={len(new) - len(errors)}"
        )
        started = [line[6:] for line in lines if line.startswith("START ")]
        if finished or collected is None or not started:
            break
        log(f"{folder}: the process died in {started[-1]}")
        with open(progress, "a") as f:
            f.write(f"END crashed {started[-1]}\n")
        args = collected[collected.index(started[-1]) + 1 :]
        if not args:
            break
    counts: dict = {}
    for line in progress.read_text().splitlines():
        if line.startswith("END "):
            kind = line.split(" ", 2)[1]
            counts[kind] = counts.get(kind, 0) + 1
    log(f"DONE {folder}: {time.monotonic() - began:.0f} s {counts}")
    return counts


def main() -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="folders of tests/python, run in this order")
    parser.add_argument("--tree", default=str(here.parent), help="checkout with the ASan _C")
    parser.add_argument("--out", default="/tmp/torchlite-asan", help="logs and reports")
    parser.add_argument("--log", default=None, help="summary log (default OUT/suite.log)")
    opts = parser.parse_args()
    tree, out = Path(opts.tree).resolve(), Path(opts.out)
    (out / "reports").mkdir(parents=True, exist_ok=True)
    summary = open(opts.log or out / "suite.log", "a", buffering=1)  # noqa: SIM115
    tag = ",".join(opts.folders)

    def log(msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S', time.gmtime())} [{tag}] {msg}"
        summary.write(line + "\n")
        print(line, flush=True)

    env = dict(
        os.environ,
        LD_PRELOAD=_runtime_preload(),
        # NOTE: exitcode 66 tells a report from a failed test (pytest's 1); detect_leaks=0:
        # CPython frees little at exit; halt_on_error: a report ends the process.
        ASAN_OPTIONS=f"detect_leaks=0:halt_on_error=1:exitcode=66:log_path={out}/reports/asan",
        PYTHONPATH=os.pathsep.join([str(tree), str(here)]),
        PYTHONUNBUFFERED="1",
    )
    for test, why in DESELECT.items():
        log(f"deselected {test}: {why}")
    old = set(glob.glob(str(out / "reports" / "*")))
    bad = 0
    for folder in opts.folders:
        counts = _run_folder(folder, tree, out, env, log)
        bad += sum(counts.get(k, 0) for k in ("failed", "error", "crashed"))
    new = sorted(set(glob.glob(str(out / "reports" / "*"))) - old)
    reports = [p for p in new if _is_error_report(p)]
    log(f"finished: {bad} failed/crashed tests, {len(reports)} AddressSanitizer error reports")
    return 1 if bad or reports else 0


if __name__ == "__main__":
    sys.exit(main())
