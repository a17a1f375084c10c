"""The instruction forms CPython 3.13 introduced, each through capture, a graph break and its
resume function: superinstructions (LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST,
STORE_FAST_LOAD_FAST), CALL_KW, TO_BOOL and the to-bool COMPARE_OP before a jump,
CONVERT_VALUE/FORMAT_SIMPLE/FORMAT_WITH_SPEC, MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE, the
call layout with the NULL above the callable, and FOR_ITER over END_FOR + POP_TOP.

The same sources compile to the older forms on 3.11/3.12, so every test runs there too; the
`uses` checks make sure that on 3.13 the test really exercises the new instruction."""

import dis
import sys
import traceback

import pytest
import torch
from helpers import check, counters, lineno_of
from resume_check import check_resume

import torchlite
from torchlite import _interpreter

PY313 = sys.version_info >= (3, 13)


def uses(fn, *opnames):
    """On 3.13, asserts that `fn` (or a code object nested in it) contains each opname."""
    if not PY313:
        return
    seen = set()
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        seen.update(i.opname for i in dis.get_instructions(code))
        todo.extend(c for c in code.co_consts if isinstance(c, type(code)))
    missing = [op for op in opnames if op not in seen]
    assert not missing, f"{fn.__name__} does not use {missing} on {sys.version}"


# --- superinstructions -------------------------------------------------------------------------


def _swap_and_add(x, y):
    a, b = x, y  # STORE_FAST_STORE_FAST
    a, b = b, a
    c = a + b  # LOAD_FAST_LOAD_FAST
    return c * a - b


def _comprehension(x, ws):
    return sum([w * x for w in ws])  # STORE_FAST_LOAD_FAST in the inlined comprehension


def test_superinstructions_capture_in_one_graph():
    uses(_swap_and_add, "STORE_FAST_STORE_FAST", "LOAD_FAST_LOAD_FAST")
    uses(_comprehension, "STORE_FAST_LOAD_FAST")
    check(_swap_and_add, torch.randn(3, 4), torch.randn(3, 4))
    check(_comprehension, torch.randn(5), [torch.randn(5) for _ in range(3)])


def _superinstructions_around_a_break(x, y):
    a, b = x.sin(), y.cos()
    print("break")  # BREAK
    a, b = b, a
    return a * b + a


def test_superinstructions_in_a_resume_function():
    uses(_superinstructions_around_a_break, "STORE_FAST_STORE_FAST", "LOAD_FAST_LOAD_FAST")
    check_resume(_superinstructions_around_a_break, torch.randn(4), torch.randn(4), graphs=2)


def branch_targets_start_with(fn, marker, opname):
    """On 3.13, asserts that both sides of the conditional jump on `marker`'s line (where the
    two resume functions start) begin with `opname`."""
    if not PY313:
        return
    line = lineno_of(fn, marker)
    insts = list(dis.get_instructions(fn))
    i = next(
        i for i, ins in enumerate(insts) if ins.line_number == line and "JUMP_IF" in ins.opname
    )
    taken = next(ins for ins in insts if ins.offset == insts[i].jump_target)
    assert (insts[i + 1].opname, taken.opname) == (opname, opname), (insts[i + 1], taken)


def _while_head_is_a_superinstruction(x, n):
    i, k = 0, n
    y = x.sin()
    while i < k:
        y = y + i * 2  # the loop body's head: LOAD_FAST_LOAD_FAST (y, i)
        print("step")  # BREAK inside the loop: the body becomes a function of its own
        i += 1
    return y.cos()


def test_loop_body_starting_at_load_fast_load_fast():
    if PY313:
        insts = list(dis.get_instructions(_while_head_is_a_superinstruction))
        back = next(ins for ins in insts if ins.opname == "JUMP_BACKWARD")
        head = next(ins for ins in insts if ins.offset == back.jump_target)
        assert head.opname == "LOAD_FAST_LOAD_FAST", head
    # Two iterations, so the backward jump lands on the superinstruction once. `i` is a
    # per-call number (`y + i * 2` computes `i * 2` in the graph: capture/scalar_inputs.h): the
    # body is one graph with one break for both iterations; the code after print() reads
    # `i < k` and is captured per value, around the graphs before and after the loop.
    check_resume(
        _while_head_is_a_superinstruction,
        torch.randn(4),
        2,
        graphs=5,
        breaks=2,
        loop_body=True,
    )


POS_4 = torch.tensor([0.5, 1.0, 2.0, 0.1])


def _branch_into_load_fast_load_fast(x, y):
    a = x.sin()
    b = y.cos()
    if (a > 0).all():  # BREAK: both resume functions start at LOAD_FAST_LOAD_FAST (a, b)
        return a * b
    return a - b


