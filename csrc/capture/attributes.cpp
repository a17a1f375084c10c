// Attribute reads and writes on symbolic values.
#include "capture/deque.h"
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"
#include "guards/fetch.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only
using guards::AttrTable;

namespace {
// Where `o.<name>` comes from when `o` is a module or a class, if one table
// entry can say it: the module's __dict__ entry, or the class's MRO entry
// (borrowed; null: absent everywhere the read looks). Untabled reads (a
// metaclass data descriptor such as __name__, a module or metaclass
// __getattr__, a custom getattro) keep a guard on the value read instead.
struct OwnerLookup {
  bool tabled = false;
  AttrTable::Owner owner = AttrTable::Owner::Module;
  PyObject* found = nullptr;
};

// Whether the graph so far runs a backward (Tensor.backward, torch.autograd.backward): it
// writes the .grad of the leaves it reaches when the graph runs, after any trace-time read.
bool graph_runs_backward(const ir::Graph& graph) {
  for (const auto& n : graph.nodes()) {
    const std::string& t = n->target_name;
    size_t dot = t.rfind('.');
    if (t.compare(dot == std::string::npos ? 0 : dot + 1, std::string::npos, "backward") == 0)
      return true;
  }
  return false;
}

OwnerLookup owner_lookup(PyObject* o, PyObject* name) {
  static PyObject* getattr_name = PyUnicode_InternFromString("__getattr__");  // immortal by use
  if (PyModule_Check(o)) {
    if (Py_TYPE(o)->tp_getattro != PyModule_Type.tp_getattro) return {};
    PyObject* descr = _PyType_Lookup(Py_TYPE(o), name);  // borrowed
    if (descr && Py_TYPE(descr)->tp_descr_set) return {};
    PyObject* dict = PyModule_GetDict(o);
    PyObject* found = PyDict_GetItemWithError(dict, name);
    if (!found && PyErr_Occurred()) throw PythonError();
    if (!found && (descr || PyDict_GetItemWithError(dict, getattr_name))) return {};
    if (PyErr_Occurred()) throw PythonError();
    return {true, AttrTable::Owner::Module, found};
  }
  if (PyType_Check(o)) {
    PyTypeObject* meta = Py_TYPE(o);
    if (meta->tp_getattro != PyType_Type.tp_getattro) return {};
    PyObject* meta_descr = _PyType_Lookup(meta, name);
    if (meta_descr && Py_TYPE(meta_descr)->tp_descr_set) return {};
    PyObject* found = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o), name);
    if (!found && meta_descr) return {};
    return {true, AttrTable::Owner::Class, found};
  }
  return {};
}

// torch.Tensor (or the tensor's own type) as a guard root: patching one of its
// methods after compiling (`torch.Tensor.sin = ...`) must recompile.
ir::SourcePtr tensor_type_source(PyObject* type) {
  return ir::Source::held(PyRef::borrow(type), reinterpret_cast<PyTypeObject*>(type)->tp_name);
}

// A tensor method replaced by the user: a Python function from outside torch
// (inlined like any method) or another C method (called by its own name).
// torch's own Python methods (torch/_tensor.py) stay calls by name.
bool is_user_function(PyObject* f) {
  if (!PyFunction_Check(f)) return false;
  PyObject* mod = reinterpret_cast<PyFunctionObject*>(f)->func_module;
  if (!mod || !PyUnicode_Check(mod)) return true;
  std::string m = utf8(mod);
  return m != "torch" && m.rfind("torch.", 0) != 0;
}

// `name` on an input tensor where torch defines nothing: a Python attribute
// the caller set (`x.tag = ...`), read from its __dict__ and guarded like any
// value; absent, guarded absent (hasattr(x, "tag") is False only while it is).
std::optional<ValuePtr> tensor_instance_attr(CaptureContext& ctx, const ValuePtr& t,
                                             PyObject* name) {
  if (!t->source) return std::nullopt;
  PyRef real = guards::fetch(*t->source, ctx.frame());
  PyObject** dict = real ? _PyObject_GetDictPtr(real.get()) : nullptr;
  PyObject* v = dict && *dict ? PyDict_GetItemWithError(*dict, name) : nullptr;
  if (v) return ctx.wrap(v, ir::Source::attr(t->source, utf8(name)));
  if (PyErr_Occurred()) throw PythonError();
  ctx.guards().add_no_instance_attr(t->source, name);
  return std::nullopt;
}
}  // namespace

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
    case VKind::Deque:
      return deque_type();
    default:
      return v->named_type ? v->named_type.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
  }
}

}  // namespace

