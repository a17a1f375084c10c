"""Random small Python programs, run eagerly and under torchlite.compile and compared.

`generate(seed)` writes one module's text from a grammar over typed locals: tensors of shape (4,)
("T") and 0-d ("S"), ints, floats, bools, lists, tuples, dicts and sets; arithmetic, comparisons,
indexing, torch functions and tensor methods, in-place tensor ops, container mutation, loops (for
over range/list/zip/enumerate, bounded while), if/else on Python values and on tensor values (a
data-dependent graph break), generated helper functions (inlined), closures (reading and
`nonlocal`-writing the caller's locals), try/except with raises, and global reads and writes.

Risky statements from a second random stream (so adding them kept every program's other
statements) alias tensors and write through the alias or a view (overlapping in-place
operands), alias a global list and rebind the global, loop with zip/enumerate/reversed over a
list the body changes across a graph break, and raise and catch inside loops.

`check_seed(seed)` execs the text twice into two module namespaces (so global side effects of the
eager and the compiled run stay apart), registered in `linecache` under one filename so tracebacks
show the program's lines, and runs `prog` eagerly and compiled twice, mutating the globals of both
namespaces the same way between the calls (the second call checks the guards). Return value,
exception (type, message, the traceback's last line in the program), inputs after the call and the
module globals must match; on a mismatch the AssertionError carries the program text.

Programs are deterministic per seed and small; every loop is bounded (range(k % 4), lists sliced
to four items, while with a counter) and lists never grow inside loops, so every program ends fast.
"""

from __future__ import annotations

import linecache
import random
import re
import sys

import torch
from conformance_check import assert_same_outcome, assert_same_value, run_one

