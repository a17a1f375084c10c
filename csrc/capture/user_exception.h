#pragma once
// A Python exception raised by the traced program itself: a missing attribute
// or dict key, a `raise` statement, a failing call folded at trace time. Unlike
// other graph breaks it carries the exception object, so an inlined frame whose
// try block covers the raising instruction can catch it at trace time and run
// its handler symbolically (PretrainedConfig's `getattr(config, name, default)`
// and `os.environ.get` work this way). Uncaught, it is a `user_exception`
// break: the frame runs in CPython, which raises it for real with the user's
// traceback.
#include <Python.h>

#include <string>

#include "capture/graph_break.h"
#include "core/py_ref.h"

namespace tl::capture {

class UserException : public GraphBreak {
 public:
  // `exc` is an exception instance (owned).
  UserException(PyRef exc, std::string reason)
      : GraphBreak("user_exception", std::move(reason)), exc_(std::move(exc)) {}
  PyObject* exception() const { return exc_.get(); }  // borrowed
  // isinstance(exception, type_or_tuple), as an `except` clause tests it.
  bool matches(PyObject* type_or_tuple) const;
  // Set once the exception's __context__ was chained (at its raise, as _PyErr_SetObject
  // does); a re-raise or a frame it propagates through must not chain it again.
  bool chained = false;

 private:
  PyRef exc_;
};

// Raises `exc_type(message)` in the traced program.
[[noreturn]] void raise_user(PyObject* exc_type, const std::string& message);
// Raises `exc_type(arg)` (borrowed arg), e.g. KeyError(key) as dict lookups do.
[[noreturn]] void raise_user_arg(PyObject* exc_type, PyObject* arg, const std::string& reason);
// Raises an exception value the traced program built: an instance, or a class
// instantiated with no arguments. Anything else is a `raise_of_non_exception` break.
[[noreturn]] void raise_user_value(PyObject* exc_or_class);
// Re-raises an exception the traced program caught (bare `raise`, RERAISE): no new context.
[[noreturn]] void reraise_user(PyObject* exc);
// `raise exc from cause` (both borrowed; either may be a class): sets __cause__ and
// __suppress_context__ as CPython's do_raise does, then raises.
[[noreturn]] void raise_user_from(PyObject* exc, PyObject* cause);
// Sets exc.__context__ to the exception being handled (borrowed, may be null) unless they are
// the same object, first cutting a cycle through `exc`, as _PyErr_SetObject does.
void chain_context(PyObject* exc, PyObject* handled);
// PEP 479: a StopIteration (borrowed) leaving a generator's body becomes
// RuntimeError("generator raised StopIteration") caused by it; other exceptions are returned.
PyRef pep479_replacement(PyObject* exc);
[[noreturn]] void pep479_error(PyObject* stop_iteration);
// Turns the Python error currently set (by a call folded at trace time) into a
// UserException; `what` prefixes the break reason.
[[noreturn]] void raise_current_error(const std::string& what);

}  // namespace tl::capture