@pytest.mark.parametrize("x", [POS_4, -POS_4], ids=["true", "false"])
def test_resume_functions_starting_at_load_fast_load_fast(x):
    branch_targets_start_with(_branch_into_load_fast_load_fast, "# BREAK", "LOAD_FAST_LOAD_FAST")
    check_resume(_branch_into_load_fast_load_fast, x, torch.randn(4), graphs=2)


def _superinstructions_with_many_locals(x, y):
    # Seventeen locals: in the resume function the live locals are renumbered, so the pairs
    # after the break name other slots there than here.
    a, b = x.sin(), y.cos()
    l0, l1, l2, l3, l4, l5, l6, l7 = x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7
    m0, m1, m2, m3, m4, m5, m6 = y, y + 1, y + 2, y + 3, y + 4, y + 5, y + 6
    s = (l0 + l1 + l2 + l3 + l4 + l5 + l6 + l7) * (m0 + m1 + m2 + m3 + m4 + m5 + m6)
    t = torch.add(s, _noisy(a))  # BREAK with torch.add, its NULL and s on the stack
    a, b = b, a
    return t + a * b - l7 * m6


def test_superinstructions_with_many_locals_after_a_break():
    fn = _superinstructions_with_many_locals
    assert fn.__code__.co_nlocals > 16
    if PY313:
        line = lineno_of(fn, "# BREAK")
        after = {i.opname for i in dis.get_instructions(fn) if (i.line_number or 0) > line}
        assert {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"} <= after, after
    check_resume(fn, torch.randn(4), torch.randn(4), graphs=3, breaks=1)


# --- calls: CALL_KW, the NULL above the callable, CALL_FUNCTION_EX, super() -------------------


def _scaled(x, *, scale, shift=0.0):
    return x * scale + shift


def _keyword_calls(x, w):
    y = torch.nn.functional.linear(x, weight=w)
    z = _scaled(y, scale=2.0, shift=1.0)
    return torch.sum(z, dim=1, keepdim=True) + y.clamp(min=-1.0, max=1.0)


def test_call_kw():
    uses(_keyword_calls, "CALL_KW")
    check(_keyword_calls, torch.randn(3, 4), torch.randn(5, 4))


def _star_calls(x, args, kwargs):
    y = torch.cat(*args, **kwargs)
    return x.add(*args[0][:1]) + y.sum()


def test_call_function_ex():
    uses(_star_calls, "CALL_FUNCTION_EX")
    x = torch.randn(4)
    check(_star_calls, x, ([torch.randn(4), torch.randn(4)],), {"dim": 0})


def _noisy(v):
    print("inner break")
    return v + 1


def _break_with_null_on_the_stack(x):
    # torch.add and its NULL (3.13: above it), then x.sin(), sit on the stack while the
    # inlined _noisy breaks: the bridge rebuilds them and runs the CALL.
    return torch.add(x.sin(), _noisy(x.cos()))  # BREAK


def test_break_with_a_null_and_a_callable_on_the_stack():
    # One break for both frames (print() inside the inlined call); the caller goes on after its
    # CALL with torch.add, its NULL and x.sin() rebuilt below the callee's result.
    check_resume(_break_with_null_on_the_stack, torch.randn(6), graphs=3, breaks=1)


class _Base(torch.nn.Module):
    def forward(self, x):
        return x.relu()


class _Child(_Base):
    def forward(self, x):
        return super().forward(x) * 2  # LOAD_SUPER_ATTR, method form


def test_super_method_call():
    uses(_Child.forward, "LOAD_SUPER_ATTR")
    check(_Child(), torch.randn(4, 4))


# --- truth tests: TO_BOOL, the to-bool COMPARE_OP --------------------------------------------


def _branch_on_compare(x):
    y = x.cos()
    if x.sum() > 0:  # COMPARE_OP with the to-bool bit, then POP_JUMP_IF_FALSE
        return y + 1
    return y - 1


def _branch_on_truth(x):
    y = x * 2
    if (y > 0).all():  # TO_BOOL, then POP_JUMP_IF_FALSE
        y = y.sin()
    else:
        y = y.cos()
    return y * 3


def _not_of_a_tensor(x):
    y = x + 1
    flag = not (y > 0).any()  # TO_BOOL, UNARY_NOT
    return y * 2 if flag else y * 3


POS, NEG = torch.tensor([0.5, 1.0, 2.0]), torch.tensor([-3.0, -1.0, -0.5])


@pytest.mark.parametrize("x", [POS, NEG], ids=["true", "false"])
def test_break_on_a_compare_resumes_the_taken_branch(x):
    check_resume(_branch_on_compare, x, graphs=2)


@pytest.mark.parametrize("x", [POS, NEG], ids=["true", "false"])
def test_break_on_to_bool_resumes_the_taken_branch(x):
    uses(_branch_on_truth, "TO_BOOL")
    check_resume(_branch_on_truth, x, graphs=2)


def test_both_branches_compile_once_each():
    torchlite.reset()
    compiled = torchlite.compile(_branch_on_truth)
    for x in (POS, NEG, POS, NEG):
        torch.testing.assert_close(compiled(x.clone()), _branch_on_truth(x.clone()))
    before = counters()
    for x in (POS, NEG):
        compiled(x.clone())
    assert counters()["frames"] == before["frames"]


@pytest.mark.parametrize("x", [POS, NEG], ids=["true", "false"])
def test_not_of_a_tensor(x):
    uses(_not_of_a_tensor, "TO_BOOL", "UNARY_NOT")
    torchlite.reset()
    compiled = torchlite.compile(_not_of_a_tensor)
    torch.testing.assert_close(compiled(x.clone()), _not_of_a_tensor(x.clone()))


def _python_truth(x, n, items, name):
    if n and items and not name:  # TO_BOOL on constants: folded while tracing
        return x + len(items)
    return x - n


def test_truth_of_python_values_is_folded_and_guarded():
    torchlite.reset()
    compiled = torchlite.compile(_python_truth)
    for n, items, name in [(2, [1], ""), (0, [1], ""), (2, [], ""), (2, [1], "a")]:
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, n, items, name), _python_truth(x, n, items, name))


