#include "core/python_helpers.h"

#include <mutex>
#include <unordered_map>

#include "core/errors.h"

namespace tl {
namespace {

std::mutex g_mu;

// NOTE: references are never dropped at exit: the table outlives the
// interpreter, and a Py_DECREF after finalization would crash.
std::unordered_map<std::string, PyObject*>& helpers() {
  static auto* table = new std::unordered_map<std::string, PyObject*>();
  return *table;
}

}  // namespace

void register_python_helper(const std::string& name, PyObject* fn) {
  Py_XINCREF(fn);
  PyObject* old = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    PyObject*& slot = helpers()[name];
    old = slot;
    slot = fn;
  }
  Py_XDECREF(old);
}

PyRef python_helper(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = helpers().find(name);
  TL_CHECK(it != helpers().end() && it->second)
      << "torchlite's Python package did not register its helper '" << name
      << "' (torchlite/_install.py registers them at import)";
  return PyRef::borrow(it->second);
}

}  // namespace tl
