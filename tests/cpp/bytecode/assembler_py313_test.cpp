// The CPython 3.13 instruction forms, assembled by hand: each function is
// written the way 3.13's compiler writes it, must come out byte for byte as
// CPython's own code (CACHE units included), get CPython's stack size, and
// run. The forms are the ones resume functions and loop bodies emit on 3.13:
// TO_BOOL and the to-bool COMPARE_OP before a jump, superinstructions, the
// call layout with the NULL above the callable, CALL_KW, END_FOR + POP_TOP.
#include <Python.h>

#if PY_VERSION_HEX >= 0x030D0000

#include <catch2/catch.hpp>
#include <string>

#include "bytecode/assembler.h"
#include "bytecode/decode.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::code_of;
using tl::testing::function_spec;
using tl::testing::ins;
using tl::testing::make_function;
using tl::testing::PyModule;
using tl::testing::str_tuple;
namespace bc = tl::bytecode;

namespace {

PyRef values(const char* expr) {
  PyRef globals = PyRef::steal(PyDict_New());
  PyRef v = PyRef::steal(PyRun_String(expr, Py_eval_input, globals.get(), globals.get()));
  PyModule::check(v);
  return v;
}

std::string co_code(PyCodeObject* code) {
  PyRef b = PyRef::steal(PyCode_GetCode(code));
  return std::string(PyBytes_AS_STRING(b.get()), PyBytes_GET_SIZE(b.get()));
}

// repr(fn(*args)) with args given as source text, or "raise <type>".
std::string call_repr(const PyRef& fn, const char* args) {
  PyRef r = PyRef::steal(PyObject_Call(fn.get(), values(args).get(), nullptr));
  if (!r) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    std::string out = std::string("raise ") + reinterpret_cast<PyTypeObject*>(type)->tp_name;
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    return out;
  }
  PyRef s = PyRef::steal(PyObject_Repr(r.get()));
  return PyUnicode_AsUTF8(s.get());
}

// Assembles `a` with `spec` and checks it against CPython's compilation of
// `source` (one function named `name`): the same code units and stack size.
PyRef assemble_like(const bc::Assembly& a, const bc::CodeSpec& spec, const char* source,
                    const char* name) {
  PyRef code = bc::assemble(a, spec);
  PyModule m(source);
  PyCodeObject* theirs = code_of(m.get(name));
  auto* ours = reinterpret_cast<PyCodeObject*>(code.get());
  CHECK(co_code(ours) == co_code(theirs));
  CHECK(ours->co_stacksize == theirs->co_stacksize);
  return make_function(code.get());
}

// Superinstruction argument: the first local in the high nibble.
constexpr int pair(int first, int second) { return first << 4 | second; }

}  // namespace

TEST_CASE("3.13: a for loop ends with END_FOR and POP_TOP, FOR_ITER jumping over both",
          "[bytecode][py313]") {
  const char* src = "def f(xs):\n  t = 0\n  for x in xs:\n    t = t + x\n  return t\n";
  bc::Assembly a;
  a.insts = {ins(RESUME),
             ins(LOAD_CONST, 1),
             ins(STORE_FAST, 1),
             ins(LOAD_FAST, 0),
             ins(GET_ITER),
             ins(FOR_ITER, 0, 5, 11),
             ins(STORE_FAST, 2),
             ins(LOAD_FAST_LOAD_FAST, pair(1, 2)),
             ins(BINARY_OP, NB_ADD),
             ins(STORE_FAST, 1),
             ins(JUMP_BACKWARD, 0, bc::kNoLabel, 5),
             ins(END_FOR, 0, 11),
             ins(POP_TOP),
             ins(LOAD_FAST, 1),
             ins(RETURN_VALUE)};
  PyRef fn = assemble_like(a, function_spec(1, {"xs", "t", "x"}, values("(None, 0)")), src, "f");
  CHECK(call_repr(fn, "([1, 2, 3],)") == "6");
  CHECK(call_repr(fn, "([],)") == "0");
  CHECK(call_repr(fn, "(iter('ab'),)") == "raise TypeError");  // 0 + 'a'
  // The decoder sees FOR_ITER's target at END_FOR, as the resume builder expects.
  tl::bytecode::Bytecode d = tl::bytecode::decode(code_of(fn.get()));
  CHECK(d.insts[d.insts[5].jump_target].opcode == END_FOR);
}

