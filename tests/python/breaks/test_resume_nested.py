"""A graph break inside inlined calls costs one break, whatever the depth: the graph runs the
code before the break on every level, CPython runs the breaking instruction in the innermost
frame (its caller frames live, at their call lines), then each level goes on after its call in
a resume function of its own, captured by the hook (transformers' fsmt, longformer, led broke
once per nesting level before: the caller stopped at its call and each callee broke again)."""

import sys
import traceback
import zlib

import pytest
import torch
from helpers import assert_same, clone_args, counters
from resume_check import check_resume, inputs, resume_frames

import torchlite


def _crc():
    """An unsupported C call (a graph break with nothing to pass on)."""
    return zlib.crc32(b"torchlite") % 7


# --- two and three levels, breaks by print, an unsupported builtin, a data-dependent branch


def _inner_print(y):
    z = y * 3
    print("inside")
    return z - 1


def _outer_print(x):
    a = x.sin() * 2
    r = _inner_print(a)
    return r + a


def _leaf_crc(t):
    u = t.cos()
    k = _crc()
    return u * k + t


def _middle_crc(t):
    v = t + 1
    w = _leaf_crc(v * 2)
    return w.relu() - v


def _top_crc(x):
    h = x.exp()
    out = _middle_crc(h) * 0.5
    return out + h


def _leaf_branch(t):
    m = t * 2
    if m.sum() > 0:  # data-dependent: both sides go on in resume functions
        return m + 1
    return m - 1


def _middle_branch(t):
    s = t.tanh()
    return _leaf_branch(s) * s


def _top_branch(x):
    y = x + 0.25
    return _middle_branch(y).sum(0) + y.mean()


def test_two_levels_break_once_and_run_both_levels_compiled(capsys):
    # graphs: before the break (both levels), the callee's rest, the caller's rest
    report = check_resume(_outer_print, inputs(4, 3), graphs=3, breaks=1)
    assert len(resume_frames(report)) == 2, str(report)
    # explain, then 3 eager and 3 compiled calls: each printed once
    assert capsys.readouterr().out.count("inside") == 7


def test_three_levels_break_once_at_an_unsupported_builtin():
    report = check_resume(_top_crc, inputs(5), graphs=4, breaks=1)
    assert len(resume_frames(report)) == 3, str(report)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_three_levels_break_once_at_a_data_dependent_branch(sign):
    x = torch.rand(4, 3) * sign + 0.25 * sign
    check_resume(_top_branch, x, graphs=4, breaks=1)


def test_both_sides_of_a_nested_branch_match_eager():
    torchlite.reset()
    compiled = torchlite.compile(_top_branch)
    for sign in (1.0, -1.0, 1.0, -1.0):
        for shape in ((4, 3), (2, 5)):
            x = (torch.rand(*shape) + 0.3) * sign
            assert_same(compiled(clone_args(x)), _top_branch(clone_args(x)))


# --- methods, submodules, closures


class _Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def helper(self, h):
        g = h.sigmoid()
        _crc()
        return g * self.lin.weight.sum()

    def forward(self, x):
        h = self.lin(x)
        return self.helper(h) + h


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = _Leaf()
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.leaf(x.relu()) + x)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        y = self.block(x * 2)
        return self.head(y)


def test_submodule_forwards_and_a_method_break_once():
    torch.manual_seed(0)
    net = _Net().eval()
    with torch.no_grad():
        # Net.forward -> Block.forward -> Leaf.forward -> Leaf.helper
        report = check_resume(net, inputs(3, 4), graphs=5, breaks=1)
    assert len(resume_frames(report)) == 4, str(report)


def _make_scaler(scale, shift):
    def scaled(t):
        u = t * scale
        _crc()
        return u + shift

    return scaled


_scaler = _make_scaler(1.5, -0.5)


def _closure_caller(x):
    a = x.abs()
    return _scaler(a) * a


def test_a_closure_of_a_module_level_function_breaks_once():
    check_resume(_closure_caller, inputs(6), graphs=3, breaks=1)


def _with_locals_on_every_level(x, n):
    def inner(t, k):
        acc = [t * k]
        acc.append(t + k)
        _crc()
        acc.append(t - k)
        return acc

    a = x * n
    parts = inner(a, n + 1)
    return sum(parts) + a, len(parts)


def test_a_function_made_per_call_breaks_at_its_call_and_matches_eager():
    # NOTE: `inner` is made on every call (a closure over nothing the caller owns but its code):
    # the caller breaks at its call and `inner` is captured on its own (two breaks).
    report = check_resume(_with_locals_on_every_level, inputs(4), 3, graphs=4, breaks=2)
    assert report.graph_break_count == 2


def _keyword_and_star_call(x):
    kw = {"scale": 2.0}
    return _kw_leaf(x, **kw) + _kw_leaf(x * 2, scale=3.0)


def _kw_leaf(t, scale=1.0):
    s = t * scale
    _crc()
    return s.sum(0)


def test_calls_with_keywords_and_double_star_break_once_each():
    # two calls of a breaking function: one break each, not two; one resume function of
    # _kw_leaf for both values of `scale` (a number it takes per call)
    check_resume(_keyword_and_star_call, inputs(3, 2), graphs=4, breaks=2)


# --- state across the levels


def _mutates_callers_list(x):
    seen = []
    y = _appends(x, seen)
    return y + len(seen), list(seen)


