// Objects made by traced code (plain classes, dataclasses, dict subclasses such as
// transformers' ModelOutput) and the Python-level dunder methods of objects in general.
//
// A made object is a VKind::Object with flag set: `attrs` is its instance dict and, for dict
// subclasses, `mapping` its items, both symbolic Dict values. The real instance (from tp_new,
// never initialised) only gives the type and an address; after the graph runs, the object is
// rebuilt from attrs/mapping by rebuild_created_object (context.cpp).
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"
#include "guards/dict_order.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

// dataclasses.fields(cls) as a tuple of Field objects (new reference), or null.
PyRef dataclass_fields(PyObject* cls) {
  static PyObject* fields_fn = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("dataclasses"));
    PyObject* f = m ? PyObject_GetAttrString(m.get(), "fields") : nullptr;
    if (!f) clear_expected_error();
    return f;  // NOTE: kept for the process lifetime, like the dataclasses module
  }();
  if (!fields_fn) return {};
  PyRef r = PyRef::steal(PyObject_CallOneArg(fields_fn, cls));
  if (!r) clear_expected_error();
  return r;
}

PyRef field_attr(PyObject* field, const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(field, name));
  if (!r) throw PythonError();
  return r;
}

bool is_none(const ValuePtr& v) { return v && v->is_const() && v->obj.get() == Py_None; }

}  // namespace

// The class named transformers.utils.generic.ModelOutput in cls's MRO whose
// __init__ (dataclass-made), __post_init__ and __setattr__ cls does not override; borrowed or
// null. Its construction is modelled natively below (what its __post_init__ computes).
PyObject* detail::model_output_base(PyObject* cls) {
  if (!PyType_Check(cls)) return nullptr;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  PyObject* base = nullptr;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* t = PyTuple_GET_ITEM(mro, i);
    if (attr_str(t, "__qualname__") == "ModelOutput" &&
        attr_str(t, "__module__") == "transformers.utils.generic")
      base = t;
  }
  if (!base || base == cls) return nullptr;
  for (const char* name : {"__post_init__", "__setattr__", "__setitem__", "__getitem__"}) {
    PyRef key = PyRef::steal(PyUnicode_FromString(name));
    if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), key.get()) !=
        _PyType_Lookup(reinterpret_cast<PyTypeObject*>(base), key.get()))
      return nullptr;
  }
  PyRef init_name = PyRef::steal(PyUnicode_FromString("__init__"));
  PyObject* init = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), init_name.get());
  if (!init || !PyFunction_Check(init)) return nullptr;
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(init));
  if (utf8(code->co_filename) != "<string>") return nullptr;  // not made by @dataclass
  return base;
}

// What `cls(*args, **kwargs)` builds for a @dataclass subclass of ModelOutput: every field
// an attribute; the items are the fields that are not None, in field order (what its
// __setattr__ and __post_init__ leave behind in the ordinary case).
ValuePtr Tracer::construct_model_output(PyObject* cls, std::vector<ValuePtr>& args,
                                        KwArgs& kwargs) {
  PyRef fields = dataclass_fields(cls);
  if (!fields || PyTuple_GET_SIZE(fields.get()) == 0)
    graph_break("model_output_construction", std::string("ModelOutput without fields: ") +
                                                 reinterpret_cast<PyTypeObject*>(cls)->tp_name);
  PyRef dc = PyRef::steal(PyImport_ImportModule("dataclasses"));
  if (!dc) throw PythonError();
  PyRef missing = PyRef::steal(PyObject_GetAttrString(dc.get(), "MISSING"));
  if (!missing) throw PythonError();

  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  ValuePtr obj = new_traced_object(cls);
  obj->mapping = Value::of_kind(VKind::Dict);

  size_t next_pos = 0;
  std::vector<std::pair<PyRef, ValuePtr>> values;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
    PyObject* f = PyTuple_GET_ITEM(fields.get(), i);
    PyRef name = field_attr(f, "name");
    std::string n = utf8(name.get());
    ValuePtr v;
    if (PyObject_IsTrue(field_attr(f, "init").get())) {
      if (next_pos < args.size()) v = args[next_pos++];
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
        if (it->first == n) {
          if (v) graph_break("user_exception", "got multiple values for argument '" + n + "'");
          v = it->second;
          kwargs.erase(it);
          break;
        }
    }
    if (!v) {
      PyRef def = field_attr(f, "default");
      PyRef factory = field_attr(f, "default_factory");
      if (def.get() != missing.get()) {
        v = ctx_.from_result(def.get());
      } else if (factory.get() == reinterpret_cast<PyObject*>(&PyList_Type)) {
        v = Value::list({});
      } else if (factory.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) {
        v = Value::of_kind(VKind::Dict);
      } else {
        graph_break("user_exception", "missing required argument '" + n + "'");
      }
    }
    values.emplace_back(name, v);
  }
  if (next_pos < args.size() || !kwargs.empty())
    graph_break("user_exception", std::string(type->tp_name) + "() got unexpected arguments");

  // __post_init__ rebuilds the items from a dict or (key, value) iterator given as the
  // only field; that rare form is left to CPython.
  bool others_none = true;
  for (size_t i = 1; i < values.size(); ++i) others_none = others_none && is_none(values[i].second);
  const ValuePtr& first = values[0].second;
  if (others_none && !first->is_tensor() && !is_none(first) &&
      (!first->is_const() || PyTuple_Check(first->obj.get()) || PyList_Check(first->obj.get()) ||
       PyDict_Check(first->obj.get())))
    graph_break("model_output_construction",
                std::string(type->tp_name) + " built from a container as its only field");
  for (auto& [name, v] : values) {
    dict_set(obj->attrs, name.get(), v);
    if (!is_none(v)) dict_set(obj->mapping, name.get(), v);
  }
  return obj;
}

