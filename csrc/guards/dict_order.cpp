#include "guards/dict_order.h"

#include "core/errors.h"

namespace tl::guards {

namespace {
// NOTE: the layout of CPython's dict views (_PyDictViewObject; internal from 3.13, unchanged
// since 3.0): the object header, then the dict the view reads.
struct DictViewLayout {
  PyObject_HEAD PyObject* dict;
};
}  // namespace

bool iterates_like_ordered_dict(PyTypeObject* type) {
  if (!PyType_IsSubtype(type, &PyODict_Type)) return false;
  static PyObject* names[] = {
      PyUnicode_InternFromString("__iter__"), PyUnicode_InternFromString("__reversed__"),
      PyUnicode_InternFromString("keys"), PyUnicode_InternFromString("items"),
      PyUnicode_InternFromString("values")};  // NOTE: immortal by use, like interned names
  for (PyObject* name : names) {
    TL_CHECK(name) << "interning a method name failed";
    if (_PyType_Lookup(type, name) != _PyType_Lookup(&PyODict_Type, name)) return false;
  }
  return true;
}

std::vector<PyRef> dict_keys_in_order(PyObject* dict) {
  std::vector<PyRef> keys;
  keys.reserve(PyDict_GET_SIZE(dict));
  if (PyODict_Check(dict)) {
    // OrderedDict's C iterator walks its linked list; it runs no Python code of a subclass.
    PyRef it = PyRef::steal(PyODict_Type.tp_iter(dict));
    if (!it) throw PythonError();
    while (PyRef k = PyRef::steal(PyIter_Next(it.get()))) keys.push_back(std::move(k));
    if (PyErr_Occurred()) throw PythonError();
    return keys;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) keys.push_back(PyRef::borrow(k));
  return keys;
}

PyObject* dict_view_mapping(PyObject* view) {
  if (!PyDictKeys_Check(view) && !PyDictValues_Check(view) && !PyDictItems_Check(view))
    return nullptr;
  PyObject* d = reinterpret_cast<DictViewLayout*>(view)->dict;
  return d && PyDict_Check(d) ? d : nullptr;
}

}  // namespace tl::guards
