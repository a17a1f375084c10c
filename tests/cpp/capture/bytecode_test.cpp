// The decoder is checked against dis on every instruction of every code object
// of a corpus (nested code objects included), on the Python it is built for.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "bytecode/decode.h"
#include "bytecode/opcode_tables.h"
#include "core/errors.h"
#include "core/py_ref.h"

using tl::PyRef;

namespace {

// dis's view, with EXTENDED_ARG folded the way decode() folds it: one row per
// instruction at the offset of its first prefix.
const char* kHelpers = R"PY(
import dis, opcode

def all_codes(code):
    out = [code]
    for c in code.co_consts:
        if isinstance(c, type(code)):
            out.extend(all_codes(c))
    return out

def expected(code):
    # NOTE: the start of each source line as 3.11/3.12's dis.findlinestarts reports it; 3.13's
    # also reports a change to "no line" (None) and back, which decode() does not.
    line_starts, last = set(), None
    for start, _, ln in code.co_lines():
        if ln is not None and ln != last:
            last = ln
            line_starts.add(start)
    rows, group = [], []
    for ins in dis.get_instructions(code):
        group.append(ins)
        if ins.opname == 'EXTENDED_ARG':
            continue
        first = group[0]
        jump = ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs
        line = first.positions.lineno
        starts = any(g.offset in line_starts for g in group)
        rows.append('%s %d @%d ->%d line %d%s' % (ins.opname, ins.arg or 0, first.offset,
                    ins.argval if jump else -1, -1 if line is None else line,
                    ' starts' if starts else ''))
        group = []
    return rows

def expected_table(code):
    return ['[%d, %d) -> %d depth %d%s' % (e.start, e.end, e.target, e.depth,
            ' lasti' if e.lasti else '') for e in dis._parse_exception_table(code)]

def opcode_row(op):
    name = opcode.opname[op]
    known = op in opcode.opmap.values() and not name.startswith('<')
    flags = [f for f, s in (('jump', opcode.hasjrel), ('const', opcode.hasconst),
             ('name', opcode.hasname), ('local', opcode.haslocal), ('free', opcode.hasfree),
             ('compare', opcode.hascompare)) if op in s]
    if not known:
        flags = []  # 3.12.1 still lists the removed LOAD_CLASSDEREF (148) in hasfree
    if 'jump' in flags and 'JUMP_BACKWARD' in name:
        flags.append('backward')
    caches = opcode._inline_cache_entries  # 3.13: a dict by name (a list by opcode before)
    n = caches.get(name, 0) if isinstance(caches, dict) else caches[op]
    return '%d %s known=%d caches=%d %s' % (op, name, known, n, ','.join(flags))
)PY";

PyObject* helpers() {  // returns a borrowed dict, alive for the whole run
  static PyRef ns = [] {
    PyRef d = PyRef::steal(PyDict_New());
    PyDict_SetItemString(d.get(), "__builtins__", PyEval_GetBuiltins());
    PyRef r = PyRef::steal(PyRun_String(kHelpers, Py_file_input, d.get(), d.get()));
    if (!r) PyErr_Print();
    REQUIRE(r);
    return d;
  }();
  return ns.get();
}

// Calls helpers()[fn](arg); returns a new reference (arg is borrowed).
PyRef call_helper(const char* fn, PyObject* arg) {
  PyObject* f = PyDict_GetItemString(helpers(), fn);  // borrowed
  REQUIRE(f != nullptr);
  PyRef r = PyRef::steal(PyObject_CallOneArg(f, arg));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return r;
}

std::vector<std::string> str_list(PyObject* list) {  // borrows list
  std::vector<std::string> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i)
    out.push_back(PyUnicode_AsUTF8(PyList_GET_ITEM(list, i)));
  return out;
}

std::string row(const tl::bytecode::Bytecode& bc, const tl::bytecode::Instruction& in) {
  std::ostringstream os;
  int target = in.jump_target >= 0 ? bc.insts[in.jump_target].offset : -1;
  os << in.opname << " " << in.arg << " @" << in.offset << " ->" << target << " line " << in.line
     << (in.starts_line ? " starts" : "");
  return os.str();
}

