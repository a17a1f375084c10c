// Bridges run the breaking instruction natively and hand the new stack and the
// locals to resume functions, which finish the original function; both keep
// the user's file and lines and are built once per break site.
#include "bytecode/resume.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "bytecode/decode.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::code_of;
using tl::testing::PyModule;
namespace bc = tl::bytecode;

namespace {

const char* kSource = R"PY(
def mul(x, y):
    z = x + 1
    return z * y

def branch(x):
    if x > 0:
        return 'pos'
    return 'neg'

def nested(a):
    return abs(neg(a)) + 1

def neg(a):
    return -a

def raises(x):
    y = x + 1
    return y / 0
)PY";

// Index of the first instruction named `opname` in `fn`'s code.
int index_of(PyObject* fn, const char* opname) {
  tl::bytecode::Bytecode b = tl::bytecode::decode(code_of(fn));
  for (size_t i = 0; i < b.insts.size(); ++i)
    if (b.insts[i].opname == opname) return static_cast<int>(i);
  FAIL("no " << opname);
  return -1;
}

PyRef fn_of(PyObject* code, const PyModule& m) {
  PyRef f = PyRef::steal(PyFunction_New(code, m.dict()));
  PyModule::check(f);
  return f;
}

// bridge(*args) (it makes its resume functions itself); new reference or null with an error set.
PyRef call_bridge(const bc::BridgeCode& codes, const PyModule& m, std::vector<PyObject*> args) {
  PyRef bridge = fn_of(codes.bridge.get(), m);
  return PyRef::steal(PyObject_Vectorcall(bridge.get(), args.data(), args.size(), nullptr));
}

PyRef num(long v) { return PyRef::steal(PyLong_FromLong(v)); }

}  // namespace

TEST_CASE("bridge runs the breaking operator and its resume function returns the result") {
  PyModule m(kSource);
  PyObject* mul = m.get("mul");
  int at = index_of(mul, "BINARY_OP");
  bc::BreakSite site{code_of(mul), -1, false, "VV", {0, 1, 2}};
  // The second BINARY_OP is the multiplication.
  tl::bytecode::Bytecode b = tl::bytecode::decode(code_of(mul));
  for (size_t i = at + 1; i < b.insts.size(); ++i)
    if (b.insts[i].opname == "BINARY_OP") site.index = static_cast<int>(i);
  const bc::BridgeCode& codes = bc::bridge_for(site);
  REQUIRE(codes.resumes.size() == 1);
  PyRef x = num(2), y = num(5), z = num(3);
  PyRef r = call_bridge(codes, m, {x.get(), y.get(), z.get(), z.get(), y.get()});
  PyModule::check(r);
  CHECK(PyLong_AsLong(r.get()) == 15);
  CHECK(&bc::bridge_for(site) == &codes);  // built once
  CHECK(bc::is_bridge(code_of(PyRef::steal(PyFunction_New(codes.bridge.get(), m.dict())).get())));
}

TEST_CASE("bridge at a branch resumes on the side the condition picks") {
  PyModule m(kSource);
  PyObject* branch = m.get("branch");
#if PY_VERSION_HEX >= 0x030C0000
  int at = index_of(branch, "POP_JUMP_IF_FALSE");
#else
  int at = index_of(branch, "POP_JUMP_FORWARD_IF_FALSE");
#endif
  bc::BreakSite site{code_of(branch), at, false, "V", {0}};
  const bc::BridgeCode& codes = bc::bridge_for(site);
  REQUIRE(codes.resumes.size() == 2);
  PyRef x = num(1);
  PyRef yes = call_bridge(codes, m, {x.get(), Py_True});
  PyRef no = call_bridge(codes, m, {x.get(), Py_False});
  PyModule::check(yes);
  PyModule::check(no);
  CHECK(std::string(PyUnicode_AsUTF8(yes.get())) == "pos");
  CHECK(std::string(PyUnicode_AsUTF8(no.get())) == "neg");
}

TEST_CASE("bridge drops NULLs below the call's result and rebuilds them in the resume function") {
  PyModule m(kSource);
  PyObject* nested = m.get("nested");
  tl::bytecode::Bytecode b = tl::bytecode::decode(code_of(nested));
  // The inner call: the first CALL (neg(a)), with (PRE)CALL/KW_NAMES before it.
  int at = index_of(nested, "CALL");
#if PY_VERSION_HEX < 0x030C0000
  at -= 1;  // PRECALL
#endif
#if PY_VERSION_HEX >= 0x030D0000
  // NOTE: 3.13 pushes the NULL above the callable (callable, self_or_null, args).
  const char* layout = "VNVNV";
#else
  const char* layout = "NVNVV";
#endif
  bc::BreakSite site{code_of(nested), at, false, layout, {0}};
  const bc::BridgeCode& codes = bc::bridge_for(site);
  PyRef a = num(4);
  PyObject* abs_fn = PyDict_GetItemString(PyEval_GetBuiltins(), "abs");
  PyRef r = call_bridge(codes, m, {a.get(), abs_fn, m.get("neg"), a.get()});
  PyModule::check(r);
  CHECK(PyLong_AsLong(r.get()) == 5);
}

TEST_CASE("an error after the break points at the user's file and line") {
  PyModule m(kSource);
  PyObject* raises = m.get("raises");
  tl::bytecode::Bytecode b = tl::bytecode::decode(code_of(raises));
  int at = -1;
  for (size_t i = 0; i < b.insts.size(); ++i)
    if (b.insts[i].opname == "STORE_FAST") at = static_cast<int>(i) + 1;  // after y = ...
  bc::BreakSite site{code_of(raises), at, false, "", {0, 1}};
  const bc::BridgeCode& codes = bc::bridge_for(site);
  PyRef x = num(1), y = num(2);
  PyRef r = call_bridge(codes, m, {x.get(), y.get()});
  REQUIRE(!r);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  CHECK(PyErr_GivenExceptionMatches(type, PyExc_ZeroDivisionError));
  // Walk to the innermost traceback entry: the resume function's frame.
  PyObject* t = tb;
  while (PyObject_HasAttrString(t, "tb_next") &&
         PyRef::steal(PyObject_GetAttrString(t, "tb_next")).get() != Py_None)
    t = PyRef::steal(PyObject_GetAttrString(t, "tb_next")).get();
  PyRef line = PyRef::steal(PyObject_GetAttrString(t, "tb_lineno"));
  CHECK(PyLong_AsLong(line.get()) == 19);
  Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
}

TEST_CASE("a function with cell variables cannot be resumed") {
  PyModule m("def f(x):\n    def g():\n        return x\n    return g()\n");
  bc::BreakSite site{code_of(m.get("f")), 3, false, "", {}};
  CHECK_THROWS_AS(bc::bridge_for(site), bc::CannotResume);
}
