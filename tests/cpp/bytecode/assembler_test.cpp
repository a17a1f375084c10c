// Functions assembled from scratch run, long jumps get EXTENDED_ARG prefixes,
// and malformed input is rejected with a message naming the instruction.
#include "bytecode/assembler.h"

#include <catch2/catch.hpp>
#include <string>

#include "bytecode/decode.h"
#include "core/errors.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::function_spec;
using tl::testing::ins;
using tl::testing::make_function;
using tl::testing::PyModule;
namespace bc = tl::bytecode;

namespace {

#if PY_VERSION_HEX >= 0x030C0000
constexpr int kPopJumpIfFalse = POP_JUMP_IF_FALSE;
#else
constexpr int kPopJumpIfFalse = POP_JUMP_FORWARD_IF_FALSE;
#endif

// Appends a jump on the truth of the value on top: 3.13's POP_JUMP_IF_* only
// accept an exact bool (an int 0 would not jump), so TO_BOOL goes first there.
void jump_if_false(bc::Assembly& a, int target) {
#ifdef TO_BOOL
  a.insts.push_back(ins(TO_BOOL));
#endif
  a.insts.push_back(ins(kPopJumpIfFalse, 0, bc::kNoLabel, target));
}

// Index and byte offset of the jump jump_if_false appends after RESUME and one LOAD_FAST.
#ifdef TO_BOOL
constexpr int kJumpIndex = 3;
constexpr int kJumpByte = 4 + 8;  // TO_BOOL and its 3 CACHE units
#else
constexpr int kJumpIndex = 2;
constexpr int kJumpByte = 4;
#endif

// A tuple of Python values given as source text; new reference.
PyRef values(const char* expr) {
  PyRef globals = PyRef::steal(PyDict_New());
  PyRef v = PyRef::steal(PyRun_String(expr, Py_eval_input, globals.get(), globals.get()));
  PyModule::check(v);
  return v;
}

// repr(fn(*args)), or "raise <type>"; fn is borrowed, args is source text.
std::string call_repr(PyObject* fn, const char* args) {
  PyRef r = PyRef::steal(PyObject_Call(fn, values(args).get(), nullptr));
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

std::string co_code(const PyRef& code) {
  PyRef b = PyRef::steal(PyCode_GetCode(reinterpret_cast<PyCodeObject*>(code.get())));
  return std::string(PyBytes_AS_STRING(b.get()), PyBytes_GET_SIZE(b.get()));
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

int stacksize(const PyRef& code) {
  return reinterpret_cast<PyCodeObject*>(code.get())->co_stacksize;
}

// f(cond): returns "yes" if cond else "no", with 300 NOPs in the "yes" branch.
bc::Assembly long_branch() {
  bc::Assembly a;
  a.insts = {ins(RESUME), ins(LOAD_FAST, 0)};
  jump_if_false(a, 1);
  for (int i = 0; i < 300; ++i) a.insts.push_back(ins(NOP));
  a.insts.push_back(ins(LOAD_CONST, 1));
  a.insts.push_back(ins(RETURN_VALUE));
  a.insts.push_back(ins(LOAD_CONST, 2, 1));
  a.insts.push_back(ins(RETURN_VALUE));
  return a;
}

}  // namespace

TEST_CASE("a function assembled from scratch adds its arguments", "[bytecode]") {
  bc::Assembly a;
  a.insts = {ins(RESUME), ins(LOAD_FAST, 0), ins(LOAD_FAST, 1), ins(BINARY_OP, NB_ADD),
             ins(RETURN_VALUE)};
  PyRef code = bc::assemble(a, function_spec(2, {"a", "b"}, values("(None,)")));
  // BINARY_OP carries one CACHE unit, written as zeros.
  CHECK(co_code(code) ==
        bytes({RESUME, 0, LOAD_FAST, 0, LOAD_FAST, 1, BINARY_OP, NB_ADD, 0, 0, RETURN_VALUE, 0}));
  CHECK(stacksize(code) == 2);
  PyRef fn = make_function(code.get());
  CHECK(call_repr(fn.get(), "(2, 3)") == "5");
  CHECK(call_repr(fn.get(), "('a', 'b')") == "'ab'");
  CHECK(call_repr(fn.get(), "(1, 'b')") == "raise TypeError");
}

TEST_CASE("a handler assembled from scratch catches the exception", "[bytecode]") {
  // try: return 10 // x   except: return -1   (CPython's own handler shape)
  bc::Assembly a;
  a.insts = {ins(RESUME),
             ins(LOAD_CONST, 1, 1),
             ins(LOAD_FAST, 0),
             ins(BINARY_OP, NB_FLOOR_DIVIDE),
             ins(RETURN_VALUE, 0, 4),
             ins(PUSH_EXC_INFO, 0, 5),
             ins(POP_TOP, 0, 6),
             ins(POP_EXCEPT),
             ins(LOAD_CONST, 2),
             ins(RETURN_VALUE),
             ins(COPY, 3, 10),
             ins(POP_EXCEPT),
             ins(RERAISE, 1)};
  a.blocks = {{1, 4, 5, 0, false}, {5, 6, 10, 1, true}};
  PyRef code = bc::assemble(a, function_spec(1, {"x"}, values("(None, 10, -1)")));
  // The cleanup handler runs at depth 1 + lasti + exception, then COPY 3.
  CHECK(stacksize(code) == 4);
  PyRef fn = make_function(code.get());
  CHECK(call_repr(fn.get(), "(3,)") == "3");
  CHECK(call_repr(fn.get(), "(0,)") == "-1");
  CHECK(call_repr(fn.get(), "('s',)") == "-1");
}

TEST_CASE("a forward jump over 300 code units gets an EXTENDED_ARG prefix", "[bytecode]") {
  PyRef code = bc::assemble(long_branch(), function_spec(1, {"c"}, values("(None, 'yes', 'no')")));
  std::string units = co_code(code);
  // RESUME, LOAD_FAST, (3.13: TO_BOOL,) then the prefix with the high byte of 302.
  REQUIRE(units.size() > kJumpByte + 4);
  CHECK(units[kJumpByte] == static_cast<char>(EXTENDED_ARG));
  CHECK(units[kJumpByte + 1] == 1);
  CHECK(units[kJumpByte + 2] == static_cast<char>(kPopJumpIfFalse));
  CHECK(units[kJumpByte + 3] == 302 - 256);
  tl::bytecode::Bytecode decoded =
      tl::bytecode::decode(reinterpret_cast<PyCodeObject*>(code.get()));
  CHECK(decoded.insts[kJumpIndex].arg == 302);
  CHECK(decoded.insts[decoded.insts[kJumpIndex].jump_target].arg == 2);  // LOAD_CONST 'no'
  PyRef fn = make_function(code.get());
  CHECK(call_repr(fn.get(), "(True,)") == "'yes'");
  CHECK(call_repr(fn.get(), "(0,)") == "'no'");
}

TEST_CASE("a loop around 300 code units jumps back through EXTENDED_ARG", "[bytecode]") {
  // acc = 0; while n: (300 NOPs) n -= 1; acc += 1; return acc
  bc::Assembly a;
  a.insts = {ins(RESUME), ins(LOAD_CONST, 0), ins(STORE_FAST, 1), ins(LOAD_FAST, 0, 3)};
  jump_if_false(a, 4);
  const int head_jump = static_cast<int>(a.insts.size()) - 1;
  for (int i = 0; i < 300; ++i) a.insts.push_back(ins(NOP));
  for (int v : {0, 1}) {
    a.insts.push_back(ins(LOAD_FAST, v));
    a.insts.push_back(ins(LOAD_CONST, 1));
    a.insts.push_back(ins(BINARY_OP, v == 0 ? NB_SUBTRACT : NB_ADD));
    a.insts.push_back(ins(STORE_FAST, v));
  }
  a.insts.push_back(ins(JUMP_BACKWARD, 0, bc::kNoLabel, 3));
  a.insts.push_back(ins(LOAD_FAST, 1, 4));
  a.insts.push_back(ins(RETURN_VALUE));
  PyRef code = bc::assemble(a, function_spec(1, {"n", "acc"}, values("(0, 1)")));
  tl::bytecode::Bytecode decoded =
      tl::bytecode::decode(reinterpret_cast<PyCodeObject*>(code.get()));
  const tl::bytecode::Instruction& back = decoded.insts[decoded.insts.size() - 3];
  REQUIRE(back.opcode == JUMP_BACKWARD);
  CHECK(back.arg > 255);
  CHECK(back.jump_target == 3);
  CHECK(decoded.insts[head_jump].arg > 255);
  PyRef fn = make_function(code.get());
  CHECK(call_repr(fn.get(), "(0,)") == "0");
  CHECK(call_repr(fn.get(), "(4,)") == "4");
}

TEST_CASE("extended_arg_count counts the prefixes of each argument width", "[bytecode]") {
  CHECK(bc::extended_arg_count(0) == 0);
  CHECK(bc::extended_arg_count(255) == 0);
  CHECK(bc::extended_arg_count(256) == 1);
  CHECK(bc::extended_arg_count(65535) == 1);
  CHECK(bc::extended_arg_count(65536) == 2);
  CHECK(bc::extended_arg_count(1 << 24) == 3);
}

TEST_CASE("a constant index above 65535 gets two EXTENDED_ARG prefixes", "[bytecode]") {
  bc::Assembly a;
  a.insts = {ins(RESUME), ins(LOAD_CONST, 70000), ins(RETURN_VALUE)};
  PyRef consts = values("tuple(range(70001))");
  PyRef code = bc::assemble(a, function_spec(0, {}, consts));
  CHECK(co_code(code) ==
        bytes({RESUME, 0, EXTENDED_ARG, 1, EXTENDED_ARG, 0x11, LOAD_CONST, 0x70, RETURN_VALUE, 0}));
  CHECK(call_repr(make_function(code.get()).get(), "()") == "70000");
}

TEST_CASE("malformed assemblies are rejected with the instruction named", "[bytecode]") {
  bc::CodeSpec spec = function_spec(1, {"x"}, values("(None,)"));
  bc::Assembly a;
  SECTION("a forward-only jump to an earlier instruction") {
    a.insts = {ins(RESUME, 0, 0), ins(JUMP_FORWARD, 0, bc::kNoLabel, 0)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("cannot jump backward"));
  }
  SECTION("a jump to a label nobody defines") {
    a.insts = {ins(RESUME), ins(JUMP_FORWARD, 0, bc::kNoLabel, 7), ins(RETURN_VALUE)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("label 7, which no instruction"));
  }
  SECTION("a label defined twice") {
    a.insts = {ins(RESUME, 0, 2), ins(NOP, 0, 2)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("label 2 is defined twice"));
  }
  SECTION("a jump without a target") {
    a.insts = {ins(RESUME), ins(JUMP_FORWARD)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("has no target"));
  }
  SECTION("a target on an instruction that is no jump") {
    a.insts = {ins(RESUME, 0, 0), ins(NOP, 0, bc::kNoLabel, 0)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("is not a jump"));
  }
  SECTION("an argument on an opcode without one") {
    a.insts = {ins(RESUME), ins(NOP, 3)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("takes no argument"));
  }
  SECTION("an EXTENDED_ARG written by hand") {
    a.insts = {ins(EXTENDED_ARG, 1), ins(LOAD_CONST, 0), ins(RETURN_VALUE)};
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("cannot be assembled"));
  }
  SECTION("a spec without names") {
    a.insts = {ins(RESUME), ins(LOAD_CONST, 0), ins(RETURN_VALUE)};
    spec.names = PyRef();
    REQUIRE_THROWS_WITH(bc::assemble(a, spec), Catch::Contains("CodeSpec.names must be a tuple"));
  }
}
