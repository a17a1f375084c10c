#pragma once
// One attribute of a Python module, importing the module if needed.
#include <Python.h>

#include "core/errors.h"
#include "core/py_ref.h"

namespace tl {

// `module`.`name`; throws PythonError (Python's exception set) when either is missing.
inline PyRef import_attr(const char* module, const char* name) {
  PyRef m = PyRef::steal(PyImport_ImportModule(module));
  PyRef attr = m ? PyRef::steal(PyObject_GetAttrString(m.get(), name)) : PyRef();
  if (!attr) throw PythonError();
  return attr;
}

}  // namespace tl