TEST_CASE("3.13: TO_BOOL makes the exact bool POP_JUMP_IF_FALSE needs", "[bytecode][py313]") {
  const char* src = "def g(c):\n  if c:\n    return 'yes'\n  return 'no'\n";
  bc::Assembly a;
  a.insts = {ins(RESUME),          ins(LOAD_FAST, 0),
             ins(TO_BOOL),         ins(POP_JUMP_IF_FALSE, 0, bc::kNoLabel, 1),
             ins(RETURN_CONST, 1), ins(RETURN_CONST, 2, 1)};
  PyRef fn = assemble_like(a, function_spec(1, {"c"}, values("(None, 'yes', 'no')")), src, "g");
  CHECK(call_repr(fn, "(1,)") == "'yes'");
  CHECK(call_repr(fn, "(0,)") == "'no'");
  CHECK(call_repr(fn, "([],)") == "'no'");
  CHECK(call_repr(fn, "('x',)") == "'yes'");
  CHECK(call_repr(fn, "(None,)") == "'no'");
}

TEST_CASE("3.13: TO_BOOL feeds UNARY_NOT", "[bytecode][py313]") {
  bc::Assembly a;
  a.insts = {ins(RESUME), ins(LOAD_FAST, 0), ins(TO_BOOL), ins(UNARY_NOT), ins(RETURN_VALUE)};
  PyRef fn = assemble_like(a, function_spec(1, {"x"}, values("(None,)")),
                           "def n(x):\n  return not x\n", "n");
  CHECK(call_repr(fn, "(0,)") == "True");
  CHECK(call_repr(fn, "([1],)") == "False");
}

TEST_CASE("3.13: a to-bool COMPARE_OP jumps without TO_BOOL", "[bytecode][py313]") {
  const char* src = "def m(a, b):\n  if a < b:\n    return 'lt'\n  return 'ge'\n";
  // COMPARE_OP's argument: op << 5 | 16 (convert to bool) | the mask of `<` (2).
  constexpr int kLessToBool = 0 << 5 | 16 | 2;
  bc::Assembly a;
  a.insts = {ins(RESUME),
             ins(LOAD_FAST_LOAD_FAST, pair(0, 1)),
             ins(COMPARE_OP, kLessToBool),
             ins(POP_JUMP_IF_FALSE, 0, bc::kNoLabel, 1),
             ins(RETURN_CONST, 1),
             ins(RETURN_CONST, 2, 1)};
  PyRef fn = assemble_like(a, function_spec(2, {"a", "b"}, values("(None, 'lt', 'ge')")), src, "m");
  CHECK(call_repr(fn, "(1, 2)") == "'lt'");
  CHECK(call_repr(fn, "(2, 2)") == "'ge'");
  CHECK(call_repr(fn, "('a', 'b')") == "'lt'");
  CHECK(call_repr(fn, "(1, 'b')") == "raise TypeError");
}

TEST_CASE("3.13: STORE_FAST_STORE_FAST stores the high nibble's local first", "[bytecode][py313]") {
  const char* src = "def s(x, y):\n  a, b = x, y\n  return a - b\n";
  bc::Assembly a;
  // The tuple is never built: x, y on the stack, y stored into b first.
  a.insts = {ins(RESUME),
             ins(LOAD_FAST_LOAD_FAST, pair(0, 1)),
             ins(STORE_FAST_STORE_FAST, pair(3, 2)),
             ins(LOAD_FAST_LOAD_FAST, pair(2, 3)),
             ins(BINARY_OP, NB_SUBTRACT),
             ins(RETURN_VALUE)};
  PyRef fn = assemble_like(a, function_spec(2, {"x", "y", "a", "b"}, values("(None,)")), src, "s");
  CHECK(call_repr(fn, "(10, 3)") == "7");
  CHECK(call_repr(fn, "(3, 10)") == "-7");
}

TEST_CASE("3.13: STORE_FAST_LOAD_FAST stores then loads in one instruction", "[bytecode][py313]") {
  // y = x * 2; return y + x, with the store of y and the load of y fused.
  bc::Assembly a;
  a.insts = {ins(RESUME),
             ins(LOAD_FAST, 0),
             ins(LOAD_CONST, 1),
             ins(BINARY_OP, NB_MULTIPLY),
             ins(STORE_FAST_LOAD_FAST, pair(1, 1)),
             ins(LOAD_FAST, 0),
             ins(BINARY_OP, NB_ADD),
             ins(RETURN_VALUE)};
  PyRef code = bc::assemble(a, function_spec(1, {"x", "y"}, values("(None, 2)")));
  CHECK(reinterpret_cast<PyCodeObject*>(code.get())->co_stacksize == 2);
  PyRef fn = make_function(code.get());
  CHECK(call_repr(fn, "(5,)") == "15");
  CHECK(call_repr(fn, "('ab',)") == "'ababab'");
}

