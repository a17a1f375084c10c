#include "capture/polyfills.h"

#include <vector>

#include "core/errors.h"
#include "core/py_ref.h"

namespace tl::capture {
namespace {

struct Polyfill {
  PyRef torch_fn;  // the function user code calls
  PyRef stand_in;  // torchlite._polyfills.<name>
};

// NOTE: {module, function, stand-in}: a module that fails to import (an older torch) leaves its
// rows out; the function is then never called by user code either.
constexpr const char* kTable[][3] = {
    // transformers' Mamba under torch.compiler.is_compiling(): vmap inside (generic mode)
    {"torch._higher_order_ops.associative_scan", "associative_scan", "associative_scan"},
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
    PyRef stand_in = import_attr("torchlite._polyfills", row[2]);
    if (fn && stand_in) out.push_back({std::move(fn), std::move(stand_in)});
  }
  return out;
}

}  // namespace

PyObject* polyfill_for(PyObject* fn) {
  if (!PyFunction_Check(fn)) return nullptr;
  // NOTE: built once under the GIL on first use and never freed (as torch_api()): the objects
  // live as long as the interpreter.
  static const std::vector<Polyfill>* table = new std::vector<Polyfill>(build());
  for (const Polyfill& p : *table)
    if (p.torch_fn.get() == fn) return p.stand_in.get();
  return nullptr;
}

}  // namespace tl::capture
