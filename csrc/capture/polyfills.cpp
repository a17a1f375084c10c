#include "capture/polyfills.h"

#include <vector>

#include "core/errors.h"
#include "core/py_ref.h"
#include "core/python_helpers.h"

namespace tl::capture {
namespace {

struct Polyfill {
  PyRef torch_fn;  // the function user code calls
  PyRef stand_in;  // torchlite._polyfills.<name>, registered as helper "polyfills.<name>"
};

// NOTE: {module, function, stand-in helper (torchlite/_install.py registers it)}: a module that
// fails to import (an older torch) leaves its rows out; user code cannot call the function then.
constexpr const char* kTable[][3] = {
    // transformers' Mamba under torch.compiler.is_compiling(): vmap inside (generic mode)
    {"torch._higher_order_ops.associative_scan", "associative_scan", "polyfills.associative_scan"},
    // a C function calling user code (a lambda over tensors, operator.mul over sizes)
    {"functools", "reduce", "polyfills.reduce"},
    // collections.Counter's update() of an iterable (a Counter made in traced code)
    {"_collections", "_count_elements", "polyfills.count_elements"},
    // Python functions over C heap helpers (heapify); Counter.most_common(n) calls nlargest
    {"heapq", "nlargest", "polyfills.nlargest"},
    {"heapq", "nsmallest", "polyfills.nsmallest"},
};

PyRef import_attr(const char* module, const char* name) {
  PyRef m = PyRef::steal(PyImport_ImportModule(module));
  PyRef a = m ? PyRef::steal(PyObject_GetAttrString(m.get(), name)) : PyRef();
  if (!a) clear_expected_error();
  return a;
}

std::vector<Polyfill> build() {
  std::vector<Polyfill> out;
  for (const auto& row : kTable) {
    PyRef fn = import_attr(row[0], row[1]);
    if (fn) out.push_back({std::move(fn), python_helper(row[2])});
  }
  return out;
}

}  // namespace

PyObject* polyfill_for(PyObject* fn) {
  if (!PyFunction_Check(fn) && !PyCFunction_Check(fn)) return nullptr;
  // NOTE: built once under the GIL on first use and never freed (as torch_api()): the objects
  // live as long as the interpreter.
  static const std::vector<Polyfill>* table = new std::vector<Polyfill>(build());
  for (const Polyfill& p : *table)
    if (p.torch_fn.get() == fn) return p.stand_in.get();
  return nullptr;
}

}  // namespace tl::capture
