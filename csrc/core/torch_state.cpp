#include "core/torch_state.h"

#include "core/errors.h"
#include "core/py_ref.h"

namespace tl {

NoArgsQuery::NoArgsQuery(PyObject* fn) : fn_(fn) {
  // NOTE: CPython calls a METH_NOARGS function as meth(self, NULL); doing the same
  // skips only the call protocol's dispatch. Anything else (a Python function, a
  // pybind11 overload set) goes through PyObject_CallNoArgs.
  if (fn && PyCFunction_Check(fn) && (PyCFunction_GET_FLAGS(fn) & METH_NOARGS) == METH_NOARGS &&
      !(PyCFunction_GET_FLAGS(fn) &
        (METH_VARARGS | METH_FASTCALL | METH_O | METH_KEYWORDS | METH_METHOD))) {
    direct_ = PyCFunction_GET_FUNCTION(fn);
    self_ = PyCFunction_GET_SELF(fn);
  }
}

namespace {
struct ModeStacks {
  NoArgsQuery function_len;  // torch._C._len_torch_function_stack
  NoArgsQuery dispatch_len;  // torch._C._len_torch_dispatch_stack
};

const ModeStacks& mode_stacks() {
  static ModeStacks* s = nullptr;  // the GIL serialises initialisation
  if (s) return *s;
  PyRef c = PyRef::steal(PyImport_ImportModule("torch._C"));
  if (!c) throw PythonError();
  auto* n = new ModeStacks();
  PyObject* f = PyObject_GetAttrString(c.get(), "_len_torch_function_stack");
  PyObject* d = f ? PyObject_GetAttrString(c.get(), "_len_torch_dispatch_stack") : nullptr;
  if (!f || !d) {  // an older torch: both or neither
    PyErr_Clear();
    Py_XDECREF(f);
  } else {
    n->function_len = NoArgsQuery(f);
    n->dispatch_len = NoArgsQuery(d);
  }
  s = n;
  return *s;
}

bool stack_empty(const NoArgsQuery& len) {
  PyObject* n = len.call();
  if (!n) throw PythonError();
  // NOTE: small ints are cached; the length is almost always the shared 0.
  bool empty = PyLong_Check(n) && PyLong_AsLong(n) == 0;
  Py_DECREF(n);
  return empty;
}
}  // namespace

bool torch_mode_stacks_empty() {
  const ModeStacks& s = mode_stacks();
  if (!s.function_len) return true;
  return stack_empty(s.function_len) && stack_empty(s.dispatch_len);
}

bool torch_has_mode_stack_queries() { return static_cast<bool>(mode_stacks().function_len); }

}  // namespace tl
