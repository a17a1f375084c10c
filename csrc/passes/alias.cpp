#include "passes/alias.h"

namespace tl::passes {

std::optional<int64_t> alias_offset(const ir::Node& n, const ir::Node& base) {
  PyObject* ex = n.example.get();
  PyObject* bex = base.example.get();
  if (!ex || !bex) return std::nullopt;
  if (ex == bex) return 0;  // the op returned its input
  PyRef eb = PyRef::steal(PyObject_GetAttrString(ex, "_base"));
  // NOTE: n not a view shares no memory with another value (the root below is a tensor): asked
  // for every pair a pass looks at, so the other three Python calls are skipped.
  if (eb && eb.get() == Py_None) return std::nullopt;
  PyRef bb = eb ? PyRef::steal(PyObject_GetAttrString(bex, "_base")) : PyRef();
  if (!eb || !bb) {
    PyErr_Clear();
    return std::nullopt;
  }
  PyObject* root = bb.get() == Py_None ? bex : bb.get();
  if (eb.get() != root) return std::nullopt;
  PyRef eo = PyRef::steal(PyObject_CallMethod(ex, "storage_offset", nullptr));
  PyRef bo = PyRef::steal(PyObject_CallMethod(bex, "storage_offset", nullptr));
  if (!eo || !bo || !PyLong_Check(eo.get()) || !PyLong_Check(bo.get())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return PyLong_AsLongLong(eo.get()) - PyLong_AsLongLong(bo.get());
}

}  // namespace tl::passes