// An attribute of a list/tuple/dict/set value, looked up on its type as CPython does: a
// missing one is missing (hasattr([], "foo") is False), a Python method of a namedtuple
// subclass is inlined with self, a plain class attribute (_fields) is its value.
std::optional<ValuePtr> Tracer::container_attr(const ValuePtr& obj, const std::string& name) {
  if (obj->kind == VKind::Deque && name == "maxlen") return Value::constant(obj->maxlen);
  PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyObject* type = container_type(obj);
  PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), pyname.get());
  if (!descr) return std::nullopt;
  ValuePtr m = Value::of_kind(VKind::Method);
  m->self = obj;
  // NOTE: collections.namedtuple's generated _replace goes through `cls._make` and
  // `tuple.__new__`; call_method_on makes the new tuple itself.
  if (name == "_replace" && obj->kind == VKind::Tuple && obj->named_type &&
      PyFunction_Check(descr) &&
      utf8(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(descr))->co_qualname) ==
          "namedtuple.<locals>._replace") {
    m->method_name = name;
    return m;
  }
  if (PyFunction_Check(descr)) {
    m->obj = PyRef::borrow(descr);
    return m;
  }
  if (Py_TYPE(descr) == &PyMethodDescr_Type || Py_TYPE(descr) == &PyWrapperDescr_Type) {
    m->method_name = name;
    return m;
  }
  if (!Py_TYPE(descr)->tp_descr_get) return ctx_.from_result(descr);
  if (PyObject_TypeCheck(descr, &PyProperty_Type)) {  // a namedtuple class's own property
    PyRef fget = PyRef::steal(PyObject_GetAttrString(descr, "fget"));
    if (!fget) throw PythonError();
    if (PyFunction_Check(fget.get()))
      return inline_function(fget.get(), nullptr, nullptr, {obj}, {});
  }
  graph_break("unsupported_attribute",
              "attribute '" + name + "' of a " + obj->type_name() + " (a descriptor)");
}

namespace {

// The object a tensor value is in eager: an op that returned its argument (a no-op `.to()`)
// is that argument.
const ValuePtr& eager_object(const ValuePtr& v) { return v->same_object ? v->same_object : v; }

// torch.nn.modules.module's global registration hooks for buffers, parameters and modules
// (borrowed dicts, process lifetime), or nulls when torch has none.
std::vector<PyObject*> module_registration_hooks() {
  static const std::vector<PyObject*> dicts = [] {
    std::vector<PyObject*> out;
    PyRef m = PyRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
    if (!m) clear_expected_error();
    for (const char* name :
         {"_global_buffer_registration_hooks", "_global_parameter_registration_hooks",
          "_global_module_registration_hooks"}) {
      PyObject* d = m ? PyObject_GetAttrString(m.get(), name) : nullptr;  // NOTE: kept
      if (!d) clear_expected_error();
      out.push_back(d && PyDict_Check(d) ? d : nullptr);
    }
    return out;
  }();
  return dicts;
}

}  // namespace

// `self.buf = self.buf.to(device, dtype)` (transformers' CTRL) stores back the tensor already
// there when the `.to()` is a no-op: Module.__setattr__ then changes nothing but what its
// global registration hooks would see, so with none (guarded) the store is dropped.
bool Tracer::stores_back_same_tensor(const ValuePtr& module, const std::string& name,
                                     const ValuePtr& v) {
  if (!v->is_tensor()) return false;
  static PyObject* setattr_name = PyUnicode_InternFromString("__setattr__");  // NOTE: immortal
  auto* module_type = reinterpret_cast<PyTypeObject*>(torch_api().module_type.get());
  if (_PyType_Lookup(Py_TYPE(module->obj.get()), setattr_name) !=
      _PyType_Lookup(module_type, setattr_name))
    return false;  // a __setattr__ of its own may do anything
  for (PyObject* hooks : module_registration_hooks()) {
    if (!hooks || PyDict_GET_SIZE(hooks) != 0) return false;
  }
  PyObject* d = PyObject_GenericGetDict(module->obj.get(), nullptr);
  if (!d) throw PythonError();
  PyRef dict = PyRef::steal(d);
  if (PyDict_GetItemString(dict.get(), name.c_str())) return false;  // a plain attribute
  ValuePtr current = get_attr(module, name);
  if (!current || !current->is_tensor() || eager_object(current) != eager_object(v)) return false;
  for (PyObject* hooks : module_registration_hooks())
    ctx_.guards().add_dict_version(ir::Source::held(PyRef::borrow(hooks), "registration hooks"),
                                   hooks);
  return true;
}

