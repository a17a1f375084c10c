#include "guards/leaf_guard.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "guards/dict_order.h"
#include "guards/torch_refs.h"

namespace tl::guards {

bool is_numpy_number(PyObject* v) {
  // NOTE: by name, so numpy is never imported here: numpy.float64, numpy.int64, numpy.bool_...
  // all derive from numpy.number or are numpy.bool(_), immutable values like float and int.
  PyTypeObject* t = Py_TYPE(v);
  if (std::strncmp(t->tp_name, "numpy.", 6) != 0) return false;
  for (PyTypeObject* b = t; b; b = b->tp_base)
    if (!std::strcmp(b->tp_name, "numpy.number") || !std::strcmp(b->tp_name, "numpy.bool_") ||
        !std::strcmp(b->tp_name, "numpy.bool"))
      return true;
  return false;
}

namespace {
std::string repr(PyObject* v) {
  PyRef r = PyRef::steal(PyObject_Repr(v));
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (!s) PyErr_Clear();
  std::string out = s ? s : "?";
  // NOTE: a failure names the value; a tuple of modules and tensors would print pages.
  return out.size() > 200 ? out.substr(0, 200) + "..." : out;
}

const char* type_name(PyObject* v) { return Py_TYPE(v)->tp_name; }

// Values whose == is a total, side-effect free comparison of immutable data.
bool is_constant(PyObject* v) {
  if (is_numpy_number(v)) return true;
  if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
      PyComplex_CheckExact(v) || PyUnicode_CheckExact(v) || PyBytes_CheckExact(v))
    return true;
  const TorchRefs& t = torch_refs();
  PyObject* type = (PyObject*)Py_TYPE(v);
  if (type == t.dtype_type || type == t.device_type || type == t.layout_type ||
      type == t.memory_format_type)
    return true;
  if (PyTuple_CheckExact(v) || (t.size_type && type == t.size_type)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i)
      if (!is_constant(PyTuple_GET_ITEM(v, i))) return false;
    return true;
  }
  // NOTE: capture treats these as immutable constants too (capture/context.cpp
  // is_immutable_constant), e.g. a slice argument `x[s]` or `module_list[:n]` in a resume frame.
  if (v == Py_Ellipsis || v == Py_NotImplemented || PyRange_Check(v)) return true;
  if (PySlice_Check(v)) {
    auto* s = reinterpret_cast<PySliceObject*>(v);
    return is_constant(s->start) && is_constant(s->stop) && is_constant(s->step);
  }
  if (PyFrozenSet_CheckExact(v)) {
    PyRef it = PyRef::steal(PyObject_GetIter(v));
    if (!it) throw PythonError();
    while (PyRef item = PyRef::steal(PyIter_Next(it.get())))
      if (!is_constant(item.get())) return false;
    if (PyErr_Occurred()) throw PythonError();
    return true;
  }
  return false;
}

Py_ssize_t length_of(PyObject* v) {
  if (PyList_CheckExact(v)) return PyList_GET_SIZE(v);
  if (PyTuple_CheckExact(v)) return PyTuple_GET_SIZE(v);
  if (PyDict_CheckExact(v)) return PyDict_GET_SIZE(v);
  Py_ssize_t n = PyObject_Length(v);
  if (n < 0) clear_expected_error();  // no len(): the guard fails (Ctrl-C still raises)
  return n;
}
}  // namespace

bool compared_by_value(PyObject* v) { return is_constant(v); }

bool equals_exact(PyObject* a, PyObject* b) {
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  if (a == b) return true;
  if (PyFloat_CheckExact(a)) {
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    return x == y && std::signbit(x) == std::signbit(y);
  }
  if (PySlice_Check(a)) {
    // NOTE: by part, so slice(1, 2) and slice(1.0, 2) (equal under ==) stay apart.
    auto* x = reinterpret_cast<PySliceObject*>(a);
    auto* y = reinterpret_cast<PySliceObject*>(b);
    return equals_exact(x->start, y->start) && equals_exact(x->stop, y->stop) &&
           equals_exact(x->step, y->step);
  }
  if (PyTuple_Check(a)) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (PyTuple_GET_SIZE(b) != n) return false;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!equals_exact(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i))) return false;
    return true;
  }
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) throw PythonError();
  if (eq == 0 && is_numpy_number(a)) {  // NOTE: a numpy NaN equals NaN, as a float's does
    double x = PyFloat_AsDouble(a), y = PyFloat_AsDouble(b);
    if (PyErr_Occurred()) {  // a complex one: unequal
      PyErr_Clear();
      return false;
    }
    return std::isnan(x) && std::isnan(y);
  }
  return eq == 1;
}

