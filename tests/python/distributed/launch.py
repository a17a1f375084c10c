"""A torchrun-like launcher for the distributed tests: runs a list of cases on `world_size`
processes (CPU, gloo) and returns each case's per-rank result or error.

Workers are fresh interpreters (`python worker.py`), rendezvous through a file store in a
temporary folder (no port to pick), run every case in order on one process group and write
one JSON file each. NOTE: one launch serves a whole test module: starting 2 interpreters
with torch costs seconds; the cases themselves are quick.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def run_cases(
    cases: list[dict], world_size: int = 2, backend: str = "gloo", timeout: float = 300.0
) -> dict:
    """cases: [{"name", "fn" (a function name in cases.py), "kwargs"}]; backend "gloo" (CPU)
    or "nccl" (one GPU a rank, NVLink multicast off). Returns
    {name: [rank 0 result, rank 1 result, ...]}, each {"ok": bool, "value" or "error"}."""
    with tempfile.TemporaryDirectory(prefix="torchlite-dist-") as tmp:
        spec = pathlib.Path(tmp, "cases.json")
        spec.write_text(json.dumps(cases))
        env = dict(os.environ)
        # NOTE: the parent's sys.path, so workers import the torchlite this test imported
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, sys.path)])
        env["OMP_NUM_THREADS"] = "1"
        env["NCCL_NVLS_ENABLE"] = "0"
        procs = []
        for rank in range(world_size):
            args = [sys.executable, str(HERE / "worker.py"), str(spec), tmp, backend]
            env_r = {**env, "RANK": str(rank), "WORLD_SIZE": str(world_size)}
            log = open(pathlib.Path(tmp, f"log{rank}.txt"), "w")  # noqa: SIM115
            procs.append((subprocess.Popen(args, env=env_r, stdout=log, stderr=log), log))
        try:
            for p, _ in procs:
                p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p, _ in procs:
                p.kill()
        finally:
            for p, log in procs:
                p.wait()
                log.close()
        return _collect(cases, tmp, world_size, [p.returncode for p, _ in procs])


def _collect(cases: list[dict], tmp: str, world_size: int, codes: list[int]) -> dict:
    results: dict = {c["name"]: [None] * world_size for c in cases}
    for rank in range(world_size):
        out = pathlib.Path(tmp, f"result{rank}.json")
        log = pathlib.Path(tmp, f"log{rank}.txt").read_text()[-4000:]
        done = json.loads(out.read_text()) if out.exists() else {}
        for c in cases:
            results[c["name"]][rank] = done.get(c["name"]) or {
                "ok": False,
                "error": f"rank {rank} exited with {codes[rank]} before this case ended:\n{log}",
            }
    return results


def values(results: dict, name: str) -> list:
    """The per-rank values of a case; fails the test with the workers' error otherwise."""
    per_rank = results[name]
    errors = [f"rank {i}: {r['error']}" for i, r in enumerate(per_rank) if not r["ok"]]
    if errors:
        raise AssertionError(f"distributed case {name} failed:\n" + "\n".join(errors))
    return [r["value"] for r in per_rank]