// `self.last = t` (a cache, a statistic kept for later) where Module.__setattr__ only sets the
// instance attribute: no parameter, buffer or submodule of that name (their dicts guarded by
// version), nn.Module's own __setattr__, and `t` no Parameter (which it would register).
// Replayed after the graph as any object attribute is.
bool Tracer::plain_tensor_attr(const ValuePtr& module, const std::string& name, const ValuePtr& v) {
  if (!v->is_tensor()) return false;
  static PyObject* setattr_name = PyUnicode_InternFromString("__setattr__");  // NOTE: immortal
  auto* module_type = reinterpret_cast<PyTypeObject*>(torch_api().module_type.get());
  if (_PyType_Lookup(Py_TYPE(module->obj.get()), setattr_name) !=
      _PyType_Lookup(module_type, setattr_name))
    return false;
  if (PyObject* real = ctx_.real_input(v->same_object ? v->same_object : v)) {
    int r = PyObject_IsInstance(real, torch_api().parameter_type.get());
    if (r < 0) throw PythonError();
    if (r) return false;
  }
  PyObject* d = PyObject_GenericGetDict(module->obj.get(), nullptr);
  if (!d) throw PythonError();
  PyRef dict = PyRef::steal(d);
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  if (!key) throw PythonError();
  for (const char* registry : {"_parameters", "_buffers", "_modules"}) {
    PyObject* reg = PyDict_GetItemString(dict.get(), registry);  // borrowed
    if (!reg || !PyDict_Check(reg)) return false;
    int has = PyDict_Contains(reg, key.get());
    if (has < 0) throw PythonError();
    if (has) return false;
    ctx_.guard_module_registry(module, registry, reg);
  }
  return true;
}

void Tracer::store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& v) {
  // NOTE: an object's class decides what `obj.name = v` does, for objects from outside the
  // function as for those made in it: a Python __setattr__ or a property's setter runs (a later
  // read goes through the getter, never the stored value), any other data descriptor or a C
  // __setattr__ breaks.
  if (obj->kind == VKind::Object && (obj->source || obj->flag)) {
    PyTypeObject* type = Py_TYPE(obj->obj.get());
    PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
    PyRef setattr_name = PyRef::steal(PyUnicode_FromString("__setattr__"));
    PyObject* setattr = _PyType_Lookup(type, setattr_name.get());  // borrowed
    if (setattr && PyFunction_Check(setattr)) {
      inline_function(setattr, nullptr, nullptr, {obj, Value::constant(key), v}, {});
      return;
    }
    // NOTE: a C type may name the generic slot as its own (SimpleNamespace does).
    if (setattr != _PyType_Lookup(&PyBaseObject_Type, setattr_name.get()) &&
        type->tp_setattro != PyObject_GenericSetAttr)
      graph_break("unsupported_side_effect", std::string("attribute assignment on a ") +
                                                 type->tp_name + ", whose __setattr__ is C code");
    store_plain_attr(obj, name, v);
    return;
  }
  if ((obj->kind == VKind::Module || obj->kind == VKind::Object) && obj->source) {
    if (obj->kind == VKind::Module && stores_back_same_tensor(obj, name, v)) return;
    if (obj->kind == VKind::Module && (v->is_tensor() || v->kind == VKind::Module) &&
        !plain_tensor_attr(obj, name, v))
      graph_break("unsupported_side_effect", "assigning a tensor or module attribute (self." +
                                                 name + " = ...) in traced code");
    ctx_.attr_overlay[{obj->obj.get(), name}] = v;
    ctx_.keep_alive.push_back(obj->obj);
    ctx_.effects.push_back({ir::SideEffect::Kind::SetAttr, obj->source, name, v});
    return;
  }
  if (is_fresh_module(obj)) return store_fresh_module_attr(obj, name, v);
  if (obj->is_const() && PyType_Check(obj->obj.get())) {
    if (store_class_attr(obj, name, v)) return;
    graph_break("unsupported_side_effect",
                std::string("assignment to the class attribute ") +
                    reinterpret_cast<PyTypeObject*>(obj->obj.get())->tp_name + "." + name +
                    " of a value other than a number, string, bool or None, or on a class "
                    "with a metaclass __setattr__",
                "keep per-call state on the instance (self." + name + " = ...) or return it");
  }
  graph_break("unsupported_side_effect", "attribute assignment on a " + obj->type_name());
}