LeafGuard LeafGuard::type_match(PyObject* type) {
  TL_CHECK(PyType_Check(type)) << "TYPE_MATCH needs a type, got " << type_name(type);
  return LeafGuard{GuardKind::TypeMatch, PyRef::borrow(type)};
}

LeafGuard LeafGuard::number_type(PyObject* number, bool narrow) {
  TL_CHECK(PyFloat_CheckExact(number) || PyLong_CheckExact(number))
      << "NUMBER_TYPE needs a float or an int, got " << type_name(number);
  LeafGuard g{GuardKind::NumberType, PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(number)))};
  g.narrow = narrow;
  return g;
}

LeafGuard LeafGuard::id_match(PyObject* obj) {
  // NOTE: a weakref, not a strong reference: cache entries live on the code
  // object, so a strong one would keep e.g. a dropped model and its weights
  // alive for the life of the process. The weakref still rules out id reuse:
  // it is cleared before the object is freed, so a new object at the same
  // address never matches. Objects without weakref support (None, ints,
  // tuples) are small or immortal, so those are held strongly.
  LeafGuard g{GuardKind::IdMatch};
  g.id = obj;
  if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj))) {
    g.ref = PyRef::steal(PyWeakref_NewRef(obj, nullptr));
    if (!g.ref) throw PythonError();
    g.weak = true;
  } else {
    g.ref = PyRef::borrow(obj);
  }
  return g;
}

LeafGuard LeafGuard::equals_match(PyObject* value) {
  TL_CHECK(is_constant(value)) << "EQUALS_MATCH on a " << type_name(value)
                               << ": only None/bool/int/float/complex/str/bytes, tuples of "
                                  "those and torch.dtype/device/layout/memory_format are "
                                  "compared by value; use ID_MATCH";
  return LeafGuard{GuardKind::EqualsMatch, PyRef::borrow(value)};
}

LeafGuard LeafGuard::tensor_match(PyObject* tensor) {
  LeafGuard g{GuardKind::TensorMatch};
  g.tensor = std::make_shared<const guards::TensorMatch>(tensor);
  return g;
}

LeafGuard LeafGuard::dict_version(PyObject* dict) {
  TL_CHECK(PyDict_Check(dict)) << "DICT_VERSION needs a dict, got " << type_name(dict);
  // Version tags come from one interpreter-wide counter, so no other dict can
  // carry this one: no reference to the dict is needed.
  LeafGuard g{GuardKind::DictVersion};
  g.version = dict_version_of(dict);
  g.snapshot = std::make_shared<const DictSnapshot>(dict);
  return g;
}

LeafGuard LeafGuard::length_match(Py_ssize_t n) {
  LeafGuard g{GuardKind::LengthMatch};
  g.length = n;
  return g;
}

LeafGuard LeafGuard::value_match(PyObject* value) {
  return is_constant(value) ? equals_match(value) : id_match(value);
}

LeafGuard LeafGuard::attr_table(AttrTable::Owner owner, PyObject* v) {
  LeafGuard g{GuardKind::AttrTable};
  g.table = std::make_shared<AttrTable>(owner, v);
  return g;
}

LeafGuard LeafGuard::no_instance_attr(PyObject* name) {
  return LeafGuard{GuardKind::NoInstanceAttr, PyRef::borrow(name)};
}

LeafGuard LeafGuard::set_match(PyObject* set) {
  TL_CHECK(PySet_CheckExact(set)) << "SET_MATCH needs a set, got " << type_name(set);
  LeafGuard g{GuardKind::SetMatch};
  g.ref = PyRef::steal(PySequence_Tuple(set));  // iteration order, as the trace saw it
  if (!g.ref) throw PythonError();
  g.by_value = is_constant(g.ref.get());
  return g;
}

LeafGuard LeafGuard::function_defaults(PyObject* fn) {
  TL_CHECK(PyFunction_Check(fn)) << "FUNCTION_DEFAULTS needs a function, got " << type_name(fn);
  LeafGuard g{GuardKind::FunctionDefaults, PyRef::borrow(PyFunction_GET_DEFAULTS(fn))};
  g.ref2 = PyRef::borrow(PyFunction_GET_KW_DEFAULTS(fn));
  return g;
}

