"""Random programs around an `assert` on a tensor's value (capture/data_dependent_assert.cpp):
`.item()`, `int()`/`float()` of a tensor or a tensor condition compared with ints, floats,
bools, NaN, huge ints, a size or an attribute; an in-place update before or after; a message.
Each is compiled and run four times against eager on inputs that pass and fail: the result or
the exception (type and message) and the arguments after the call must match. Seeds 51, 1082,
1328, 1491 and 2063 compare an int32/uint8 tensor with 2**53 + 1, which a kernel computed with
a rounded constant (eager compares with the int's low bits). Seeds also run as pytest rewrites
the assert ("pytest") and as `if not (cond): raise ValueError(...)` ("raise")."""

import ast
import random
import re

import pytest
import torch
from _pytest.assertion.rewrite import rewrite_asserts

import torchlite

OPS = ["<", "<=", ">", ">=", "==", "!="]
CONSTS = ["0", "1", "3", "-2", "0.1", "2.5", "1e20", "2**60", "2**53+1", "True", "False"]
CONSTS += ["float('nan')", "float('inf')"]
CONDS = [
    "x.sum().item() {op} {c}",
    "{c} {op} x.max().item()",
    "(x {op} {c}).all()",
    "not (x {op} {c}).any()",
    "int(x.max()) {op} {c}",
    "float(x.min()) {op} {c}",
    "x[0].item()",
    "not x[0].item()",
    "x.max().item() {op} n",
    "x.max().item() {op} holder.v",
]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
DTYPES += [torch.int32, torch.int64, torch.bool, torch.uint8]
SEEDS = list(range(120)) + [1082, 1328, 1491, 2063]


class _Holder:
    v = 4


def _program(seed: int, form: str = "assert"):
    r = random.Random(seed)
    cond = r.choice(CONDS).format(op=r.choice(OPS), c=r.choice(CONSTS))
    pre = r.choice(["", "x = x * 1", "buf.add_(1)", "y0 = x + 1"])
    post = r.choice(
        [
            "return x.float() * 2 + buf",
            "buf.mul_(2)\n    return buf + 1",
            "return (x.float().sum() + n, buf * 1)",
        ]
    )
    msg = r.choice(["", ", 'boom'", ", f'v={n}'"])
    stmt = f"assert {cond}{msg}"
    if r.random() < 0.25 and not cond.startswith("not"):
        stmt = f"torch._assert({cond}, 'm')"
    if form == "raise":
        stmt = f"if not ({cond}):\n        raise ValueError('v=' + str(n))"
    src = f"def f(x, buf, n, holder):\n    {pre}\n    {stmt}\n    {post}\n"
    scope = {"torch": torch}
    tree = ast.parse(src)
    if form == "pytest":
        # NOTE: as pytest rewrites an assert in a test module: steps kept in `@py_assertN`
        # locals, then `if not @py_assertN: raise AssertionError(<explanation>)`.
        rewrite_asserts(tree, src.encode())
    exec(compile(tree, "<program>", "exec"), scope)  # noqa: S102  (a generated test program)
    return src, scope["f"], r


def _inputs(r: random.Random, dtype, gen):
    if dtype == torch.bool:
        x = torch.rand(5, generator=gen) > r.random()
    elif dtype.is_floating_point:
        x = (torch.randn(5, generator=gen) * r.choice([0.1, 1, 5])).to(dtype)
        if r.random() < 0.1:
            x[1] = float("nan")
    else:
        low = 0 if dtype == torch.uint8 else -3
        x = torch.randint(low, 6, (5,), generator=gen).to(dtype)
    return [x, torch.zeros(2), r.choice([3, 5, 7]), _Holder]


def _outcome(fn, args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001  (eager's own exception is the expected result)
        # NOTE: pytest's explanation names objects with their addresses.
        return ("raised", type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e)))


@pytest.mark.parametrize(
    "seed,form",
    [(s, "assert") for s in SEEDS] + [(s, f) for s in SEEDS[:60] for f in ("pytest", "raise")],
)
def test_assert_program_matches_eager(seed, form):
    src, fn, r = _program(seed, form)
    dtype = r.choice(DTYPES)
    gen = torch.Generator().manual_seed(seed)
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for call in range(4):
        args = _inputs(r, dtype, gen)
        eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        comp_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.no_grad():
            want = _outcome(fn, eager_args)
            got = _outcome(compiled, comp_args)
        where = f"seed {seed}, {dtype}, call {call}:\n{src}\nx={args[0]}"
        assert got[0] == want[0], f"{where}\neager {want}\ncompiled {got}"
        if want[0] == "ok":
            torch.testing.assert_close(got[1], want[1], equal_nan=True, msg=where)
        elif form == "pytest":
            # NOTE: pytest's explanation after the user's message prints the values, where a
            # compiled reduction may differ from eager's in the last bits (a break at .item()).
            assert got[1] == want[1], f"{where}\neager {want}\ncompiled {got}"
            assert got[2].split("assert ")[0] == want[2].split("assert ")[0], where
        else:
            assert got[1:] == want[1:], f"{where}\neager {want}\ncompiled {got}"
        torch.testing.assert_close(comp_args[1], eager_args[1], msg=where)