PyRef compile_source(const std::string& src) {
  PyRef code = PyRef::steal(Py_CompileString(src.c_str(), "<corpus>", Py_file_input));
  if (!code) PyErr_Print();
  REQUIRE(code);
  return code;
}

// Compares decode() with dis for the module code of `src` and every code
// object nested in it; returns how many instructions were compared.
size_t check_against_dis(const std::string& src) {
  PyRef module = compile_source(src);
  PyRef codes = call_helper("all_codes", module.get());
  size_t compared = 0;
  for (Py_ssize_t c = 0; c < PyList_GET_SIZE(codes.get()); ++c) {
    auto* code = reinterpret_cast<PyCodeObject*>(PyList_GET_ITEM(codes.get(), c));
    INFO("code object " << PyUnicode_AsUTF8(code->co_qualname));
    tl::bytecode::Bytecode bc = tl::bytecode::decode(code);
    auto want = str_list(call_helper("expected", reinterpret_cast<PyObject*>(code)).get());
    REQUIRE(bc.insts.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("instruction " << i);
      CHECK(row(bc, bc.insts[i]) == want[i]);
      CHECK(bc.index_at_offset(bc.insts[i].offset) == static_cast<int>(i));
    }
    auto want_table =
        str_list(call_helper("expected_table", reinterpret_cast<PyObject*>(code)).get());
    REQUIRE(bc.exception_table.size() == want_table.size());
    for (size_t i = 0; i < want_table.size(); ++i) {
      const tl::bytecode::ExceptionTableEntry& e = bc.exception_table[i];
      std::ostringstream os;
      os << "[" << e.start << ", " << e.end << ") -> " << e.target << " depth " << e.depth
         << (e.lasti ? " lasti" : "");
      CHECK(os.str() == want_table[i]);
      CHECK(bc.index_at_offset(e.target) >= 0);
    }
    compared += want.size();
  }
  return compared;
}

bool has_extended_arg_source(PyCodeObject* code) {  // borrows code
  PyRef bytes = PyRef::steal(PyCode_GetCode(code));
  auto* p = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(bytes.get()));
  for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(bytes.get()); i += 2)
    if (p[i] == EXTENDED_ARG) return true;
  return false;
}

// A function with 300 locals, constants and attribute names inside a loop and
// a try block, so consts, names, locals, forward and backward jumps and the
// exception table all need more than one byte (EXTENDED_ARG, long varints).
std::string big_function_source() {
  std::ostringstream os;
  os << "def big(x):\n    for _ in range(2):\n        try:\n            if x:\n";
  for (int i = 0; i < 300; ++i)
    os << "                v" << i << " = x.attr" << i << " + " << i << ".5\n";
  os << "        except AttributeError:\n            x = v299\n    return x\n";
  return os.str();
}

}  // namespace

TEST_CASE("opcode table matches the opcode module of the running Python", "[capture]") {
  for (int op = 0; op < 256; ++op) {
    PyRef py_op = PyRef::steal(PyLong_FromLong(op));
    PyRef want = call_helper("opcode_row", py_op.get());
    unsigned f = tl::bytecode::opcode_flags(op);
    std::ostringstream os;
    os << op << " " << tl::bytecode::opcode_name(op)
       << " known=" << tl::bytecode::is_known_opcode(op)
       << " caches=" << tl::bytecode::inline_cache_entries(op) << " ";
    const char* sep = "";
    for (auto [bit, name] : {std::pair<unsigned, const char*>{tl::bytecode::kJump, "jump"},
                             {tl::bytecode::kConst, "const"},
                             {tl::bytecode::kName, "name"},
                             {tl::bytecode::kLocal | tl::bytecode::kLocalPair, "local"},
                             {tl::bytecode::kFree, "free"},
                             {tl::bytecode::kCompare, "compare"},
                             {tl::bytecode::kBackward, "backward"}}) {
      if (f & bit) os << sep << name, sep = ",";
    }
    CHECK(os.str() == PyUnicode_AsUTF8(want.get()));
  }
}

