// CompiledGraph on hand-made partitions: a fused kernel feeding an extern
// node, outputs allocated through torch, compared with eager torch.
#include "runtime/compiled_graph.h"

#include <catch2/catch.hpp>

#include "../codegen/kernel_builder.h"
#include "core/errors.h"
#include "passes/memory_plan.h"
#include "runtime/disk_cache.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"

using namespace tl::test;
using tl::PyRef;
using namespace tl::ir;

namespace {
// Evaluates `expr` in `ns` (after running `setup` there); returns a new reference.
PyRef eval(PyObject* ns, const char* expr) {
  PyRef r = PyRef::steal(PyRun_String(expr, Py_eval_input, ns, ns));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return r;
}

PyRef namespace_with_torch() {
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "__builtins__", PyEval_GetBuiltins());
  const char* setup = "import torch\nx = torch.randn(4, 300)\ny = torch.randn(300)\n";
  PyRef r = PyRef::steal(PyRun_String(setup, Py_file_input, ns.get(), ns.get()));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return ns;
}

TensorMeta meta(PyObject* ns, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorMeta m;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  m.dtype = eval(ns, "torch.float32");
  m.device = eval(ns, "torch.device('cpu')");
  return m;
}
}  // namespace

TEST_CASE("a fused kernel feeding an extern sum matches eager torch", "[runtime]") {
  tl::runtime::set_cache_dir("");
  PyRef ns = namespace_with_torch();
  auto g = std::make_shared<Graph>();
  Node* x = g->add_placeholder("x", Source::local(0, "x"));
  Node* y = g->add_placeholder("y", Source::local(1, "y"));
  x->meta = meta(ns.get(), {4, 300}, {300, 1});
  y->meta = meta(ns.get(), {300}, {1});
  Node* add =
      g->add_call_function(eval(ns.get(), "torch.add"), {Arg::of_node(x), Arg::of_node(y)}, {});
  Node* tanh = g->add_call_function(eval(ns.get(), "torch.tanh"), {Arg::of_node(add)}, {});
  tanh->meta = meta(ns.get(), {4, 300}, {300, 1});
  Node* sum = g->add_call_method("sum", {Arg::of_node(tanh)},
                                 {{"dim", Arg::constant(eval(ns.get(), "1"))}});
  g->set_output({Arg::of_node(sum), Arg::of_node(tanh)});

  KernelBuilder b("add_tanh", {4, 300});
  int xv = b.load(b.input(ST::F32, {300, 1}), ST::F32);
  int yv = b.load(b.input(ST::F32, {0, 1}), ST::F32);
  b.output(b.expr(ExprOp::Tanh, ST::F32, {b.expr(ExprOp::Add, ST::F32, {xv, yv})}), ST::F32,
           {300, 1});
  tl::ir::Schedule p;
  p.kernels.push_back({b.k, {x, y}, {tanh}, {add, tanh}});
  p.order.push_back({nullptr, 0});
  p.order.push_back({sum, -1});
  tl::passes::plan_memory(*g, p);

  tl::runtime::CompiledGraph cg(g, std::move(p));
  PyRef xs = eval(ns.get(), "x"), ys = eval(ns.get(), "y");
  PyObject* inputs[] = {xs.get(), ys.get()};
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<PyRef> out = cg.run(inputs, 2);
    REQUIRE(out.size() == 2);
    PyDict_SetItemString(ns.get(), "s", out[0].get());
    PyDict_SetItemString(ns.get(), "t", out[1].get());
    CHECK(PyObject_IsTrue(eval(ns.get(), "torch.allclose(t, torch.tanh(x + y), atol=1e-6)").get()));
    auto ok = [&](const char* expr) { return PyObject_IsTrue(eval(ns.get(), expr).get()) == 1; };
    CHECK(ok("torch.allclose(s, torch.tanh(x + y).sum(1), atol=1e-4)"));
    CHECK(ok("t.stride() == (300, 1) and t.dtype == torch.float32"));
  }
}

TEST_CASE("an extern node that raises names itself as the failed node", "[runtime]") {
  PyRef ns = namespace_with_torch();
  auto g = std::make_shared<Graph>();
  Node* x = g->add_placeholder("x", Source::local(0, "x"));
  Node* bad = g->add_call_method("no_such_method", {Arg::of_node(x)}, {});
  g->set_output({Arg::of_node(bad)});
  tl::ir::Schedule p;
  p.order.push_back({bad, -1});
  tl::passes::plan_memory(*g, p);
  tl::runtime::CompiledGraph cg(g, std::move(p));
  PyRef xs = eval(ns.get(), "x");
  PyObject* inputs[] = {xs.get()};
  CHECK_THROWS_AS(cg.run(inputs, 1), tl::PythonError);
  CHECK(PyErr_ExceptionMatches(PyExc_AttributeError));
  PyErr_Clear();
  CHECK(cg.failed_node() == bad);
}
#endif
