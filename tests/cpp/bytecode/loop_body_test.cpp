// A bridge at a loop head (region mode) calls a generated loop-body function
// once per iteration; run here without the hook, the result must be the
// original function's: break, continue, return, locals first assigned in the
// body, with-blocks around the loop and 3.12's inlined comprehensions.
#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bytecode/decode.h"
#include "bytecode/resume.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::code_of;
using tl::testing::PyModule;
namespace bc = tl::bytecode;

namespace {

const char* kSource = R"PY(
def loop(xs, acc):
    for x in xs:
        if x == 0:
            continue
        if x < 0:
            break
        if x > 100:
            return 'big'
        acc = acc + x
        last = x
    return acc, last

def count(n, i):
    while i < n:
        sq = i * i
        i += 1
    return i, sq

class CM:
    def __init__(self, log):
        self.log = log
    def __enter__(self):
        self.log.append('enter')
    def __exit__(self, *exc):
        self.log.append('exit' if exc[0] is None else 'exit ' + exc[0].__name__)
        return False

def with_loop(xs, log):
    with CM(log):
        for x in xs:
            if x == 2:
                return 'two'
            log.append(10 // x)
    return 'none'

def comprehension(xs):
    k = 'outer'
    out = []
    for x in xs:
        out.append(sum([k * 2 for k in range(x)]))
    return out, k

def handled(xs, log):
    total = 0
    for x in xs:
        try:
            total += 10 // x
        except ZeroDivisionError:
            log.append('zero')
            continue
        finally:
            log.append('finally')
        with CM(log):
            if x == 5:
                return 'five', total
    return total

def search(xs, want):
    i = 0
    while True:
        if i >= len(xs):
            break
        if xs[i] == want:
            found = i
            break
        i += 1
        if xs[i - 1] is None:
            continue
        seen = i
    return i, found, seen

def deletes(xs):
    for x in xs:
        y = x
        del y
    return x

def run(fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        return type(e).__name__
)PY";

PyRef fn_of(PyObject* code, const PyModule& m) {
  PyRef f = PyRef::steal(PyFunction_New(code, m.dict()));
  PyModule::check(f);
  return f;
}

// run(bridge, *args) (it makes its body and resume functions itself): the result or the
// error's type name.
std::string call_bridge(const bc::BridgeCode& codes, const PyModule& m,
                        std::vector<PyObject*> args) {
  PyRef bridge = fn_of(codes.bridge.get(), m);
  args.insert(args.begin(), bridge.get());
  PyRef r = PyRef::steal(PyObject_Vectorcall(m.get("run"), args.data(), args.size(), nullptr));
  PyModule::check(r);
  PyRef s = PyRef::steal(PyObject_Str(r.get()));
  return PyUnicode_AsUTF8(s.get());
}

// The loop head: the target of the last backward jump.
int head_of(PyObject* fn) {
  tl::bytecode::Bytecode b = tl::bytecode::decode(code_of(fn));
  int head = -1;
  for (size_t i = 0; i < b.insts.size(); ++i)
    if (b.insts[i].jump_target >= 0 && b.insts[i].jump_target <= static_cast<int>(i))
      head = b.insts[i].jump_target;
  REQUIRE(head >= 0);
  return head;
}

PyRef eval(const PyModule& m, const char* expr) {
  PyRef r = PyRef::steal(PyRun_String(expr, Py_eval_input, m.dict(), m.dict()));
  PyModule::check(r);
  return r;
}

std::string str(const PyRef& r) {
  PyRef s = PyRef::steal(PyObject_Str(r.get()));
  return PyUnicode_AsUTF8(s.get());
}

}  // namespace

TEST_CASE("a for loop's body function continues, breaks and returns as the loop would") {
  PyModule m(kSource);
  PyObject* loop = m.get("loop");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(loop), head_of(loop), true, "I", {0, 1}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  // The body function, then one resume function per way out of the loop.
  REQUIRE(codes.resumes.size() >= 2);
  auto* body = reinterpret_cast<PyCodeObject*>(codes.resumes[0].get());
  CHECK_THAT(PyUnicode_AsUTF8(body->co_qualname), Catch::Contains("loop (loop body at line 3)"));
  auto* after = reinterpret_cast<PyCodeObject*>(codes.resumes.back().get());
  CHECK_THAT(PyUnicode_AsUTF8(after->co_qualname), Catch::Contains("loop (resumed at line"));
  for (const char* xs : {"(1, 2, 0, 3)", "(1, -1, 5)", "(1, 200, 3)", "(0, 0)", "()"}) {
    INFO(xs);
    PyRef items = eval(m, xs), acc = eval(m, "10");
    std::string expected = str(eval(m, (std::string("run(loop, ") + xs + ", 10)").c_str()));
    // The bridge starts at the loop head with the items left as its iterator.
    CHECK(call_bridge(codes, m, {items.get(), acc.get(), items.get()}) == expected);
  }
}

TEST_CASE("a while loop's body hands back a local it assigned first") {
  PyModule m(kSource);
  PyObject* count = m.get("count");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(count), head_of(count), true, "", {0, 1}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  PyRef n = eval(m, "4"), i = eval(m, "0");
  CHECK(call_bridge(codes, m, {n.get(), i.get()}) == "(4, 9)");
}

TEST_CASE("a return inside a with-block around the loop runs __exit__ once") {
  PyModule m(kSource);
  PyObject* fn = m.get("with_loop");
  // NOTE: the with-block passes as a grad-mode one ('T'), whose __exit__ never swallows an
  // exception; CM's does not either.
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "TI", {0, 1}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  for (auto [xs, result, log] :
       {std::tuple{"(1, 2, 3)", "two", "['enter', 10, 'exit']"},
        std::tuple{"(5,)", "none", "['enter', 2, 'exit']"},
        std::tuple{"(1, 0)", "ZeroDivisionError", "['enter', 10, 'exit ZeroDivisionError']"}}) {
    INFO(xs);
    PyRef items = eval(m, xs), logs = eval(m, "[]");
    PyRef cm = PyRef::steal(PyObject_CallOneArg(m.get("CM"), logs.get()));
    PyModule::check(cm);
    PyModule::check(PyRef::steal(PyObject_CallMethod(cm.get(), "__enter__", nullptr)));
    PyRef exit = PyRef::steal(PyObject_GetAttrString(cm.get(), "__exit__"));
    CHECK(call_bridge(codes, m, {items.get(), logs.get(), exit.get(), items.get()}) == result);
    CHECK(str(logs) == log);
  }
}

TEST_CASE("a comprehension in the loop body leaves the outer local as it was") {
  PyModule m(kSource);
  PyObject* fn = m.get("comprehension");
  // The bound locals at the head: xs, k, out.
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "I", {0, 1, 2}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  PyRef xs = eval(m, "(1, 2)"), k = eval(m, "'outer'"), out = eval(m, "[]");
  CHECK(call_bridge(codes, m, {xs.get(), k.get(), out.get(), xs.get()}) == "([0, 2], 'outer')");
}

TEST_CASE("a loop body with del stays in the bridge") {
  PyModule m(kSource);
  PyObject* fn = m.get("deletes");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "I", {0}});
  CHECK_FALSE(codes.loop_body);
  CHECK_THAT(codes.no_loop_body, Catch::Contains("del"));
  PyRef xs = eval(m, "(1, 2)");
  CHECK(call_bridge(codes, m, {xs.get(), xs.get()}) == "2");
}

