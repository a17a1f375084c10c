// Attribute reads and writes on symbolic values.
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

// ---------------------------------------------------------------- attributes

namespace {

PyObject* container_type(const ValuePtr& v) {  // borrowed
  switch (v->kind) {
    case VKind::List:
      return reinterpret_cast<PyObject*>(&PyList_Type);
    case VKind::Dict:
      return reinterpret_cast<PyObject*>(&PyDict_Type);
    case VKind::Set:
      return reinterpret_cast<PyObject*>(&PySet_Type);
    default:
      return v->named_type ? v->named_type.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
  }
}

}  // namespace

// An attribute of a list/tuple/dict/set value, looked up on its type as CPython does: a
// missing one is missing (hasattr([], "foo") is False), a Python method of a namedtuple
// subclass is inlined with self, a plain class attribute (_fields) is its value.
std::optional<ValuePtr> Tracer::container_attr(const ValuePtr& obj, const std::string& name) {
  PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyObject* type = container_type(obj);
  PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), pyname.get());
  if (!descr) return std::nullopt;
  ValuePtr m = Value::of_kind(VKind::Method);
  m->self = obj;
  if (PyFunction_Check(descr)) {
    m->obj = PyRef::borrow(descr);
    return m;
  }
  if (Py_TYPE(descr) == &PyMethodDescr_Type || Py_TYPE(descr) == &PyWrapperDescr_Type) {
    m->method_name = name;
    return m;
  }
  if (!Py_TYPE(descr)->tp_descr_get) return ctx_.from_result(descr);
  graph_break("unsupported_value",
              "attribute '" + name + "' of a " + obj->type_name() + " (a descriptor)");
}

void Tracer::store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& v) {
  if ((obj->kind == VKind::Module || obj->kind == VKind::Object) && obj->source) {
    if (obj->kind == VKind::Module && (v->is_tensor() || v->kind == VKind::Module))
      graph_break("unsupported_side_effect", "assigning a tensor or module attribute (self." +
                                                 name + " = ...) in traced code");
    ctx_.attr_overlay[{obj->obj.get(), name}] = v;
    ctx_.keep_alive.push_back(obj->obj);
    ctx_.effects.push_back({ir::SideEffect::Kind::SetAttr, obj->source, name, v});
    return;
  }
  if (obj->kind == VKind::Object && obj->flag) {
    PyTypeObject* type = Py_TYPE(obj->obj.get());
    PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
    PyRef setattr_name = PyRef::steal(PyUnicode_FromString("__setattr__"));
    PyObject* setattr = _PyType_Lookup(type, setattr_name.get());  // borrowed
    if (setattr && PyFunction_Check(setattr)) {
      inline_function(setattr, nullptr, nullptr, {obj, Value::constant(key), v}, {});
      return;
    }
    if (setattr != _PyType_Lookup(&PyBaseObject_Type, setattr_name.get()))
      graph_break("unsupported_side_effect", std::string("attribute assignment on a ") +
                                                 type->tp_name + ", whose __setattr__ is C code");
    PyObject* descr = _PyType_Lookup(type, key.get());
    if (descr && Py_TYPE(descr)->tp_descr_set) {
      PyRef fset = PyObject_TypeCheck(descr, &PyProperty_Type)
                       ? PyRef::steal(PyObject_GetAttrString(descr, "fset"))
                       : PyRef();
      if (!fset) PyErr_Clear();
      if (fset && PyFunction_Check(fset.get())) {
        inline_function(fset.get(), nullptr, nullptr, {obj, v}, {});
        return;
      }
      graph_break("unsupported_side_effect", "assignment to descriptor " + name);
    }
    dict_set(obj->attrs, key.get(), v);
    return;
  }
  graph_break("unsupported_side_effect", "attribute assignment on a " + obj->type_name());
}

ValuePtr Tracer::get_attr(const ValuePtr& obj, const std::string& name) {
  auto r = try_get_attr(obj, name);
  if (!r)
    raise_user(PyExc_AttributeError,
               "'" + obj->type_name() + "' object has no attribute '" + name + "'");
  return *r;
}

