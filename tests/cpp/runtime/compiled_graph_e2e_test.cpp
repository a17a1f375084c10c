// partition_graph + CompiledGraph against the op-by-op GraphRunner (eager):
// same values, dtypes, shapes and strides.
#include <catch2/catch.hpp>

#include "../passes/test_graphs.h"
#include "core/errors.h"
#include "passes/memory_plan.h"
#include "passes/partition.h"
#include "runtime/compiled_graph.h"
#include "runtime/disk_cache.h"
#include "runtime/graph_runner.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::PyRef;

namespace {
PyRef py(const char* code, const char* result) {
  static PyRef ns;
  if (!ns) {
    ns = PyRef::steal(PyDict_New());
    PyDict_SetItemString(ns.get(), "__builtins__", PyEval_GetBuiltins());
    PyRef r = PyRef::steal(PyRun_String(
        "import torch\n"
        "def same(a, b):\n"
        "    if not isinstance(a, torch.Tensor): return a == b\n"
        "    return (a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()\n"
        "            and torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-4,\n"
        "                               equal_nan=True))\n",
        Py_file_input, ns.get(), ns.get()));
    REQUIRE(r);
  }
  if (code) REQUIRE(PyRef::steal(PyRun_String(code, Py_file_input, ns.get(), ns.get())));
  PyRef r = PyRef::steal(PyRun_String(result, Py_eval_input, ns.get(), ns.get()));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return r;
}

// Random inputs for the graph's placeholders; compiled and eager outputs must match.
// Returns the number of kernels the partition made.
size_t check_graph(TestGraph& t) {
  tl::runtime::set_cache_dir("");
  auto g = std::shared_ptr<const Graph>(&t.g, [](const Graph*) {});
  std::vector<PyRef> inputs;
  std::vector<PyObject*> raw;
  for (Node* n : t.g.placeholders()) {
    PyDict_SetItemString(py(nullptr, "globals()").get(), "dt", n->meta->dtype.get());
    PyDict_SetItemString(py(nullptr, "globals()").get(), "sz", PyRef::steal(PyList_New(0)).get());
    for (int64_t s : n->meta->sizes)
      PyList_Append(py(nullptr, "sz").get(), PyRef::steal(PyLong_FromLongLong(s)).get());
    inputs.push_back(py(nullptr, "(torch.randn(sz) * 3).to(dt)"));
    raw.push_back(inputs.back().get());
  }
  auto partition = tl::passes::partition_graph(t.g);
  size_t n_kernels = partition.kernels.size();
  tl::runtime::CompiledGraph compiled(g, std::move(partition));
  tl::runtime::GraphRunner eager(g, tl::passes::op_by_op_schedule(*g));
  auto want = eager.run(raw.data(), raw.size());
  auto got = compiled.run(raw.data(), raw.size());
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    PyDict_SetItemString(py(nullptr, "globals()").get(), "a", got[i].get());
    PyDict_SetItemString(py(nullptr, "globals()").get(), "b", want[i].get());
    INFO("output " << i << ": compiled " << PyUnicode_AsUTF8(py(nullptr, "repr(a)").get())
                   << "\neager " << PyUnicode_AsUTF8(py(nullptr, "repr(b)").get()));
    CHECK(PyObject_IsTrue(py(nullptr, "same(a, b)").get()));
  }
  return n_kernels;
}
}  // namespace

TEST_CASE("compiled pointwise chain with broadcast equals eager", "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {64, 130});
  Node* y = t.input("y", {130});
  Node* a = t.op("torch.sin", {of(x)}, {64, 130});
  Node* b = t.op("operator.add", {of(a), of(y)}, {64, 130});
  Node* c = t.op(".relu", {of(b)}, {64, 130});
  Node* d = t.op("torch.sigmoid", {of(c)}, {64, 130});
  t.output({d, b});
  CHECK(check_graph(t) == 1);
}

TEST_CASE("compiled softmax, sum and layer_norm equal eager", "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {32, 200});
  Node* w = t.input("w", {200});
  Node* sm = t.op("torch.softmax", {of(x), integer(-1)}, {32, 200});
  Node* s = t.op("torch.sum", {of(x), integer(1)}, {32});
  Node* e = t.op("operator.mul", {of(s), num(2.0)}, {32});
  Node* ln = t.op("torch.nn.functional.layer_norm", {of(x), ints({200}), of(w)}, {32, 200});
  t.output({sm, e, ln});
  check_graph(t);
}

TEST_CASE("compiled graph around an extern matmul and a transposed view equals eager",
          "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {16, 8});
  Node* w = t.input("w", {8, 16});
  Node* mm = t.op("torch.mm", {of(x), of(w)}, {16, 16});
  Node* tr = t.op(".t", {of(mm)}, {16, 16}, "float32", {}, {1, 16});
  Node* r = t.op("operator.add", {of(mm), of(tr)}, {16, 16});  // contiguous like its first operand
  Node* am = t.op("torch.argmax", {of(r), integer(1)}, {16}, "int64");
  t.output({r, am});
  check_graph(t);
}

TEST_CASE("compiled mixed half and float math equals eager", "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {300}, "float16");
  Node* y = t.input("y", {300}, "bfloat16");
  Node* a = t.op("torch.exp", {of(x)}, {300}, "float16");
  Node* b = t.op("operator.mul", {of(a), of(y)}, {300}, "float32");
  Node* c = t.op("torch.tanh", {of(y)}, {300}, "bfloat16");
  t.output({b, c});
  check_graph(t);
}
#endif

#ifdef TORCHLITE_HAVE_LLVM
TEST_CASE("compiled integer, bool and where ops equal eager", "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {40, 7}, "int64");
  Node* y = t.input("y", {7}, "int32");
  Node* fd = t.op("torch.floor_divide", {of(x), integer(3)}, {40, 7}, "int64");
  Node* rm = t.op("torch.remainder", {of(x), integer(-4)}, {40, 7}, "int64");
  Node* gt = t.op("torch.gt", {of(x), of(y)}, {40, 7}, "bool");
  Node* ne = t.op("torch.logical_not", {of(gt)}, {40, 7}, "bool");
  Node* wh = t.op("torch.where", {of(ne), of(fd), of(rm)}, {40, 7}, "int64");
  Node* mx = t.op("torch.amax", {of(wh), integer(0)}, {7}, "int64");
  t.output({wh, ne, mx});
  check_graph(t);
}

TEST_CASE("compiled log_softmax, mean and max-with-indices equal eager", "[runtime][e2e]") {
  TestGraph t;
  Node* x = t.input("x", {3, 50, 9});
  Node* ls = t.op("torch.log_softmax", {of(x), integer(1)}, {3, 50, 9});
  Node* mean = t.op("torch.mean", {of(x), ints({0, 2})}, {50});
  Node* mn = t.op("torch.amin", {of(x), integer(-1)}, {3, 50});
  t.output({ls, mean, mn});
  check_graph(t);
}
#endif