def _appends(t, out):
    out.append(1)
    _crc()
    out.append(2)
    return t * len(out)


def test_a_list_of_the_caller_mutated_around_the_break_matches_eager():
    torchlite.reset()
    compiled = torchlite.compile(_mutates_callers_list)
    for _ in range(3):
        x = torch.randn(3)
        assert_same(compiled(clone_args(x)), _mutates_callers_list(clone_args(x)))


_GLOBAL_LOG = []


def _writes_global(t):
    _GLOBAL_LOG.append("before")
    u = t + 1
    _crc()
    _GLOBAL_LOG.append("after")
    return u


def _calls_global_writer(x):
    return _writes_global(x * 2) * 3


def test_side_effects_before_a_nested_break_happen_once_in_order():
    torchlite.reset()
    _GLOBAL_LOG.clear()
    compiled = torchlite.compile(_calls_global_writer)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(compiled(x), (x * 2 + 1) * 3)
    assert _GLOBAL_LOG == ["before", "after"] * 3


def _no_grad_inner(t):
    with torch.no_grad():
        u = t * 2
    _crc()
    return u + t


def _grad_outer(x):
    return _no_grad_inner(x.sin()).sum()


def test_grad_mode_and_gradients_through_a_nested_break():
    torchlite.reset()
    compiled = torchlite.compile(_grad_outer)
    for _ in range(2):
        x = torch.randn(4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        out, want = compiled(x), _grad_outer(x2)
        assert_same(out, want)
        out.backward()
        want.backward()
        torch.testing.assert_close(x.grad, x2.grad)
    assert torch.is_grad_enabled()


def test_second_identical_call_hits_the_cache_for_every_level():
    torchlite.reset()
    compiled = torchlite.compile(_top_crc)
    x = torch.randn(5)
    compiled(x)
    before = counters()
    for _ in range(3):
        compiled(x)
    after = counters()
    assert after["frames"] == before["frames"], (before, after)
    assert after["graph_breaks"] == before["graph_breaks"], (before, after)


# --- what CPython sees during and after the break: exceptions, frames


def _leaf_raises_after(t):
    u = t * 2
    _crc()
    if u.sum() > -1e9:
        raise ValueError("after the break")
    return u


def _middle_raises(t):
    v = t + 1
    return _leaf_raises_after(v) - v


def _top_raises(x):
    return _middle_raises(x.cos()) * 2


def _leaf_raises_at(t):
    u = t * 2
    return u + undefined_name  # noqa: F821  (the breaking instruction itself raises)


def _top_raises_at(x):
    y = x + 1
    return _middle_raises_at(y)


def _middle_raises_at(t):
    return _leaf_raises_at(t * 3) + 1


def _middle_raises_after_return(t):
    w = _leaf_crc(t)
    if w.sum() > -1e9:
        raise KeyError("in the caller, after the callee resumed")
    return w


def _top_raises_in_middle(x):
    return _middle_raises_after_return(x.abs())


def _frames(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 (any error: the traceback is what is compared)
        tb = traceback.extract_tb(e.__traceback__)
        return type(e), str(e), [(f.filename, f.name, f.lineno) for f in tb]
    pytest.fail("no exception")


@pytest.mark.parametrize(
    "fn", [_top_raises, _top_raises_at, _top_raises_in_middle], ids=lambda f: f.__name__
)
def test_exceptions_leave_every_level_with_the_users_file_and_line(fn):
    torchlite.reset()
    want = _frames(fn, torch.randn(3))
    compiled = torchlite.compile(fn)
    for _ in range(2):  # the capturing call, then the cached one
        got = _frames(compiled, torch.randn(3))
        # NOTE: the compiled callable's own wrapper adds its entry at the head
        assert got[:2] == want[:2]
        assert got[2][-len(want[2]) + 1 :] == want[2][1:], (got, want)


def _leaf_looks_at_callers(t):
    u = t + 1
    f = sys._getframe(1)  # the caller, as eager has it: the break is here
    return u, f.f_code.co_name, f.f_lineno, sorted(f.f_locals)


def _middle_looks(t):
    s = t * 2
    return _leaf_looks_at_callers(s)


def test_the_innermost_frames_caller_is_the_users_frame_at_its_call_line():
    torchlite.reset()
    x = torch.randn(3)
    want = _middle_looks(x)
    report = torchlite.explain(_middle_looks)(x)
    assert report.graph_break_count == 1, str(report)
    torchlite.reset()
    compiled = torchlite.compile(_middle_looks)
    for _ in range(2):
        got = compiled(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:3] == want[1:3]
        assert got[3] == want[3]


def _prints_pair(a, b):
    print("pair", a, b)


def _passes_a_new_list(x):
    y = x * 2
    _prints_pair(3, [1, 2])  # the list is the callee's local and on its stack at the break
    return y + 1


def test_a_level_the_break_cannot_hand_on_breaks_at_the_call_instead(capsys):
    # NOTE: a list the trace built, named twice at the innermost level (a local, and an argument
    # on the stack), cannot be handed to CPython there; the caller then breaks at its call, as
    # before, and still runs compiled on both sides of it (it ran eagerly whole at first).
    check_resume(_passes_a_new_list, inputs(3), graphs=2, breaks=1)
    assert "pair 3 [1, 2]" in capsys.readouterr().out
