// Python builtins, operator.* and math.* over symbolic values.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "capture/constant_fold.h"
#include "capture/deque.h"
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

// The Python type of an iterator the trace models (Value::method_name): a generator, or a
// builtin iterator type (map, filter, zip, enumerate); null for others. Borrowed.
PyObject* iterator_type(const std::string& name) {
  if (name == "generator") return reinterpret_cast<PyObject*>(&PyGen_Type);
  if (name != "map" && name != "filter" && name != "zip" && name != "enumerate") return nullptr;
  PyRef t = PyRef::steal(PyObject_GetAttrString(torch_api().builtins.get(), name.c_str()));
  if (!t) throw PythonError();
  return PyType_Check(t.get()) ? t.get() : nullptr;  // NOTE: a static type: lives on
}

// Keyword arguments to a builtin whose rule below reads only positional ones: those CPython
// rejects raise its TypeError; those it accepts but the rule would ignore break.
void check_builtin_kwargs(const std::string& name, const KwArgs& kwargs) {
  static const std::unordered_set<std::string> positional_only = {
      "isinstance", "issubclass", "len",  "callable", "hasattr", "getattr", "setattr",
      "delattr",    "next",       "iter", "abs",      "all",     "any",     "hash",
      "id",         "repr",       "map",  "reversed", "filter"};
  if (positional_only.count(name))
    raise_user(PyExc_TypeError, name + "() takes no keyword arguments");
  static const std::unordered_map<std::string, std::unordered_set<std::string>> allowed = {
      {"sum", {"start"}}, {"enumerate", {"start"}}};
  auto it = allowed.find(name);
  if (it == allowed.end()) return;  // the rule passes kwargs on (pure builtins, sorted...)
  for (auto& [k, v] : kwargs) {
    (void)v;
    if (!it->second.count(k))
      graph_break("unsupported_builtin", name + "() with keyword argument " + k);
  }
}

// A class whose metaclass overrides __instancecheck__ (other than ABCMeta's, which
// answers from the type as the rule below does) runs Python code the rule would skip.
void check_instancecheck(PyObject* cls) {
  if (PyTuple_Check(cls)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      check_instancecheck(PyTuple_GET_ITEM(cls, i));
    return;
  }
  PyTypeObject* meta = Py_TYPE(cls);
  if (meta == &PyType_Type) return;
  static PyObject* name = PyUnicode_InternFromString("__instancecheck__");
  static PyObject* abc_check = [] {  // NOTE: abc lives as long as the interpreter
    PyRef abc = PyRef::steal(PyImport_ImportModule("abc"));
    PyRef meta_type = abc ? PyRef::steal(PyObject_GetAttrString(abc.get(), "ABCMeta")) : PyRef();
    if (!meta_type) throw PythonError();
    return _PyType_Lookup(reinterpret_cast<PyTypeObject*>(meta_type.get()), name);
  }();
  PyObject* check = _PyType_Lookup(meta, name);
  if (check && check != _PyType_Lookup(&PyType_Type, name) && check != abc_check)
    graph_break("unsupported_callable", std::string("isinstance() with a metaclass ") +
                                            meta->tp_name + " that defines __instancecheck__");
}

// An ABC among `cls` (a class or a tuple of them): its answer follows registrations
// (`Base.register(Other)`), which abc counts in its cache token.
bool uses_abc_registry(PyObject* cls) {
  if (PyTuple_Check(cls)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      if (uses_abc_registry(PyTuple_GET_ITEM(cls, i))) return true;
    return false;
  }
  static PyObject* abc_meta = [] {  // NOTE: abc lives as long as the interpreter
    PyRef abc = PyRef::steal(PyImport_ImportModule("abc"));
    PyObject* m = abc ? PyObject_GetAttrString(abc.get(), "ABCMeta") : nullptr;
    if (!m) throw PythonError();
    return m;
  }();
  return PyType_Check(cls) &&
         PyType_IsSubtype(Py_TYPE(cls), reinterpret_cast<PyTypeObject*>(abc_meta));
}

// NOTE: isinstance/issubclass of an ABC hold while no class is registered with any ABC:
// abc.get_cache_token() (a counter of registrations) is guarded to return what it does now.
void guard_abc_registry(guards::GuardSet& guards) {
  static PyObject* token_fn = [] {
    PyRef abc = PyRef::steal(PyImport_ImportModule("abc"));
    PyObject* f = abc ? PyObject_GetAttrString(abc.get(), "get_cache_token") : nullptr;
    if (!f) throw PythonError();
    return f;
  }();
  PyRef token = PyRef::steal(PyObject_CallNoArgs(token_fn));
  if (!token) throw PythonError();
  guards.add_call_result(token_fn, token.get());
}

}  // namespace