LeafGuard LeafGuard::call_result(PyObject* result) {
  LeafGuard g = equals_match(result);
  g.kind = GuardKind::CallResult;
  return g;
}

LeafGuard LeafGuard::dict_keys(PyObject* dict) {
  TL_CHECK(PyDict_Check(dict)) << "DICT_KEYS needs a dict, got " << type_name(dict);
  LeafGuard g{GuardKind::DictKeys};
  std::vector<PyRef> keys = dict_keys_in_order(dict);
  g.ref = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(keys.size())));
  if (!g.ref) throw PythonError();
  for (size_t i = 0; i < keys.size(); ++i) {
    TL_CHECK(is_constant(keys[i].get()))
        << "DICT_KEYS on a dict with a " << type_name(keys[i].get()) << " key";
    PyTuple_SET_ITEM(g.ref.get(), static_cast<Py_ssize_t>(i), keys[i].release());
  }
  return g;
}

namespace {
bool call_result_equals(PyObject* fn, PyObject* want) {
  PyRef r = PyRef::steal(PyObject_CallNoArgs(fn));
  if (!r) throw PythonError();
  return equals_exact(r.get(), want);
}

// The set `v` holds exactly `items` (a tuple), in that iteration order.
bool set_matches(PyObject* v, PyObject* items, bool by_value) {
  if (!PySet_CheckExact(v) || PySet_GET_SIZE(v) != PyTuple_GET_SIZE(items)) return false;
  Py_ssize_t i = 0;
#if PY_VERSION_HEX >= 0x030D0000
  // NOTE: 3.13 made _PySet_NextEntry internal; the set iterator walks the same order.
  PyRef it = PyRef::steal(PyObject_GetIter(v));
  if (!it) throw PythonError();
  while (PyRef key = PyRef::steal(PyIter_Next(it.get()))) {
    PyObject* want = PyTuple_GET_ITEM(items, i++);
    if (by_value ? !equals_exact(key.get(), want) : key.get() != want) return false;
  }
  if (PyErr_Occurred()) throw PythonError();
#else
  Py_ssize_t pos = 0;
  PyObject* key;
  Py_hash_t hash;
  while (_PySet_NextEntry(v, &pos, &key, &hash)) {
    PyObject* want = PyTuple_GET_ITEM(items, i++);
    if (by_value ? !equals_exact(key, want) : key != want) return false;
  }
#endif
  return true;
}

// NOTE: in iteration order (an OrderedDict's own order, dict_order.h), the order the trace read.
bool dict_keys_match(PyObject* v, PyObject* keys) {
  if (!PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys)) return false;
  if (PyODict_Check(v)) {
    std::vector<PyRef> now = dict_keys_in_order(v);
    for (size_t i = 0; i < now.size(); ++i) {
      PyObject* want = PyTuple_GET_ITEM(keys, static_cast<Py_ssize_t>(i));
      if (now[i].get() != want && !equals_exact(now[i].get(), want)) return false;
    }
    return true;
  }
  PyObject *k, *value;
  Py_ssize_t pos = 0, i = 0;
  while (PyDict_Next(v, &pos, &k, &value)) {
    PyObject* want = PyTuple_GET_ITEM(keys, i++);
    if (k != want && !equals_exact(k, want)) return false;
  }
  return true;
}

// v.__dict__[name] as a borrowed pointer, or null (no instance dict, no such
// key). Throws PythonError if the lookup raised.
PyObject* instance_attr(PyObject* v, PyObject* name) {
  PyObject** slot = _PyObject_GetDictPtr(v);
  if (!slot || !*slot) return nullptr;
  PyObject* d = PyDict_GetItemWithError(*slot, name);
  if (!d && PyErr_Occurred()) throw PythonError();
  return d;
}

bool is_empty_dict(PyObject* d) { return d && PyDict_Check(d) && PyDict_GET_SIZE(d) == 0; }
}  // namespace

std::optional<LeafGuard> LeafGuard::empty_dict_attr(PyObject* owner, PyObject* name) {
  PyObject* descr = _PyType_Lookup(Py_TYPE(owner), name);  // borrowed
  if (descr && Py_TYPE(descr)->tp_descr_set) return std::nullopt;
  if (!is_empty_dict(instance_attr(owner, name))) return std::nullopt;
  LeafGuard g{GuardKind::EmptyDictAttr};
  g.ref = PyRef::borrow(name);
  return g;
}