TEST_CASE("handlers and with-blocks inside the body stay in the body function") {
  PyModule m(kSource);
  PyObject* fn = m.get("handled");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "I", {0, 1, 2}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  for (const char* xs : {"(1, 0, 2)", "(2, 5, 1)", "(0,)", "()"}) {
    INFO(xs);
    PyRef items = eval(m, xs), logs = eval(m, "[]"), total = eval(m, "0");
    std::string expected =
        str(eval(m, (std::string("(run(handled, ") + xs + ", l := []), l)").c_str()));
    std::string got = call_bridge(codes, m, {items.get(), logs.get(), total.get(), items.get()});
    CHECK("(" + got + ", " + str(logs) + ")" == expected);
  }
}

TEST_CASE("a while loop's break, continue and locals match eager") {
  PyModule m(kSource);
  PyObject* fn = m.get("search");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "", {0, 1, 2}});
  INFO(codes.no_loop_body);
  REQUIRE(codes.loop_body);
  for (const char* args : {"(1, 2, 3), 3", "(1, None, 3), 3", "(1, 2), 7", "(4, 5), 4"}) {
    INFO(args);
    std::string call = std::string("(") + args + ")";
    PyRef a = eval(m, call.c_str());
    PyRef zero = eval(m, "0");
    std::string expected = str(eval(m, (std::string("run(search, ") + args + ")").c_str()));
    CHECK(call_bridge(codes, m,
                      {PyTuple_GET_ITEM(a.get(), 0), PyTuple_GET_ITEM(a.get(), 1), zero.get()}) ==
          expected);
  }
}

TEST_CASE("a loop inside a with-block that may swallow an exception stays in the bridge") {
  PyModule m(kSource);
  PyObject* fn = m.get("with_loop");
  const bc::BridgeCode& codes = bc::bridge_for({code_of(fn), head_of(fn), true, "VI", {0, 1}});
  CHECK_FALSE(codes.loop_body);
  CHECK_THAT(codes.no_loop_body, Catch::Contains("swallow"));
}
