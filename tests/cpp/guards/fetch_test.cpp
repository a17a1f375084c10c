#include "guards/fetch.h"

#include "test_frame.h"

using tl::PyRef;
using tl::guards::fetch;
using tl::ir::Source;
using tl::testing::TestFrame;

namespace {
PyRef str(const char* s) { return PyRef::steal(PyUnicode_FromString(s)); }
PyRef num(long v) { return PyRef::steal(PyLong_FromLong(v)); }

// fetch() that asserts no Python error is left behind.
PyRef fetch_ok(const tl::ir::SourcePtr& s, const TestFrame& f) {
  PyRef v = fetch(*s, f.view());
  REQUIRE(!PyErr_Occurred());
  return v;
}

const char* kModules = R"(
import torch
class Plain:
    cls_attr = 7
    def __init__(self): self.a = 1
    @property
    def broken(self): raise AttributeError('nope')
class Dyn:
    def __getattr__(self, name): return 'dyn:' + name
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.register_buffer('buf', torch.zeros(3))
        self.register_parameter('none_param', None)
        self.scale = 2.0
    @property
    def prop(self): return 'property'
class Custom(torch.nn.Module):
    def __getattr__(self, name): return 'custom:' + name
m = M()
object.__setattr__(m, 'shadow', 'instance')
m._parameters['shadow'] = torch.nn.Parameter(torch.ones(1))
seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())
mlist = torch.nn.ModuleList([torch.nn.ReLU()])
p, d, c = Plain(), Dyn(), Custom()
xs = [10, 20, 30]
t = (1, 2)
dd = {'k': 5, 3: 'three'}
unbound = None
)";
}  // namespace

TEST_CASE("fetch reads locals and returns null for an unbound slot", "[guards][fetch]") {
  TestFrame f("a = 41\n", {"a", "missing"});
  REQUIRE(fetch_ok(Source::local(0, "a"), f).get() == f.get("a"));
  REQUIRE(!fetch_ok(Source::local(1, "missing"), f));
}

TEST_CASE("fetch reads closure cells and returns null for an empty cell", "[guards][fetch]") {
  TestFrame f(R"(
def outer():
    full = 5
    def inner(): return full + late
    cells = inner.__closure__
    return cells
    late = 1
cells = outer()
)",
              {});
  f.closure = PyRef::borrow(f.get("cells"));
  // Cells are in co_freevars order: ('full', 'late').
  PyRef full = fetch_ok(Source::closure(0, "full"), f);
  REQUIRE(PyLong_AsLong(full.get()) == 5);
  REQUIRE(!fetch_ok(Source::closure(1, "late"), f));
}

TEST_CASE("fetch reads globals and builtins, null when missing", "[guards][fetch]") {
  TestFrame f("SCALE = 2.0\n", {});
  REQUIRE(fetch_ok(Source::global("SCALE"), f).get() == f.get("SCALE"));
  REQUIRE(!fetch_ok(Source::global("NOPE"), f));
  REQUIRE(PyCFunction_Check(fetch_ok(Source::builtin("len"), f).get()));
  REQUIRE(!fetch_ok(Source::builtin("no_such_builtin"), f));
}

TEST_CASE("fetch attributes follow getattr on plain objects", "[guards][fetch]") {
  TestFrame f(kModules, {"p", "d"});
  auto p = Source::local(0, "p");
  REQUIRE(PyLong_AsLong(fetch_ok(Source::attr(p, "a"), f).get()) == 1);
  REQUIRE(PyLong_AsLong(fetch_ok(Source::attr(p, "cls_attr"), f).get()) == 7);
  REQUIRE(!fetch_ok(Source::attr(p, "missing"), f));
  REQUIRE(!fetch_ok(Source::attr(p, "broken"), f));  // a property raising AttributeError
  PyRef dyn = fetch_ok(Source::attr(Source::local(1, "d"), "x"), f);
  REQUIRE(std::string(PyUnicode_AsUTF8(dyn.get())) == "dyn:x");
}

