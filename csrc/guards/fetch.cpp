#include "guards/fetch.h"

#include <algorithm>

#include "core/errors.h"
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
  return is_module_like(type) ? kModule : kGeneric;
}

// Module.__getattr__: self.__dict__'s _parameters, _buffers, _modules in that
// order. Returns a new reference or null (missing); throws on errors.
PyRef module_getattr(PyObject* obj, PyObject* name) {
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
    PyObject* v = PyDict_GetItemWithError(sub.get(), name);  // borrowed; None is a value
    if (v) return own(v);
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
      return dict_get(frame.globals, name_.get());
    case SourceKind::Builtin:
      return dict_get(frame.builtins, name_.get());
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
  }
  if (path == kGeneric) {
    PyObject* v = PyObject_GetAttr(obj, name_.get());
    return v ? PyRef::steal(v) : missing_or_throw(PyExc_AttributeError);
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
  if (PyDict_Check(obj)) return dict_get(obj, key_.get());
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