// NOTE: the key function is the user's code: folding the call would run it once, at trace time
// (its effects lost on later calls, what it reads unguarded). It is called here on each item in
// eager's order, so it is traced like any call; the order then follows from the keys, compared
// as CPython compares them (sorted: Python's own stable sort of the indices; min/max: the first
// best, `<` for min and `>` for max, key by key).
ValuePtr Tracer::keyed_order(PyObject* fn, const std::string& name, std::vector<ValuePtr>& args,
                             const KwArgs& kwargs) {
  ValuePtr key, fallback;
  bool reverse = false;
  for (auto& [k, v] : kwargs) {
    if (k == "key") {
      key = v;
    } else if (k == "reverse" && name == "sorted" && v->is_const()) {
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) raise_current_error("sorted() reverse= raised while tracing");
      reverse = r;
    } else if (k == "default" && name != "sorted") {
      fallback = v;
    } else {
      graph_break("unsupported_operand", name + "() with key= and " + k + "=");
    }
  }
  if (name == "sorted" && args.size() != 1)
    graph_break("user_exception", "sorted() takes one positional argument");
  if (args.empty()) graph_break("user_exception", name + "() expects at least one argument");
  if (fallback && args.size() > 1)
    raise_user(PyExc_TypeError,
               "Cannot specify a default for " + name + "() with multiple positional arguments");
  std::vector<ValuePtr> items = args.size() == 1 ? iterate(args[0]) : args;
  PyRef keys = PyRef::steal(PyList_New(0));
  if (!keys) throw PythonError();
  size_t best = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    ValuePtr k = key_value(ctx_, call(key, {items[i]}, {}));
    if (!k->is_const())
      graph_break("unsupported_operand", name + "() with a key= that returns a " + k->type_name(),
                  "return a Python number or string from the key");
    ctx_.specialise(k);
    if (PyList_Append(keys.get(), k->obj.get()) < 0) throw PythonError();
    if (name == "sorted" || i == 0) continue;
    int better = PyObject_RichCompareBool(k->obj.get(), PyList_GET_ITEM(keys.get(), best),
                                          name == "min" ? Py_LT : Py_GT);
    if (better < 0) raise_current_error(name + "() compared keys while tracing");
    if (better) best = i;
  }
  if (name != "sorted") {
    if (!items.empty()) return items[best];
    if (fallback) return fallback;
    raise_user(PyExc_ValueError, name + "() iterable argument is empty");
  }
  PyRef order = PyRef::steal(PyList_New(0));
  for (size_t i = 0; order && i < items.size(); ++i) {
    PyRef idx = PyRef::steal(PyLong_FromSize_t(i));
    if (!idx || PyList_Append(order.get(), idx.get()) < 0) throw PythonError();
  }
  PyRef getitem = PyRef::steal(PyObject_GetAttrString(keys.get(), "__getitem__"));
  PyRef kw = PyRef::steal(Py_BuildValue("{sOsO}", "key", getitem.get(), "reverse", C(reverse)));
  PyRef pos = PyRef::steal(PyTuple_Pack(1, order.get()));
  if (!getitem || !kw || !pos) throw PythonError();
  PyRef sorted = PyRef::steal(PyObject_Call(fn, pos.get(), kw.get()));
  if (!sorted) raise_current_error("sorted() compared keys while tracing");
  std::vector<ValuePtr> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sorted.get()); ++i)
    out.push_back(items[PyLong_AsSize_t(PyList_GET_ITEM(sorted.get(), i))]);
  return Value::list(std::move(out));
}

