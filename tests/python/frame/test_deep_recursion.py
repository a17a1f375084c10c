"""Deep recursion under the frame hook (issue 20, crash 3).

While any thread is inside a compiled call the hook is installed for the whole
interpreter, so every Python call of every thread nests CPython's evaluator on
the C stack (without a hook CPython runs it in the caller's C frame). These
programs recursed past the 8 MiB thread stack and segfaulted on 3.11, and hit
RecursionError on 3.12 far below sys.getrecursionlimit(); eager returns. Each
runs in its own process so a regression fails the test instead of killing
pytest. Most use _C with Marker standing in for tensors (no torch needed, so
they also run on 3.12 without torch); the last ones are the issue's programs.
"""

import pathlib
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent

# The child loads _C by file (importing torch would take most of its time),
# treats Marker instances as tensors and caches every miss as a graph break.
PRELUDE = f"""
import sys, threading
sys.path.insert(0, {str(HERE)!r})
from c_loader import load_c_without_torch
_C = load_c_without_torch()

class Marker:
    pass

_C._test_set_tensor_types((Marker,))
_C._test_use_stub_compiler(1)

def compiled(fn):
    return _C.CompiledFunction(fn, _C.make_config(None, "torchlite", False, 8, None))

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def rec_with_marker(x, n):
    return 0 if n == 0 else 1 + rec_with_marker(x, n - 1)
"""


def run_child(*parts: str, prelude: str = PRELUDE, timeout: int = 300) -> str:
    """Runs `prelude` and `parts` in a fresh interpreter; returns its stdout,
    failing the test with its stderr when it exits nonzero (a segfault
    included)."""
    code = prelude + "".join(textwrap.dedent(p) for p in parts)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, f"exit code {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout.strip()


def test_recursion_20000_deep_inside_a_compiled_call_returns_as_eager():
    out = run_child(
        """
        sys.setrecursionlimit(21000)
        print(compiled(lambda x: rec(20000))(Marker()), _C.is_hook_installed())
        """
    )
    assert out == "20000 False"


def test_recursion_20000_deep_of_intercepted_frames_returns_as_eager():
    # Every level has a tensor-like argument, so each goes through the cache
    # lookup (a graph-break entry) before it runs.
    out = run_child(
        """
        sys.setrecursionlimit(21000)
        print(compiled(rec_with_marker)(Marker(), 20000))
        """
    )
    assert out == "20000"


def test_recursion_past_the_python_limit_inside_a_compiled_call_raises_recursion_error():
    out = run_child(
        """
        sys.setrecursionlimit(21000)
        def f(x):
            try:
                rec(30000)
            except RecursionError:
                return "RecursionError"
        cf = compiled(f)
        print(cf(Marker()), cf(Marker()), compiled(lambda x: rec(20000))(Marker()))
        """
    )
    assert out == "RecursionError RecursionError 20000"


# A thread parked inside a compiled call (its frame is a graph break run
# eagerly) keeps the hook installed while the main thread recurses.
PARKED = """
inside, release = threading.Event(), threading.Event()
def park(x):
    inside.set()
    release.wait(60)
parked = threading.Thread(target=compiled(park), args=(Marker(),))
parked.start()
inside.wait(60)
assert _C.is_hook_installed()
"""


def test_thread_outside_torchlite_recurses_30000_deep_while_another_is_in_a_compiled_call():
    out = run_child(
        PARKED,
        """
        sys.setrecursionlimit(31000)
        result = []
        t = threading.Thread(target=lambda: result.append(rec(30000)))
        t.start(); t.join()
        result.append(rec(30000))  # the main thread too
        release.set(); parked.join()
        print(*result)
        """,
    )
    assert out == "30000 30000"


def test_thread_outside_torchlite_gets_recursion_error_past_the_limit_while_hook_is_installed():
    out = run_child(
        PARKED,
        """
        sys.setrecursionlimit(5000)
        try:
            rec(6000)
            print("returned")
        except RecursionError:
            print("RecursionError", rec(4900))
        release.set(); parked.join()
        """,
    )
    assert out == "RecursionError 4900"