TEST_CASE("straight-line arithmetic and comparisons decode like dis", "[capture]") {
  CHECK(check_against_dis(R"PY(
SCALE = 3
def straight(x, y):
    a = x + y * 2
    b = a - x / 3 // SCALE
    c = -a ** 2 % 5 @ b if a else ~b
    a += 1; b <<= 2; c |= a ^ b & 7
    return a, b, c, a < b, a >= b, a is None, x in (1, 2), not x, f"{x!r:>{y}}"
)PY") > 40);
}

TEST_CASE("calls with keywords, star-args and method calls decode like dis", "[capture]") {
  CHECK(check_against_dis(R"PY(
import operator as op
def calls(x, *args, **kw):
    a = sorted([x, 1], key=abs, reverse=True) + list(map(str, [x]))
    b = op.add(*args, **kw)
    c = x.strip().split(",", maxsplit=1)
    d = print(x, sep="", end="\n", file=None)
    return a, b, c, d, (lambda q, *, r=2: q + r)(1, r=3)
class Base:
    def m(self):
        return 1
class Child(Base):
    def m(self):
        return super().m() + self.__class__.__name__.count("C")
)PY") > 40);
}

TEST_CASE("loops with break, continue and else decode like dis", "[capture]") {
  check_against_dis(R"PY(
def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            continue
        if i > 10:
            break
        total += i
    else:
        total -= 1
    while total > 0:
        total -= 3
        if total == 5:
            break
        for j in (1, 2):
            if j is None or j is not None and total:
                continue
    return total
)PY");
}

TEST_CASE("comprehensions, nested or inlined, decode like dis", "[capture]") {
  check_against_dis(R"PY(
def comps(xs):
    a = [x * 2 for x in xs if x]
    b = {x: y for x in xs for y in range(x)}
    c = {x for x in xs}
    d = list(x for x in xs)
    e = [[y for y in range(x)] for x in xs]
    return a, b, c, d, e
)PY");
}

TEST_CASE("try/except/finally, with blocks and match decode like dis with their tables",
          "[capture]") {
  check_against_dis(R"PY(
def handlers(x):
    try:
        y = 1 / x
    except ZeroDivisionError as e:
        y = str(e)
    except (TypeError, ValueError):
        y = None
    else:
        y += 1
    finally:
        x = 0
    try:
        raise ValueError(y)
    except* ValueError:
        pass
    return y
def withs(path):
    with open(path) as f, open(path) as g:
        return f.read() + g.read()
def matching(v):
    match v:
        case [1, *rest]: return rest
        case {"k": k}: return k
        case int() if v > 3: return v
        case _: return None
)PY");
}

TEST_CASE("closures, generators and coroutines decode like dis", "[capture]") {
  check_against_dis(R"PY(
def closures(x):
    def inner(y):
        nonlocal x
        x += y
        return x
    return inner
def generators(xs):
    yield from xs
    yield 1
async def coro(x):
    async with x as y:
        async for z in y:
            await z
    return [w async for w in x]
global_name = 0
def uses_globals():
    global global_name
    global_name += 1
    del global_name
    import os.path as p
    from os import sep
    return p, sep
)PY");
}

TEST_CASE("more than 256 constants, names and locals fold EXTENDED_ARG like dis", "[capture]") {
  std::string src = big_function_source();
  CHECK(check_against_dis(src) > 1000);
  PyRef module = compile_source(src);
  PyRef codes = call_helper("all_codes", module.get());
  auto* big = reinterpret_cast<PyCodeObject*>(PyList_GET_ITEM(codes.get(), 1));
  REQUIRE(has_extended_arg_source(big));
  tl::bytecode::Bytecode bc = tl::bytecode::decode(big);
  bool long_backward_jump = false, long_const = false;
  for (const tl::bytecode::Instruction& in : bc.insts) {
    CHECK(in.opcode != EXTENDED_ARG);
    if ((tl::bytecode::opcode_flags(in.opcode) & tl::bytecode::kBackward) && in.arg > 255)
      long_backward_jump = true;
    if (in.opcode == LOAD_CONST && in.arg > 255) long_const = true;
  }
  CHECK(long_backward_jump);
  CHECK(long_const);
}

TEST_CASE("index_at_offset maps prefixes to their instruction and rejects caches", "[capture]") {
  PyRef module = compile_source(big_function_source());
  PyRef codes = call_helper("all_codes", module.get());
  tl::bytecode::Bytecode bc =
      tl::bytecode::decode(reinterpret_cast<PyCodeObject*>(PyList_GET_ITEM(codes.get(), 1)));
  for (size_t i = 0; i < bc.insts.size(); ++i) {
    const tl::bytecode::Instruction& in = bc.insts[i];
    int opcode_at = in.next_offset - 2 - 2 * tl::bytecode::inline_cache_entries(in.opcode);
    CHECK(bc.index_at_offset(opcode_at) == static_cast<int>(i));
    if (tl::bytecode::inline_cache_entries(in.opcode) > 0)
      CHECK(bc.index_at_offset(opcode_at + 2) == -1);
  }
  CHECK(bc.index_at_offset(-2) == -1);
  CHECK(bc.index_at_offset(bc.insts.back().next_offset) == -1);
}

TEST_CASE("disassemble lists lines, resolved arguments and jump targets", "[capture]") {
  PyRef module = compile_source(R"PY(
def f(x):
    for i in range(x):
        x = x + i
    return x
)PY");
  PyRef codes = call_helper("all_codes", module.get());
  auto* code = reinterpret_cast<PyCodeObject*>(PyList_GET_ITEM(codes.get(), 1));
  tl::bytecode::Bytecode bc = tl::bytecode::decode(code);
  std::string text = tl::bytecode::disassemble(bc, code);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("   2     ") && Catch::Contains("RESUME"));
  CHECK_THAT(text, Catch::Contains("LOAD_FAST                     0 (x)"));
  CHECK_THAT(text, Catch::Contains("(NULL + range)"));
  CHECK_THAT(text, Catch::Contains("STORE_FAST                    1 (i)"));
  CHECK_THAT(text, Catch::Contains("(+)"));
  CHECK_THAT(text, Catch::Contains(" >> "));
  int for_iter = -1;
  for (const tl::bytecode::Instruction& in : bc.insts)
    if (in.opcode == FOR_ITER) for_iter = in.jump_target;
  REQUIRE(for_iter >= 0);
  CHECK_THAT(text, Catch::Contains("(to " + std::to_string(bc.insts[for_iter].offset) + ")"));
}

TEST_CASE("exception table listing ends with the handler ranges", "[capture]") {
  PyRef module = compile_source("def f(x):\n    try:\n        x()\n    except E:\n        pass\n");
  PyRef codes = call_helper("all_codes", module.get());
  auto* code = reinterpret_cast<PyCodeObject*>(PyList_GET_ITEM(codes.get(), 1));
  tl::bytecode::Bytecode bc = tl::bytecode::decode(code);
  REQUIRE(!bc.exception_table.empty());
  std::string text = tl::bytecode::disassemble(bc, code);
  CHECK_THAT(text, Catch::Contains("ExceptionTable:\n  "));
  CHECK_THAT(text, Catch::Contains(" lasti\n"));
}

TEST_CASE("opcode_name names base opcodes and marks unknown numbers", "[capture]") {
  CHECK(std::string(tl::bytecode::opcode_name(LOAD_FAST)) == "LOAD_FAST");
  CHECK(std::string(tl::bytecode::opcode_name(EXTENDED_ARG)) == "EXTENDED_ARG");
  CHECK(std::string(tl::bytecode::opcode_name(-1)) == "<?>");
}