bool LeafGuard::check(PyObject* v) const {
  switch (kind) {
    case GuardKind::TypeMatch:
      return (PyObject*)Py_TYPE(v) == ref.get();
    case GuardKind::IdMatch:
      return v == id && (!weak || PyWeakref_GET_OBJECT(ref.get()) == v);
    case GuardKind::EqualsMatch:
      return equals_exact(v, ref.get());
    case GuardKind::TensorMatch:
      return tensor->check(v);
    case GuardKind::DictVersion: {
      if (!PyDict_Check(v)) return false;
      uint64_t now = dict_version_of(v);
      if (now == version) return true;
      if (!snapshot->matches(v)) return false;
      version = now;
      return true;
    }
    case GuardKind::LengthMatch:
      return length_of(v) == length;
    case GuardKind::EmptyDictAttr: {
      if (!is_empty_dict(instance_attr(v, ref.get()))) return false;
      for (const PyRef& name : more_names)
        if (!is_empty_dict(instance_attr(v, name.get()))) return false;
      return true;
    }
    case GuardKind::AttrTable:
      return table->check(v);
    case GuardKind::NoInstanceAttr:
      return instance_attr(v, ref.get()) == nullptr;
    case GuardKind::SetMatch:
      return set_matches(v, ref.get(), by_value);
    case GuardKind::CallResult:
      return call_result_equals(v, ref.get());
    case GuardKind::FunctionDefaults:
      return PyFunction_Check(v) && PyFunction_GET_DEFAULTS(v) == ref.get() &&
             PyFunction_GET_KW_DEFAULTS(v) == ref2.get();
    case GuardKind::DictKeys:
      return dict_keys_match(v, ref.get());
    case GuardKind::NumberType: {
      if (reinterpret_cast<PyObject*>(Py_TYPE(v)) != ref.get()) return false;
      if (PyFloat_CheckExact(v)) {
        // NOTE: int() raises for inf and nan; beyond int64 the graph's cast would wrap.
        const double d = PyFloat_AS_DOUBLE(v);
        return !narrow ||
               (std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0);
      }
      int overflow = 0;
      const long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
      constexpr long long kNarrow = 1LL << 31;
      return overflow == 0 && (!narrow || (n >= -kNarrow && n <= kNarrow));
    }
  }
  return false;
}

std::string LeafGuard::failure(PyObject* v, const std::string& src) const {
  switch (kind) {
    case GuardKind::TypeMatch:
      return src + ": type mismatch: expected " + ((PyTypeObject*)ref.get())->tp_name + ", got " +
             type_name(v);
    case GuardKind::IdMatch: {
      PyObject* target = weak ? PyWeakref_GET_OBJECT(ref.get()) : ref.get();
      if (target == Py_None && weak) return src + ": the guarded object was freed";
      return src + ": not the same " + type_name(target) + " object as at trace time (got a " +
             type_name(v) + ")";
    }
    case GuardKind::EqualsMatch: {
      std::string got = repr(v);
      if (Py_TYPE(v) != Py_TYPE(ref.get())) got += std::string(" of type ") + type_name(v);
      return src + " == " + repr(ref.get()) + " failed (got " + got + ")";
    }
    case GuardKind::TensorMatch:
      return src + ": " + tensor->mismatch(v);
    case GuardKind::DictVersion:
      return src + " was modified since tracing (its items differ)";
    case GuardKind::LengthMatch:
      return "len(" + src + ") == " + std::to_string(length) + " failed (got " +
             std::to_string(length_of(v)) + ")";
    case GuardKind::EmptyDictAttr: {
      PyObject* name = ref.get();  // NOTE: the first that is not empty
      if (is_empty_dict(instance_attr(v, name)))
        for (const PyRef& more : more_names)
          if (!is_empty_dict(instance_attr(v, more.get()))) {
            name = more.get();
            break;
          }
      return src + "." + PyUnicode_AsUTF8(name) +
             " is no longer an empty dict (a hook was registered?)";
    }
    case GuardKind::AttrTable:
      return table->failure(v, src);
    case GuardKind::NoInstanceAttr:
      return src + "." + PyUnicode_AsUTF8(ref.get()) + " was set since tracing";
    case GuardKind::SetMatch:
      return src + ": the set changed since tracing (now " + repr(v) + ")";
    case GuardKind::FunctionDefaults:
      return src + ": __defaults__ or __kwdefaults__ was replaced";
    case GuardKind::CallResult:
      return src + "() != " + repr(ref.get()) + " any more";
    case GuardKind::DictKeys:
      return src + ": the keys changed since tracing (expected " + repr(ref.get()) + ")";
    case GuardKind::NumberType:
      return src + ": expected a " + reinterpret_cast<PyTypeObject*>(ref.get())->tp_name +
             (ref.get() == reinterpret_cast<PyObject*>(&PyLong_Type)
                  ? (narrow ? " within +-2**31" : " within int64")
                  : (narrow ? " whose int() fits in int64" : "")) +
             ", got " + repr(v) + " of type " + type_name(v);
  }
  return src + ": guard failed";
}