std::optional<ValuePtr> Tracer::try_get_attr(const ValuePtr& obj, const std::string& name,
                                             bool generic) {
  const TorchApi& api = torch_api();
  switch (obj->kind) {
    case VKind::Super:
      return super_attr(obj, name);
    case VKind::Tensor: {
      PyObject* meta = obj->meta.get();
      if (name == "device") return Value::constant(obj->device);
      if (name == "__class__") return Value::constant(obj->obj);
      if (name == "shape" || name == "dtype" || name == "ndim" || name == "requires_grad" ||
          name == "layout" || name == "is_sparse" || name == "is_quantized" ||
          name == "is_nested" || name == "is_mkldnn" || name == "is_complex") {
        PyRef r = PyRef::steal(PyObject_GetAttrString(meta, name.c_str()));
        if (!r) throw PythonError();
        if (PyCallable_Check(r.get())) break;  // is_complex() is a method
        return ctx_.from_result(r.get());
      }
      if (name == "is_cuda" || name == "is_cpu" || name == "is_meta") {
        std::string type = attr_str(obj->device.get(), "type");
        return const_bool((name == "is_cuda" && type == "cuda") ||
                          (name == "is_cpu" && type == "cpu"));
      }
      if (name == "T" || name == "mT" || name == "H" || name == "mH" || name == "real" ||
          name == "imag" || name == "data") {
        return ctx_.call_op(
            api.builtin_getattr.get(), "",
            {obj, Value::constant(PyRef::steal(PyUnicode_FromString(name.c_str())))}, {});
      }
      PyRef probe = PyRef::steal(PyObject_GetAttrString(meta, name.c_str()));
      if (!probe) {
        PyErr_Clear();
        return std::nullopt;
      }
      if (name == "grad" || name == "grad_fn" || name == "is_leaf" || name == "_version" ||
          name == "names" || name == "_base")
        graph_break("unsupported_value", "Tensor." + name + " is not captured");
      // NOTE: sizes follow from the guarded shape and dtype; any other data attribute
      // (retains_grad, a Python attribute...) describes the real tensor, not the meta one.
      if (name == "itemsize" || name == "nbytes") return ctx_.from_result(probe.get());
      if (!PyCallable_Check(probe.get()))
        graph_break("unsupported_value", "Tensor." + name + " is not captured");
      break;
    }
    case VKind::Module:
    case VKind::Object: {
      auto ov = ctx_.attr_overlay.find({obj->obj.get(), name});
      if (ov != ctx_.attr_overlay.end()) return ov->second;
      PyObject* o = obj->obj.get();
      PyTypeObject* type = Py_TYPE(o);
      PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
      PyObject* descr = _PyType_Lookup(type, pyname.get());  // borrowed
      bool is_module = obj->kind == VKind::Module;
      auto src = [&]() { return obj->source ? ir::Source::attr(obj->source, name) : nullptr; };
      if (descr && Py_TYPE(descr)->tp_descr_set) {
        if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
          PyRef fget = PyRef::steal(PyObject_GetAttrString(descr, "fget"));
          if (!fget) throw PythonError();
          if (PyFunction_Check(fget.get()))
            return inline_function(fget.get(), nullptr, nullptr, {obj}, {});
          graph_break("unsupported_value", "property " + name + " with a C getter");
        }
        if (name == "__dict__" && obj->attrs) return obj->attrs;
        if (name == "__dict__") {
          PyObject** dp = _PyObject_GetDictPtr(o);
          if (!obj->source || !dp || !*dp) graph_break("unsupported_value", "reading __dict__");
          return ctx_.wrap(*dp, src());
        }
        PyRef r = PyRef::steal(PyObject_GetAttr(o, pyname.get()));
        if (!r) {
          PyErr_Clear();
          return std::nullopt;
        }
        return ctx_.wrap(r.get(), src());
      }
      if (!is_module && !generic && type->tp_getattro != PyObject_GenericGetAttr)
        return custom_getattr(obj, name);
      if (obj->attrs) {
        int i = dict_find(obj->attrs, pyname.get());
        if (i >= 0) return obj->attrs->items[i];
      }
      PyObject** dictptr = _PyObject_GetDictPtr(o);
      if (!obj->attrs && dictptr && *dictptr) {
        PyObject* v = PyDict_GetItemWithError(*dictptr, pyname.get());
        if (v) return ctx_.wrap(v, src(), !is_module);
        if (PyErr_Occurred()) throw PythonError();
      }
      if (descr) {
        if (PyFunction_Check(descr)) {
          ValuePtr m = Value::of_kind(VKind::Method);
          m->self = obj;
          m->obj = PyRef::borrow(descr);
          return m;
        }
        if (Py_TYPE(descr) == &PyStaticMethod_Type || Py_TYPE(descr) == &PyClassMethod_Type) {
          PyRef f = PyRef::steal(PyObject_GetAttrString(descr, "__func__"));
          if (!f) throw PythonError();
          if (Py_TYPE(descr) == &PyStaticMethod_Type) return Value::constant(f);
          ValuePtr m = Value::of_kind(VKind::Method);
          m->self = Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(type)));
          m->obj = f;
          return m;
        }
        if (Py_TYPE(descr) == &PyMethodDescr_Type || PyCFunction_Check(descr)) {
          ValuePtr m = Value::of_kind(VKind::Method);
          m->self = obj;
          m->method_name = name;
          return m;
        }
        PyRef r = PyRef::steal(PyObject_GetAttr(o, pyname.get()));
        if (!r) throw PythonError();
        return ctx_.wrap(r.get(), src(), false);
      }
      if (is_module) {
        for (const char* dict_name : {"_parameters", "_buffers", "_modules"}) {
          PyObject* d = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, dict_name) : nullptr;
          if (!d || !PyDict_Check(d)) continue;
          PyObject* v = PyDict_GetItemWithError(d, pyname.get());
          if (v) return ctx_.wrap(v, src());
          if (PyErr_Occurred()) throw PythonError();
        }
      }
      return std::nullopt;
    }
    case VKind::Const: {
      PyObject* o = obj->obj.get();
      // NOTE: frames traced symbolically leave no traceback on the exceptions they raise.
      if (PyExceptionInstance_Check(o) && name == "__traceback__")
        graph_break("unsupported_value",
                    "the traceback of an exception raised in traced code (e.__traceback__)");
      PyRef r = PyRef::steal(PyObject_GetAttrString(o, name.c_str()));
      if (!r) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
          raise_current_error("attribute read raised");
        PyErr_Clear();
        return std::nullopt;
      }
      bool guard = !(PyModule_Check(o) || PyType_Check(o));
      // A bound method is made anew on every read: derived from its guarded
      // owner, it needs no source (an ID_MATCH on it would always fail).
      PyObject* ro = r.get();
      bool bound = PyMethod_Check(ro) || (PyCFunction_Check(ro) && PyCFunction_GET_SELF(ro) &&
                                          !PyModule_Check(PyCFunction_GET_SELF(ro)));
      if (obj->source && !bound && !is_immutable_constant(o))
        return ctx_.wrap(ro, ir::Source::attr(obj->source, name), guard);
      if (is_type(r.get(), api.tensor_type))
        graph_break("unsupported_value", "tensor attribute of an untracked object");
      if (is_type(r.get(), api.module_type)) {
        ValuePtr m = Value::of_kind(VKind::Module);
        m->obj = r;
        return m;
      }
      return ctx_.from_result(r.get());
    }
    case VKind::Method: {
      // A bound method's parts (inspect.signature reads __func__). The function
      // came from the guarded owner's type, so it needs no guard of its own.
      if (name == "__self__" && obj->self) return obj->self;
      PyObject* fn = obj->obj.get();
      if (!fn || !PyFunction_Check(fn)) break;
      if (name == "__func__") return Value::constant(obj->obj);
      if (name == "__name__" || name == "__qualname__" || name == "__module__" ||
          name == "__doc__" || name == "__wrapped__" || name == "__code__" ||
          name == "__defaults__" || name == "__kwdefaults__" || name == "__annotations__") {
        PyRef r = PyRef::steal(PyObject_GetAttrString(fn, name.c_str()));
        if (!r) {
          PyErr_Clear();
          return std::nullopt;
        }
        return ctx_.from_result(r.get());
      }
      break;
    }
    case VKind::Tuple: {
      if (obj->named_type) {
        PyRef fields = PyRef::steal(PyObject_GetAttrString(obj->named_type.get(), "_fields"));
        if (!fields) {
          PyErr_Clear();
          fields = PyRef::steal(PyObject_GetAttrString(obj->named_type.get(), "__match_args__"));
          if (!fields) PyErr_Clear();
        }
        if (fields && PyTuple_Check(fields.get())) {
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
            if (utf8(PyTuple_GET_ITEM(fields.get(), i)) == name &&
                i < static_cast<Py_ssize_t>(obj->items.size()))
              return obj->items[i];
          }
        }
      }
      break;
    }
    default:
      break;
  }
  if (obj->is_sequence() || obj->kind == VKind::Dict || obj->kind == VKind::Set)
    return container_attr(obj, name);
  if (obj->kind == VKind::Tensor) {
    ValuePtr m = Value::of_kind(VKind::Method);
    m->self = obj;
    m->method_name = name;
    return m;
  }
  graph_break("unsupported_value", "attribute '" + name + "' of a " + obj->type_name());
}

}  // namespace tl::capture