TEST_CASE("fetch attributes of nn.Module find parameters, buffers and submodules",
          "[guards][fetch]") {
  TestFrame f(kModules, {"m", "c", "seq"});
  auto m = Source::local(0, "m");
  f.run("lin_w = m.lin.weight\nbuf = m.buf\nlin = m.lin\n");
  REQUIRE(fetch_ok(Source::attr(m, "lin"), f).get() == f.get("lin"));
  REQUIRE(fetch_ok(Source::attr(Source::attr(m, "lin"), "weight"), f).get() == f.get("lin_w"));
  REQUIRE(fetch_ok(Source::attr(m, "buf"), f).get() == f.get("buf"));
  REQUIRE(fetch_ok(Source::attr(m, "none_param"), f).get() == Py_None);
  REQUIRE(fetch_ok(Source::attr(m, "training"), f).get() == Py_True);
  REQUIRE(PyFloat_AsDouble(fetch_ok(Source::attr(m, "scale"), f).get()) == 2.0);
  REQUIRE(std::string(PyUnicode_AsUTF8(fetch_ok(Source::attr(m, "prop"), f).get())) == "property");
  // The instance __dict__ wins over _parameters, as in getattr().
  REQUIRE(std::string(PyUnicode_AsUTF8(fetch_ok(Source::attr(m, "shadow"), f).get())) ==
          "instance");
  REQUIRE(!fetch_ok(Source::attr(m, "missing"), f));
  // Submodules of Sequential are named "0", "1".
  REQUIRE(PyObject_HasAttrString(fetch_ok(Source::attr(Source::local(2, "seq"), "1"), f).get(),
                                 "forward"));
  // A module overriding __getattr__ goes through Python.
  PyRef custom = fetch_ok(Source::attr(Source::local(1, "c"), "zzz"), f);
  REQUIRE(std::string(PyUnicode_AsUTF8(custom.get())) == "custom:zzz");
}

TEST_CASE("fetch items use list, tuple and dict fast paths and __getitem__", "[guards][fetch]") {
  TestFrame f(kModules, {"xs", "t", "dd", "mlist"});
  auto xs = Source::local(0, "xs");
  REQUIRE(PyLong_AsLong(fetch_ok(Source::item(xs, num(1)), f).get()) == 20);
  REQUIRE(PyLong_AsLong(fetch_ok(Source::item(xs, num(-1)), f).get()) == 30);
  REQUIRE(!fetch_ok(Source::item(xs, num(3)), f));
  REQUIRE(PyLong_AsLong(fetch_ok(Source::item(Source::local(1, "t"), num(0)), f).get()) == 1);
  auto dd = Source::local(2, "dd");
  REQUIRE(PyLong_AsLong(fetch_ok(Source::item(dd, str("k")), f).get()) == 5);
  REQUIRE(PyUnicode_Check(fetch_ok(Source::item(dd, num(3)), f).get()));
  REQUIRE(!fetch_ok(Source::item(dd, str("nope")), f));
  auto mlist = Source::local(3, "mlist");
  REQUIRE(fetch_ok(Source::item(mlist, num(0)), f));
  REQUIRE(!fetch_ok(Source::item(mlist, num(5)), f));  // IndexError from Python
}

TEST_CASE("fetch of a held source returns the held object", "[guards][fetch]") {
  TestFrame f("g = {'a': 1}\n", {});
  auto held = Source::held(PyRef::borrow(f.get("g")), "globals of mod");
  REQUIRE(fetch_ok(held, f).get() == f.get("g"));
  REQUIRE(PyLong_AsLong(fetch_ok(Source::item(held, str("a")), f).get()) == 1);
}

TEST_CASE("fetch lets unexpected errors propagate as PythonError", "[guards][fetch]") {
  TestFrame f("class Bad:\n    def __getattr__(self, n): raise ValueError('boom')\nb = Bad()\n",
              {"b"});
  REQUIRE_THROWS_AS(fetch(*Source::attr(Source::local(0, "b"), "x"), f.view()), tl::PythonError);
  REQUIRE(PyErr_ExceptionMatches(PyExc_ValueError));
  PyErr_Clear();
}
