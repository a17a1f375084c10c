"""Programs that crashed the interpreter (issue 20) run correctly or break cleanly.

The programs run in a fresh Python process (`run_programs`), so a regression that segfaults
fails its test instead of killing pytest. Each program defines and checks itself against eager
(the shared `check`: fresh random inputs, the cache hit on later calls); the process reports
the programs that failed by name. Programs are grouped per process: starting one costs seconds.

PYTEST_DONT_REWRITE: the helpers' own `assert` statements must stay plain.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchlite

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)

RUNNER = """\
import sys, traceback
import torch
import torchlite
from helpers import check

programs = {programs!r}
failed = []
for name, src in programs.items():
    torchlite.reset()
    torch.manual_seed(0)
    try:
        exec(compile(src, name, "exec"), {{"torch": torch, "torchlite": torchlite, "check": check}})
    except BaseException:
        failed.append(name)
        print("FAILED", name, file=sys.stderr)
        traceback.print_exc()
print("failed:", failed)
"""


def run_programs(programs: dict, prelude: str = "", timeout: float = 300.0) -> None:
    """Runs each of `programs` (name -> source, after `prelude`) in one subprocess.

    Fails on a crash (naming the signal), or naming the programs that raised.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, TESTS])}
    env.pop("TORCHLITE_DISABLE", None)
    srcs = {n: textwrap.dedent(prelude) + textwrap.dedent(s) for n, s in programs.items()}
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", RUNNER.format(programs=srcs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode < 0:
        pytest.fail(f"crashed with signal {-proc.returncode}:\n{proc.stderr[-6000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-6000:]}"
    assert proc.stdout.strip().endswith("failed: []"), f"{proc.stdout}\n{proc.stderr[-6000:]}"


# --- user-defined iterators (crash 1) ---------------------------------------------------------

USER_ITER = """
class MyIter:
    def __init__(self, n=3):
        self.i = 0
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i
"""

ITERATOR_PROGRAMS = {
    "for_loop_is_one_graph": """
def fn(x):
    for i in MyIter():
        x = x + i
    return x

check(fn, torch.randn(4), fullgraph=True)
check(fn, torch.randn(4), fullgraph=False)
""",
    "enumerate_is_one_graph": """
def fn(x):
    for j, i in enumerate(MyIter()):
        x = x + i * j
    for j, i in enumerate(MyIter(2), 5):
        x = x - i * j
    return x

check(fn, torch.randn(4), fullgraph=True)
check(fn, torch.randn(4), fullgraph=False)
""",
    # The loop leaves early: __next__ must not have run for the items after the break.
    "break_leaves_the_iterator_where_eager_does": """
def fn(x):
    it = MyIter(5)
    for i in it:
        if i == 2:
            break
        x = x + i
    return x + it.i

check(fn, torch.randn(4))
""",
    "iterable_whose_iter_returns_another_iterator": """
class Box:
    def __iter__(self):
        return MyIter(4)

def fn(x):
    for i in Box():
        x = x * i
    return x

check(fn, torch.randn(4))
""",
    "zip_stops_at_the_shortest_like_eager": """
def fn(x):
    a, b = MyIter(5), MyIter(5)
    for p, q in zip(range(2), a):
        x = x + p * q
    for p, q in zip(b, range(2)):
        x = x - p * q
    return x + a.i * 10 + b.i

check(fn, torch.randn(4))
""",
    "next_with_default_unpacking_and_draining_builtins": """
def fn(x):
    it = MyIter(1)
    first = next(it)
    second = next(it, 10)
    a, b, c = MyIter()
    return x + first + second + a * c + sum(MyIter()) + len(list(MyIter(4))) + max(MyIter())

check(fn, torch.randn(4))
""",
    "endless_iterator_left_with_break": """
class Count:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        return self.i

def fn(x):
    for i in Count():
        if i > 3:
            break
        x = x + i
    return x

check(fn, torch.randn(4))
""",
    "getitem_only_sequence_iterates_until_index_error": """
class Seq:
    def __init__(self):
        self.data = [1.0, 2.0, 3.0]

    def __getitem__(self, i):
        return self.data[i]

def fn(x):
    for v in Seq():
        x = x + v
    return x

check(fn, torch.randn(4))
""",
    "iter_returning_a_list_raises_type_error": """
class Bad:
    def __iter__(self):
        return [1, 2]

def fn(x):
    try:
        for v in Bad():
            x = x + v
    except TypeError:
        return x - 1
    return x

check(fn, torch.randn(4), fullgraph=False)
""",
    "next_raising_value_error_is_caught_by_the_caller": """
class Raising:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        if self.i == 2:
            raise ValueError("bad item")
        return self.i

def fn(x):
    r = Raising()
    try:
        for v in r:
            x = x + v
    except ValueError:
        x = x * 3
    return x + r.i

check(fn, torch.randn(4), fullgraph=False)
""",
    "iterator_from_the_caller_is_advanced_as_in_eager": """
def fn(x, it):
    for i in it:
        x = x + i
        if i == 2:
            break
    return x

x = torch.randn(4)
mine, theirs = MyIter(4), MyIter(4)
torch.testing.assert_close(torchlite.compile(fn)(x, mine), fn(x, theirs))
assert mine.i == theirs.i == 2, (mine.i, theirs.i)
""",
}


def test_user_iterator_programs_match_eager():
    run_programs(ITERATOR_PROGRAMS, prelude=USER_ITER)


# --- an exception in a call with keyword arguments, caught by the caller (crash 2) -------------

CAUGHT_CALL_PROGRAMS = {
    "keyword_call_raises_then_loop_over_dict_items": """
def g(x, k=False):
    if k:
        raise ValueError("boom")
    return x + 1

def fn(x, d):
    try:
        x = g(x, k=True)
    except ValueError:
        x = x * 2
    for key, v in d.items():
        x = x + v
    return x

check(fn, torch.randn(4), {"a": 1.0, "b": 2.0}, fullgraph=False)
""",
    "star_args_call_raises_then_keyword_call": """
def g(x, *args, **kwargs):
    if kwargs.get("k"):
        raise KeyError("k")
    return x + len(args)

def fn(x, d):
    try:
        x = g(x, *[1, 2], **{"k": True})
    except KeyError:
        x = x - 1
    x = g(x, 3, k=False)
    for key, v in d.items():
        x = x * v
    return x

check(fn, torch.randn(4), {"a": 1.5, "b": 2.0}, fullgraph=False)
""",
    "method_call_with_keywords_raises_two_frames_down": """
class M:
    def inner(self, x, *, scale):
        if scale > 1:
            raise RuntimeError("too big")
        return x * scale

    def outer(self, x, scale=2):
        return self.inner(x, scale=scale) + 1

def fn(x, d):
    m = M()
    try:
        x = m.outer(x, scale=3)
    except RuntimeError:
        x = m.outer(x, scale=1)
    for key, v in d.items():
        x = x + v
    return x

check(fn, torch.randn(4), {"a": 1.0}, fullgraph=False)
""",
}


def test_exception_in_call_caught_by_caller_programs_match_eager():
    run_programs(CAUGHT_CALL_PROGRAMS)


# A __bool__ or __len__ that returns the object itself made truth() recurse until the C stack
# overflowed; CPython raises TypeError.
DUNDER_RESULT_PROGRAMS = {
    "bool_returning_self_raises_type_error": """
class B:
    def __bool__(self):
        return self

def fn(x):
    try:
        if B():
            return x + 1
    except TypeError:
        return x - 1
    return x

check(fn, torch.randn(4), fullgraph=False)
""",
    "len_returning_self_raises_type_error": """
class L:
    def __len__(self):
        return self

def fn(x):
    try:
        if L():
            return x + 1
    except TypeError:
        x = x - 1
    try:
        return x + len(L())
    except TypeError:
        return x * 2

check(fn, torch.randn(4), fullgraph=False)
""",
    "negative_len_raises_value_error": """
class N:
    def __len__(self):
        return -1

def fn(x):
    try:
        if N():
            return x + 1
    except ValueError:
        return x - 1
    return x

check(fn, torch.randn(4), fullgraph=False)
""",
}


def test_dunder_results_checked_as_cpython_does():
    run_programs(DUNDER_RESULT_PROGRAMS)


# --- torch.compile and torch._dynamo.disable inside a torchlite-compiled call (crash 4) --------

NESTED_PROGRAMS = {
    f"nested_torch_compile_backend_{backend}": f"""
def fn(x):
    def inner(y):
        return y.sin() + 1

    return torch.compile(inner, backend="{backend}")(x) * 2

check(fn, torch.randn(4), fullgraph=False)
"""
    for backend in ("torchlite", "eager", "aot_eager", "inductor")
}
NESTED_PROGRAMS["torch_compiled_module_called_inside"] = """
lin = torch.nn.Linear(4, 4)
compiled = torch.compile(lin, backend="torchlite")

def fn(x):
    return compiled(x).relu()

check(fn, torch.randn(2, 4), fullgraph=False)
"""
NESTED_PROGRAMS["dynamo_disabled_function_called_inside"] = """
@torch._dynamo.disable
def eager_only(y):
    return y.cos() * 3

def fn(x):
    return eager_only(x + 1) - 1

check(fn, torch.randn(4), fullgraph=False)
"""
NESTED_PROGRAMS["torchlite_compiled_function_inside_torch_compile"] = """
inner = torchlite.compile(lambda y: y.sin() + 1)

def fn(x):
    return inner(x) * 2

x = torch.randn(4)
torch.testing.assert_close(torch.compile(fn, backend="eager")(x), fn(x))
"""


def test_nested_torch_compile_programs_match_eager():
    run_programs(NESTED_PROGRAMS)


# Inductor's generated `call(args)` empties its argument list before its kernels run (a graph
# break here): the values handed on at the break are read before the list is replayed.
def list_cleared_before_a_break(args):
    a, b = args
    args.clear()
    print("graph break")
    return a * b + len(args)


def test_list_cleared_before_a_graph_break_hands_its_items_on():
    x, y = torch.randn(4), torch.randn(4)
    mine, theirs = [x, y], [x, y]
    compiled = torchlite.compile(list_cleared_before_a_break)
    torch.testing.assert_close(compiled(mine), list_cleared_before_a_break(theirs))
    assert mine == [] and theirs == []
    again = [torch.randn(4), torch.randn(4)]
    expected = again[0] * again[1]
    torch.testing.assert_close(compiled(again), expected)


# --- KeyboardInterrupt, SystemExit, MemoryError during capture (crash 5) ------------------------

# A user descriptor and a metaclass __getattr__ that the trace runs for real raise once, while
# the frame is being captured: the error must reach the caller, no cache entry may be left, and
# the next call captures afresh.
FATAL_PRELUDE = """
armed = [None]

def boom():
    kind, armed[0] = armed[0], None
    if kind is not None:
        raise kind()

class Desc:
    def __get__(self, obj, owner=None):
        boom()
        return 2.0

    def __set__(self, obj, value):
        pass

class Holder:
    d = Desc()

class Meta(type):
    def __getattr__(cls, name):
        boom()
        return 3.0

class WithMeta(metaclass=Meta):
    pass

HOLDER = Holder()

def expect_propagated(fn, kind):
    compiled = torchlite.compile(fn)
    x = torch.randn(4)
    armed[0] = kind
    try:
        compiled(x)
    except kind:
        pass
    else:
        raise AssertionError(f"{kind.__name__} raised during capture was swallowed")
    assert torchlite._C.cache_entry_count(fn) == 0, "an entry was cached"
    frames = torchlite.counters()["frames"]
    torch.testing.assert_close(compiled(x), fn(x))
    assert torchlite.counters()["frames"] == frames + 1, "the next call did not capture"
"""

FATAL_PROGRAMS = {
    f"{kind}_from_{where}_propagates": f"""
def fn(x):
    return x + {expr}

for _ in range(2):
    torchlite.reset()
    expect_propagated(fn, {kind})
"""
    for kind in ("KeyboardInterrupt", "SystemExit", "MemoryError")
    for where, expr in (("descriptor", "HOLDER.d"), ("metaclass_getattr", "WithMeta.scale"))
}
# Ctrl-C while the interpreter traces a long loop of pure Python arithmetic (C++ only, no
# Python code runs): the signal's KeyboardInterrupt is raised in the trace.
FATAL_PROGRAMS["sigint_during_a_long_trace_propagates"] = """
import signal

def fn(x):
    n = 0
    for i in range(150000):
        n = n + i % 7
    return x + n

def on_alarm(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.05)
try:
    torchlite.compile(fn)(torch.randn(4))
except KeyboardInterrupt:
    pass
else:
    raise AssertionError("Ctrl-C during capture was swallowed (or capture was too quick)")
finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
assert torchlite._C.cache_entry_count(fn) == 0, "an entry was cached"
"""


def test_fatal_errors_during_capture_reach_the_caller_and_cache_nothing():
    run_programs(FATAL_PROGRAMS, prelude=FATAL_PRELUDE)
