#include "ir/graph.h"

#include <catch2/catch.hpp>
#include <string>

#include "core/errors.h"

using tl::PyRef;
using namespace tl::ir;

namespace {

// operator.<name>, a torch-free callable; returns a new reference.
PyRef operator_fn(const char* name) {
  PyRef mod = PyRef::steal(PyImport_ImportModule("operator"));
  REQUIRE(mod);
  PyRef fn = PyRef::steal(PyObject_GetAttrString(mod.get(), name));
  REQUIRE(fn);
  return fn;
}

PyRef py_int(long v) { return PyRef::steal(PyLong_FromLong(v)); }

// x, y -> add = x + y -> mul = add.mul(2, alpha=1) -> return (mul,)
struct SmallGraph {
  Graph g;
  Node *x, *y, *add, *mul;
  SmallGraph() {
    x = g.add_placeholder("x", Source::local(0, "x"));
    y = g.add_placeholder("y", Source::local(1, "y"));
    add = g.add_call_function(operator_fn("add"), {Arg::of_node(x), Arg::of_node(y)}, {});
    mul = g.add_call_method("mul", {Arg::of_node(add), Arg::constant(py_int(2))},
                            {{"alpha", Arg::constant(py_int(1))}});
    g.set_output({Arg::of_node(mul)});
  }
};

}  // namespace

TEST_CASE("graph prints one node a line under its signature", "[ir]") {
  SmallGraph s;
  CHECK(s.g.str() ==
        "graph(%x, %y):\n"
        "  %x = placeholder[L['x']]\n"
        "  %y = placeholder[L['y']]\n"
        "  %add = operator.add(%x, %y)\n"
        "  %mul = .mul(%add, 2, alpha=1)\n"
        "  return (%mul,)\n");
  CHECK(s.g.num_ops() == 2);
  CHECK(s.g.placeholders().size() == 2);
  CHECK(s.g.output() == s.g.nodes().back().get());
}

TEST_CASE("graph names repeated targets uniquely and prints nested arguments", "[ir]") {
  Graph g;
  Node* x = g.add_placeholder("x", Source::global("SCALE"));
  Node* a = g.add_call_function(operator_fn("add"), {Arg::of_node(x), Arg::of_node(x)}, {});
  Node* b = g.add_call_function(
      operator_fn("add"),
      {Arg::of_node(a), Arg::tuple({Arg::of_node(x)}), Arg::list({Arg::constant(py_int(3))})}, {});
  g.set_output({Arg::of_node(a), Arg::of_node(b)});
  CHECK(b->name == "add_1");
  CHECK(g.str() ==
        "graph(%x):\n"
        "  %x = placeholder[G['SCALE']]\n"
        "  %add = operator.add(%x, %x)\n"
        "  %add_1 = operator.add(%add, (%x,), [3])\n"
        "  return (%add, %add_1)\n");
}

TEST_CASE("graph never gives a made name that a given name already took", "[ir]") {
  // NOTE: a backward graph's placeholders keep the joint graph's names (`add_1`), and its ops
  // are named by target: the second `add` must not be `add_1` too.
  Graph g;
  Node* x = g.add_placeholder("add_1", Source::local(0, "add_1"));
  Node* a = g.add_call_function(operator_fn("add"), {Arg::of_node(x), Arg::of_node(x)}, {});
  Node* b = g.add_call_function(operator_fn("add"), {Arg::of_node(a), Arg::of_node(x)}, {});
  Node* c = g.add_call_function(operator_fn("add"), {Arg::of_node(b), Arg::of_node(x)}, {});
  CHECK(a->name == "add");
  CHECK(b->name == "add_2");
  CHECK(c->name == "add_3");
  Node* y = g.add_placeholder("add_3", Source::local(1, "add_3"));
  CHECK(y->name == "add_3_1");
}

TEST_CASE("lint passes on a graph whose arguments refer to earlier nodes", "[ir]") {
  SmallGraph s;
  CHECK_NOTHROW(s.g.lint());
}

TEST_CASE("lint throws naming the node that uses a value defined later", "[ir]") {
  SmallGraph s;
  s.add->args[1] = Arg::of_node(s.mul);  // %add now reads %mul, defined after it
  try {
    s.g.lint();
    FAIL("lint did not throw");
  } catch (const tl::Error& e) {
    CHECK(e.kind() == tl::ErrorKind::Internal);
    CHECK_THAT(e.what(), Catch::Contains("node %add uses a value that is not defined before it"));
    CHECK_THAT(e.what(), Catch::Contains("%add = operator.add(%x, %mul)"));
  }
}

TEST_CASE("lint finds a late node inside a nested keyword argument", "[ir]") {
  SmallGraph s;
  s.mul->kwargs[0].second = Arg::list({Arg::of_node(s.g.output())});
  CHECK_THROWS_WITH(s.g.lint(), Catch::Contains("node %mul"));
}