std::string LeafGuard::str(const std::string& src) const {
  switch (kind) {
    case GuardKind::TypeMatch:
      return "TYPE_MATCH " + src + " (" + ((PyTypeObject*)ref.get())->tp_name + ")";
    case GuardKind::IdMatch: {
      PyObject* target = weak ? PyWeakref_GET_OBJECT(ref.get()) : ref.get();
      if (weak && target == Py_None) return "ID_MATCH " + src + " (freed)";
      return "ID_MATCH " + src + " (" + (target == Py_None ? "None" : type_name(target)) + ")";
    }
    case GuardKind::EqualsMatch:
      return "EQUALS_MATCH " + src + " == " + repr(ref.get());
    case GuardKind::TensorMatch:
      return "TENSOR_MATCH " + src + " " + tensor->str();
    case GuardKind::DictVersion:
      return "DICT_VERSION " + src;
    case GuardKind::LengthMatch:
      return "LENGTH_MATCH len(" + src + ") == " + std::to_string(length);
    case GuardKind::EmptyDictAttr: {
      std::string names = std::string("'") + PyUnicode_AsUTF8(ref.get()) + "'";
      for (const PyRef& more : more_names)
        names += std::string(", '") + PyUnicode_AsUTF8(more.get()) + "'";
      return "EMPTY_DICT_ATTR " + src + ".__dict__[" + names + "] are empty dicts";
    }
    case GuardKind::AttrTable:
      return table->str(src);
    case GuardKind::NoInstanceAttr:
      return "NO_INSTANCE_ATTR '" + std::string(PyUnicode_AsUTF8(ref.get())) + "' not in " + src +
             ".__dict__";
    case GuardKind::SetMatch:
      return "SET_MATCH " + src + " == " + repr(ref.get());
    case GuardKind::FunctionDefaults:
      return "FUNCTION_DEFAULTS " + src;
    case GuardKind::CallResult:
      return "CALL_RESULT " + src + "() == " + repr(ref.get());
    case GuardKind::DictKeys:
      return "DICT_KEYS " + src + " == " + repr(ref.get());
    case GuardKind::NumberType:
      return "NUMBER_TYPE " + src + " (" + reinterpret_cast<PyTypeObject*>(ref.get())->tp_name +
             (!narrow                                                  ? ""
              : ref.get() == reinterpret_cast<PyObject*>(&PyLong_Type) ? ", within +-2**31"
                                                                       : ", int() within int64") +
             ", a graph input)";
  }
  return "?";
}

bool LeafGuard::same_as(const LeafGuard& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case GuardKind::TypeMatch:
      return ref.get() == o.ref.get();
    case GuardKind::NumberType:
      return ref.get() == o.ref.get() && narrow == o.narrow;
    case GuardKind::IdMatch:
      return id == o.id && check(o.id);  // and ours is still alive
    case GuardKind::EqualsMatch:
    case GuardKind::CallResult:
      return equals_exact(ref.get(), o.ref.get());
    case GuardKind::TensorMatch:
      return tensor->same_as(*o.tensor);
    case GuardKind::DictVersion:
      return version == o.version;
    case GuardKind::LengthMatch:
      return length == o.length;
    case GuardKind::EmptyDictAttr:
      if (more_names.size() != o.more_names.size()) return false;
      for (size_t i = 0; i < more_names.size(); ++i)
        if (more_names[i].get() != o.more_names[i].get()) return false;
      return ref.get() == o.ref.get();  // interned
    case GuardKind::NoInstanceAttr:
      return ref.get() == o.ref.get();  // interned
    case GuardKind::AttrTable:
      return table == o.table;
    case GuardKind::SetMatch:
      return by_value == o.by_value && equals_exact(ref.get(), o.ref.get());
    case GuardKind::FunctionDefaults:
      return ref.get() == o.ref.get() && ref2.get() == o.ref2.get();
    case GuardKind::DictKeys:
      return equals_exact(ref.get(), o.ref.get());
  }
  return false;
}

}  // namespace tl::guards
