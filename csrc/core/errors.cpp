#include "core/errors.h"

namespace tl {
namespace {
// Written once at module init under the GIL, read-only afterwards.
PyObject* g_internal_error_type = nullptr;
PyObject* g_unsupported_type = nullptr;
}  // namespace

void set_internal_error_type(PyObject* type) {
  Py_XINCREF(type);
  g_internal_error_type = type;
}

void set_unsupported_error_type(PyObject* type) {
  Py_XINCREF(type);
  g_unsupported_type = type;
}

bool fatal_python_error_pending() {
  PyObject* t = PyErr_Occurred();  // borrowed
  return t && (PyErr_GivenExceptionMatches(t, PyExc_KeyboardInterrupt) ||
               PyErr_GivenExceptionMatches(t, PyExc_SystemExit) ||
               PyErr_GivenExceptionMatches(t, PyExc_MemoryError));
}

void clear_expected_error() {
  if (fatal_python_error_pending()) throw PythonError();
  PyErr_Clear();
}

void set_python_error(const std::exception& e) {
  if (dynamic_cast<const PythonError*>(&e)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "lost Python error");
    return;
  }
  PyObject* type = PyExc_RuntimeError;
  if (auto* err = dynamic_cast<const Error*>(&e)) {
    switch (err->kind()) {
      case ErrorKind::Internal:
        type = g_internal_error_type ? g_internal_error_type : PyExc_RuntimeError;
        break;
      case ErrorKind::Type:
        type = PyExc_TypeError;
        break;
      case ErrorKind::Value:
        type = PyExc_ValueError;
        break;
      case ErrorKind::Runtime:
        type = PyExc_RuntimeError;
        break;
      case ErrorKind::NotImplemented:
        type = PyExc_NotImplementedError;
        break;
      case ErrorKind::Index:
        type = PyExc_IndexError;
        break;
      case ErrorKind::Key:
        type = PyExc_KeyError;
        break;
      case ErrorKind::Unsupported:
        type = g_unsupported_type ? g_unsupported_type : PyExc_RuntimeError;
        break;
    }
  }
  PyErr_SetString(type, e.what());
}

}  // namespace tl
