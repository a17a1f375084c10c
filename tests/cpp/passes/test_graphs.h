#pragma once
// Hand-built captured graphs for pass tests: nodes call real torch callables
// (looked up by dotted name) and carry the TensorMeta capture would record.
#include <Python.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "passes/partition.h"

namespace tl::testing {

// "torch.nn.functional.relu" -> the callable (new reference).
inline PyRef resolve(const std::string& dotted) {
  size_t dot = dotted.find('.');
  PyRef obj = PyRef::steal(PyImport_ImportModule(dotted.substr(0, dot).c_str()));
  while (obj && dot != std::string::npos) {
    size_t next = dotted.find('.', dot + 1);
    std::string part = dotted.substr(dot + 1, next == std::string::npos ? next : next - dot - 1);
    obj = PyRef::steal(PyObject_GetAttrString(obj.get(), part.c_str()));
    dot = next;
  }
  if (!obj) PyErr_Print();
  REQUIRE(obj);
  return obj;
}

inline ir::Arg num(double v) { return ir::Arg::constant(PyRef::steal(PyFloat_FromDouble(v))); }
inline ir::Arg integer(long v) { return ir::Arg::constant(PyRef::steal(PyLong_FromLong(v))); }
inline ir::Arg str(const char* s) {
  return ir::Arg::constant(PyRef::steal(PyUnicode_FromString(s)));
}
inline ir::Arg pybool(bool b) { return ir::Arg::constant(PyRef::borrow(b ? Py_True : Py_False)); }
inline ir::Arg ints(std::vector<long> v) {
  std::vector<ir::Arg> items;
  for (long x : v) items.push_back(integer(x));
  return ir::Arg::tuple(std::move(items));
}
inline ir::Arg of(ir::Node* n) { return ir::Arg::of_node(n); }

inline std::vector<int64_t> contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return st;
}

struct TestGraph {
  ir::Graph g;
  int n_inputs = 0;

  static ir::TensorMeta meta(std::vector<int64_t> sizes, const char* dtype,
                             std::vector<int64_t> strides) {
    ir::TensorMeta m;
    m.strides = strides.empty() ? contiguous(sizes) : strides;
    m.sizes = std::move(sizes);
    m.dtype = resolve(std::string("torch.") + dtype);
    m.device = PyRef::steal(PyObject_CallOneArg(resolve("torch.device").get(),
                                                PyRef::steal(PyUnicode_FromString("cpu")).get()));
    return m;
  }
  ir::Node* input(const char* name, std::vector<int64_t> sizes, const char* dtype = "float32",
                  std::vector<int64_t> strides = {}) {
    ir::Node* n = g.add_placeholder(name, ir::Source::local(n_inputs++, name));
    n->meta = meta(std::move(sizes), dtype, std::move(strides));
    return n;
  }
  // `fn` is a dotted callable ("torch.sin") or ".method"; `sizes` empty with
  // no_meta for tuple-valued nodes.
  ir::Node* op(const std::string& fn, std::vector<ir::Arg> args, std::vector<int64_t> sizes,
               const char* dtype = "float32",
               std::vector<std::pair<std::string, ir::Arg>> kwargs = {},
               std::vector<int64_t> strides = {}, bool no_meta = false) {
    ir::Node* n = fn[0] == '.'
                      ? g.add_call_method(fn.substr(1), std::move(args), std::move(kwargs))
                      : g.add_call_function(resolve(fn), std::move(args), std::move(kwargs));
    if (!no_meta) n->meta = meta(std::move(sizes), dtype, std::move(strides));
    return n;
  }
  void output(std::vector<ir::Node*> outs) {
    std::vector<ir::Arg> args;
    for (ir::Node* n : outs) args.push_back(of(n));
    g.set_output(std::move(args));
  }
};

// Gives every tensor node of `t` a meta example, as capture would.
inline void add_examples(TestGraph& t) {
  for (auto& n : t.g.nodes()) {
    if (!n->meta) continue;
    PyRef sizes = PyRef::steal(PyTuple_New(n->meta->sizes.size()));
    PyRef strides = PyRef::steal(PyTuple_New(n->meta->strides.size()));
    for (size_t i = 0; i < n->meta->sizes.size(); ++i) {
      PyTuple_SET_ITEM(sizes.get(), i, PyLong_FromLongLong(n->meta->sizes[i]));
      PyTuple_SET_ITEM(strides.get(), i, PyLong_FromLongLong(n->meta->strides[i]));
    }
    PyRef kw =
        PyRef::steal(Py_BuildValue("{s:O,s:s}", "dtype", n->meta->dtype.get(), "device", "meta"));
    PyRef args = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
    n->example =
        PyRef::steal(PyObject_Call(resolve("torch.empty_strided").get(), args.get(), kw.get()));
    REQUIRE(n->example);
  }
}

// A partition's kernels and externs in plan order: "k0 matmul k1".
inline std::string plan(const passes::Partition& p) {
  std::string s;
  for (const auto& it : p.order) {
    if (!s.empty()) s += ' ';
    s += it.extern_node ? it.extern_node->name : std::string("k").append(std::to_string(it.kernel));
  }
  return s;
}

}  // namespace tl::testing
