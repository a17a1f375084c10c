"""torchlite's frame hook beside another PEP 523 evaluator (torch.compile's shim) that hands
every frame it does not take to the evaluator it replaced.

Installed in the order below, each of the two records the other as the evaluator to chain to;
a frame neither takes was then handed back and forth forever through tail calls (a hang with
no stack growth: torch.cond, whose eager path runs Dynamo, hung after a mix of both compilers
in one process). The program runs in its own process with a timeout, so a regression fails
the test instead of hanging pytest.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]

PROGRAM = """
import torch
import torchlite
from torchlite import _C

import sys

def plain(y):
    return y * 2

def untraceable(n):
    return sys._getframe(0).f_lineno + n  # a Python frame run as is, through the hooks

def opens_the_other_evaluator(x):
    y = x + 1
    _C._test_chaining_evaluator(1)  # installed over ours: it records our hook
    return y.sin()

# Our compiled region ends while the other evaluator is installed: ours stays recorded there.
f = torchlite.compile(opens_the_other_evaluator)
torch.testing.assert_close(f(torch.ones(3)), (torch.ones(3) + 1).sin())

def calls_python(x):
    return plain(x) + untraceable(1)

# Entering a compiled region again installs our hook over the other one, which records ours.
g = torchlite.compile(calls_python)
for _ in range(3):
    x = torch.randn(3)
    torch.testing.assert_close(g(x), calls_python(x))
print("done")
"""


def test_frames_neither_evaluator_takes_run_once_instead_of_circling():
    out = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", PROGRAM],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),  # NOTE: keeps LD_PRELOAD (ASan builds)
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("done"), out.stdout
