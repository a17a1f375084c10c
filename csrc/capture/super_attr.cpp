// super() and classes that customise attribute access (__getattribute__ /
// __getattr__ written in Python, e.g. transformers' PretrainedConfig).
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using detail::dict_set;
using detail::utf8;

namespace {

PyObject* object_attr(const char* name) {  // borrowed, from `object` itself
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  return _PyType_Lookup(&PyBaseObject_Type, key.get());
}

ValuePtr method(const ValuePtr& self, PyObject* fn) {
  ValuePtr m = Value::of_kind(VKind::Method);
  m->self = self;
  m->obj = PyRef::borrow(fn);
  return m;
}

}  // namespace

ValuePtr Tracer::make_super(const ValuePtr& cls, const ValuePtr& self) {
  if (!cls || !cls->is_const() || !PyType_Check(cls->obj.get()))
    graph_break("unsupported_super", "super() whose class is not known while tracing");
  if (!self || (self->kind != VKind::Object && self->kind != VKind::Module))
    graph_break("unsupported_super", "super() on a " + (self ? self->type_name() : "?"));
  ValuePtr sup = Value::of_kind(VKind::Super);
  sup->self = self;
  sup->obj = cls->obj;
  return sup;
}

std::optional<ValuePtr> Tracer::super_attr(const ValuePtr& sup, const std::string& name) {
  PyTypeObject* type = Py_TYPE(sup->self->obj.get());
  // What the MRO after the class answers is guarded like a read through the
  // instance: changing `Base.k` after compiling must recompile.
  auto record = [&](PyObject* found) {
    if (!sup->self->source) return;
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name.c_str()));
    if (!key) throw PythonError();
    ctx_.guards().add_attr(sup->self->source, guards::AttrTable::Owner::Instance,
                           sup->self->obj.get(), key.get(), found, sup->obj.get());
  };
  PyObject* mro = type->tp_mro;
  Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
  while (i < n && PyTuple_GET_ITEM(mro, i) != sup->obj.get()) ++i;
  for (++i; i < n; ++i) {
    PyRef dict = type_dict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    PyObject* v = dict ? PyDict_GetItemString(dict.get(), name.c_str()) : nullptr;  // borrowed
    if (!v) continue;
    record(v);
    if (PyFunction_Check(v)) return method(sup->self, v);
    if (PyObject_TypeCheck(v, &PyProperty_Type)) {
      PyRef fget = PyRef::steal(PyObject_GetAttrString(v, "fget"));
      if (fget && PyFunction_Check(fget.get()))
        return inline_function(fget.get(), nullptr, nullptr, {sup->self}, {});
      clear_expected_error();
      graph_break("unsupported_attribute", "super()." + name + ": property with a C getter");
    }
    if (Py_TYPE(v) == &PyStaticMethod_Type || Py_TYPE(v) == &PyClassMethod_Type) {
      PyRef f = PyRef::steal(PyObject_GetAttrString(v, "__func__"));
      if (!f) throw PythonError();
      if (Py_TYPE(v) == &PyStaticMethod_Type) return Value::constant(f);
      return method(Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(type))), f.get());
    }
    if (Py_TYPE(v) == &PyWrapperDescr_Type || Py_TYPE(v) == &PyMethodDescr_Type) {
      ValuePtr m = Value::of_kind(VKind::Method);
      m->self = sup->self;
      m->method_name = name;
      m->flag = true;  // a C slot of a base class: see call_base_slot
      return m;
    }
    return ctx_.from_result(v);
  }
  record(nullptr);
  return std::nullopt;
}

ValuePtr Tracer::call_base_slot(const ValuePtr& self, const std::string& name,
                                std::vector<ValuePtr>& args) {
  if (name == "__getattribute__" && args.size() == 1 && args[0]->is_const() &&
      PyUnicode_Check(args[0]->obj.get())) {
    auto r = try_get_attr(self, utf8(args[0]->obj.get()), /*generic=*/true);
    if (!r)
      raise_user(PyExc_AttributeError, "'" + self->type_name() + "' object has no attribute '" +
                                           utf8(args[0]->obj.get()) + "'");
    return *r;
  }
  if (name == "__init__" && args.empty()) return Value::constant(PyRef::borrow(Py_None));
  // NOTE: `super().__setitem__` of a dict subclass (transformers' ModelOutput) read from the
  // frame: the C base's item store.
  if (name == "__setitem__" && args.size() == 2 && self->kind == VKind::Object && self->source &&
      PyDict_Check(self->obj.get())) {
    base_setitem(self, args[0], args[1]);
    return Value::constant(PyRef::borrow(Py_None));
  }
  // NOTE: object.__setattr__ runs the class's data descriptors (a property's setter) too.
  if (name == "__setattr__" && args.size() == 2 && args[0]->is_const() &&
      PyUnicode_Check(args[0]->obj.get()) && self->kind == VKind::Object &&
      (self->source || self->flag)) {
    store_plain_attr(self, utf8(args[0]->obj.get()), args[1]);
    return Value::constant(PyRef::borrow(Py_None));
  }
  if (name == "__setattr__" && args.size() == 2 && args[0]->is_const() && self->attrs) {
    dict_set(self->attrs, args[0]->obj.get(), args[1]);
    return Value::constant(PyRef::borrow(Py_None));
  }
  KwArgs no_kwargs;
  if (auto r = created_object_method(self, name, args, no_kwargs)) return *r;
  if (name == "__setattr__" && args.size() == 2 && args[0]->is_const()) {
    ctx_.attr_overlay[{self->obj.get(), utf8(args[0]->obj.get())}] = args[1];
    if (self->source) {
      ctx_.keep_alive.push_back(self->obj);
      ctx_.effects.push_back(
          {ir::SideEffect::Kind::SetAttr, self->source, utf8(args[0]->obj.get()), args[1]});
    } else if (!self->flag) {
      graph_break("unsupported_side_effect", "object.__setattr__ on an untracked object");
    }
    return Value::constant(PyRef::borrow(Py_None));
  }
  graph_break("unsupported_callable", "super()." + name + " (a C-level method)");
}

std::optional<ValuePtr> Tracer::custom_getattr(const ValuePtr& obj, const std::string& name) {
  PyTypeObject* type = Py_TYPE(obj->obj.get());
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyRef ga = PyRef::steal(PyUnicode_FromString("__getattribute__"));
  PyObject* getattribute = _PyType_Lookup(type, ga.get());
  if (getattribute && PyFunction_Check(getattribute)) {
    return inline_function(getattribute, nullptr, nullptr, {obj, Value::constant(key)}, {});
  }
  PyRef gn = PyRef::steal(PyUnicode_FromString("__getattr__"));
  PyObject* getattr = _PyType_Lookup(type, gn.get());
  bool generic_base = getattribute == object_attr("__getattribute__");
  if (generic_base && getattr && PyFunction_Check(getattr)) {
    auto r = try_get_attr(obj, name, /*generic=*/true);
    if (r) return r;
    return inline_function(getattr, nullptr, nullptr, {obj, Value::constant(key)}, {});
  }
  graph_break("unsupported_attribute", std::string("attribute read on ") + type->tp_name +
                                           ", which customises attribute access in C");
}

}  // namespace tl::capture