// sorted() of pairs whose first items are distinct constants (`sorted(d.items())` over a dict
// of tensors): tuples compare by their first items alone then, so those order them. Null when
// that does not hold.
ValuePtr Tracer::sorted_by_first(PyObject* sorted_fn, const std::vector<ValuePtr>& items,
                                 const KwArgs& kwargs) {
  if (items.size() > 256) return nullptr;
  for (const auto& [k, v] : kwargs)
    if (k != "reverse" || !v->is_const()) return nullptr;
  PyRef firsts = PyRef::steal(PyList_New(0));
  if (!firsts) throw PythonError();
  for (const auto& item : items) {
    std::vector<ValuePtr> parts;
    if (item->kind != VKind::Tuple || !as_items(item, parts) || parts.empty()) return nullptr;
    ValuePtr first = key_value(ctx_, parts[0]);
    if (!first->is_const()) return nullptr;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(firsts.get()); ++j) {
      int eq = PyObject_RichCompareBool(PyList_GET_ITEM(firsts.get(), j), first->obj.get(), Py_EQ);
      if (eq < 0) raise_current_error("sorted() compared keys while tracing");
      if (eq) return nullptr;
    }
    ctx_.specialise(first);
    if (PyList_Append(firsts.get(), first->obj.get()) < 0) throw PythonError();
  }
  PyRef order = PyRef::steal(PyList_New(0));
  for (size_t i = 0; order && i < items.size(); ++i) {
    PyRef idx = PyRef::steal(PyLong_FromSize_t(i));
    if (!idx || PyList_Append(order.get(), idx.get()) < 0) throw PythonError();
  }
  PyRef getitem = PyRef::steal(PyObject_GetAttrString(firsts.get(), "__getitem__"));
  PyRef kw = PyRef::steal(PyDict_New());
  PyRef pos = PyRef::steal(PyTuple_Pack(1, order.get()));
  if (!getitem || !kw || !pos || PyDict_SetItemString(kw.get(), "key", getitem.get()) < 0)
    throw PythonError();
  for (const auto& [k, v] : kwargs)
    if (PyDict_SetItemString(kw.get(), k.c_str(), v->obj.get()) < 0) throw PythonError();
  PyRef sorted = PyRef::steal(PyObject_Call(sorted_fn, pos.get(), kw.get()));
  if (!sorted) raise_current_error("sorted() compared keys while tracing");
  std::vector<ValuePtr> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sorted.get()); ++i)
    out.push_back(items[PyLong_AsSize_t(PyList_GET_ITEM(sorted.get(), i))]);
  return Value::list(std::move(out));
}

// sorted() of objects whose class orders them in Python (`__lt__`): a stable sort on `<`, as
// CPython's (reverse=True reverses before and after, keeping equal items in order). Null when
// the items are not all such objects.
ValuePtr Tracer::sorted_objects(const std::vector<ValuePtr>& items, const KwArgs& kwargs) {
  bool reverse = false;
  for (const auto& [k, v] : kwargs) {
    if (k != "reverse" || !v->is_const()) return nullptr;
    reverse = PyObject_IsTrue(v->obj.get()) == 1;
  }
  for (const auto& v : items)
    if (v->kind != VKind::Object) return nullptr;
  std::vector<ValuePtr> out = items;
  if (reverse) std::reverse(out.begin(), out.end());
  std::stable_sort(out.begin(), out.end(),
                   [&](const ValuePtr& x, const ValuePtr& y) { return truth(compare(0, x, y)); });
  if (reverse) std::reverse(out.begin(), out.end());
  return Value::list(std::move(out));
}