// `Cls.counter = n`, `type(self).calls += 1` (Dynamo captures these): replayed after the graph
// as a setattr on the class, read back by the rest of the trace (class_overlay). Only a user
// class (a heap type with type's own __setattr__, reached through a source) and a value that
// is an immutable constant: a function or object stored on a class would be found by method
// lookups that never consult the overlay. A read of the attribute is guarded by the class's
// attribute table, so a counter still recompiles when its value changes (as it did when the
// write broke the graph, whose first part read the value too); a flag or a size set once hits
// the cache from then on.
bool Tracer::store_class_attr(const ValuePtr& cls, const std::string& name, const ValuePtr& v) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls->obj.get());
  if (!cls->source || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  if (name.rfind("__", 0) == 0 || !v->is_const() || v->scalar || v->sym_slice || !v->obj ||
      !is_immutable_constant(v->obj.get()) || PyTuple_Check(v->obj.get()))
    return false;
  static PyObject* setattr_name = PyUnicode_InternFromString("__setattr__");  // NOTE: immortal
  if (_PyType_Lookup(Py_TYPE(type), setattr_name) != _PyType_Lookup(&PyType_Type, setattr_name))
    return false;
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  if (!key) throw PythonError();
  PyObject* meta_descr = _PyType_Lookup(Py_TYPE(type), key.get());
  if (meta_descr && Py_TYPE(meta_descr)->tp_descr_set) return false;
  if (v->sym) ctx_.specialise(v);  // NOTE: the class keeps this call's number
  ctx_.attr_overlay[{cls->obj.get(), name}] = v;
  ctx_.keep_alive.push_back(cls->obj);
  ctx_.effects.push_back({ir::SideEffect::Kind::SetAttr, cls->source, name, v});
  return true;
}

// What the trace stored as `name` on `type` or the first class of its MRO that has it
// (store_class_attr), else null.
ValuePtr Tracer::class_overlay(PyTypeObject* type, const std::string& name) const {
  if (ctx_.attr_overlay.empty() || !type->tp_mro) return nullptr;
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  if (!key) throw PythonError();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(type->tp_mro); ++i) {
    PyObject* base = PyTuple_GET_ITEM(type->tp_mro, i);
    auto it = ctx_.attr_overlay.find({base, name});
    if (it != ctx_.attr_overlay.end()) return it->second;
    PyObject* dict = reinterpret_cast<PyTypeObject*>(base)->tp_dict;
    if (dict && PyDict_GetItemWithError(dict, key.get())) return nullptr;
    if (PyErr_Occurred()) throw PythonError();
  }
  return nullptr;
}

