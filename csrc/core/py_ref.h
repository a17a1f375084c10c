#pragma once
// RAII ownership of one CPython reference. Every owned PyObject* in torchlite
// lives in a PyRef; raw pointers in signatures are borrowed unless the
// function's comment says otherwise.
#include <Python.h>

#include <utility>
#include <vector>

namespace tl {

class PyRef {
 public:
  PyRef() = default;
  // Takes over a new reference (may be null).
  static PyRef steal(PyObject* p) { return PyRef(p); }
  // Adds a reference to a borrowed pointer (may be null).
  static PyRef borrow(PyObject* p) {
    Py_XINCREF(p);
    return PyRef(p);
  }
  PyRef(const PyRef& o) : p_(o.p_) { Py_XINCREF(p_); }
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(p_); }

  PyObject* get() const { return p_; }
  // Returns the new reference to the caller and forgets it.
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const PyRef& o) const { return p_ == o.p_; }

 private:
  explicit PyRef(PyObject* p) : p_(p) {}
  PyObject* p_ = nullptr;
};

// The pointers of `refs`, borrowed (valid while `refs` lives): for calls taking PyObject* const*.
inline std::vector<PyObject*> borrowed(const std::vector<PyRef>& refs) {
  std::vector<PyObject*> out;
  out.reserve(refs.size());
  for (const PyRef& r : refs) out.push_back(r.get());
  return out;
}

// A type's own attribute dict (new reference). NOTE: on 3.12 static builtin types such as
// `object` keep tp_dict NULL; PyType_GetDict finds theirs.
inline PyRef type_dict(PyTypeObject* t) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyRef::steal(PyType_GetDict(t));
#else
  return PyRef::borrow(t->tp_dict);
#endif
}

}  // namespace tl