TEST_CASE("3.13: a callable in a local is called with PUSH_NULL above it", "[bytecode][py313]") {
  // The form resume functions use to call the next resume function.
  const char* src = "def c(fn, x):\n  return fn(x)\n";
  bc::Assembly a;
  a.insts = {ins(RESUME),       ins(LOAD_FAST, 0), ins(PUSH_NULL),
             ins(LOAD_FAST, 1), ins(CALL, 1),      ins(RETURN_VALUE)};
  PyRef fn = assemble_like(a, function_spec(2, {"fn", "x"}, values("(None,)")), src, "c");
  CHECK(call_repr(fn, "(abs, -4)") == "4");
  CHECK(call_repr(fn, "(len, 'abc')") == "3");
}

TEST_CASE("3.13: LOAD_GLOBAL pushes the NULL after the value and CALL_KW pops the names",
          "[bytecode][py313]") {
  const char* src = "def k(a, b):\n  return pow(a, b, mod=7)\n";
  bc::Assembly a;
  a.insts = {ins(RESUME),        ins(LOAD_GLOBAL, 0 << 1 | 1), ins(LOAD_FAST_LOAD_FAST, pair(0, 1)),
             ins(LOAD_CONST, 1), ins(LOAD_CONST, 2),           ins(CALL_KW, 3),
             ins(RETURN_VALUE)};
  bc::CodeSpec spec = function_spec(2, {"a", "b"}, values("(None, 7, ('mod',))"));
  spec.names = str_tuple({"pow"});
  PyRef fn = assemble_like(a, spec, src, "k");
  CHECK(call_repr(fn, "(3, 4)") == "4");   // 81 % 7
  CHECK(call_repr(fn, "(2, 10)") == "2");  // 1024 % 7
}

TEST_CASE("3.13: a while loop tests its condition with TO_BOOL at the head and the end",
          "[bytecode][py313]") {
  const char* src = "def w(n):\n  acc = 0\n  while n:\n    n -= 1\n    acc += 1\n  return acc\n";
  bc::Assembly a;
  a.insts = {ins(RESUME),       ins(LOAD_CONST, 1), ins(STORE_FAST, 1),
             ins(LOAD_FAST, 0), ins(TO_BOOL),       ins(POP_JUMP_IF_FALSE, 0, bc::kNoLabel, 2)};
  bool first = true;
  for (int v : {0, 1}) {
    a.insts.push_back(ins(LOAD_FAST, v, first ? 1 : bc::kNoLabel));
    first = false;
    a.insts.push_back(ins(LOAD_CONST, 2));
    a.insts.push_back(ins(BINARY_OP, v == 0 ? NB_INPLACE_SUBTRACT : NB_INPLACE_ADD));
    a.insts.push_back(ins(STORE_FAST, v));
  }
  a.insts.push_back(ins(LOAD_FAST, 0));
  a.insts.push_back(ins(TO_BOOL));
  a.insts.push_back(ins(POP_JUMP_IF_FALSE, 0, bc::kNoLabel, 2));
  a.insts.push_back(ins(JUMP_BACKWARD, 0, bc::kNoLabel, 1));
  a.insts.push_back(ins(LOAD_FAST, 1, 2));
  a.insts.push_back(ins(RETURN_VALUE));
  PyRef fn = assemble_like(a, function_spec(1, {"n", "acc"}, values("(None, 0, 1)")), src, "w");
  CHECK(call_repr(fn, "(0,)") == "0");
  CHECK(call_repr(fn, "(5,)") == "5");
}

TEST_CASE("3.13: lifting CPython's code and assembling it again keeps every code unit",
          "[bytecode][py313]") {
  // Every form above in one function, through lift() instead of by hand.
  PyModule m(
      "def every(xs, k, *a):\n"
      "  t, u = 0, 1\n"
      "  for x in xs:\n"
      "    if x < k or not u:\n"
      "      t += pow(x, 2, mod=7)\n"
      "    u = f'{x!r:>{k}}'\n"
      "  def inner(v, w=k):\n"
      "    return v + w\n"
      "  return t, u, inner(t), max(a, default=0)\n");
  PyCodeObject* theirs = code_of(m.get("every"));
  bc::Assembly a = bc::lift(tl::bytecode::decode(theirs));
  PyRef code = bc::assemble(a, bc::spec_of(theirs));
  auto* ours = reinterpret_cast<PyCodeObject*>(code.get());
  CHECK(co_code(ours) == co_code(theirs));
  CHECK(ours->co_stacksize == theirs->co_stacksize);
  PyRef fn = PyRef::steal(PyFunction_New(code.get(), m.dict()));
  PyModule::check(fn);
  CHECK(call_repr(fn, "([1, 5, 2], 3, 4, 9)") == "(5, '  2', 8, 9)");
  CHECK(call_repr(fn, "([], 3)") == "(0, 1, 3, 0)");
}

#endif  // PY_VERSION_HEX >= 0x030D0000
