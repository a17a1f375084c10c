#pragma once
// torch's thread-state queries that take no argument (torch.is_grad_enabled(),
// torch._C._len_torch_dispatch_stack(), ...), asked on every compiled call by
// the global-state guard and the kernel runner. torch defines them as
// METH_NOARGS builtins, so NoArgsQuery calls their C function directly: no
// vectorcall dispatch and no argument handling, a few nanoseconds per query.
#include <Python.h>

namespace tl {

class NoArgsQuery {
 public:
  NoArgsQuery() = default;
  // `fn` is a new reference (or null: the query is absent), kept for the process's life:
  // queries live in never-freed tables that outlive every guard (Py_Finalize is not run).
  explicit NoArgsQuery(PyObject* fn);

  explicit operator bool() const { return fn_ != nullptr; }
  // The query's result as a new reference, or null with the Python error set.
  PyObject* call() const { return direct_ ? direct_(self_, nullptr) : PyObject_CallNoArgs(fn_); }

 private:
  PyObject* fn_ = nullptr;
  PyCFunction direct_ = nullptr;  // set when fn_ is a METH_NOARGS builtin
  PyObject* self_ = nullptr;      // its bound module (borrowed from fn_)
};

// Whether torch's function-mode and dispatch-mode stacks of this thread are both
// empty: the common case, two direct calls. Throws PythonError if torch cannot be
// imported or a query raised; true on a torch without these queries (modes are not
// seen there).
bool torch_mode_stacks_empty();
// Whether this torch has the mode-stack queries (false: torch_mode_stacks_empty() cannot see
// modes). Throws PythonError if torch._C cannot be imported.
bool torch_has_mode_stack_queries();

}  // namespace tl
