#include "capture/user_exception.h"

#include "core/errors.h"

namespace tl::capture {
namespace {

std::string describe(PyObject* exc) {
  std::string out = Py_TYPE(exc)->tp_name;
  PyRef s = PyRef::steal(PyObject_Str(exc));
  const char* text = s && PyUnicode_Check(s.get()) ? PyUnicode_AsUTF8(s.get()) : nullptr;
  if (!text) clear_expected_error();
  if (text && *text) out += std::string(": ") + text;
  return out;
}

}  // namespace

bool UserException::matches(PyObject* type_or_tuple) const {
  return PyErr_GivenExceptionMatches(exc_.get(), type_or_tuple) != 0;
}

void raise_user(PyObject* exc_type, const std::string& message) {
  PyRef exc = PyRef::steal(PyObject_CallFunction(exc_type, "s", message.c_str()));
  if (!exc) throw PythonError();
  std::string reason = describe(exc.get());
  throw UserException(std::move(exc), std::move(reason));
}

void raise_user_arg(PyObject* exc_type, PyObject* arg, const std::string& reason) {
  PyRef exc = PyRef::steal(PyObject_CallOneArg(exc_type, arg));
  if (!exc) throw PythonError();
  throw UserException(std::move(exc), reason);
}

void raise_user_value(PyObject* exc_or_class) {
  PyRef exc;
  if (PyExceptionInstance_Check(exc_or_class)) {
    exc = PyRef::borrow(exc_or_class);
  } else if (PyExceptionClass_Check(exc_or_class)) {
    exc = PyRef::steal(PyObject_CallNoArgs(exc_or_class));
    if (!exc) throw PythonError();
  } else {
    graph_break("raise_of_non_exception",
                std::string("raise of a ") + Py_TYPE(exc_or_class)->tp_name);
  }
  std::string reason = describe(exc.get());
  throw UserException(std::move(exc), std::move(reason));
}

namespace {

PyRef exception_instance(PyObject* exc_or_class) {
  if (PyExceptionInstance_Check(exc_or_class)) return PyRef::borrow(exc_or_class);
  if (PyExceptionClass_Check(exc_or_class)) {
    PyRef exc = PyRef::steal(PyObject_CallNoArgs(exc_or_class));
    if (!exc) throw PythonError();
    if (!PyExceptionInstance_Check(exc.get()))
      raise_user(PyExc_TypeError, "calling " + std::string(Py_TYPE(exc_or_class)->tp_name) +
                                      " should have returned an instance of BaseException");
    return exc;
  }
  return {};
}

}  // namespace

void reraise_user(PyObject* exc) {
  try {
    raise_user_value(exc);
  } catch (UserException& e) {
    e.chained = true;
    throw;
  }
}

void raise_user_from(PyObject* exc_or_class, PyObject* cause_or_class) {
  PyRef exc = exception_instance(exc_or_class);
  if (!exc) raise_user(PyExc_TypeError, "exceptions must derive from BaseException");
  PyRef cause;
  if (cause_or_class != Py_None) {
    cause = exception_instance(cause_or_class);
    if (!cause) raise_user(PyExc_TypeError, "exception causes must derive from BaseException");
  }
  PyException_SetCause(exc.get(), cause.release());  // steals; also sets __suppress_context__
  raise_user_value(exc.get());
}

void chain_context(PyObject* exc, PyObject* handled) {
  if (!handled || handled == Py_None || handled == exc) return;
  // NOTE: bounded walk, like CPython's cycle-safe one: a pre-existing cycle must not hang.
  PyObject* o = handled;
  for (int steps = 0; steps < 10000; ++steps) {
    PyRef context = PyRef::steal(PyException_GetContext(o));
    if (!context) break;
    if (context.get() == exc) {
      PyException_SetContext(o, nullptr);
      break;
    }
    o = context.get();  // kept alive by the chain it belongs to
  }
  PyException_SetContext(exc, PyRef::borrow(handled).release());  // steals
}

PyRef pep479_replacement(PyObject* exc) {
  if (!PyErr_GivenExceptionMatches(exc, PyExc_StopIteration)) return PyRef::borrow(exc);
  PyRef err = PyRef::steal(
      PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration"));
  if (!err) throw PythonError();
  PyException_SetCause(err.get(), PyRef::borrow(exc).release());
  PyException_SetContext(err.get(), PyRef::borrow(exc).release());
  return err;
}

void pep479_error(PyObject* stop_iteration) {
  PyRef err = pep479_replacement(stop_iteration);
  reraise_user(err.get());  // its context is the StopIteration already
}

void raise_current_error(const std::string& what) {
  // NOTE: never a UserException: the traced program's handlers must not catch it, nor may
  // the frame run again eagerly as if nothing happened.
  if (fatal_python_error_pending()) throw PythonError();
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
  if (!value) graph_break("user_exception", what + ": unknown error");
  std::string reason = what + ": " + describe(value.get());
  throw UserException(std::move(value), std::move(reason));
}

}  // namespace tl::capture
