#include "guards/fetch.h"

#include <algorithm>

#include "core/errors.h"
#include "guards/attr_table.h"
#include "guards/dict_order.h"
#include "guards/torch_refs.h"

namespace tl::guards {

namespace {
using ir::SourceKind;

// How an attribute read on a given type is evaluated.
enum AttrPath : unsigned char {
  kGeneric = 1,  // PyObject_GetAttr, AttributeError cleared
  kPlain = 2,    // tp_getattro is object's: generic lookup with the error suppressed
  kModule = 3,   // nn.Module: generic lookup, then _parameters/_buffers/_modules
};

// A new reference to a borrowed pointer, or null.
PyRef own(PyObject* borrowed) { return PyRef::borrow(borrowed); }

// Null PyRef for "missing" when the pending error is one of `missing`, else throws.
PyRef missing_or_throw(PyObject* missing) {
  if (PyErr_ExceptionMatches(missing)) {
    PyErr_Clear();
    return {};
  }
  throw PythonError();
}

// Dict lookup; returns a new reference or null (missing), throws on error.
// NOTE: a dict subclass is read from its storage, as the trace read it
// (Tracer::created_object_method), not through a __getitem__ of its own.
PyRef dict_get(PyObject* dict, PyObject* key) {
  if (PyDict_Check(dict)) {
    PyObject* v = PyDict_GetItemWithError(dict, key);  // borrowed
    if (!v && PyErr_Occurred()) throw PythonError();
    return own(v);
  }
  PyObject* v = PyObject_GetItem(dict, key);
  return v ? PyRef::steal(v) : missing_or_throw(PyExc_KeyError);
}

// Whether `type` resolves attributes exactly like torch.nn.Module does:
// object.__getattribute__, then Module.__getattr__ on a miss.
bool is_module_like(PyTypeObject* type) {
  const TorchRefs& t = torch_refs();
  if (!t.module_getattr || !PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) return false;
  if (!PyType_IsSubtype(type, reinterpret_cast<PyTypeObject*>(t.module_type))) return false;
  static PyObject* getattr_name = PyUnicode_InternFromString("__getattr__");  // immortal by use
  static PyObject* getattribute_name = PyUnicode_InternFromString("__getattribute__");
  static PyObject* object_getattribute = _PyType_Lookup(&PyBaseObject_Type, getattribute_name);
  return _PyType_Lookup(type, getattr_name) == t.module_getattr &&
         _PyType_Lookup(type, getattribute_name) == object_getattribute;
}

unsigned char classify(PyTypeObject* type) {
  if (type->tp_getattro == PyObject_GenericGetAttr) return kPlain;
  // NOTE: a class's own Python __getattribute__ was inlined by the trace, which read through
  // it by object.__getattribute__ (the generic read): running it again here would repeat its
  // effects (a log it appends to) on every guard check.
  static PyObject* getattribute = PyUnicode_InternFromString("__getattribute__");  // immortal
  PyObject* own = _PyType_Lookup(type, getattribute);                              // borrowed
  if (own && PyFunction_Check(own)) return kPlain;
  return is_module_like(type) ? kModule : kGeneric;
}

// Module.__getattr__: self.__dict__'s _parameters, _buffers, _modules in that
// order. Returns a new reference or null (missing); throws on errors. `subs`/`n_subs` (when
// given): the exact dicts consulted, in order, and `from_dicts` whether the value (or the
// miss) was decided by those dicts alone.
PyRef module_getattr(PyObject* obj, PyObject* name, PyObject** subs = nullptr,
                     int* n_subs = nullptr, bool* from_dicts = nullptr) {
  if (from_dicts) *from_dicts = false;
  static PyObject* dict_names[3] = {PyUnicode_InternFromString("_parameters"),
                                    PyUnicode_InternFromString("_buffers"),
                                    PyUnicode_InternFromString("_modules")};
  PyObject** dict_ptr = _PyObject_GetDictPtr(obj);  // borrowed slot
  if (!dict_ptr || !*dict_ptr) return {};
  for (PyObject* dict_name : dict_names) {
    PyRef sub = dict_get(*dict_ptr, dict_name);
    if (!sub) continue;
    if (!PyDict_CheckExact(sub.get())) {
      // A custom mapping may override __contains__: let Python decide.
      PyObject* v = PyObject_GetAttr(obj, name);
      return v ? PyRef::steal(v) : missing_or_throw(PyExc_AttributeError);
    }
    if (subs) subs[(*n_subs)++] = sub.get();                 // NOTE: the instance __dict__ holds it
    PyObject* v = PyDict_GetItemWithError(sub.get(), name);  // borrowed; None is a value
    if (v) {
      if (from_dicts) *from_dicts = true;
      return own(v);
    }
    if (PyErr_Occurred()) throw PythonError();
  }
  return {};
}
}  // namespace

FetchStep::FetchStep(const ir::Source& s) : kind_(s.kind), index_(s.index) {
  switch (kind_) {
    case SourceKind::Global:
    case SourceKind::Builtin:
    case SourceKind::Attr:
      name_ = PyRef::steal(PyUnicode_InternFromString(s.name.c_str()));
      if (!name_) throw PythonError();
      view_mapping_ = kind_ == SourceKind::Attr && s.name == "mapping";
      break;
    case SourceKind::Item:
      key_ = s.key;
      if (PyLong_CheckExact(key_.get())) {
        index_key_ = PyLong_AsSsize_t(key_.get());
        if (index_key_ == -1 && PyErr_Occurred()) throw PythonError();
        key_is_index_ = true;
      }
      break;
    case SourceKind::Held:
      key_ = s.key;
      break;
    case SourceKind::ScalarTensor: {
      key_ = s.key;  // (dtype, device): compared by same_as
      PyObject* kw = Py_BuildValue("{s:O,s:O}", "dtype", PyTuple_GET_ITEM(s.key.get(), 0), "device",
                                   PyTuple_GET_ITEM(s.key.get(), 1));
      if (!kw) throw PythonError();
      call_kwargs_ = PyRef::steal(kw);
      break;
    }
    case SourceKind::Local:
    case SourceKind::Closure:
    case SourceKind::Deref:
      break;
  }
}

bool FetchStep::same_as(const FetchStep& o) const {
  if (kind_ != o.kind_ || index_ != o.index_) return false;
  if (name_.get() != o.name_.get()) return false;  // interned: pointer equality
  if (key_.get() == o.key_.get()) return true;
  if (kind_ == SourceKind::Held) return false;  // held objects: by identity
  if (!key_ || !o.key_ || Py_TYPE(key_.get()) != Py_TYPE(o.key_.get())) return false;
  int eq = PyObject_RichCompareBool(key_.get(), o.key_.get(), Py_EQ);
  if (eq < 0) throw PythonError();
  return eq == 1;
}

PyRef FetchStep::apply(PyObject* base, const ir::FrameView& frame) const {
  switch (kind_) {
    case SourceKind::Local:
      TL_CHECK(index_ >= 0 && index_ < frame.nlocals) << "local slot " << index_ << " out of range";
      return own(frame.locals[index_]);
    case SourceKind::Closure: {
      if (!frame.closure) return {};
      TL_CHECK(index_ >= 0 && index_ < PyTuple_GET_SIZE(frame.closure)) << "bad cell " << index_;
      return own(PyCell_GET(PyTuple_GET_ITEM(frame.closure, index_)));  // empty cell: null
    }
    case SourceKind::Global:
      return dict_read(frame.globals);
    case SourceKind::Builtin:
      return dict_read(frame.builtins);
    case SourceKind::Attr:
      return get_attr(base);
    case SourceKind::Item:
      return get_item(base);
    case SourceKind::Held:
      return key_;
    case SourceKind::Deref:
      return deref(base);
    case SourceKind::ScalarTensor:
      return scalar_tensor(base);
  }
  return {};
}

// NOTE: a new tensor on each call: the number is the call's own (the guards checked its type).
PyRef FetchStep::scalar_tensor(PyObject* number) const {
  static PyObject* fn = [] {
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    PyObject* f = torch ? PyObject_GetAttrString(torch.get(), "scalar_tensor") : nullptr;
    if (!f) throw PythonError();
    return f;  // NOTE: kept for the life of the process, like the torch module
  }();
  PyRef args = PyRef::steal(PyTuple_Pack(1, number));
  if (!args) throw PythonError();
  PyObject* t = PyObject_Call(fn, args.get(), call_kwargs_.get());
  if (!t) throw PythonError();
  return PyRef::steal(t);
}

bool FetchStep::memo_valid(PyObject* dict) const {
  if (!memo_value_ || dict != memo_dict_.dict || dict_version_of(dict) != memo_dict_.version)
    return false;
  // NOTE: the sub-dicts are held by `dict`, unchanged, so they are alive.
  for (int i = 0; i < memo_n_subs_; ++i)
    if (dict_version_of(memo_subs_[i].dict) != memo_subs_[i].version) return false;
  return true;
}

void FetchStep::remember(PyObject* dict, PyObject* value, PyObject* const* subs, int n_subs) const {
  memo_value_ = nullptr;
  memo_dict_ = {dict, dict_version_of(dict)};
  for (int i = 0; i < n_subs; ++i) memo_subs_[i] = {subs[i], dict_version_of(subs[i])};
  memo_n_subs_ = n_subs;
  memo_value_ = value;
}

PyRef FetchStep::dict_read(PyObject* dict) const {
  if (!PyDict_Check(dict))
    return dict_get(dict, kind_ == SourceKind::Item ? key_.get() : name_.get());
  if (memo_valid(dict)) return own(memo_value_);
  memo_value_ = nullptr;
  PyRef v = dict_get(dict, kind_ == SourceKind::Item ? key_.get() : name_.get());
  if (v) remember(dict, v.get());
  return v;
}

PyRef FetchStep::get_attr(PyObject* obj) const {
  // NOTE: `view.mapping` of a dict view is a mappingproxy in Python; the guards and inputs of a
  // view read its dict itself (CaptureContext::wrap_dict_view), as iterating the view does.
  if (view_mapping_)
    if (PyObject* d = dict_view_mapping(obj)) return own(d);
  PyTypeObject* type = Py_TYPE(obj);
  unsigned char path = kGeneric;
  if (type == cached_type_ && type->tp_version_tag == cached_tag_ && cached_tag_ != 0) {
    path = cached_path_;
  } else {
    path = classify(type);  // assigns a version tag through _PyType_Lookup when it can
    cached_type_ = type;
    cached_tag_ = type->tp_version_tag;
    cached_path_ = path;
    memo_value_ = nullptr;  // NOTE: remembered under another type (or its older version)
  }
  if (path == kGeneric) {
    PyObject* v = PyObject_GetAttr(obj, name_.get());
    return v ? PyRef::steal(v) : missing_or_throw(PyExc_AttributeError);
  }
  PyObject** dict_ptr = cached_tag_ != 0 ? _PyObject_GetDictPtr(obj) : nullptr;
  PyObject* dict = dict_ptr ? *dict_ptr : nullptr;
  if (dict && PyDict_CheckExact(dict)) {
    if (memo_valid(dict)) return own(memo_value_);
    memo_value_ = nullptr;
    // NOTE: as object.__getattribute__: a data descriptor of the type comes first, then the
    // instance __dict__. Only a value found in the dict (or a module's sub-dicts) is kept.
    PyObject* descr = _PyType_Lookup(type, name_.get());  // borrowed
    if (!descr || !Py_TYPE(descr)->tp_descr_set) {
      PyObject* v = PyDict_GetItemWithError(dict, name_.get());  // borrowed
      if (v) {
        remember(dict, v);
        return own(v);
      }
      if (PyErr_Occurred()) throw PythonError();
      if (!descr && path == kModule) {
        PyObject* subs[3];
        int n_subs = 0;
        bool from_dicts = false;
        PyRef found = module_getattr(obj, name_.get(), subs, &n_subs, &from_dicts);
        if (found && from_dicts) remember(dict, found.get(), subs, n_subs);
        return found;
      }
    }
  }
  // suppress=1: a miss (also an AttributeError raised by a descriptor) returns
  // null with no error, which is when Python would call __getattr__.
  PyObject* v = _PyObject_GenericGetAttrWithDict(obj, name_.get(), nullptr, 1);
  if (v) return PyRef::steal(v);
  if (PyErr_Occurred()) throw PythonError();
  return path == kModule ? module_getattr(obj, name_.get()) : PyRef();
}

// NOTE: not a weakref any more (the attribute now holds something else): missing, so the
// guard fails and the frame is traced again.
PyRef FetchStep::deref(PyObject* obj) const {
  if (!PyWeakref_CheckRefExact(obj)) return {};
  return own(PyWeakref_GET_OBJECT(obj));  // Py_None once the referent died
}

PyRef FetchStep::get_item(PyObject* obj) const {
  if (key_is_index_ && (PyList_CheckExact(obj) || PyTuple_CheckExact(obj))) {
    bool list = PyList_CheckExact(obj);
    Py_ssize_t n = list ? PyList_GET_SIZE(obj) : PyTuple_GET_SIZE(obj);
    Py_ssize_t i = index_key_ < 0 ? index_key_ + n : index_key_;
    if (i < 0 || i >= n) return {};
    return own(list ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i));
  }
  // NOTE: a dict subclass too: the trace read its storage (CaptureContext::dict_subclass_items),
  // never a __getitem__ of its own.
  if (PyDict_Check(obj)) return dict_read(obj);
  PyObject* v = PyObject_GetItem(obj, key_.get());
  return v ? PyRef::steal(v) : missing_or_throw(PyExc_LookupError);
}

SourceFetcher::SourceFetcher(const ir::Source& source) {
  for (const ir::Source* s = &source; s; s = s->base.get()) steps_.emplace_back(*s);
  std::reverse(steps_.begin(), steps_.end());
}

PyRef SourceFetcher::operator()(const ir::FrameView& frame) const {
  PyRef v;
  for (const FetchStep& step : steps_) {
    v = step.apply(v.get(), frame);
    if (!v) return {};
  }
  return v;
}

PyRef fetch(const ir::Source& source, const ir::FrameView& frame) {
  return SourceFetcher(source)(frame);
}

}  // namespace tl::guards
