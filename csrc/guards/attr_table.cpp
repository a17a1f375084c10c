#include "guards/attr_table.h"

#include <atomic>

#include "core/errors.h"
#include "guards/leaf_guard.h"

namespace tl::guards {

struct AttrTable::Entry {
  PyRef name;   // interned str
  PyRef after;  // Class/Instance: start the MRO walk after this class (super()); else null
  std::optional<LeafGuard> expect;  // identity, or value for constants; empty: absent
};

uint64_t dict_version_of(PyObject* dict) {
#if PY_VERSION_HEX >= 0x030D0000
  // NOTE: on 3.13 an instance __dict__ that shares the object's inline values
  // (a split dict: ma_values set) does not change its version when
  // `obj.attr = v` stores into those values. Such a dict gets a number never
  // seen before, so its guard always takes the slow path (the items).
  if (reinterpret_cast<PyDictObject*>(dict)->ma_values != nullptr) {
    static std::atomic<uint64_t> unique{0};
    return (uint64_t{1} << 63) | unique.fetch_add(1, std::memory_order_relaxed);
  }
#endif
  // NOTE: ma_version_tag is deprecated on 3.12 but still bumped on every store
  // (reference/frame-layer.md); on 3.12 its low bits also hold dict-watcher
  // flags, which only makes the slow path run once more.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag;
#pragma GCC diagnostic pop
}

namespace {
PyTypeObject* owner_type(AttrTable::Owner owner, PyObject* v) {
  if (owner == AttrTable::Owner::Instance) return Py_TYPE(v);
  return PyType_Check(v) ? reinterpret_cast<PyTypeObject*>(v) : nullptr;
}

// `name` in the MRO of `type` after class `after`, borrowed, or null.
PyObject* lookup_after(PyTypeObject* type, PyObject* after, PyObject* name) {
  PyObject* mro = type->tp_mro;
  if (!mro) return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
  while (i < n && PyTuple_GET_ITEM(mro, i) != after) ++i;
  for (++i; i < n; ++i) {
    PyRef d = type_dict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    PyObject* v = d ? PyDict_GetItemWithError(d.get(), name) : nullptr;
    if (v) return v;  // NOTE: borrowed from a dict its class keeps alive
    if (PyErr_Occurred()) throw PythonError();
  }
  return nullptr;
}

// The type's version tag, assigning one first when CPython has not (a cleared
// tag is re-assigned by the next _PyType_Lookup). 0: the type has none.
unsigned int type_tag(PyTypeObject* t) {
  if (t->tp_version_tag == 0) {
    static PyObject* probe = PyUnicode_InternFromString("__torchlite_probe__");  // immortal by use
    _PyType_Lookup(t, probe);
  }
  return t->tp_version_tag;
}

std::string repr_of(PyObject* v) {
  PyRef r = PyRef::steal(PyObject_Repr(v));
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (!s) PyErr_Clear();
  std::string out = s ? s : "?";
  return out.size() > 80 ? out.substr(0, 80) + "..." : out;
}
}  // namespace

AttrTable::AttrTable(Owner owner, PyObject* v) : owner_(owner) { version_ = version_of(v); }
AttrTable::~AttrTable() = default;

uint64_t AttrTable::version_of(PyObject* v) const {
  switch (owner_) {
    case Owner::Module:
      return PyModule_Check(v) ? dict_version_of(PyModule_GetDict(v)) : 0;
    case Owner::Dict:
      return PyDict_Check(v) ? dict_version_of(v) : 0;
    case Owner::Class:
    case Owner::Instance: {
      PyTypeObject* t = owner_type(owner_, v);
      return t ? type_tag(t) : 0;
    }
  }
  return 0;
}

void AttrTable::add(PyObject* name, PyObject* found, PyObject* after) {
  PyObject* interned = name;
  Py_INCREF(interned);
  PyUnicode_InternInPlace(&interned);  // entries compare names by pointer
  PyRef key = PyRef::steal(interned);
  for (const Entry& e : entries_)
    if (e.name.get() == key.get() && e.after.get() == after) return;
  Entry e{std::move(key), PyRef::borrow(after), std::nullopt};
  if (found) e.expect = LeafGuard::value_match(found);
  entries_.push_back(std::move(e));
}

PyObject* AttrTable::lookup(PyObject* v, const Entry& e) const {
  PyObject* found = nullptr;
  switch (owner_) {
    case Owner::Module:
    case Owner::Dict: {
      PyObject* d = owner_ == Owner::Module ? PyModule_GetDict(v) : v;
      found = PyDict_GetItemWithError(d, e.name.get());
      if (!found && PyErr_Occurred()) throw PythonError();
      return found;
    }
    case Owner::Class:
    case Owner::Instance: {
      PyTypeObject* t = owner_type(owner_, v);
      return e.after ? lookup_after(t, e.after.get(), e.name.get())
                     : _PyType_Lookup(t, e.name.get());
    }
  }
  return nullptr;
}

const AttrTable::Entry* AttrTable::first_changed(PyObject* v) const {
  for (const Entry& e : entries_) {
    PyObject* now = lookup(v, e);
    if (!now != !e.expect || (now && !e.expect->check(now))) return &e;
  }
  return nullptr;
}

bool AttrTable::check(PyObject* v) const {
  bool right_kind = owner_ == Owner::Module  ? PyModule_Check(v)
                    : owner_ == Owner::Dict  ? PyDict_Check(v)
                    : owner_ == Owner::Class ? PyType_Check(v)
                                             : true;
  if (!right_kind) return false;
  uint64_t now = version_of(v);
  if (now != 0 && now == version_) return true;
  if (first_changed(v)) return false;
  version_ = version_of(v);  // the lookups may have assigned a fresh type tag
  return true;
}

std::string AttrTable::failure(PyObject* v, const std::string& src) const {
  const Entry* e = nullptr;
  try {
    e = first_changed(v);
  } catch (const PythonError&) {
    PyErr_Clear();
  }
  if (!e) return src + ": not a " + (owner_ == Owner::Module ? "module" : "class") + " any more";
  std::string name = PyUnicode_AsUTF8(e->name.get());
  std::string where = owner_ == Owner::Instance ? "type(" + src + ")" : src;
  if (!e->expect) return where + "." + name + " now exists (it did not at trace time)";
  PyObject* now = lookup(v, *e);
  if (!now) return where + "." + name + " no longer exists";
  return where + "." + name + " changed since tracing (now " + repr_of(now) + ")";
}

std::string AttrTable::str(const std::string& src) const {
  std::string where = owner_ == Owner::Instance ? "type(" + src + ")" : src;
  std::string out = "ATTR_TABLE " + where + ":";
  for (const Entry& e : entries_) {
    out += std::string(" ") + PyUnicode_AsUTF8(e.name.get());
    if (e.after)
      out += std::string("@after:") + reinterpret_cast<PyTypeObject*>(e.after.get())->tp_name;
    if (!e.expect) out += "(absent)";
  }
  return out;
}

}  // namespace tl::guards