PARAMS = {"x": "T", "y": "T", "n": "I", "f": "F", "flag": "B", "xs": "LT", "ks": "LI", "d": "D"}
GLOBALS_INIT = {
    "G_K": "3",
    "G_F": "0.5",
    "G_L": "[1, 2]",
    "G_D": '{"a": 1}',
    "G_T": "torch.arange(4.0)",
}
# Exception types the generated code raises or can hit, and the handlers it writes.
RAISED = ("ValueError", "KeyError", "IndexError", "RuntimeError", "TypeError")
CAUGHT = (
    "ValueError",
    "KeyError",
    "IndexError",
    "ZeroDivisionError",
    "LookupError",
    "ArithmeticError",
    "Exception",
    "(ValueError, IndexError)",
)
UNARY_TORCH = ("sin", "cos", "tanh", "sigmoid", "relu", "abs", "neg", "exp", "floor")
REDUCTIONS = ("sum()", "mean()", "amax()", "amin()", "max()", "prod()", "norm()", "sum(0)")
KEYS = ('"a"', '"b"', '"c"')


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.lines: list[str] = []
        self.indent = 1
        self.scopes: list[dict[str, str]] = []
        self.frozen: set[str] = set()
        self.loop_depth = 0
        self.block_depth = 0
        self.count = 0
        self.helpers: list[tuple[str, list[tuple[str, str]], str]] = []
        self.in_helper = False
        # NOTE: the risky statements (stmt_risky) draw from a stream of their own and bind only
        # names no other statement reads, so every seed's program keeps the statements it had
        # before they were added (a seed that found a bug still shows it).
        self.q = random.Random(seed * 7919 + 17)

    # --- bookkeeping --------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def emit(self, text: str):
        self.lines.append("    " * self.indent + text)

    def fresh(self, prefix="v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def visible(self, typ: str) -> list[str]:
        seen = {}
        for scope in self.scopes:
            seen.update(scope)
        return [n for n, t in seen.items() if t == typ]

    def mutable(self, typ: str) -> list[str]:
        return [n for n in self.visible(typ) if n not in self.frozen]

    def define(self, name: str, typ: str):
        self.scopes[-1][name] = typ

    # --- expressions --------------------------------------------------------------------------

    def expr(self, typ: str, depth: int = 2) -> str:
        names = self.visible(typ)
        if depth <= 0 or (names and self.chance(0.35)):
            return self.leaf(typ)
        return getattr(self, "expr_" + typ)(depth - 1)

    def leaf(self, typ: str) -> str:
        names = self.visible(typ)
        if names and self.chance(0.85):
            return self.pick(names)
        return {
            "T": lambda: self.pick(["torch.ones(4)", "torch.arange(4.0)", "G_T", "torch.zeros(4)"]),
            "S": lambda: self.leaf("T") + "." + self.pick(REDUCTIONS),
            "I": lambda: str(self.r.randint(-2, 6)),
            "F": lambda: self.pick(["0.5", "-1.25", "2.0", "0.0", "G_F"]),
            "B": lambda: self.pick(["True", "False"]),
            "LI": lambda: self.pick(["[1, 2]", "[]", "[0, 3, 1]", "G_L"]),
            "LT": lambda: f"[{self.leaf('T')}]",
            "D": lambda: self.pick(['{"a": 1}', '{"b": 2, "a": 0}', "G_D"]),
            "TUP": lambda: self.pick(["(1, 2)", "()", "(3,)"]),
            "SET": lambda: self.pick(["{1, 2}", "set()"]),
        }[typ]()

    def index(self, d: int, n: int = 2) -> str:
        """An index that is mostly in range (n items), sometimes anything (IndexError)."""
        return self.expr("I", d) if self.chance(0.2) else f"{self.expr('I', d)} % {n}"

    def expr_T(self, d):
        e = self.expr
        k = self.r.randrange(17)
        if k == 0:
            return f"({e('T', d)} {self.pick('+-*')} {e('T', d)})"
        if k == 1:
            return f"({e('T', d)} {self.pick('+-*')} {e(self.pick(['I', 'F', 'S', 'B']), d)})"
        if k == 2:
            return f"({e(self.pick(['I', 'F']), d)} {self.pick('+-*')} {e('T', d)})"
        if k == 3:
            return f"torch.{self.pick(UNARY_TORCH)}({e('T', d)})"
        if k == 4:
            return f"{e('T', d)}.{self.pick(UNARY_TORCH)}()"
        if k == 5:
            return f"torch.where({e('T', d)} > {e('F', d)}, {e('T', d)}, {e('T', d)})"
        if k == 6:
            return f"torch.{self.pick(['maximum', 'minimum', 'atan2'])}({e('T', d)}, {e('T', d)})"
        if k == 7:
            return f"{e('T', d)}.clamp({e('F', d)}, 2.0)"
        if k == 8:
            return f"{e('T', d)}.flip(0)"
        if k == 9:
            return f"torch.stack([{e('S', d)}, {e('S', d)}, {e('S', d)}, {e('S', d)}]).float()"
        if k == 10:
            return f"torch.cat([{e('T', d)}[:2], {e('T', d)}[2:]])"
        if k == 11:
            return f"{e('LT', d)}[{self.index(d)}]"
        if k == 12:
            return f"{e('T', d)}.reshape(2, 2).t().reshape(4)"
        if k == 13:
            return f"{e('T', d)}[[3, 1, 2, 0]]"
        if k == 14:
            return f"({e('T', d)} / ({e('T', d)}.abs() + 1))"
        if k == 15:
            return f"{e('T', d)}.clone()"
        return f"torch.softmax({e('T', d)}, 0)"

    def expr_S(self, d):
        e = self.expr
        k = self.r.randrange(8)
        if k == 0:
            return f"{e('T', d)}.{self.pick(REDUCTIONS)}"
        if k == 1:
            return f"{e('T', d)}[{self.index(d, 4)}]"
        if k == 2:
            return f"({e('S', d)} {self.pick('+-*')} {e(self.pick(['S', 'F', 'I']), d)})"
        if k == 3:
            return f"torch.dot({e('T', d)}, {e('T', d)})"
        if k == 4:
            return f"({e('T', d)} > {e('F', d)}).sum()"
        if k == 5:
            return f"{e('T', d)}[1:3].sum()"
        if k == 6:
            return f"{e('T', d)}[{e('T', d)} > 0].sum()"
        return f"torch.tensor({e('F', d)})"

    def expr_I(self, d):
        e = self.expr
        k = self.r.randrange(24)
        if k == 0:
            return f"({e('I', d)} {self.pick(['+', '-', '*'])} {e('I', d)})"
        if k == 1:
            return f"({e('I', d)} {self.pick(['//', '%'])} {e('I', d)})"
        if k == 2:
            return f"len({e(self.pick(['LI', 'LT', 'D', 'TUP', 'SET']), d)})"
        if k == 3:
            return self.pick(
                [f"{e('T', d)}.shape[0]", f"{e('T', d)}.size(0)", f"{e('T', d)}.dim()"]
            )
        if k == 4:
            return f"{e('LI', d)}[{self.index(d)}]"
        if k == 5:
            return f"{e('D', d)}[{self.pick(KEYS)}]"
        if k == 6:
            return f"{e('D', d)}.get({self.pick(KEYS)}, {e('I', d)})"
        if k == 7:
            return f"{self.pick(['abs', '-'])}({e('I', d)})"
        if k == 8:
            return f"{self.pick(['min', 'max'])}({e('I', d)}, {e('I', d)})"
        if k == 9:
            return f"int({e(self.pick(['F', 'B']), d)})"
        if k == 10:
            return f"sum({e('LI', d)})"
        if k == 11:
            return f"{e('TUP', d)}[{self.index(d)}]"
        if k == 12:
            return f"({e('I', d)} {self.pick(['&', '|', '^', '<<'])} {self.r.randint(0, 3)})"
        if k == 13:
            return f"{e('LI', d)}.{self.pick(['count', 'index'])}({e('I', d)})"
        if k == 14:
            return f"int({e('S', d)})"
        if k == 15:
            return f"round({e('F', d)})"
        if k == 16:
            return f"({e('I', d)} if {e('B', d)} else {e('I', d)})"
        if k == 17:
            return f"math.floor({e('F', d)})"
        if k == 18:
            return f"{e('I', d)} ** 2"
        if k == 19:
            return f"(~{e('I', d)})"
        if k == 20:
            return f"sum(v * 2 for v in {e('LI', d)})"
        if k == 21:
            return f"({e('B', d)} + {e('I', d)})"
        if k == 22:
            return f"max({e('LI', d)}, default={e('I', d)})"
        return f"len([v for v in {e('LI', d)} if v > {e('I', d)}])"

    def expr_F(self, d):
        e = self.expr
        k = self.r.randrange(10)
        if k == 0:
            return f"({e('F', d)} {self.pick('+-*')} {e(self.pick(['F', 'I']), d)})"
        if k == 1:
            return f"({e('I', d)} / {e('I', d)})"
        if k == 2:
            return f"float({e('I', d)})"
        if k == 3:
            return f"{e('S', d)}.item()" if self.chance(0.3) else f"float({e('S', d)})"
        if k == 4:
            return f"math.sqrt(abs({e('F', d)}))"
        if k == 5:
            return f"round({e('F', d)}, 2)"
        if k == 6:
            return f"abs({e('F', d)})"
        if k == 7:
            return f"({e('F', d)} / ({e('F', d)} + 0.5))"
        if k == 8:
            return f"math.{self.pick(['cos', 'tanh', 'exp'])}({e('F', d)} * 0.1)"
        return f"{e('F', d)} ** 2"

    def expr_B(self, d):
        e = self.expr
        k = self.r.randrange(14)
        if k == 0:
            return f"({e('I', d)} {self.pick(['<', '<=', '==', '!=', '>', '>='])} {e('I', d)})"
        if k == 1:
            return f"({e('F', d)} {self.pick(['<', '>=', '=='])} {e(self.pick(['F', 'I']), d)})"
        if k == 2:
            return f"(not {e('B', d)})"
        if k == 3:
            return f"({e('B', d)} {self.pick(['and', 'or'])} {e('B', d)})"
        if k == 4:
            return f"({e('I', d)} in {e(self.pick(['LI', 'SET', 'TUP']), d)})"
        if k == 5:
            return f"({self.pick(KEYS)} in {e('D', d)})"
        if k == 6:
            return f"bool({e(self.pick(['I', 'LI', 'D', 'SET']), d)})"
        if k == 7:
            return f"(0 <= {e('I', d)} < 3)"
        if k == 8:
            return f"{self.pick(['any', 'all'])}({e('LI', d)})"
        if k == 9:
            typ = self.pick(["I", "F", "T", "LI"])
            cls = self.pick(["int", "float", "torch.Tensor", "list", "(int, float)"])
            return f"isinstance({e(typ, d)}, {cls})"
        if k == 10:
            return f"{e('T', d)}.is_floating_point()"
        if k == 11:
            return f"({e('TUP', d)} == (1, 2))"
        if k == 12:
            return f"bool({e('S', d)} > 0)"
        return f"({e('LT', d)} is {e('LT', d)})"

    def expr_LI(self, d):
        e = self.expr
        k = self.r.randrange(12)
        if k == 0:
            return f"[{e('I', d)}, {e('I', d)}]"
        if k == 1:
            return f"list(range({e('I', d)} % 4))"
        if k == 2:
            return f"[v * 2 for v in {e('LI', d)}]"
        if k == 3:
            return f"({e('LI', d)} + {e('LI', d)})"
        if k == 4:
            return f"{e('LI', d)}[{self.pick(['1:', ':2', '::-1', '1:-1', '::2'])}]"
        if k == 5:
            return f"sorted({e('LI', d)}{self.pick(['', ', reverse=True'])})"
        if k == 6:
            return f"list(reversed({e('LI', d)}))"
        if k == 7:
            return f"list({e('TUP', d)})"
        if k == 8:
            return f"list({e('D', d)}.values())"
        if k == 9:
            return f"sorted({e('SET', d)})"
        if k == 10:
            return f"[a + b for a, b in zip({e('LI', d)}, {e('LI', d)})]"
        return f"list(map(lambda v: v - 1, {e('LI', d)}))"

    def expr_LT(self, d):
        e = self.expr
        k = self.r.randrange(4)
        if k == 0:
            return f"[{e('T', d)}, {e('T', d)}]"
        if k == 1:
            return f"({e('LT', d)} + [{e('T', d)}])"
        if k == 2:
            return f"[t * 2 for t in {e('LT', d)}]"
        return f"{e('LT', d)}[::-1]"

    def expr_D(self, d):
        e = self.expr
        k = self.r.randrange(5)
        if k == 0:
            return f"{{{self.pick(KEYS)}: {e('I', d)}, {self.pick(KEYS)}: {e('I', d)}}}"
        if k == 1:
            return f"dict({e('D', d)})"
        if k == 2:
            return f"{{**{e('D', d)}, {self.pick(KEYS)}: {e('I', d)}}}"
        if k == 3:
            return f"{{k: v + 1 for k, v in {e('D', d)}.items()}}"
        return f"({e('D', d)} | {e('D', d)})"

    def expr_TUP(self, d):
        e = self.expr
        k = self.r.randrange(5)
        if k == 0:
            return f"({e('I', d)}, {e('I', d)})"
        if k == 1:
            return f"tuple({e('LI', d)})"
        if k == 2:
            return f"({e('TUP', d)} + ({e('I', d)},))"
        if k == 3:
            return f"divmod({e('I', d)}, {e('I', d)})"
        return f"tuple({e('T', d)}.shape)"

    def expr_SET(self, d):
        e = self.expr
        k = self.r.randrange(3)
        if k == 0:
            return f"{{{e('I', d)}, {e('I', d)}}}"
        if k == 1:
            return f"set({e('LI', d)})"
        return f"({e('SET', d)} {self.pick(['|', '&', '-'])} {e('SET', d)})"

    # --- statements ---------------------------------------------------------------------------

    def block(self, n: int | None = None):
        self.indent += 1
        self.block_depth += 1
        self.scopes.append({})
        start = len(self.lines)
        for _ in range(n if n is not None else self.r.randint(1, 3)):
            self.stmt()
        if len(self.lines) == start:
            self.emit("pass")
        self.scopes.pop()
        self.block_depth -= 1
        self.indent -= 1

    def stmt(self):
        if self.q.random() < 0.15:
            self.stmt_risky()
        kinds = ["assign"] * 6 + ["reassign"] * 3 + ["inplace"] * 2 + ["mutate"] * 3
        kinds += ["raise_if"] if self.chance(0.5) else ["assert"] if self.chance(0.3) else []
        if self.block_depth < 2:
            kinds += ["if"] * 2 + ["if_tensor", "for_range", "for_list", "for_zip", "while", "try"]
        if self.helpers:
            kinds += ["call"] * 2
        if not self.in_helper and self.block_depth < 2:
            kinds += ["closure"]
        if self.loop_depth:
            kinds += ["break"]
        getattr(self, "stmt_" + self.pick(kinds))()

    # --- risky statements: aliasing, global rebinding, loops over what their body changes ------

    def stmt_risky(self):
        q = self.q
        kinds = ["alias_inplace", "alias_inplace", "global_rebind", "mutated_loop"]
        kinds += ["raise_in_loop"] * 2 if self.loop_depth else []
        getattr(self, "risky_" + kinds[q.randrange(len(kinds))])()

    def q_pick(self, seq):
        return seq[self.q.randrange(len(seq))] if seq else None

    def emit_block(self, lines: list[str]):
        for line in lines:
            self.emit(line)

    def risky_alias_inplace(self):
        """An in-place op through an alias or a view of another name: the operand may overlap
        the tensor written (eager raises there, after the side effects made before it)."""
        ts = self.mutable("T")
        if not ts:
            return
        t, u = self.q_pick(ts), self.q_pick(ts)
        i = self.q.randrange(4)
        view = self.q_pick([t, f"{t}[{i}]", f"{t}[1:3]", f"{t}.view(4)", f"{t}[:2]"])
        self.emit(f"_al = {view}")
        self.emit(
            self.q_pick(
                [
                    f"_al += {u}[{i}]",
                    f"{u}.add_(_al)",
                    f"_al.mul_({u}[{i}])",
                    f"_al.copy_({u}[{i}])",
                    f"{u}[1:3] = _al[0:2]",
                    "_al.sub_(_al.sum())",
                    "_al *= 2",
                ]
            )
        )
        if self.q.random() < 0.5:
            self.emit(f"_ok = _al is {t}")

    def risky_global_rebind(self):
        """A local aliasing a global list, the global rebound, the old list changed after."""
        lists = [n for n in self.mutable("LI") if n != "G_L"]
        declared = "G_L" in self.visible("LI")
        lines = ["_al = G_L"]
        if declared:
            lines.append(
                self.q_pick(
                    [
                        "G_L = list(reversed(_al))",
                        "G_L = _al + [len(_al)]",
                        "G_L = [v + 1 for v in _al][:4]",
                    ]
                )
            )
        if lists and self.q.random() < 0.6:
            k = self.q_pick(lists)
            lines.append(self.q_pick([f"{k} = _al", f"_al = {k}", f"{k} += _al[:2]"]))
        if self.q.random() < 0.6:
            lines.append(self.q_pick(["_al.append(len(_al))", "_al.reverse()", "_al.clear()"]))
        if "G_K" in self.visible("I") and self.q.random() < 0.4:
            lines.append("G_K = G_K + len(G_L)")
        self.emit_block(lines)

    def risky_mutated_loop(self):
        """zip/enumerate/reversed over a list the body changes, with a graph break inside."""
        lists, ts = self.mutable("LI"), self.mutable("T")
        if not lists or not ts:
            return
        k, k2, t = self.q_pick(lists), self.q_pick(lists), self.q_pick(ts)
        header, change = self.q_pick(
            [
                (f"for _i, _v in enumerate({k}):", f"if _i < 2: {k}.append(_v + 1)"),
                (f"for _v, _w in zip({k}, {k2}):", f"if len({k2}) < 6: {k2}.append(_v)"),
                (f"for _v in reversed({k}):", f"{k}[0] = _v + 1"),
                (
                    f"for _i, (_v, _w) in enumerate(zip({k}, {k2})):",
                    f"if len({k}) < 6: {k}.insert(0, _i)",
                ),
                (f"for _v in {k}:", f"if len({k}) < 5: {k}.append(_v * 2)"),
            ]
        )
        body = [change] if self.q.random() < 0.7 else []
        cond = self.q_pick([f"{t}.sum() > 0", f"({t} > 0).any()"])
        body += [f"if {cond}:", f"    {t} = {t} + _v", "else:", f"    {t} = {t} - 1"]
        if self.q.random() < 0.5:
            body.append(change)  # after the break too
        if self.q.random() < 0.3:
            body.append("if _v > 2: break")
        self.emit(header)
        self.emit_block(["    " + line for line in body])

    def risky_raise_in_loop(self):
        """An exception raised and caught inside a loop, leaving it or going on."""
        lists, dicts = self.visible("LI"), self.visible("D")
        raising = ["_al = 1 // (len(_e0) - len(_e0))".replace("_e0", self.q_pick(lists) or "[]")]
        if lists:
            raising.append(f"_al = {self.q_pick(lists)}[{self.q.randrange(2, 6)}]")
        if dicts:
            raising.append(f'_al = {self.q_pick(dicts)}["z"]')
        raising.append(f'raise ValueError("in loop {self.count}")')
        after = self.q_pick(["continue", "break", "pass", "_al = -1"])
        lists_m = self.mutable("LI")
        handler = [after] if not lists_m else [f"{self.q_pick(lists_m)}.append(7)", after]
        self.emit("try:")
        self.emit("    " + self.q_pick(raising))
        self.emit("except (IndexError, KeyError, ZeroDivisionError, ValueError):")
        self.emit_block(["    " + line for line in handler])

    def stmt_assign(self):
        typ = self.pick(["T"] * 4 + ["S", "I", "I", "F", "B", "LI", "LT", "D", "TUP", "SET"])
        name = self.fresh()
        if typ in ("LI", "LT") and self.chance(0.3):
            self.emit(f"{name} = [{self.expr(typ[1], 1)} for _ in range({self.r.randint(0, 3)})]")
        elif typ == "I" and self.chance(0.15):
            other = self.fresh()
            self.emit(f"{name}, {other} = {self.expr('TUP', 1)}")
            self.define(other, "I")
        elif typ == "I" and self.chance(0.1):
            rest = self.fresh()
            self.emit(f"{name}, *{rest} = {self.expr('LI', 1)}")
            self.define(rest, "LI")
        else:
            self.emit(f"{name} = {self.expr(typ)}")
        self.define(name, typ)

    def stmt_reassign(self):
        typ = self.pick(["T", "T", "I", "F", "LI", "S"])
        names = self.mutable(typ)
        if not names:
            return self.stmt_assign()
        name = self.pick(names)
        if typ == "I":
            op = self.pick(["+=", "-=", "^="]) if self.chance(0.5) else "="
            rhs = self.leaf("I") if op != "=" else f"({self.expr('I')}) % 97"
            self.emit(f"{name} {op} {rhs}")
        elif typ == "LI" and not self.loop_depth and self.chance(0.5):
            self.emit(f"{name} += {self.expr('LI', 1)}")
        elif typ == "T" and self.chance(0.4):
            rhs = self.operand_of_inplace(name, self.pick(["T", "F"]))
            self.emit(f"{name} {self.pick(['+=', '-=', '*='])} {rhs}")
        elif typ == "F" and self.chance(0.5):
            self.emit(f"{name} {self.pick(['+=', '*=', '-='])} {self.leaf('F')}")
        else:
            self.emit(f"{name} = {self.expr(typ, 1 if typ == 'LI' else 2)}")

    def operand_of_inplace(self, target: str, typ: str) -> str:
        """An operand for an in-place op on `target`, cloned where it reads `target`.

        NOTE: an operand overlapping the target (t.add_(t[1])) raises in eager; the clone keeps
        most programs running past their in-place ops (risky_alias_inplace makes overlaps).
        """
        e = self.expr(typ, 1)
        return f"({e}).clone()" if typ in "TS" and re.search(rf"\b{target}\b", e) else e

    def stmt_inplace(self):
        names = self.mutable("T")
        if not names:
            return self.stmt_assign()
        t = self.pick(names)
        arg = lambda typ: self.operand_of_inplace(t, typ)
        self.emit(
            self.pick(
                [
                    f"{t}.add_({arg(self.pick(['T', 'S', 'F']))})",
                    f"{t}.mul_({self.expr('F', 1)})",
                    f"{t}.clamp_(-2.0, 2.0)",
                    f"{t}[{self.expr('I', 1)}] = {self.expr('F', 1)}",
                    f"{t}.copy_({arg('T')})",
                    f"{t}.sigmoid_()",
                    f"{t}[1:3] = {arg('S')}",
                ]
            )
        )

    def stmt_mutate(self):
        typ = self.pick(["LI", "LI", "LT", "D", "D", "SET"])
        names = self.mutable(typ)
        if not names:
            return self.stmt_assign()
        c = self.pick(names)
        i = lambda: self.expr("I", 1)
        options = {
            "LI": [
                f"{c}.append({i()})",
                f"{c}.insert({i()}, {i()})",
                f"{c}.pop()",
                f"{c}[{i()}] = {i()}",
                f"del {c}[{i()}]",
                f"{c}.sort()",
                f"{c}.reverse()",
                f"{c}.remove({i()})",
            ]
            + ([] if self.loop_depth else [f"{c}.extend({self.expr('LI', 1)})"]),
            "LT": [f"{c}.append({self.expr('T', 1)})", f"{c}.pop(0)", f"{c}[0] = {self.leaf('T')}"],
            "D": [
                f"{c}[{self.pick(KEYS)}] = {i()}",
                f"{c}.pop({self.pick(KEYS)}, None)",
                f"{c}.update({{{self.pick(KEYS)}: {i()}}})",
                f"del {c}[{self.pick(KEYS[:1])}]",
                f"{c}.setdefault({self.pick(KEYS)}, {i()})",
            ],
            "SET": [f"{c}.add({i()})", f"{c}.discard({i()})", f"{c} |= {{{i()}}}"],
        }[typ]
        self.emit(self.pick(options))

    def stmt_raise_if(self):
        exc = self.pick(RAISED)
        self.emit(f"if {self.expr('B', 1)} and {self.expr('B', 1)}:")
        self.indent += 1
        self.emit(f'raise {exc}("{exc.lower()} " + str({self.expr("I", 1)}))')
        self.indent -= 1

    def stmt_assert(self):
        self.emit(f'assert {self.expr("B", 1)} or {self.expr("B", 1)}, "assertion {self.count}"')

    def stmt_if(self):
        self.emit(f"if {self.expr('B')}:")
        self.block()
        if self.chance(0.5):
            self.emit("else:")
            self.block()

    def stmt_if_tensor(self):
        cond = self.pick(
            [
                f"{self.expr('S', 1)} > {self.expr('F', 0)}",
                f"({self.expr('T', 1)} > 0).any()",
                f"{self.expr('T', 0)}.sum() < 0",
            ]
        )
        self.emit(f"if {cond}:")
        self.block()
        self.emit("else:")
        self.block()

    def loop(self, header: str, var_types: dict[str, str], frozen: str | None = None):
        self.emit(header)
        self.loop_depth += 1
        self.indent += 1
        self.block_depth += 1
        self.scopes.append(dict(var_types))
        if frozen:
            self.frozen.add(frozen)
        for _ in range(self.r.randint(1, 3)):
            self.stmt()
        if frozen:
            self.frozen.discard(frozen)
        self.scopes.pop()
        self.block_depth -= 1
        self.indent -= 1
        self.loop_depth -= 1

    def stmt_for_range(self):
        i = self.fresh("i")
        bound = self.pick([f"{self.expr('I', 1)} % 4", str(self.r.randint(0, 3))])
        self.loop(f"for {i} in range({bound}):", {i: "I"})

    def stmt_for_list(self):
        typ = self.pick(["LI", "LT", "D"])
        src = self.expr(typ, 1)
        e = self.fresh("e")
        if typ == "D":
            k = self.fresh("k")
            return self.loop(f"for {k}, {e} in list({src}.items())[:4]:", {e: "I"})
        if self.chance(0.4):
            j = self.fresh("j")
            return self.loop(f"for {j}, {e} in enumerate({src}[:4]):", {j: "I", e: typ[1]})
        self.loop(f"for {e} in {src}[:4]:", {e: typ[1]})

    def stmt_for_zip(self):
        a, b = self.fresh("e"), self.fresh("e")
        ta, tb = self.pick(["LI", "LT"]), self.pick(["LI", "LT", "TUP"])
        second = self.expr(tb, 1)
        hdr = f"for {a}, {b} in zip({self.expr(ta, 1)}[:4], {second}):"
        # NOTE: the body does not change `second` here, so loops run their full length;
        # risky_mutated_loop writes loops over lists their body changes.
        frozen = second if second in self.visible(tb) else None
        self.loop(hdr, {a: ta[1], b: "I" if tb != "LT" else "T"}, frozen)

    def stmt_while(self):
        w = self.fresh("w")
        self.emit(f"{w} = 0")
        self.define(w, "I")
        self.frozen.add(w)
        self.emit(f"while {w} < {self.r.randint(1, 3)} and {self.expr('B', 1)}:")
        self.indent += 1
        self.emit(f"{w} += 1")  # NOTE: first, so `continue` cannot skip it
        self.indent -= 1
        self.loop_depth += 1
        self.block(self.r.randint(1, 2))
        self.loop_depth -= 1
        self.frozen.discard(w)

    def stmt_break(self):
        self.emit(f"if {self.expr('B', 1)}:")
        self.indent += 1
        self.emit(self.pick(["break", "continue"]))
        self.indent -= 1

    def stmt_try(self):
        self.emit("try:")
        self.block()
        exc = self.pick(CAUGHT)
        e = self.fresh("err")
        self.emit(f"except {exc} as {e}:")
        self.indent += 1
        self.scopes.append({})
        target = self.mutable("LI")
        if target and self.chance(0.5):
            self.emit(f"{self.pick(target)}.append(len(str({e})))")
        else:
            name = self.fresh()
            self.emit(f"{name} = {self.pick([f'len({e}.args)', f'len(str({e}))', '-1'])}")
        self.scopes.pop()
        self.indent -= 1
        if self.chance(0.3):
            self.emit("finally:")
            self.block(1)

    def stmt_call(self):
        name, params, ret = self.pick(self.helpers)
        args = [self.expr(t, 1) for _, t in params]
        if len(params) > 1 and self.chance(0.3):
            args[-1] = f"{params[-1][0]}={args[-1]}"
        v = self.fresh()
        self.emit(f"{v} = {name}({', '.join(args)})")
        self.define(v, ret)

    def stmt_closure(self):
        c = self.fresh("c")
        captured = self.visible("T") + self.visible("I")
        counters = [n for n in self.mutable("I") if not n.startswith(("i", "e", "j"))]
        counters = [n for n in counters if n not in PARAMS and not n.startswith("G_")]
        if counters and self.chance(0.4):
            v = self.pick(counters)
            self.emit(f"def {c}(p):")
            self.emit(f"    nonlocal {v}")
            self.emit(f"    {v} += 1")
            self.emit(f"    return p * {v}")
        else:
            v = self.pick(captured) if captured else "1"
            self.emit(f"def {c}(p):")
            self.emit(f"    return p + {v}")
        r = self.fresh()
        typ = "T" if self.chance(0.7) or self.type_of(v) == "T" else "S"
        self.emit(f"{r} = {c}({self.expr(typ, 1)})")
        self.define(r, typ)

    def type_of(self, name: str) -> str:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return ""

    # --- whole module -------------------------------------------------------------------------

    def helper(self, index: int):
        name = f"h{index}"
        params = [(p, self.pick(["T", "T", "I", "F", "LI"])) for p in ("a", "b", "c")]
        params = params[: self.r.randint(1, 3)]
        ret = self.pick(["T", "T", "I", "S", "F"])
        self.lines.append(f"def {name}({', '.join(p for p, _ in params)}):")
        self.indent, self.in_helper = 1, True
        self.scopes = [dict(params)]
        for _ in range(self.r.randint(1, 3)):
            self.stmt()
        self.emit(f"return {self.expr(ret)}")
        self.in_helper = False
        self.lines.append("")
        self.helpers.append((name, params, ret))

    def program(self) -> str:
        self.lines += ["import math", "", "import torch", ""]
        self.lines += [f"{k} = {v}" for k, v in GLOBALS_INIT.items()] + [""]
        for index in range(self.r.choice([0, 0, 1, 1, 2])):
            self.helper(index)
        self.lines.append(f"def prog({', '.join(PARAMS)}):")
        self.indent = 1
        self.scopes = [dict(PARAMS)]
        if self.chance(0.3):
            self.emit("global G_K, G_L")
            self.scopes.append({"G_K": "I", "G_L": "LI"})
        for _ in range(self.r.randint(3, 8)):
            self.stmt()
        names = [n for scope in self.scopes for n in scope if n not in ("G_K", "G_L")]
        out = ["x"] + self.r.sample(names, min(len(names), 3))
        self.emit(f"return {', '.join(out)}")
        return "\n".join(self.lines) + "\n"


def generate(seed: int) -> str:
    """The program text for `seed` (deterministic)."""
    return _Gen(seed).program()


# --- running ----------------------------------------------------------------------------------


def make_args(seed: int, call: int):
    """Inputs of `prog`: fresh tensors and Python values per (seed, call)."""
    r = random.Random(seed * 7 + call)
    g = torch.Generator().manual_seed(seed * 7 + call)
    t = lambda: torch.randn(4, generator=g)
    return [
        t(),
        t(),
        r.randint(0, 4),
        r.choice([0.5, -1.5, 2.0]),
        r.random() < 0.5,
        [t(), t()],
        [r.randint(0, 3) for _ in range(r.randint(0, 3))],
        {"a": r.randint(-1, 2), "b": 1},
    ]


def mutate_globals(ns: dict, call: int):
    """The same change to both namespaces between calls: the compiled code's guards must see it."""
    if call == 1:
        ns["G_K"] = ns["G_K"] + 2
        ns["G_F"] = 1.75
        ns["G_L"].append(4)
        ns["G_D"]["b"] = 7
        ns["G_T"].add_(1.0)


def _filename(seed: int) -> str:
    return f"/torchlite_fuzz/prog_{seed}.py"


def load(seed: int, text: str) -> tuple[dict, dict]:
    """Two module namespaces of one program text, registered in linecache for tracebacks."""
    filename = _filename(seed)
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    code = compile(text, filename, "exec")
    out = []
    for _ in range(2):
        ns = {"__name__": f"torchlite_fuzz_{seed}", "__file__": filename}
        exec(code, ns)  # noqa: S102 - the generated program
        out.append(ns)
    return out[0], out[1]


def _globals_of(ns: dict) -> dict:
    return {k: ns[k] for k in GLOBALS_INIT}


def check_program(seed: int, text: str, backend="torchlite"):
    import torchlite

    eager_ns, comp_ns = load(seed, text)
    compiled = torchlite.compile(comp_ns["prog"], backend=backend)
    filename = _filename(seed)
    for call in range(2):
        if call:
            mutate_globals(eager_ns, call)
            mutate_globals(comp_ns, call)
        eager_args, comp_args = make_args(seed, call), make_args(seed, call)
        expected = run_one(eager_ns["prog"], eager_args, filename)
        actual = run_one(compiled, comp_args, filename)
        assert_same_outcome(actual, expected, f"call {call}")
        assert_same_value(comp_args, eager_args, f"call {call} inputs after the call")
        assert_same_value(_globals_of(comp_ns), _globals_of(eager_ns), f"call {call} globals")


def check_seed(seed: int, backend="torchlite"):
    """Generates, runs and compares program `seed`; AssertionError with the program on mismatch."""
    text = generate(seed)
    try:
        check_program(seed, text, backend)
    except Exception as e:
        numbered = "\n".join(f"{i + 1:3d} {line}" for i, line in enumerate(text.splitlines()))
        raise AssertionError(f"seed {seed}: {type(e).__name__}: {e}\n{numbered}") from e


def _fails(seed: int, text: str) -> bool:
    import torchlite

    torchlite.reset()
    try:
        compile(text, "<candidate>", "exec")
        check_program(seed, text)
    except SyntaxError:
        return False
    except AssertionError:
        return True
    return False


def minimise(seed: int, text: str | None = None) -> str:
    """A smaller program of `seed` that still mismatches: drops lines (a line that ends a block
    becomes `pass`) while the mismatch stays, until no line can go."""
    lines = (text or generate(seed)).splitlines()
    if not _fails(seed, "\n".join(lines) + "\n"):
        raise ValueError(f"program {seed} matches eager; nothing to minimise")
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(lines))):
            line = lines[i]
            if not line.startswith(" ") or line.strip() in ("pass", "") or "return" in line:
                continue
            indent = line[: len(line) - len(line.lstrip())]
            for candidate in (
                lines[:i] + lines[i + 1 :],
                [*lines[:i], indent + "pass", *lines[i + 1 :]],
            ):
                if _fails(seed, "\n".join(candidate) + "\n"):
                    lines, changed = candidate, True
                    break
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # python program_gen.py SEED [--run | --minimise]: print a program (run it, or shrink it).
    seed = int(sys.argv[1])
    print(generate(seed))
    if "--run" in sys.argv[2:]:
        check_seed(seed)
        print("ok")
    if "--minimise" in sys.argv[2:]:
        print(minimise(seed))