def test_small_thread_stack_recursion_under_the_hook_returns():
    # threading.stack_size(256 KiB): a few hundred frames fit before the hook
    # moves the recursion to a fresh segment.
    out = run_child(
        PARKED,
        """
        sys.setrecursionlimit(21000)
        threading.stack_size(256 * 1024)
        result = []
        t = threading.Thread(target=lambda: result.append(rec(20000)))
        t.start(); t.join()
        release.set(); parked.join()
        print(*result)
        """,
    )
    assert out == "20000"


def test_hook_adds_no_c_stack_to_a_python_call():
    # C stack per Python frame: a thread outside torchlite while the hook is
    # installed, and a frame inside a compiled call that went through the
    # cache lookup. Both are CPython's own evaluator frames (about 400 bytes
    # on x86-64 3.11); the hook's pass-through leaves by tail call.
    out = run_child(
        PARKED,
        """
        def probe(n, out):
            if n == 0:
                out.append(_C._test_c_stack_address())
                return
            probe(n - 1, out)
        def probe_marker(x, n, out):
            if n == 0:
                out.append(_C._test_c_stack_address())
                return
            probe_marker(x, n - 1, out)
        def per_frame(fn, *args):
            a, b = [], []
            fn(*args, 10, a)
            fn(*args, 510, b)
            return (a[0] - b[0]) / 500
        outside = per_frame(probe)
        inside = compiled(lambda x: per_frame(probe_marker, x))(Marker())
        release.set(); parked.join()
        print(outside, inside)
        """,
    )
    outside, inside = map(float, out.split())
    # NOTE: CPython's evaluator frame alone: about 400 bytes on 3.11/3.12, 560 on 3.13 (measured
    # on x86-64 GCC builds); a hook that called instead of jumping would add its own frame to each one
    evaluator_frame = 640 if sys.version_info >= (3, 13) else 512
    assert 0 < outside <= evaluator_frame, out
    assert inside == outside, out


def test_stack_segments_are_used_only_past_the_thread_stack():
    out = run_child(
        """
        sys.setrecursionlimit(41000)
        cf = compiled(lambda x, n: rec(n))
        cf(Marker(), 1000)
        shallow = _C._test_c_stack_switches()
        cf(Marker(), 40000)
        deep = _C._test_c_stack_switches()
        print(shallow, deep > shallow)
        """
    )
    assert out == "0 True"


# ---- the issue's programs, with torch --------------------------------------

TORCH_PRELUDE = """
import sys, threading
import torch, torchlite

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)
"""


def torch_available() -> bool:
    try:
        import torch  # noqa: F401

        import torchlite  # noqa: F401
    except ImportError:
        return False
    return True


needs_torch = pytest.mark.skipif(not torch_available(), reason="needs torch")


@needs_torch
def test_issue_recursion_20000_deep_in_a_torchlite_compiled_function_matches_eager():
    out = run_child(
        """
        sys.setrecursionlimit(21000)
        def f(x):
            return x * 2 + rec(20000)
        x = torch.randn(4, 3)
        expected = f(x)
        actual = torchlite.compile(f)(x)
        torch.testing.assert_close(actual, expected)
        print("ok")
        """,
        prelude=TORCH_PRELUDE,
    )
    assert out == "ok"


@needs_torch
def test_issue_thread_recursing_while_another_thread_runs_a_torchlite_compiled_call():
    out = run_child(
        """
        sys.setrecursionlimit(31000)
        inside, release = threading.Event(), threading.Event()
        def park(y):
            inside.set()
            release.wait(60)
        @torchlite.compile
        def f(x):
            y = x.sin() + 1
            park(y)
            return y * 2
        x = torch.randn(8)
        results = []
        t = threading.Thread(target=lambda: results.append(f(x)))
        t.start()
        inside.wait(60)
        depth = rec(30000)
        release.set(); t.join()
        torch.testing.assert_close(results[0], (x.sin() + 1) * 2)
        print(depth)
        """,
        prelude=TORCH_PRELUDE,
    )
    assert out == "30000"
