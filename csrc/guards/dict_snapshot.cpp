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

bool DictSnapshot::matches(PyObject* dict) const {
  if (!PyDict_Check(dict) || PyDict_GET_SIZE(dict) != static_cast<Py_ssize_t>(items_.size()))
    return false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  for (const Item& item : items_) {
    if (!PyDict_Next(dict, &pos, &k, &v)) return false;
    if (k != item.key.get() && !equals_exact(k, item.key.get())) return false;
    if (v == item.address && Py_TYPE(v) == item.type) {
      // NOTE: the same address holds the same object only while the old one is alive: a
      // weakref says so; an address-only value (no weakrefs) is trusted, as DICT_VERSION
      // trusted the dict that held it.
      if (!item.weak || PyWeakref_GET_OBJECT(item.value.get()) == v) continue;
      return false;
    }
    if (item.weak || !item.value || !equals_exact(v, item.value.get())) return false;
  }
  return true;
}

}  // namespace tl::guards
