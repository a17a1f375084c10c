#pragma once
// Two error kinds (STYLE.md): TL_CHECK for broken invariants (InternalError,
// "please report") and TL_THROW(kind) for user mistakes. A C++ exception never
// crosses into CPython: csrc/python and the frame hook translate it.
#include <Python.h>

#include <exception>
#include <sstream>
#include <string>

namespace tl {

// Unsupported: a graph break under fullgraph=True (torchlite.Unsupported).
enum class ErrorKind { Internal, Type, Value, Runtime, NotImplemented, Index, Key, Unsupported };

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string msg) : kind_(kind), msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
  std::string msg_;
};

// Thrown when a CPython call failed and left its exception set: the Python
// error is the message, so it is passed through untouched.
class PythonError : public std::exception {
 public:
  const char* what() const noexcept override { return "Python error already set"; }
};

// Throws PythonError if a CPython call signalled failure.
inline void throw_if_python_error() {
  if (PyErr_Occurred()) throw PythonError();
}

// True while the Python error set is one no fallback may swallow or turn into a
// graph break: KeyboardInterrupt, SystemExit (the user stops the program) and
// MemoryError (it cannot go on). Such an error must reach the user.
bool fatal_python_error_pending();
// PyErr_Clear for an error the caller expects (a missing attribute, a failed
// optional lookup); a fatal one stays set and PythonError is thrown instead.
void clear_expected_error();

class ErrorBuilder {
 public:
  ErrorBuilder(ErrorKind kind, const char* file, int line, const char* cond) : kind_(kind) {
    if (kind == ErrorKind::Internal) {
      ss_ << "torchlite internal error at " << file << ":" << line << " (" << cond << "): ";
    }
  }
  template <typename T>
  ErrorBuilder& operator<<(const T& v) {
    ss_ << v;
    return *this;
  }
  [[noreturn]] ~ErrorBuilder() noexcept(false) {
    if (kind_ == ErrorKind::Internal) ss_ << "\nThis is a torchlite bug; please report it.";
    throw Error(kind_, ss_.str());
  }

 private:
  ErrorKind kind_;
  std::ostringstream ss_;
};

// Sets the matching Python exception from a caught C++ exception. Call only in
// a catch block at a boundary into CPython.
void set_python_error(const std::exception& e);
// The Python class for InternalError; registered once at module init.
void set_internal_error_type(PyObject* type);     // borrows, keeps a reference
void set_unsupported_error_type(PyObject* type);  // borrows, keeps a reference

}  // namespace tl

#define TL_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::tl::ErrorBuilder(::tl::ErrorKind::Internal, __FILE__, __LINE__, #cond)

#define TL_THROW(kind) ::tl::ErrorBuilder(::tl::ErrorKind::kind, __FILE__, __LINE__, "")