std::optional<ValuePtr> Tracer::call_dunder(const ValuePtr& obj, const char* name,
                                            std::vector<ValuePtr> args) {
  if (obj->kind != VKind::Object && obj->kind != VKind::Module) return std::nullopt;
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  PyObject* fn = _PyType_Lookup(Py_TYPE(obj->obj.get()), key.get());  // borrowed
  if (!fn || !PyFunction_Check(fn)) return std::nullopt;
  args.insert(args.begin(), obj);
  return inline_function(fn, nullptr, nullptr, std::move(args), {});
}

// C-level methods of a dict subclass instance: on a made object they act on its symbolic
// items; on one read from the frame, read-only ones run now under a dict-version guard.
std::optional<ValuePtr> Tracer::created_object_method(const ValuePtr& self, const std::string& name,
                                                      std::vector<ValuePtr>& args, KwArgs& kwargs) {
  if (self->kind != VKind::Object) return std::nullopt;
  if (self->mapping) {
    if (name == "__setitem__" && args.size() == 2) {
      base_setitem(self, args[0], args[1]);
      return none();
    }
    // NOTE: one read from the frame holds its items since its first write (base_setitem):
    // reads use them; other writes are not replayed, so they break.
    static const std::unordered_set<std::string> readers = {
        "get", "__getitem__", "__contains__", "keys", "values", "items", "__len__", "__iter__"};
    if (self->source && !readers.count(name))
      graph_break("unsupported_side_effect", self->type_name() + "." + name +
                                                 "() after an item "
                                                 "assignment");
    if (name == "__len__") return const_int(self->mapping->items.size());
    if (name == "__iter__") return get_iter(self->mapping);
    if (name == "__init__" || name == "update") {
      std::vector<ValuePtr> a = args;
      call_method_on(self->mapping, "update", a, kwargs);
      return none();
    }
    if (name == "move_to_end" || name == "popitem") {  // OrderedDict's own; `last` picks the end
      bool ordered = PyObject_HasAttrString(self->obj.get(), "move_to_end");
      ValuePtr last = name == "move_to_end" ? (args.size() > 1 ? args[1] : nullptr)
                                            : (!args.empty() ? args[0] : nullptr);
      for (auto& [k, v] : kwargs)
        if (k == "last") last = v;
      if (!ordered || (last && !last->is_const()) || (!args.empty() && !args[0]->is_const()))
        graph_break("unsupported_callable", std::string(Py_TYPE(self->obj.get())->tp_name) + "." +
                                                name + "() with a traced `last`");
      bool at_end = !last || PyObject_IsTrue(last->obj.get());
      ValuePtr& m = self->mapping;
      if (m->keys.empty() && name == "popitem") raise_user(PyExc_KeyError, "dictionary is empty");
      int i = name == "popitem" ? (at_end ? static_cast<int>(m->keys.size()) - 1 : 0)
                                : (args.empty() ? -1 : dict_find(m, args[0]->obj.get()));
      if (i < 0)
        raise_user_arg(PyExc_KeyError, args.empty() ? Py_None : args[0]->obj.get(),
                       "KeyError in move_to_end");
      PyRef key = m->keys[i];
      ValuePtr item = m->items[i];
      m->keys.erase(m->keys.begin() + i);
      m->items.erase(m->items.begin() + i);
      if (name == "popitem") return Value::tuple({Value::constant(key), item});
      m->keys.insert(at_end ? m->keys.end() : m->keys.begin(), key);
      m->items.insert(at_end ? m->items.end() : m->items.begin(), item);
      return none();
    }
    return call_method_on(self->mapping, name, args, kwargs);
  }
  if (!self->source || !PyDict_Check(self->obj.get())) return std::nullopt;
  static const std::unordered_set<std::string> readers = {
      "get", "__getitem__", "__contains__", "keys", "values", "items", "__len__", "copy"};
  if (!readers.count(name) || !all_const(args, kwargs)) return std::nullopt;
  // NOTE: a dict reached from a frame local (a ModelOutput handed to a resume function) is a
  // new object each call: guarded by keys, items as inputs. One reached from a global or a
  // closure (a registry such as ACT2FN) lives on: guarded by its dict version.
  ir::SourcePtr root = self->source;
  while (root->base) root = root->base;
  if (root->kind == ir::SourceKind::Local) {
    // NOTE: guarded by its keys, each item an input of its own (`L['out']['logits']`): a
    // ModelOutput is a new object on every call, so a guard on its items' identity (or its
    // dict version) would recompile every call (CaptureContext::dict_subclass_items).
    bool order_free =
        name == "get" || name == "__getitem__" || name == "__contains__" || name == "__len__";
    // NOTE: OrderedDict.copy builds type(self)(self), dict.copy a plain dict.
    if (name == "copy" && Py_TYPE(self->obj.get())->tp_iter != PyDict_Type.tp_iter)
      return std::nullopt;
    ValuePtr items = ctx_.dict_subclass_items(self, /*need_iteration_order=*/!order_free);
    if (!items) return std::nullopt;
    return call_method_on(items, name, args, kwargs);
  }
  ctx_.guards().add_dict_version(self->source, self->obj.get());
  // NOTE: the dict's own storage, read without running the subclass's Python __getitem__ or
  // keys() (PyDict_Copy would call them on a subclass that overrides __iter__, as
  // OrderedDict's do); only the views' order could differ from the subclass's, so those need a
  // class that leaves item access to dict.
  bool order_free =
      name == "get" || name == "__getitem__" || name == "__contains__" || name == "__len__";
  PyRef getitem_name = PyRef::steal(PyUnicode_FromString("__getitem__"));
  PyObject* getitem = _PyType_Lookup(Py_TYPE(self->obj.get()), getitem_name.get());
  if (!order_free && getitem && PyFunction_Check(getitem)) return std::nullopt;
  PyRef d = PyRef::steal(order_free ? PyDict_New() : PyDict_Copy(self->obj.get()));
  if (!d) throw PythonError();
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (order_free && PyDict_Next(self->obj.get(), &pos, &k, &v))
    if (PyDict_SetItem(d.get(), k, v) < 0) throw PythonError();
  PyRef m = PyRef::steal(PyObject_GetAttrString(d.get(), name.c_str()));
  if (!m) throw PythonError();
  return call_pure(ctx_, m.get(), args, kwargs);
}