# --- f-strings, functions made in the frame, loops ------------------------------------------


def _fstrings(x, tag, width):
    label = f"{tag!r:>{width}}|{tag!s}|{tag!a}|{width:03d}|{tag}"
    return x * len(label), label


def test_fstring_instructions():
    uses(_fstrings, "CONVERT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC")
    check(_fstrings, torch.randn(3), "né", 8)


def _makes_functions(x, k):
    def scale(v, factor=2.0, *, offset=k):  # defaults, kwdefaults and a closure over x
        return v * factor + offset + x

    return scale(x) + scale(x, 3.0, offset=1.0)


def test_set_function_attribute():
    uses(_makes_functions, "SET_FUNCTION_ATTRIBUTE")
    check(_makes_functions, torch.randn(4), 0.5)


def _loop_with_break_inside(x, ws):
    y = x.sin()
    for w in ws:
        y = y + w
        print("step")
        y = y * 2
    return y - 1


LOOP_GRAPHS = 4  # before the loop, the body before and after print(), after the loop


def test_loop_end_after_a_break_in_the_body():
    uses(_loop_with_break_inside, "END_FOR")
    check_resume(
        _loop_with_break_inside,
        torch.randn(4),
        [torch.randn(4) for _ in range(2)],
        graphs=LOOP_GRAPHS,
        breaks=2,
        loop_body=True,
    )


def _loop_exits(x, n):
    y = x
    for i in range(n):
        if i == 2:
            break
        y = y + i
    else:
        y = y * 10
    total = 0
    for a, b in [(1, 2), (3, 4)]:  # UNPACK_SEQUENCE, STORE_FAST_STORE_FAST
        total += a * b
    return y + total


@pytest.mark.parametrize("n", [1, 5])
def test_loop_exits_and_unpacking_targets(n):
    check(_loop_exits, torch.randn(3), n)


# --- errors keep the user's line; generators pass through ---------------------------------------


def _shape_error(x, y):
    z = x.sin()
    return z @ y  # ERROR


def test_error_points_at_the_users_line():
    compiled = torchlite.compile(_shape_error)
    with pytest.raises(RuntimeError) as info:
        compiled(torch.randn(3, 4), torch.randn(5, 6))
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    assert (_shape_error.__code__.co_filename, lineno_of(_shape_error, "# ERROR")) in frames


def _gen(x):
    for i in range(3):
        yield x * i


def _uses_generator(x):
    return sum(_gen(x)) + 1


def test_generator_inside_a_compiled_frame():
    torchlite.reset()
    compiled = torchlite.compile(_uses_generator)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), _uses_generator(x))
    with pytest.raises(TypeError, match="generator function"):
        torchlite.compile(_gen)


# --- the interpreter check ---------------------------------------------------------------------


def test_free_threaded_build_is_refused(monkeypatch):
    monkeypatch.setattr(
        _interpreter.sysconfig,
        "get_config_var",
        lambda name: 1 if name == "Py_GIL_DISABLED" else None,
    )
    with pytest.raises(ImportError, match="free-threaded"):
        _interpreter.check_supported()


def test_unknown_python_version_is_refused(monkeypatch):
    class FakeSys:
        version_info = (3, 14, 0)
        version = "3.14.0 (fake)"
        executable = sys.executable

    monkeypatch.setattr(_interpreter, "sys", FakeSys)
    with pytest.raises(ImportError, match="3.11 to 3.13"):
        _interpreter.check_supported()


def test_running_python_is_accepted():
    _interpreter.check_supported()