ValuePtr Tracer::call_builtin(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs,
                              bool& handled) {
  handled = true;
  const TorchApi& api = torch_api();
  bool is_builtin_fn = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == api.builtins.get();
  bool is_builtin_type = PyType_Check(fn) && attr_str(fn, "__module__") == "builtins";
  std::string name = attr_str(fn, "__name__");
  if (PyCFunction_Check(fn) && !is_builtin_fn) {
    // A read-only method of a constant dict, tuple or string (a dataclass's
    // __dataclass_fields__.values(), a class attribute's .get(key)) runs now on constants.
    static const std::unordered_set<std::string> reads = {"keys",  "values", "items",       "get",
                                                          "count", "index",  "__contains__"};
    PyObject* self = PyCFunction_GET_SELF(fn);
    if (self &&
        (PyDict_CheckExact(self) || PyTuple_CheckExact(self) || PyUnicode_CheckExact(self)) &&
        reads.count(name) && all_const(args, kwargs))
      return call_pure(ctx_, fn, args, kwargs);
    // dict.fromkeys(keys, value): a new dict of constant keys (the value is shared).
    if (self == reinterpret_cast<PyObject*>(&PyDict_Type) && name == "fromkeys" &&
        (args.size() == 1 || args.size() == 2) && kwargs.empty()) {
      PyRef keys = const_tuple(args[0]);
      if (keys) {
        PyRef list = PyRef::steal(PySequence_List(keys.get()));
        if (!list) throw PythonError();
        ValuePtr d = Value::of_kind(VKind::Dict);
        ValuePtr value = args.size() == 2 ? args[1] : none();
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i) {
          PyObject* k = PyList_GET_ITEM(list.get(), i);
          if (PyObject_Hash(k) == -1) raise_current_error("dict.fromkeys() hashed a key");
          dict_set(d, k, value);
        }
        return d;
      }
    }
  }
  if (is_builtin_fn || is_builtin_type) {
    if (name == "vars" && args.size() == 1 && kwargs.empty()) {  // obj.__dict__ (no-arg: locals)
      if (auto d = try_get_attr(args[0], "__dict__")) return *d;
      raise_user(PyExc_TypeError, "vars() argument must have __dict__ attribute");
    }
    if (forbidden_builtins().count(name))
      graph_break("unsupported_builtin", "call to builtin " + name + "()");
    if (!kwargs.empty()) check_builtin_kwargs(name, kwargs);
    if (name == "super") {
      if (args.size() == 2) return make_super(args[0], args[1]);
      if (!args.empty()) graph_break("unsupported_callable", "super() with one argument");
      // Zero-argument form: the method's first argument and its __class__ cell.
      int cls_slot = -1;
      for (int i = 0; i < code_->co_nlocalsplus; ++i)
        if (utf8(PyTuple_GET_ITEM(code_->co_localsplusnames, i)) == "__class__") cls_slot = i;
      if (cls_slot < 0 || !locals_[cls_slot] || code_->co_argcount < 1 || !locals_[0])
        graph_break("unsupported_callable", "super() outside a method");
      ValuePtr self = locals_[0];
      if (self->kind == VKind::Cell) self = self->cell_contents;
      ValuePtr cls = locals_[cls_slot];
      if (cls->kind == VKind::Cell) cls = cls->cell_contents;
      return make_super(cls, self);
    }
    if (name == "len" && args.size() == 1) {
      const ValuePtr& v = args[0];
      if (v->is_sequence() || v->kind == VKind::Dict || v->kind == VKind::Deque)
        return const_int(v->items.size());
      if (v->kind == VKind::Set) return const_int(PySet_GET_SIZE(v->obj.get()));
      if (v->kind == VKind::Object) {
        if (auto r = call_dunder(v, "__len__", {})) return const_int(checked_len(*r));
        if (v->mapping) return const_int(v->mapping->items.size());
      }
      if (v->kind == VKind::DictView) return const_int(v->self->keys.size());
      if (v->kind == VKind::Iterator)
        raise_user(PyExc_TypeError, "object of type '" + v->type_name() + "' has no len()");
      if (v->is_tensor()) {
        PyRef shape = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "shape"));
        if (!shape || PyTuple_GET_SIZE(shape.get()) == 0)
          graph_break("user_exception", "len() of a 0-d tensor");
        return ctx_.size_value(v, 0);
      }
      if (v->is_const() || v->kind == VKind::Module) {
        Py_ssize_t n = PyObject_Length(v->obj.get());
        if (n < 0) raise_current_error("len() raised");
        return const_int(n);
      }
    }
    if (name == "callable" && args.size() == 1) {
      const ValuePtr& v = args[0];
      switch (v->kind) {
        case VKind::Method:
        case VKind::Function:
        case VKind::Partial:
          return const_bool(true);
        case VKind::Tensor:
        case VKind::Tuple:
        case VKind::List:
        case VKind::Dict:
        case VKind::Set:
        case VKind::Deque:
          return const_bool(false);
        case VKind::Const:
        case VKind::Module:
        case VKind::Object:
          // NOTE: an instance is callable while its class has a __call__, which a later
          // `C.__call__ = ...` (or del) changes: the lookup is guarded.
          if (v->kind == VKind::Object && v->source && v->obj) {
            PyRef call_name = PyRef::steal(PyUnicode_FromString("__call__"));
            PyObject* found = _PyType_Lookup(Py_TYPE(v->obj.get()), call_name.get());
            ctx_.guards().add_attr(v->source, guards::AttrTable::Owner::Instance, v->obj.get(),
                                   call_name.get(), found);
          }
          if (v->obj) return const_bool(PyCallable_Check(v->obj.get()));
          break;
        default:
          break;
      }
    }
    PyRef cls_ref = args.size() == 2 ? const_tuple(args[1]) : PyRef();
    if ((name == "isinstance" || name == "issubclass") && cls_ref &&
        uses_abc_registry(cls_ref.get()))
      guard_abc_registry(ctx_.guards());
    if (name == "isinstance" && cls_ref) {
      const ValuePtr& v = args[0];
      PyObject* cls = cls_ref.get();
      check_instancecheck(cls);
      PyObject* type = nullptr;
      switch (v->kind) {
        case VKind::Tensor:
          type = v->obj.get();
          break;
        case VKind::Tuple:
          type = v->named_type ? v->named_type.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
          break;
        case VKind::List:
          type = reinterpret_cast<PyObject*>(&PyList_Type);
          break;
        case VKind::Dict:
          type = reinterpret_cast<PyObject*>(&PyDict_Type);
          break;
        case VKind::Function:
          type = reinterpret_cast<PyObject*>(&PyFunction_Type);
          break;
        case VKind::Set:
          type = reinterpret_cast<PyObject*>(&PySet_Type);
          break;
        case VKind::Deque:
          type = deque_type();
          break;
        case VKind::DictView:
          type = dict_view_type(v);
          break;
        case VKind::Method:
          // A Python function bound to self is a types.MethodType; a named method of a
          // tensor/list/dict/str is a builtin method.
          type = reinterpret_cast<PyObject*>(
              v->obj && PyFunction_Check(v->obj.get()) ? &PyMethod_Type : &PyCFunction_Type);
          break;
        case VKind::Const:
        case VKind::Module:
        case VKind::Object:
          type = reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
          break;
        case VKind::Iterator:
          type = iterator_type(v->method_name);
          if (!type) graph_break("unsupported_operand", "isinstance() of a " + v->type_name());
          break;
        default:
          graph_break("unsupported_operand", "isinstance() of a " + v->type_name());
      }
      int r = PyObject_IsSubclass(type, cls);
      if (r < 0) raise_current_error("isinstance() raised");
      return const_bool(r);
    }
    if (name == "type" && args.size() == 1) {
      const ValuePtr& v = args[0];
      if (v->is_tensor()) return Value::constant(v->obj);
      if (v->kind == VKind::List)
        return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(&PyList_Type)));
      if (v->kind == VKind::Dict)
        return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)));
      if (v->kind == VKind::Set)
        return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(&PySet_Type)));
      if (v->kind == VKind::DictView) return Value::constant(PyRef::borrow(dict_view_type(v)));
      if (v->kind == VKind::Deque) return Value::constant(PyRef::borrow(deque_type()));
      if (v->kind == VKind::Tuple)
        return Value::constant(v->named_type
                                   ? v->named_type
                                   : PyRef::borrow(reinterpret_cast<PyObject*>(&PyTuple_Type)));
      if (v->obj) {
        PyTypeObject* t = Py_TYPE(v->obj.get());
        ValuePtr r = Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(t)));
        // NOTE: a class's attributes change (`type(self).calls += 1`): the class is a guard
        // root, so what the trace reads through it is guarded as through `G['Cls']`. A C
        // type's cannot change.
        if (t->tp_flags & Py_TPFLAGS_HEAPTYPE)
          r->source = ir::Source::held(PyRef::borrow(reinterpret_cast<PyObject*>(t)), t->tp_name);
        return r;
      }
    }
    if ((name == "getattr" || name == "hasattr") && args.size() >= 2 && args[1]->is_const() &&
        PyUnicode_Check(args[1]->obj.get())) {
      const std::string attr = utf8(args[1]->obj.get());
      std::optional<ValuePtr> r;
      try {
        r = try_get_attr(args[0], attr);
      } catch (UserException& e) {
        // A Python __getattribute__/__getattr__/property raising AttributeError
        // means "no attribute", exactly as getattr/hasattr treat it.
        if (!e.matches(PyExc_AttributeError)) throw;
      }
      if (name == "hasattr") return const_bool(r.has_value());
      if (r) return *r;
      if (args.size() == 3) return args[2];
      raise_user(PyExc_AttributeError,
                 "'" + args[0]->type_name() + "' object has no attribute '" + attr + "'");
    }
    if (name == "setattr" && args.size() == 3 && args[1]->is_const()) {
      store_attr(args[0], utf8(args[1]->obj.get()), args[2]);
      return none();
    }
    if (name == "enumerate" && !args.empty()) {
      long long start = 0;
      ValuePtr s = args.size() > 1 ? args[1] : (!kwargs.empty() ? kwargs[0].second : nullptr);
      if (s) {
        if (!s->is_const()) graph_break("non_constant_argument", "enumerate start");
        start = PyLong_AsLongLong(s->obj.get());
      }
      return lazy_iterator(enumerate_iter(get_iter(args[0]), start), "enumerate");
    }
    if (name == "zip") {
      bool strict = false;
      for (auto& [k, v] : kwargs) {
        if (k != "strict" || !v->is_const())
          graph_break("unsupported_builtin", "zip() with a keyword argument other than strict=");
        int on = PyObject_IsTrue(v->obj.get());
        if (on < 0) throw PythonError();
        strict = on == 1;
      }
      std::vector<ValuePtr> its;
      for (auto& a : args) its.push_back(get_iter(a));
      // NOTE: strict=True differs from zip only when the lengths differ (a ValueError once one
      // runs out): with every length known and equal now it is zip; otherwise CPython runs it.
      // torch.nn.LSTM/GRU's _weights_have_changed zips its weight names with strict=True.
      for (size_t i = 0; strict && i < its.size(); ++i) {
        auto left = remaining_items(its[i]);
        auto first = remaining_items(its[0]);
        bool shared = std::count(its.begin(), its.end(), its[i]) > 1;
        if (!left || !first || left->size() != first->size() || shared)
          graph_break("unsupported_builtin",
                      "zip(strict=True) over iterables whose lengths are not known to be equal "
                      "while tracing");
      }
      return lazy_iterator(zip_iter(std::move(its)), "zip");
    }
    if (name == "reversed" && args.size() == 1) {
      if (args[0]->kind == VKind::List)
        return lazy_iterator(list_reverse_iter(args[0]), "list_reverseiterator");
      // NOTE: torch's Sequential/ModuleList/ParameterList reverse by __len__ and __getitem__,
      // which walk the items iteration lists.
      // (ModuleDict has no int __getitem__: reversed() of it raises, left to CPython.)
      bool container = false;
      if (args[0]->kind == VKind::Module) {
        PyTypeObject* t = Py_TYPE(args[0]->obj.get());
        static PyObject* nn = [] {  // NOTE: torch.nn, kept for the process lifetime
          PyObject* m = PyImport_ImportModule("torch.nn");
          if (!m) throw PythonError();
          return m;
        }();
        for (const char* name : {"Sequential", "ModuleList", "ParameterList"}) {
          PyRef cls = PyRef::steal(PyObject_GetAttrString(nn, name));
          if (!cls) throw PythonError();
          auto* c = reinterpret_cast<PyTypeObject*>(cls.get());
          if (!PyType_IsSubtype(t, c)) continue;
          // A subclass keeps the container's own item protocol (else CPython runs its own).
          bool same = true;
          for (const char* slot : {"__getitem__", "__len__", "__iter__", "__reversed__"}) {
            PyRef n = PyRef::steal(PyUnicode_FromString(slot));
            if (!n) throw PythonError();
            same = same && _PyType_Lookup(t, n.get()) == _PyType_Lookup(c, n.get());
          }
          container = container || same;
        }
      }
      if (args[0]->kind != VKind::Tuple && !args[0]->is_const() && !container)
        graph_break("unsupported_builtin", "reversed() of a " + args[0]->type_name());
      ValuePtr it = Value::of_kind(VKind::Iterator);
      it->items = iterate(args[0]);
      std::reverse(it->items.begin(), it->items.end());
      return it;
    }
    if (name == "iter" && args.size() == 1) return get_iter(args[0]);
    if (name == "iter" && args.size() == 2)
      graph_break("unsupported_builtin", "iter(callable, sentinel)");
    if (name == "next" && !args.empty() && args.size() <= 2 && args[0]->kind == VKind::Iterator) {
      if (ValuePtr v = iter_next(args[0])) return v;
      if (args.size() > 1) return args[1];
      raise_user_value(PyExc_StopIteration);
    }
    if (name == "next" && !args.empty() && args.size() <= 2 && is_user_iterator(args[0])) {
      // The user's own StopIteration (with its value) propagates, as from next(it).
      if (args.size() == 1) return *call_dunder(args[0], "__next__", {});
      try {
        return *call_dunder(args[0], "__next__", {});
      } catch (const UserException& e) {
        if (!e.matches(PyExc_StopIteration)) throw;
        return args[1];
      }
    }
    if (name == "next" && !args.empty() && args[0]->kind != VKind::Object)
      raise_user(PyExc_TypeError, "'" + args[0]->type_name() + "' object is not an iterator");
    if (name == "filter" && args.size() == 2) {
      bool none_fn = args[0]->is_const() && args[0]->obj.get() == Py_None;
      return lazy_iterator(filter_iter(none_fn ? nullptr : args[0], get_iter(args[1])), "filter");
    }
    if (name == "set" && args.size() <= 1 && kwargs.empty())
      return make_set(args.empty() ? std::vector<ValuePtr>{} : iterate(args[0]));
    if ((name == "list" || name == "tuple") && args.size() <= 1 && kwargs.empty()) {
      std::vector<ValuePtr> items = args.empty() ? std::vector<ValuePtr>{} : iterate(args[0]);
      return name == "list" ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (name == "dict") {
      ValuePtr d = Value::of_kind(VKind::Dict);
      if (args.size() == 1) {
        // NOTE: a dict subclass (transformers' ModelOutput) is merged as `{**m}` merges it.
        ValuePtr src = args[0];
        if (src->kind == VKind::Object && src->obj && PyDict_Check(src->obj.get()))
          src = mapping_items(src);
        if (src->kind == VKind::Dict) {
          d->keys = src->keys;
          d->items = src->items;
        } else {
          for (auto& pair : iterate(args[0])) {
            auto kv = iterate(pair);
            if (kv.size() != 2 || !kv[0]->is_const())
              graph_break("unsupported_dict_key", "dict() from pairs");
            d->keys.push_back(kv[0]->obj);
            d->items.push_back(kv[1]);
          }
        }
      }
      for (auto& [k, v] : kwargs) {
        d->keys.push_back(PyRef::steal(PyUnicode_FromString(k.c_str())));
        d->items.push_back(v);
      }
      return d;
    }
    if (name == "map" && args.size() >= 2) {
      std::vector<ValuePtr> its;
      for (size_t i = 1; i < args.size(); ++i) its.push_back(get_iter(args[i]));
      return lazy_iterator(map_iter(args[0], std::move(its)), "map");
    }
    if (name == "sum" && !args.empty() && args.size() + kwargs.size() <= 2) {
      ValuePtr acc = args.size() > 1 ? args[1] : !kwargs.empty() ? kwargs[0].second : const_int(0);
      for (auto& item : iterate(args[0])) acc = binary_op(operator_fn("add"), acc, item);
      return acc;
    }
    if ((name == "all" || name == "any") && args.size() == 1) {
      bool all = name == "all";
      ValuePtr it = get_iter(args[0]);  // NOTE: stepped, not drained: they stop early
      while (ValuePtr item = iter_next(it)) {
        bool t = truth(item);
        if (all && !t) return const_bool(false);
        if (!all && t) return const_bool(true);
      }
      return const_bool(all);
    }
    if (name == "abs" && args.size() == 1 && args[0]->is_tensor())
      return unary_op(operator_fn("abs"), args[0]);
    if ((name == "int" || name == "float" || name == "bool" || name == "complex") &&
        args.size() == 1 && args[0]->is_tensor()) {
      const char* dunder = name == "int"     ? "__int__"
                           : name == "float" ? "__float__"
                           : name == "bool"  ? "__bool__"
                                             : "__complex__";
      if (auto r = folded_call(ctx_, args[0], dunder)) return *r;
      graph_break("data_dependent_op", name + "() of a tensor needs its value");
    }
    if (name == "sorted" || name == "min" || name == "max") {
      for (auto& [k, v] : kwargs)
        // NOTE: only a constant key (None, a builtin) may be handed to CPython's own call; a
        // function made in traced code (a lambda) has no real object to hand it.
        if (k == "key" && !(v->is_const() && (v->obj.get() == Py_None || inert_value(v))))
          return keyed_order(fn, name, args, kwargs);
    }
    if (name == "sorted" && args.size() == 1 && !args[0]->is_const()) {
      std::vector<ValuePtr> items = iterate(args[0]);
      PyRef t = const_tuple(Value::tuple(items));
      if (!t) {
        if (ValuePtr r = sorted_by_first(fn, items, kwargs)) return r;
        if (ValuePtr r = sorted_objects(items, kwargs)) return r;
        graph_break("unsupported_operand", "sorted() of traced values");
      }
      return call_pure(ctx_, fn, {Value::constant(t)}, kwargs);
    }
    if ((name == "min" || name == "max") && !all_const(args, kwargs)) {
      std::vector<ValuePtr> items = args.size() == 1 ? iterate(args[0]) : args;
      if (all_const(items, kwargs)) {
        PyRef t = const_tuple(Value::tuple(items));
        return call_pure(ctx_, fn, {Value::constant(t)}, kwargs);
      }
      // Objects whose class orders them in Python: CPython's loop (the first best wins).
      const bool objects = !items.empty() && kwargs.empty() &&
                           std::all_of(items.begin(), items.end(),
                                       [](const ValuePtr& v) { return v->kind == VKind::Object; });
      if (objects) {
        size_t best = 0;
        for (size_t i = 1; i < items.size(); ++i)
          if (truth(compare(name == "min" ? 0 : 4, items[i], items[best]))) best = i;
        return items[best];
      }
      graph_break("unsupported_operand", name + "() over tensors (use torch.minimum/maximum)");
    }
    // NOTE: a container's truth is whether it holds items, whatever the items are (tensors).
    if (name == "bool" && args.size() == 1 && kwargs.empty() &&
        (args[0]->is_sequence() || args[0]->kind == VKind::Dict || args[0]->kind == VKind::Deque ||
         args[0]->kind == VKind::DictView))
      return const_bool(truth(args[0]));
    if (pure_builtins().count(name) || is_builtin_type) {
      if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
      if ((name == "str" || name == "repr") && args.size() == 1 && kwargs.empty()) {
        ValuePtr c = printable_value(ctx_, args[0]);
        if (c->is_const()) return call_pure(ctx_, fn, {c}, {});
        // An object whose class prints itself in Python (str() falls back to __repr__ where
        // __str__ is object's); what it returns must be a str, as CPython checks.
        if (c->kind == VKind::Object) {
          PyRef str_name = PyRef::steal(PyUnicode_FromString("__str__"));
          if (!str_name) throw PythonError();
          const bool own_str = _PyType_Lookup(Py_TYPE(c->obj.get()), str_name.get()) !=
                               _PyType_Lookup(&PyBaseObject_Type, str_name.get());
          std::optional<ValuePtr> r;
          if (name == "str" && own_str) r = call_dunder(c, "__str__", {});
          if (!r && (name == "repr" || !own_str)) r = call_dunder(c, "__repr__", {});
          if (r) {
            if (!(*r)->is_const() || !PyUnicode_Check((*r)->obj.get()))
              raise_user(PyExc_TypeError, std::string(name == "str" ? "__str__" : "__repr__") +
                                              " returned non-string (type " + (*r)->type_name() +
                                              ")");
            return *r;
          }
        }
      }
      if (name == "str" || name == "repr")
        graph_break("unsupported_operand",
                    name + "() of a " + (args.empty() ? "?" : args[0]->type_name()));
      std::vector<ValuePtr> consts;
      for (auto& a : args) {
        PyRef t = const_tuple(a);
        if (!t) graph_break("unsupported_operand", name + "() of a " + a->type_name());
        consts.push_back(Value::constant(t));
      }
      return call_pure(ctx_, fn, consts, kwargs);
    }
    handled = false;
    return nullptr;
  }
  // operator.* and math.*: the same rules as the bytecode operators.
  PyObject* self = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : nullptr;
  if (self == api.operator_module.get() ||
      (self && PyModule_Check(self) && std::string(PyModule_GetName(self)) == "_operator")) {
    static const std::unordered_set<std::string> binary = {
        "add",      "sub",       "mul",  "truediv", "floordiv", "mod",  "pow",  "matmul",
        "and_",     "or_",       "xor",  "lshift",  "rshift",   "iadd", "isub", "imul",
        "itruediv", "ifloordiv", "imod", "ipow",    "imatmul",  "iand", "ior",  "ixor",
        "lt",       "le",        "eq",   "ne",      "gt",       "ge"};
    if (binary.count(name) && args.size() == 2) return binary_op(fn, args[0], args[1]);
    if ((name == "neg" || name == "pos" || name == "abs" || name == "invert" || name == "inv") &&
        args.size() == 1)
      return unary_op(fn, args[0]);
    if (name == "not_" && args.size() == 1) return const_bool(!truth(args[0]));
    if (name == "truth" && args.size() == 1) return const_bool(truth(args[0]));
    if (name == "getitem" && args.size() == 2) return subscript(args[0], args[1]);
    if (name == "setitem" && args.size() == 3) {
      store_subscript(args[0], args[1], args[2]);
      return none();
    }
    if (name == "contains" && args.size() == 2 && all_const(args, kwargs))
      return call_pure(ctx_, fn, args, kwargs);
    if (name == "contains" && args.size() == 2 && kwargs.empty())
      return const_bool(contains(args[0], args[1]));  // as `b in a`
    if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
  }
  if (self == api.math_module.get()) {
    if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
    // math.prod([h, w]), math.fsum(sizes): containers of constants (sizes included) fold too.
    std::vector<ValuePtr> consts;
    for (auto& a : args) {
      bool view = a->kind == VKind::DictView || a->kind == VKind::Iterator;
      PyRef c = a->is_tensor() ? PyRef() : const_tuple(view ? Value::tuple(iterate(a)) : a);
      if (!c) break;
      consts.push_back(Value::constant(c));
    }
    if (consts.size() == args.size() && all_const(consts, kwargs))
      return call_pure(ctx_, fn, consts, kwargs);
    graph_break("unsupported_operand", "math." + name + "() of a traced value",
                "use torch." + name + " on tensors; math functions fold only on constants");
  }
  // Bound methods of immutable constants: "abc".upper(), (1, 2).index(2), dtype.is_floating_point.
  if (self && (PyCFunction_Check(fn) || Py_TYPE(fn) == &PyMethodDescr_Type) &&
      is_immutable_constant(self)) {
    std::vector<ValuePtr> consts;
    for (auto& a : args) {
      // NOTE: str.join takes any iterable; other methods may check the argument's type.
      bool view = a->kind == VKind::DictView || a->kind == VKind::Iterator;
      PyRef c = const_tuple(view && name == "join" ? Value::tuple(iterate(a)) : a);
      if (!c) graph_break("unsupported_operand", name + "() of a " + a->type_name());
      consts.push_back(Value::constant(c));
    }
    if (all_const(consts, kwargs)) return call_pure(ctx_, fn, consts, kwargs);
  }
  handled = false;
  return nullptr;
}

}  // namespace tl::capture
