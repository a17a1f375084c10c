#pragma once
// A fake frame for guard and fetch tests: Python code runs in a fresh module
// namespace, then chosen names of it become the frame's local slots.
#include <Python.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/py_ref.h"
#include "ir/frame_view.h"

namespace tl::testing {

// Fails the test with the pending Python error printed.
inline void require_no_python_error() {
  if (PyErr_Occurred()) {
    PyErr_Print();
    FAIL("Python error");
  }
}

struct TestFrame {
  PyRef globals;
  PyRef builtins;
  PyRef closure;              // optional tuple of cells
  std::vector<PyRef> values;  // owns the slots
  std::vector<PyObject*> slots;

  // Runs `code` in a new namespace; slot i is namespace[names[i]] or NULL.
  TestFrame(const std::string& code, std::vector<std::string> names) {
    globals = PyRef::steal(PyDict_New());
    builtins = PyRef::borrow(PyEval_GetBuiltins());
    PyDict_SetItemString(globals.get(), "__builtins__", builtins.get());
    PyRef r = PyRef::steal(PyRun_String(code.c_str(), Py_file_input, globals.get(), globals.get()));
    if (!r) require_no_python_error();
    for (auto& n : names) {
      values.push_back(PyRef::borrow(PyDict_GetItemString(globals.get(), n.c_str())));
      slots.push_back(values.back().get());
    }
  }
  PyObject* get(const char* name) const { return PyDict_GetItemString(globals.get(), name); }
  void run(const std::string& code) const {
    PyRef r = PyRef::steal(PyRun_String(code.c_str(), Py_file_input, globals.get(), globals.get()));
    if (!r) require_no_python_error();
  }
  // Replaces slot i (the frame of a later call).
  void set_slot(size_t i, PyObject* v) {
    values[i] = PyRef::borrow(v);
    slots[i] = v;
  }
  ir::FrameView view() const {
    ir::FrameView f;
    f.locals = slots.data();
    f.nlocals = static_cast<int>(slots.size());
    f.closure = closure.get();
    f.globals = globals.get();
    f.builtins = builtins.get();
    return f;
  }
};

}  // namespace tl::testing
