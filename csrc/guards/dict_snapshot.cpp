#include "guards/dict_snapshot.h"

#include "core/errors.h"
#include "guards/leaf_guard.h"

namespace tl::guards {

DictSnapshot::DictSnapshot(PyObject* dict) {
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    Item item{PyRef::borrow(k), PyRef(), false, v, Py_TYPE(v)};
    if (compared_by_value(v)) {
      item.value = PyRef::borrow(v);
    } else if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(v))) {
      item.value = PyRef::steal(PyWeakref_NewRef(v, nullptr));
      if (!item.value) throw PythonError();
      item.weak = true;
    }
    items_.push_back(std::move(item));
  }
}

bool DictSnapshot::same_value(const Item& item, PyObject* v) {
  if (item.type_only) return Py_TYPE(v) == item.type;
  if (v == item.address && Py_TYPE(v) == item.type) {
    // NOTE: the same address holds the same object only while the old one is alive: a
    // weakref says so; an address-only value (no weakrefs) is trusted, as DICT_VERSION
    // trusted the dict that held it.
    return !item.weak || PyWeakref_GET_OBJECT(item.value.get()) == v;
  }
  return !item.weak && item.value && equals_exact(v, item.value.get());
}

bool DictSnapshot::matches(PyObject* dict) const {
  if (!PyDict_Check(dict) || PyDict_GET_SIZE(dict) != static_cast<Py_ssize_t>(items_.size()))
    return false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  bool in_order = true;
  for (const Item& item : items_) {
    if (!PyDict_Next(dict, &pos, &k, &v)) return false;
    if (k != item.key.get() && !equals_exact(k, item.key.get())) {
      in_order = false;
      break;
    }
    if (!same_value(item, v)) return false;
  }
  if (in_order) return true;
  // NOTE: the same keys in another order (an attribute deleted and set again moves to the end:
  // torchlite's module wrapper sets the original's `_compiled_call_impl` for the length of a
  // generate() call, so the model's `_previous_max_cache_length`, set by the first call, came
  // before it from the second call on): looked up by key. Only str and int keys, whose lookup
  // runs no user code; a trace that iterates a dict guards its keys' order (DICT_KEYS).
  for (const Item& item : items_) {
    PyObject* key = item.key.get();
    if (!PyUnicode_CheckExact(key) && !PyLong_CheckExact(key)) return false;
    PyObject* now = PyDict_GetItemWithError(dict, key);  // borrowed
    if (!now) {
      if (PyErr_Occurred()) throw PythonError();
      return false;
    }
    if (!same_value(item, now)) return false;
  }
  return true;
}

}  // namespace tl::guards

namespace tl::guards {

DictSnapshot DictSnapshot::with_type_only(PyObject* key) const {
  DictSnapshot out;
  out.items_ = items_;
  for (Item& item : out.items_) {
    if (item.key.get() != key && !equals_exact(item.key.get(), key)) continue;
    // NOTE: an exact int or float: its type is a builtin (immortal), nothing to keep alive.
    item.type_only = true;
    item.value = PyRef();
    item.weak = false;
  }
  return out;
}

}  // namespace tl::guards
