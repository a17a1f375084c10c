#pragma once
// A Python module namespace for bytecode tests: source runs in a fresh dict,
// then its functions are called by name. Failures print the Python error.
#include <Python.h>
#include <opcode.h>

#include <catch2/catch.hpp>
#include <string>

#include "bytecode/assembler.h"
#include "core/py_ref.h"

namespace tl::testing {

class PyModule {
 public:
  explicit PyModule(const std::string& source) : ns_(PyRef::steal(PyDict_New())) {
    PyDict_SetItemString(ns_.get(), "__builtins__", PyEval_GetBuiltins());
    PyRef r = PyRef::steal(PyRun_String(source.c_str(), Py_file_input, ns_.get(), ns_.get()));
    check(r);
  }
  // Borrowed; fails the test if missing.
  PyObject* get(const char* name) const {
    PyObject* v = PyDict_GetItemString(ns_.get(), name);
    INFO("name " << name);
    REQUIRE(v != nullptr);
    return v;
  }
  PyObject* dict() const { return ns_.get(); }  // borrowed
  // Calls ns[fn](*args); args are borrowed; returns a new reference.
  template <typename... Args>
  PyRef call(const char* fn, Args... args) const {
    PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(get(fn), args..., nullptr));
    check(r);
    return r;
  }
  // str(ns[fn](*args)), for comparing with expected text.
  template <typename... Args>
  std::string call_str(const char* fn, Args... args) const {
    PyRef s = PyRef::steal(PyObject_Str(call(fn, args...).get()));
    check(s);
    return PyUnicode_AsUTF8(s.get());
  }

  static void check(const PyRef& r) {
    if (!r) PyErr_Print();
    REQUIRE(r);
  }

 private:
  PyRef ns_;
};

// One instruction on line 1; `target` names a label for jumps.
inline bytecode::Instr ins(int opcode, int arg = 0, int label = bytecode::kNoLabel,
                           int target = bytecode::kNoLabel) {
  return {opcode, arg, label, target, 1};
}

// A function over `code` (borrowed) with builtins as its globals; new reference.
inline PyRef make_function(PyObject* code) {
  PyRef globals = PyRef::steal(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef fn = PyRef::steal(PyFunction_New(code, globals.get()));
  PyModule::check(fn);
  return fn;
}

inline PyObject* obj(PyCodeObject* code) { return reinterpret_cast<PyObject*>(code); }
inline PyCodeObject* code_of(PyObject* fn) {  // borrows fn, returns borrowed
  return reinterpret_cast<PyCodeObject*>(PyFunction_GetCode(fn));
}

// A tuple of str from a list of C strings; returns a new reference.
inline PyRef str_tuple(std::initializer_list<const char*> items) {
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  Py_ssize_t i = 0;
  for (const char* s : items) PyTuple_SET_ITEM(t.get(), i++, PyUnicode_FromString(s));
  return t;
}

// A spec for a plain function of `varnames` (the first argcount are arguments).
inline bytecode::CodeSpec function_spec(int argcount, std::initializer_list<const char*> varnames,
                                        PyRef consts) {
  bytecode::CodeSpec s;
  s.argcount = argcount;
  s.flags = CO_OPTIMIZED | CO_NEWLOCALS;
  s.firstlineno = 1;
  s.consts = std::move(consts);
  s.names = str_tuple({});
  s.varnames = str_tuple(varnames);
  s.freevars = str_tuple({});
  s.cellvars = str_tuple({});
  s.filename = PyRef::steal(PyUnicode_FromString("<assembled>"));
  s.name = PyRef::steal(PyUnicode_FromString("assembled"));
  s.qualname = PyRef::borrow(s.name.get());
  return s;
}

}  // namespace tl::testing
