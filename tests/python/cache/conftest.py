"""Helpers of the disk-cache and dump tests: child processes with their own settings, and an
attacker (another local user) that plants files."""

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run_python_process

from torchlite import _C

ROOT = Path(__file__).resolve().parents[3]

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

# A compiled function (argv: scale, size) checked against eager, called once (so cache_hits
# counts kernels read from disk only, not guard hits); prints torchlite's counters.
CHILD = r"""
import json, sys, torch, torchlite
scale, n = float(sys.argv[1]), int(sys.argv[2])
def f(x):
    return torch.sin(x) * scale + 1
x = torch.randn(n)
torch.testing.assert_close(torchlite.compile(f)(x), torch.sin(x) * scale + 1)
print(json.dumps(torchlite.counters()))
"""


def run_child(env: dict, code: str = CHILD, args=(2.0, 64), timeout=120, umask=None):
    """Runs `code` in a fresh interpreter with the given TORCHLITE_* settings; returns
    (parsed last stdout line, stderr). Fails the test on a non-zero exit or a timeout."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("TORCHLITE_")}
    full.update(env, PYTHONPATH=str(ROOT))
    r = run_python_process(code, full, timeout, args=args, umask=umask)
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _attacker_uid():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


ATTACKER_UID = _attacker_uid()
needs_two_users = pytest.mark.skipif(
    ATTACKER_UID is None, reason="needs root, setpriv and a 'nobody' user to play the attacker"
)


def as_attacker(script: str):
    """Runs a shell script as another local user (nobody)."""
    cmd = ["setpriv", f"--reuid={ATTACKER_UID}", f"--regid={ATTACKER_UID}", "--clear-groups"]
    r = subprocess.run(
        [*cmd, "sh", "-c", script], check=False, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr


def entries(cache: Path, kind="cpu", suffix=".o"):
    return sorted((cache / kind).glob("*" + suffix))


def fresh_sin(scale: float):
    """sin(x) * scale + 1 as a new code object each call: once it is dropped, its kernels are
    freed, so compiling the same body again reads the disk cache (in this process)."""
    import torch

    scope = {"torch": torch}
    exec(f"def f(x):\n    return torch.sin(x) * {scale!r} + 1\n", scope)  # noqa: S102
    return scope["f"]


def compile_once(scale: float = 2.0, n: int = 64) -> dict:
    """Compiles and runs a fresh function once (checked against eager) and drops it; returns
    the counters' changes (cache_hits: kernels read from disk, since a single call has no
    guard hit)."""
    import gc

    import torch

    import torchlite

    before = torchlite.counters()
    f = fresh_sin(scale)
    x = torch.randn(n)
    torch.testing.assert_close(torchlite.compile(f)(x), torch.sin(x) * scale + 1)
    after = torchlite.counters()
    del f
    gc.collect()
    return {k: after[k] - before[k] for k in ("kernels", "cache_hits")}


@pytest.fixture
def use_cache(monkeypatch):
    """Points this process's disk cache at a folder (compiles and _C._disk_cache_* calls)."""
    import torchlite
    from torchlite import settings

    def use(folder, max_mb=None):
        monkeypatch.setattr(torchlite.config, "cache_dir", str(folder))
        if max_mb is not None:
            monkeypatch.setattr(torchlite.config, "cache_max_mb", max_mb)
        settings.apply_process_settings()

    yield use
    monkeypatch.undo()
    settings.apply_process_settings()