// object.__setattr__'s part of `obj.name = v` for an Object: a data descriptor of the class
// (a property's Python setter is inlined; others break), else the instance attribute (an
// overlay replayed after the graph for an object from outside, the traced dict for one made
// here).
void Tracer::store_plain_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& v) {
  PyTypeObject* type = Py_TYPE(obj->obj.get());
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyObject* descr = _PyType_Lookup(type, key.get());
  if (descr && Py_TYPE(descr)->tp_descr_set) {
    PyRef fset = PyObject_TypeCheck(descr, &PyProperty_Type)
                     ? PyRef::steal(PyObject_GetAttrString(descr, "fset"))
                     : PyRef();
    if (!fset) clear_expected_error();
    if (fset && PyFunction_Check(fset.get())) {
      inline_function(fset.get(), nullptr, nullptr, {obj, v}, {});
      return;
    }
    if (fset.get() == Py_None)  // CPython 3.11+'s text
      raise_user(PyExc_AttributeError,
                 "property '" + name + "' of '" +
                     attr_str(reinterpret_cast<PyObject*>(type), "__qualname__") +
                     "' object has no setter");
    graph_break("unsupported_side_effect", "assignment to descriptor " + name);
  }
  if (obj->flag) {
    dict_set(obj->attrs, key.get(), v);
    return;
  }
  ctx_.attr_overlay[{obj->obj.get(), name}] = v;
  ctx_.keep_alive.push_back(obj->obj);
  ctx_.effects.push_back({ir::SideEffect::Kind::SetAttr, obj->source, name, v});
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
    case VKind::Partial: {  // functools.partial's data: func, args, keywords
      if (name == "func") return obj->self;
      if (name == "args") return Value::tuple(obj->items);
      if (name == "keywords") {
        ValuePtr d = Value::of_kind(VKind::Dict);
        for (size_t i = 0; i < obj->keys.size(); ++i)
          dict_set(d, obj->keys[i].get(), obj->kwdefaults[i]);
        return d;
      }
      break;
    }
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
        if (name == "shape") return ctx_.shape_value(obj);
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
      PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
      if (!pyname) throw PythonError();
      PyObject* ttype = obj->obj.get();
      PyObject* method = PyType_Check(ttype)
                             ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(ttype), pyname.get())
                             : nullptr;
      if (PyType_Check(ttype))
        ctx_.guards().add_attr(tensor_type_source(ttype), AttrTable::Owner::Class, ttype,
                               pyname.get(), method);
      if (method && is_user_function(method)) {
        ValuePtr m = Value::of_kind(VKind::Method);
        m->self = obj;
        m->obj = PyRef::borrow(method);
        return m;
      }
      PyRef probe = PyRef::steal(PyObject_GetAttrString(meta, name.c_str()));
      if (!probe) {
        clear_expected_error();
        return tensor_instance_attr(ctx_, obj, pyname.get());
      }
      if (method && Py_IS_TYPE(method, &PyMethodDescr_Type)) {
        // NOTE: `Tensor.sin = Tensor.cos` leaves cos's descriptor under "sin".
        const char* real = reinterpret_cast<PyMethodDescrObject*>(method)->d_method->ml_name;
        if (real != name) {
          ValuePtr m = Value::of_kind(VKind::Method);
          m->self = obj;
          m->method_name = real;
          return m;
        }
      }
      if (name == "grad") {
        // An input's .grad is read through its source (a tensor input of its own, or None,
        // guarded). A tensor computed here has none unless it is a non-leaf, whose .grad
        // eager warns about.
        const ValuePtr& base = obj->same_object ? obj->same_object : obj;
        if (graph_runs_backward(ctx_.graph()))
          graph_break("unsupported_attribute", "Tensor.grad after backward() in the same graph",
                      "the backward writes .grad when the graph runs: read it after the call");
        if (PyObject* real = ctx_.real_input(base)) {
          PyRef g = PyRef::steal(PyObject_GetAttrString(real, "grad"));
          if (!g) throw PythonError();
          return ctx_.wrap(g.get(), ir::Source::attr(base->source, "grad"));
        }
        PyRef rg = PyRef::steal(PyObject_GetAttrString(meta, "requires_grad"));
        if (!rg) throw PythonError();
        if (rg.get() == Py_False) return none();
        graph_break("unsupported_attribute", "Tensor.grad of a tensor computed in traced code",
                    "read .grad outside the compiled function, after backward()");
      }
      if (name == "grad_fn" || name == "is_leaf") {
        // NOTE: a tensor that does not require grad is a leaf without a grad_fn, whatever made
        // it (requires_grad is in the tensor guards and the traced meta); one that does may
        // be either (an input made by an op or not, `t.detach().requires_grad_()`).
        PyRef rg = PyRef::steal(PyObject_GetAttrString(meta, "requires_grad"));
        if (!rg) throw PythonError();
        if (rg.get() == Py_False) return name == "is_leaf" ? const_bool(true) : none();
        graph_break("unsupported_attribute", "Tensor." + name + " of a tensor that requires grad",
                    "read it outside the compiled function");
      }
      if (name == "_version" || name == "names" || name == "_base")
        graph_break("unsupported_attribute", "Tensor." + name + " is not captured");
      // NOTE: sizes follow from the guarded shape and dtype; any other data attribute
      // (retains_grad, a Python attribute...) describes the real tensor, not the meta one.
      if (name == "nbytes") ctx_.read_size("Tensor.nbytes");
      if (name == "itemsize" || name == "nbytes") return ctx_.from_result(probe.get());
      if (!PyCallable_Check(probe.get()))
        graph_break("unsupported_attribute", "Tensor." + name + " is not captured");
      break;
    }
    case VKind::Module:
    case VKind::Object: {
      auto ov = ctx_.attr_overlay.find({obj->obj.get(), name});
      if (ov != ctx_.attr_overlay.end()) return ov->second;
      PyObject* o = obj->obj.get();
      PyTypeObject* type = Py_TYPE(o);
      // NOTE: a class attribute the trace set (store_class_attr) is a number or string: the
      // instance's own attribute of that name, if any, comes first.
      if (ValuePtr stored = class_overlay(type, name)) {
        PyObject** dp = _PyObject_GetDictPtr(o);
        PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
        PyObject* own = dp && *dp ? PyDict_GetItemWithError(*dp, key.get()) : nullptr;
        if (!own && PyErr_Occurred()) throw PythonError();
        bool traced_own = false;
        if (obj->attrs)
          for (const PyRef& k : obj->attrs->keys)
            traced_own = traced_own || PyObject_RichCompareBool(k.get(), key.get(), Py_EQ) == 1;
        if (!own && !traced_own) return stored;
      }
      PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
      PyObject* descr = _PyType_Lookup(type, pyname.get());  // borrowed
      bool is_module = obj->kind == VKind::Module;
      // NOTE: a module guarded by identity has its __dict__ version-guarded too; one guarded
      // by structure guards each attribute read, as any other object does.
      bool dict_guarded = is_module && !obj->flag;
      auto src = [&]() { return obj->source ? ir::Source::attr(obj->source, name) : nullptr; };
      // What the class says about `name` (a method, a property, a class constant, nothing)
      // is part of every read through the instance: replacing or deleting it on the class or
      // a base must recompile.
      if (obj->source)
        ctx_.guards().add_attr(obj->source, AttrTable::Owner::Instance, o, pyname.get(), descr);
      if (descr && Py_TYPE(descr)->tp_descr_set) {
        if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
          PyRef fget = PyRef::steal(PyObject_GetAttrString(descr, "fget"));
          if (!fget) throw PythonError();
          if (PyFunction_Check(fget.get()))
            return inline_function(fget.get(), nullptr, nullptr, {obj}, {});
          graph_break("unsupported_attribute", "property " + name + " with a C getter");
        }
        if (name == "__dict__" && obj->attrs) return obj->attrs;
        if (name == "__dict__") {
          PyObject** dp = _PyObject_GetDictPtr(o);
          if (!obj->source || !dp || !*dp) graph_break("unsupported_attribute", "reading __dict__");
          return ctx_.wrap(*dp, src());
        }
        PyRef r = PyRef::steal(PyObject_GetAttr(o, pyname.get()));
        if (!r) {
          clear_expected_error();
          return std::nullopt;
        }
        return ctx_.wrap(r.get(), src());
      }
      if (!is_module && !generic && type->tp_getattro != PyObject_GenericGetAttr) {
        if (obj->source)
          for (const char* hook : {"__getattribute__", "__getattr__"}) {
            PyRef h = PyRef::steal(PyUnicode_InternFromString(hook));
            ctx_.guards().add_attr(obj->source, AttrTable::Owner::Instance, o, h.get(),
                                   _PyType_Lookup(type, h.get()));
          }
        return custom_getattr(obj, name);
      }
      if (obj->attrs) {
        int i = dict_find(obj->attrs, pyname.get());
        if (i >= 0) return obj->attrs->items[i];
      }
      PyObject** dictptr = _PyObject_GetDictPtr(o);
      if (!obj->attrs && dictptr && *dictptr) {
        PyObject* v = PyDict_GetItemWithError(*dictptr, pyname.get());
        if (v) return ctx_.wrap(v, src(), !dict_guarded);
        if (PyErr_Occurred()) throw PythonError();
      }
      // NOTE: an nn.Module's __dict__ is version-guarded already; another object's must
      // stay without `name`, or an attribute set later would be missed.
      if (!dict_guarded && !obj->attrs && obj->source)
        ctx_.guards().add_no_instance_attr(obj->source, pyname.get());
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
        // NOTE: a user descriptor's __get__ may read any state (a class attribute, a
        // counter): it is traced, not run once and its answer kept unguarded.
        static PyObject* get_name = PyUnicode_InternFromString("__get__");  // NOTE: immortal
        PyObject* getter = _PyType_Lookup(Py_TYPE(descr), get_name);
        if (getter && PyFunction_Check(getter))
          return inline_function(
              getter, nullptr, nullptr,
              {Value::constant(PyRef::borrow(descr)), obj,
               Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(type)))},
              {});
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
        // NOTE: absent, and it must stay so: register_buffer/register_parameter/add_module
        // write these dicts, not the (version-guarded) __dict__.
        if (obj->source)
          for (const char* dict_name : {"_parameters", "_buffers", "_modules"}) {
            PyObject* d = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, dict_name) : nullptr;
            if (d && PyDict_Check(d)) ctx_.guard_module_registry(obj, dict_name, d);
          }
      }
      return std::nullopt;
    }
    case VKind::Const: {
      PyObject* o = obj->obj.get();
      if (PyType_Check(o))
        if (ValuePtr stored = class_overlay(reinterpret_cast<PyTypeObject*>(o), name))
          return stored;
      // NOTE: frames traced symbolically leave no traceback on the exceptions they raise.
      if (PyExceptionInstance_Check(o) && name == "__traceback__")
        graph_break("unsupported_attribute",
                    "the traceback of an exception raised in traced code (e.__traceback__)");
      PyRef pyname = PyRef::steal(PyUnicode_FromString(name.c_str()));
      if (!pyname) throw PythonError();
      OwnerLookup owner = obj->source ? owner_lookup(o, pyname.get()) : OwnerLookup{};
      PyRef r = PyRef::steal(PyObject_GetAttr(o, pyname.get()));
      if (!r) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
          raise_current_error("attribute read raised");
        clear_expected_error();
        if (owner.tabled && !owner.found)
          ctx_.guards().add_attr(obj->source, owner.owner, o, pyname.get(), nullptr);
        return std::nullopt;
      }
      // A module's or class's attribute is guarded by its owner's table (one version compare
      // a call); a tensor found there is a graph input with its own guard, so rebinding it
      // needs no recompile.
      bool guard = !owner.tabled;
      if (owner.tabled && !is_type(r.get(), api.tensor_type))
        ctx_.guards().add_attr(obj->source, owner.owner, o, pyname.get(), owner.found);
      // A bound method is made anew on every read: derived from its guarded
      // owner, it needs no source (an ID_MATCH on it would always fail).
      PyObject* ro = r.get();
      bool bound = PyMethod_Check(ro) || (PyCFunction_Check(ro) && PyCFunction_GET_SELF(ro) &&
                                          !PyModule_Check(PyCFunction_GET_SELF(ro)));
      if (obj->source && !bound && !is_immutable_constant(o))
        return ctx_.wrap(ro, ir::Source::attr(obj->source, name), guard);
      if (is_type(r.get(), api.tensor_type))
        graph_break("untracked_tensor", "tensor attribute of an untracked object");
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
          clear_expected_error();
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
          clear_expected_error();
          fields = PyRef::steal(PyObject_GetAttrString(obj->named_type.get(), "__match_args__"));
          if (!fields) clear_expected_error();
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
  if (obj->is_sequence() || obj->kind == VKind::Dict || obj->kind == VKind::Set ||
      obj->kind == VKind::Deque)
    return container_attr(obj, name);
  if (obj->kind == VKind::Tensor) {
    ValuePtr m = Value::of_kind(VKind::Method);
    m->self = obj;
    m->method_name = name;
    return m;
  }
  graph_break("unsupported_attribute", "attribute '" + name + "' of a " + obj->type_name());
}

}  // namespace tl::capture