// A set member's key: set_key's, or for a parameter read from the frame the parameter itself
// (tensors hash by identity), pinned by an ID_MATCH: nn.Module._named_members keeps a memo set
// of the parameters it has yielded.
PyRef Tracer::set_member_key(const ValuePtr& item) {
  if (PyRef c = set_key(item)) return c;
  if (!item->is_tensor() || !item->source) return {};
  PyObject* real = ctx_.real_input(item);
  auto* parameter = reinterpret_cast<PyTypeObject*>(torch_api().parameter_type.get());
  // NOTE: a parameter, or a buffer read from a module's _buffers (named_buffers' memo set),
  // is the same object call after call: pinned by identity. A tensor argument is new each call.
  if (!real || !(PyObject_TypeCheck(real, parameter) ||
                 item->source->str().find("._buffers[") != std::string::npos))
    return {};
  ctx_.guards().add_id_match(item->source, real);
  return PyRef::borrow(real);
}

// Methods of a set of constants: run on the real set (mutators in place, so every alias of
// the value sees them); arguments must be constants.
ValuePtr Tracer::call_set_method(const ValuePtr& self, const std::string& name,
                                 std::vector<ValuePtr>& args) {
  static const std::unordered_set<std::string> known = {"add",
                                                        "discard",
                                                        "remove",
                                                        "update",
                                                        "clear",
                                                        "copy",
                                                        "union",
                                                        "intersection",
                                                        "difference",
                                                        "symmetric_difference",
                                                        "issubset",
                                                        "issuperset",
                                                        "isdisjoint",
                                                        "intersection_update",
                                                        "difference_update",
                                                        "symmetric_difference_update",
                                                        "__contains__",
                                                        "__len__"};
  if (!known.count(name)) graph_break("unsupported_callable", "set." + name + "()");
  // Identity-keyed members (modules) may be added, removed and tested only: a
  // set operation would hand them back as constants.
  bool single = name == "add" || name == "discard" || name == "remove" || name == "__contains__" ||
                name == "__len__" || name == "clear";
  if (self->flag && !single)
    graph_break("set_of_objects", "set." + name + "() on a set of modules or objects");
  std::vector<ValuePtr> consts;
  for (auto& a : args) {
    PyRef c = single ? set_member_key(a) : const_tuple(a);
    if (!c) graph_break("set_of_objects", "set." + name + "() of a " + a->type_name());
    if (name == "add" && !const_tuple(a)) self->flag = true;
    consts.push_back(Value::constant(c));
  }
  PyRef m = PyRef::steal(PyObject_GetAttrString(self->obj.get(), name.c_str()));
  if (!m) throw PythonError();
  return call_pure(ctx_, m.get(), consts, {});
}

}  // namespace tl::capture
