// Calls, attributes, operators and iteration over symbolic values.
#include <algorithm>
#include <unordered_set>

#include "capture/graph_break.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) {
    PyErr_Clear();
    return "";
  }
  return c;
}

std::string attr_str(PyObject* o, const char* name) {
  PyRef v = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!v) {
    PyErr_Clear();
    return "";
  }
  return utf8(v.get());
}

std::string callable_desc(PyObject* fn) {
  std::string mod = attr_str(fn, "__module__");
  std::string name = attr_str(fn, "__qualname__");
  if (name.empty()) name = attr_str(fn, "__name__");
  if (name.empty()) name = Py_TYPE(fn)->tp_name;
  return mod.empty() ? name : mod + "." + name;
}

std::string error_text() {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
  std::string out = type ? reinterpret_cast<PyTypeObject*>(type.get())->tp_name : "error";
  if (value) {
    PyRef s = PyRef::steal(PyObject_Str(value.get()));
    if (s) out += ": " + utf8(s.get());
  }
  PyErr_Clear();
  return out;
}

PyObject* C(bool b) { return b ? Py_True : Py_False; }
ValuePtr const_bool(bool b) { return Value::constant(PyRef::borrow(C(b))); }
ValuePtr none() { return Value::constant(PyRef::borrow(Py_None)); }
ValuePtr const_int(long long i) { return Value::constant(PyRef::steal(PyLong_FromLongLong(i))); }

bool all_const(const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  for (auto& a : args)
    if (!a || !a->is_const()) return false;
  for (auto& [k, v] : kwargs)
    if (!v->is_const()) return false;
  return true;
}

// Runs a pure Python callable on constants at trace time.
ValuePtr call_pure(CaptureContext& ctx, PyObject* fn, const std::vector<ValuePtr>& args,
                   const KwArgs& kwargs) {
  PyRef pos = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(pos.get(), i, PyRef(args[i]->obj).release());
  PyRef kw;
  if (!kwargs.empty()) {
    kw = PyRef::steal(PyDict_New());
    for (auto& [k, v] : kwargs) PyDict_SetItemString(kw.get(), k.c_str(), v->obj.get());
  }
  PyRef r = PyRef::steal(PyObject_Call(fn, pos.get(), kw.get()));
  if (!r) graph_break("user_exception", callable_desc(fn) + " raised while tracing: " + error_text());
  return ctx.from_result(r.get());
}

bool is_type(PyObject* o, const PyRef& t) {
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t.get()));
}

const std::unordered_set<std::string>& pure_builtins() {
  static const std::unordered_set<std::string> s = {
      "abs",   "all",  "any",   "bool",  "chr",   "divmod", "float", "format", "hash",
      "int",   "max",  "min",   "ord",   "pow",   "repr",   "round", "sorted", "str",
      "slice", "bin",  "hex",   "oct",   "complex", "frozenset", "callable", "issubclass",
      "range", "bytes", "ascii"};
  return s;
}

const std::unordered_set<std::string>& forbidden_builtins() {
  static const std::unordered_set<std::string> s = {
      "print", "input", "open", "exec", "eval", "breakpoint", "vars", "globals", "locals",
      "id", "compile", "__import__", "delattr", "dir", "help", "memoryview", "object", "set"};
  return s;
}

const std::unordered_set<std::string>& torch_side_effect_fns() {
  static const std::unordered_set<std::string> s = {
      "manual_seed", "seed", "initial_seed", "set_default_dtype", "set_default_tensor_type",
      "set_num_threads", "set_num_interop_threads", "set_printoptions", "save", "load",
      "use_deterministic_algorithms", "set_rng_state", "get_rng_state", "set_default_device",
      "set_float32_matmul_precision", "set_anomaly_enabled", "synchronize", "empty_cache",
      "set_flush_denormal", "compile", "_set_grad_enabled", "set_autocast_enabled",
      "autocast_increment_nesting", "autocast_decrement_nesting", "grad", "backward"};
  return s;
}

bool is_side_effecting_torch_fn(PyObject* fn) {
  std::string mod = attr_str(fn, "__module__");
  std::string name = attr_str(fn, "__name__");
  if (torch_side_effect_fns().count(name)) return true;
  for (const char* prefix : {"torch.cuda", "torch.distributed", "torch.random", "torch.backends",
                             "torch.autograd", "torch.profiler", "torch.utils.data", "torch.hub",
                             "torch.serialization", "torch.testing", "torch.multiprocessing"}) {
    if (mod.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

bool is_module_type(PyObject* t) {
  return PyType_Check(t) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(t),
                          reinterpret_cast<PyTypeObject*>(torch_api().module_type.get()));
}

// Items of a constant sequence or a symbolic tuple/list; false if neither.
bool as_items(const ValuePtr& v, std::vector<ValuePtr>& out) {
  if (v->is_sequence()) {
    out = v->items;
    return true;
  }
  if (v->is_const() && (PyTuple_Check(v->obj.get()) || PyList_Check(v->obj.get()))) {
    out.clear();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v->obj.get()); ++i)
      out.push_back(Value::constant(PyRef::borrow(PySequence_Fast_GET_ITEM(v->obj.get(), i))));
    return true;
  }
  return false;
}

// A constant tuple for an all-constant symbolic tuple (e.g. to compare shapes).
PyRef const_tuple(const ValuePtr& v) {
  if (v->is_const()) return v->obj;
  if (v->kind == VKind::Dict) {
    PyRef d = PyRef::steal(PyDict_New());
    for (size_t i = 0; i < v->items.size(); ++i) {
      PyRef item = const_tuple(v->items[i]);
      if (!item || PyDict_SetItem(d.get(), v->keys[i].get(), item.get()) < 0) return {};
    }
    return d;
  }
  if (!v->is_sequence()) return {};
  PyRef t = PyRef::steal(PyTuple_New(v->items.size()));
  for (size_t i = 0; i < v->items.size(); ++i) {
    PyRef item = const_tuple(v->items[i]);
    if (!item) return {};
    PyTuple_SET_ITEM(t.get(), i, item.release());
  }
  if (v->kind == VKind::List) return PyRef::steal(PySequence_List(t.get()));
  return t;
}

Py_ssize_t normalize_index(PyObject* idx, size_t size) {
  Py_ssize_t i = PyNumber_AsSsize_t(idx, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    graph_break("unsupported_value", "non-integer index into a sequence");
  }
  if (i < 0) i += static_cast<Py_ssize_t>(size);
  if (i < 0 || i >= static_cast<Py_ssize_t>(size))
    graph_break("user_exception", "sequence index out of range");
  return i;
}

int dict_find(const ValuePtr& d, PyObject* key) {
  for (size_t i = 0; i < d->keys.size(); ++i) {
    int eq = PyObject_RichCompareBool(d->keys[i].get(), key, Py_EQ);
    if (eq < 0) throw PythonError();
    if (eq) return static_cast<int>(i);
  }
  return -1;
}

bool is_partial_type(PyObject* t) {
  static PyObject* partial = [] {
    PyRef ft = PyRef::steal(PyImport_ImportModule("functools"));
    PyObject* p = ft ? PyObject_GetAttrString(ft.get(), "partial") : nullptr;
    if (!p) PyErr_Clear();
    return p;  // NOTE: kept for the process lifetime, like the functools module
  }();
  return partial && t == partial;
}

// A class whose instances torchlite can model: created by object.__new__ with
// the default metaclass, defined outside torch.
bool is_plain_user_class(PyObject* f) {
  if (!PyType_Check(f) || Py_TYPE(f) != &PyType_Type) return false;
  auto* t = reinterpret_cast<PyTypeObject*>(f);
  if (t->tp_new != PyBaseObject_Type.tp_new || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(torch_api().module_type.get()))) return false;
  if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) return false;
  return t->tp_dictoffset != 0;
}

PyObject* operator_fn(const char* name) {
  PyObject* fn = PyObject_GetAttrString(torch_api().operator_module.get(), name);
  if (!fn) throw PythonError();
  Py_DECREF(fn);  // NOTE: the operator module keeps it alive
  return fn;
}

}  // namespace

// ---------------------------------------------------------------- truth, iteration

bool Tracer::truth(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Const: {
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) graph_break("user_exception", "truth test raised: " + error_text());
      return r;
    }
    case VKind::Tensor:
      graph_break("data_dependent_branch",
                  "branching on a tensor's value (if/while/and/or/not on a Tensor) depends on "
                  "data that is unknown while tracing");
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict: return !v->items.empty();
    case VKind::Module: {
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) throw PythonError();
      return r;
    }
    case VKind::Object: {
      PyTypeObject* t = Py_TYPE(v->obj.get());
      if ((t->tp_as_number && t->tp_as_number->nb_bool) ||
          (t->tp_as_mapping && t->tp_as_mapping->mp_length) ||
          (t->tp_as_sequence && t->tp_as_sequence->sq_length))
        graph_break("unsupported_value", std::string("truth value of a ") + t->tp_name);
      return true;
    }
    default: return true;
  }
}

std::vector<ValuePtr> Tracer::iterate(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tuple:
    case VKind::List: return v->items;
    case VKind::Dict: {
      std::vector<ValuePtr> keys;
      for (auto& k : v->keys) keys.push_back(Value::constant(k));
      return keys;
    }
    case VKind::Iterator: {
      std::vector<ValuePtr> rest(v->items.begin() + v->pos, v->items.end());
      v->pos = v->items.size();
      return rest;
    }
    case VKind::Tensor: {
      ValuePtr parts = ctx_.call_op(nullptr, "unbind", {v}, {});
      return parts->items;
    }
    case VKind::Const: {
      PyObject* o = v->obj.get();
      if (!(PyTuple_Check(o) || PyList_Check(o) || PyRange_Check(o) || PyUnicode_Check(o) ||
            PyDict_Check(o) || PyFrozenSet_Check(o) || PyAnySet_Check(o) ||
            Py_TYPE(o) == &PyDictKeys_Type || Py_TYPE(o) == &PyDictValues_Type ||
            Py_TYPE(o) == &PyDictItems_Type))
        graph_break("unsupported_value", std::string("iteration over ") + Py_TYPE(o)->tp_name);
      PyRef list = PyRef::steal(PySequence_List(o));
      if (!list) throw PythonError();
      std::vector<ValuePtr> out;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i)
        out.push_back(ctx_.from_result(PyList_GET_ITEM(list.get(), i)));
      return out;
    }
    case VKind::Module: {
      PyObject* m = v->obj.get();
      PyRef modules = PyRef::steal(PyObject_GetAttrString(m, "_modules"));
      if (!modules) throw PythonError();
      if (v->source) ctx_.guards().add_dict_version(ir::Source::attr(v->source, "_modules"), modules.get());
      PyRef list = PyRef::steal(PySequence_List(m));
      if (!list) graph_break("unsupported_value", "iteration over module raised: " + error_text());
      std::vector<ValuePtr> out;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i) {
        PyObject* item = PyList_GET_ITEM(list.get(), i);
        ir::SourcePtr src;
        PyObject *k, *val;
        Py_ssize_t pos = 0;
        while (v->source && PyDict_Next(modules.get(), &pos, &k, &val)) {
          if (val == item) {
            src = ir::Source::item(ir::Source::attr(v->source, "_modules"), PyRef::borrow(k));
            break;
          }
        }
        out.push_back(ctx_.wrap(item, src, src != nullptr));
      }
      return out;
    }
    default:
      graph_break("unsupported_value", "iteration over a " + v->type_name());
  }
}

// ---------------------------------------------------------------- operators

ValuePtr Tracer::binary_op(PyObject* op, const ValuePtr& a, const ValuePtr& b) {
  if (a->is_tensor() || b->is_tensor()) {
    if (!(a->is_tensor() || a->is_const() || a->is_sequence()) ||
        !(b->is_tensor() || b->is_const() || b->is_sequence()))
      graph_break("unsupported_value", "operator on a tensor and a " +
                                           (a->is_tensor() ? b : a)->type_name());
    return ctx_.call_op(op, "", {a, b}, {});
  }
  if (a->is_const() && b->is_const()) return call_pure(ctx_, op, {a, b}, {});
  std::string name = attr_str(op, "__name__");
  std::vector<ValuePtr> ia, ib;
  if ((name == "add" || name == "iadd") && as_items(a, ia) && as_items(b, ib)) {
    if (name == "iadd" && a->kind == VKind::List) {
      a->items.insert(a->items.end(), ib.begin(), ib.end());
      mark_mutated(a);
      return a;
    }
    ia.insert(ia.end(), ib.begin(), ib.end());
    bool list = a->kind == VKind::List || (a->is_const() && PyList_Check(a->obj.get()));
    return list ? Value::list(std::move(ia)) : Value::tuple(std::move(ia));
  }
  if ((name == "mul" || name == "imul") && b->is_const() && PyLong_Check(b->obj.get()) &&
      as_items(a, ia)) {
    long n = PyLong_AsLong(b->obj.get());
    std::vector<ValuePtr> out;
    for (long i = 0; i < n; ++i) out.insert(out.end(), ia.begin(), ia.end());
    return a->kind == VKind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
  }
  PyRef ca = const_tuple(a), cb = const_tuple(b);
  if (ca && cb) return call_pure(ctx_, op, {Value::constant(ca), Value::constant(cb)}, {});
  graph_break("unsupported_value", "operator " + name + " on " + a->type_name() + " and " +
                                       b->type_name());
}

ValuePtr Tracer::unary_op(PyObject* op, const ValuePtr& a) {
  if (a->is_tensor()) return ctx_.call_op(op, "", {a}, {});
  if (a->is_const()) return call_pure(ctx_, op, {a}, {});
  graph_break("unsupported_value", "unary operator on a " + a->type_name());
}

ValuePtr Tracer::compare(int op, const ValuePtr& a, const ValuePtr& b) {
  static const char* names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  TL_CHECK(op >= 0 && op < 6) << "bad comparison " << op;
  PyObject* fn = operator_fn(names[op]);
  if (a->is_tensor() || b->is_tensor()) {
    bool a_plain = a->is_tensor() || a->is_const(), b_plain = b->is_tensor() || b->is_const();
    if ((op == 2 || op == 3) && (!a_plain || !b_plain)) {
      // Tensor == module/object: Python falls back to identity.
      return const_bool(op == 3);
    }
    return ctx_.call_op(fn, "", {a, b}, {});
  }
  PyRef ca = const_tuple(a), cb = const_tuple(b);
  if (ca && cb) return call_pure(ctx_, fn, {Value::constant(ca), Value::constant(cb)}, {});
  if ((op == 2 || op == 3) && (a->kind == VKind::Module || a->kind == VKind::Object) &&
      (b->kind == VKind::Module || b->kind == VKind::Object || b->is_const())) {
    bool same = a->obj.get() == b->obj.get();
    if (a->kind == VKind::Object && Py_TYPE(a->obj.get())->tp_richcompare != PyBaseObject_Type.tp_richcompare)
      graph_break("unsupported_value", "== on objects with a custom __eq__");
    return const_bool(op == 2 ? same : !same);
  }
  graph_break("unsupported_value", std::string("comparison ") + names[op] + " of " +
                                       a->type_name() + " and " + b->type_name());
}

ValuePtr Tracer::subscript(const ValuePtr& c, const ValuePtr& idx) {
  switch (c->kind) {
    case VKind::Tensor: return ctx_.call_op(torch_api().operator_getitem.get(), "", {c, idx}, {});
    case VKind::Tuple:
    case VKind::List: {
      if (!idx->is_const()) graph_break("unsupported_value", "index of a sequence must be a constant");
      if (PySlice_Check(idx->obj.get())) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_GetIndicesEx(idx->obj.get(), c->items.size(), &start, &stop, &step, &len) < 0)
          throw PythonError();
        std::vector<ValuePtr> out;
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step) out.push_back(c->items[j]);
        return c->kind == VKind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
      }
      return c->items[normalize_index(idx->obj.get(), c->items.size())];
    }
    case VKind::Dict: {
      if (!idx->is_const()) graph_break("unsupported_value", "dict key must be a constant");
      int i = dict_find(c, idx->obj.get());
      if (i < 0) graph_break("user_exception", "KeyError: " + ir::const_repr(idx->obj.get()));
      return c->items[i];
    }
    case VKind::Const: {
      PyRef key = idx->is_const() ? idx->obj : const_tuple(idx);
      if (!key) graph_break("unsupported_value", "indexing a constant with a traced value");
      PyRef r = PyRef::steal(PyObject_GetItem(c->obj.get(), key.get()));
      if (!r) graph_break("user_exception", "indexing raised: " + error_text());
      if (c->source && (PyLong_Check(key.get()) || PyUnicode_Check(key.get())))
        return ctx_.wrap(r.get(), ir::Source::item(c->source, key), false);
      return ctx_.from_result(r.get());
    }
    case VKind::Module: {
      if (!idx->is_const()) graph_break("unsupported_value", "module index must be a constant");
      PyRef r = PyRef::steal(PyObject_GetItem(c->obj.get(), idx->obj.get()));
      if (!r) graph_break("user_exception", "module indexing raised: " + error_text());
      ir::SourcePtr src;
      if (c->source && (PyLong_Check(idx->obj.get()) || PyUnicode_Check(idx->obj.get())))
        src = ir::Source::item(c->source, idx->obj);
      if (c->source && !src)
        graph_break("unsupported_value", "slicing a module container (nn.Sequential[a:b])");
      return ctx_.wrap(r.get(), src);
    }
    default:
      graph_break("unsupported_value", "indexing a " + c->type_name());
  }
}

void Tracer::store_subscript(const ValuePtr& c, const ValuePtr& idx, const ValuePtr& v) {
  if (c->is_tensor()) {
    ctx_.call_op(operator_fn("setitem"), "", {c, idx, v}, {});
    return;
  }
  if (!idx->is_const()) graph_break("unsupported_value", "index must be a constant");
  if (c->kind == VKind::List) {
    if (PySlice_Check(idx->obj.get()))
      graph_break("unsupported_side_effect", "slice assignment to a list");
    c->items[normalize_index(idx->obj.get(), c->items.size())] = v;
    mark_mutated(c);
    return;
  }
  if (c->kind == VKind::Dict) {
    int i = dict_find(c, idx->obj.get());
    if (i >= 0) {
      c->items[i] = v;
    } else {
      c->keys.push_back(idx->obj);
      c->items.push_back(v);
    }
    mark_mutated(c);
    return;
  }
  graph_break("unsupported_side_effect", "item assignment on a " + c->type_name());
}

// ---------------------------------------------------------------- attributes

void Tracer::store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& v) {
  if ((obj->kind == VKind::Module || obj->kind == VKind::Object) && obj->source) {
    if (obj->kind == VKind::Module && (v->is_tensor() || v->kind == VKind::Module))
      graph_break("unsupported_side_effect",
                  "assigning a tensor or module attribute (self." + name + " = ...) in traced code");
    ctx_.attr_overlay[{obj->obj.get(), name}] = v;
    ctx_.keep_alive.push_back(obj->obj);
    ctx_.effects.push_back({ir::SideEffect::Kind::SetAttr, obj->source, name, v});
    return;
  }
  if (obj->kind == VKind::Object && obj->flag) {
    ctx_.attr_overlay[{obj->obj.get(), name}] = v;
    return;
  }
  graph_break("unsupported_side_effect", "attribute assignment on a " + obj->type_name());
}

ValuePtr Tracer::get_attr(const ValuePtr& obj, const std::string& name) {
  auto r = try_get_attr(obj, name);
  if (!r)
    graph_break("user_exception", "'" + obj->type_name() + "' object has no attribute '" + name + "'");
  return *r;
}

std::optional<ValuePtr> Tracer::try_get_attr(const ValuePtr& obj, const std::string& name,
                                             bool generic) {
  const TorchApi& api = torch_api();
  switch (obj->kind) {
    case VKind::Super: return super_attr(obj, name);
    case VKind::Tensor: {
      PyObject* meta = obj->meta.get();
      if (name == "device") return Value::constant(obj->device);
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
        return ctx_.call_op(api.builtin_getattr.get(), "",
                            {obj, Value::constant(PyRef::steal(PyUnicode_FromString(name.c_str())))},
                            {});
      }
      {
        PyRef probe = PyRef::steal(PyObject_GetAttrString(meta, name.c_str()));
        if (!probe) {
          PyErr_Clear();
          return std::nullopt;
        }
      }
      if (name == "grad" || name == "grad_fn" || name == "is_leaf" || name == "_version" ||
          name == "names" || name == "_base" || name == "itemsize" || name == "nbytes") {
        if (name == "itemsize" || name == "nbytes") break;
        graph_break("unsupported_value", "Tensor." + name + " is not captured");
      }
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
      PyObject** dictptr = _PyObject_GetDictPtr(o);
      if (dictptr && *dictptr) {
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
      PyRef r = PyRef::steal(PyObject_GetAttrString(o, name.c_str()));
      if (!r) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
          graph_break("user_exception", "attribute read raised: " + error_text());
        PyErr_Clear();
        return std::nullopt;
      }
      bool guard = !(PyModule_Check(o) || PyType_Check(o));
      // A bound method is made anew on every read: derived from its guarded
      // owner, it needs no source (an ID_MATCH on it would always fail).
      PyObject* ro = r.get();
      bool bound = PyMethod_Check(ro) ||
                   (PyCFunction_Check(ro) && PyCFunction_GET_SELF(ro) && !PyModule_Check(PyCFunction_GET_SELF(ro)));
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
    default: break;
  }
  if (obj->kind == VKind::Tensor || obj->is_sequence() || obj->kind == VKind::Dict) {
    ValuePtr m = Value::of_kind(VKind::Method);
    m->self = obj;
    m->method_name = name;
    return m;
  }
  graph_break("unsupported_value", "attribute '" + name + "' of a " + obj->type_name());
}

// ---------------------------------------------------------------- calls

ValuePtr Tracer::call(const ValuePtr& fn, std::vector<ValuePtr> args, KwArgs kwargs) {
  if (!fn) graph_break("unsupported_bytecode", "call of NULL");
  const TorchApi& api = torch_api();
  switch (fn->kind) {
    case VKind::Method:
      if (fn->flag) return call_base_slot(fn->self, fn->method_name, args);
      if (!fn->method_name.empty()) return call_method_on(fn->self, fn->method_name, args, kwargs);
      args.insert(args.begin(), fn->self);
      if (PyFunction_Check(fn->obj.get()))
        return inline_function(fn->obj.get(), nullptr, nullptr, std::move(args), kwargs);
      return call(Value::constant(fn->obj), std::move(args), std::move(kwargs));
    case VKind::Function:
      return inline_function(nullptr, nullptr, fn, std::move(args), kwargs);
    case VKind::Module: return call_module(fn, std::move(args), std::move(kwargs));
    case VKind::Object: {
      PyRef call_name = PyRef::steal(PyUnicode_FromString("__call__"));
      PyObject* impl = _PyType_Lookup(Py_TYPE(fn->obj.get()), call_name.get());
      if (!impl || !PyFunction_Check(impl))
        graph_break("unsupported_callable", "calling a " + fn->type_name());
      args.insert(args.begin(), fn);
      return inline_function(impl, nullptr, nullptr, std::move(args), kwargs);
    }
    case VKind::GradModeExit:
      ctx_.set_grad_mode(fn->flag);
      return none();
    case VKind::Partial: {
      std::vector<ValuePtr> all = fn->items;
      all.insert(all.end(), args.begin(), args.end());
      KwArgs kw;
      for (size_t i = 0; i < fn->keys.size(); ++i) kw.emplace_back(utf8(fn->keys[i].get()), fn->kwdefaults[i]);
      for (auto& [k, v] : kwargs) {
        bool replaced = false;
        for (auto& [k2, v2] : kw)
          if (k2 == k) {
            v2 = v;
            replaced = true;
          }
        if (!replaced) kw.emplace_back(k, v);
      }
      return call(fn->self, std::move(all), std::move(kw));
    }
    case VKind::Const: break;
    default:
      graph_break("unsupported_callable", "calling a " + fn->type_name());
  }
  PyObject* f = fn->obj.get();
  if (f == api.is_grad_enabled_fn.get()) return const_bool(ctx_.grad_enabled());
  if (f == api.no_grad_cls.get() || f == api.enable_grad_cls.get()) {
    if (!args.empty() || !kwargs.empty())
      graph_break("unsupported_callable", "no_grad/enable_grad with arguments");
    ValuePtr g = Value::of_kind(VKind::GradMode);
    g->flag = f == api.enable_grad_cls.get();
    return g;
  }
  if (f == api.set_grad_enabled_cls.get()) {
    ValuePtr mode = !args.empty() ? args[0] : (!kwargs.empty() ? kwargs[0].second : nullptr);
    if (!mode || !mode->is_const()) graph_break("unsupported_value", "set_grad_enabled(<traced value>)");
    ValuePtr g = Value::of_kind(VKind::GradMode);
    g->flag = PyObject_IsTrue(mode->obj.get());
    g->restore = ctx_.grad_enabled() ? 1 : 0;
    ctx_.set_grad_mode(g->flag);
    return g;
  }
  std::string qual = callable_desc(f);
  if (qual == "torch.compiler.is_compiling" || qual == "torch._dynamo.external_utils.is_compiling" ||
      qual == "torch._utils.is_compiling" || qual == "torch._dynamo.is_compiling")
    return const_bool(true);
  if (is_partial_type(reinterpret_cast<PyObject*>(Py_TYPE(f)))) return call(wrap_partial(fn), std::move(args), std::move(kwargs));
  if (is_partial_type(f)) {
    if (args.empty()) graph_break("user_exception", "partial() needs a callable");
    ValuePtr p = Value::of_kind(VKind::Partial);
    p->self = args[0];
    p->items.assign(args.begin() + 1, args.end());
    for (auto& [k, v] : kwargs) {
      p->keys.push_back(PyRef::steal(PyUnicode_FromString(k.c_str())));
      p->kwdefaults.push_back(v);
    }
    return p;
  }
  if (PyType_Check(f)) {
    if (is_module_type(f))
      graph_break("unsupported_callable", "constructing an nn.Module (" + qual + ") in traced code");
    if (f == api.size_type.get() || f == api.device_type.get() ||
        f == reinterpret_cast<PyObject*>(&PyRange_Type) ||
        f == reinterpret_cast<PyObject*>(&PySlice_Type)) {
      if (all_const(args, kwargs)) return call_pure(ctx_, f, args, kwargs);
      if (f == api.size_type.get() && args.size() == 1) {
        PyRef t = const_tuple(args[0]);
        if (t) return call_pure(ctx_, f, {Value::constant(t)}, {});
      }
    }
  }
  if (PyType_Check(f) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(f), &PyTuple_Type) &&
      PyObject_HasAttrString(f, "_fields") && PyObject_HasAttrString(f, "_make"))
    return make_namedtuple(f, args, kwargs);
  if (is_plain_user_class(f)) return construct_object(f, std::move(args), std::move(kwargs));
  if (is_torch_function(f)) {
    if (is_side_effecting_torch_fn(f))
      graph_break("unsupported_callable", "call to " + qual + ", which has effects torchlite does not capture");
    return ctx_.call_op(f, "", args, kwargs);
  }
  if (PyFunction_Check(f)) return inline_function(f, fn->source, nullptr, std::move(args), kwargs);
  if (PyMethod_Check(f)) {
    PyObject* self = PyMethod_GET_SELF(f);
    ir::SourcePtr self_src = fn->source ? ir::Source::attr(fn->source, "__self__") : nullptr;
    args.insert(args.begin(), ctx_.wrap(self, self_src));
    return call(Value::constant(PyRef::borrow(PyMethod_GET_FUNCTION(f))), std::move(args),
                std::move(kwargs));
  }
  bool handled = false;
  ValuePtr r = call_builtin(f, args, kwargs, handled);
  if (handled) return r;
  graph_break("unsupported_callable",
              "call to " + qual + " (" + Py_TYPE(f)->tp_name +
                  "), which torchlite cannot trace; it runs eagerly");
}

ValuePtr Tracer::wrap_partial(const ValuePtr& fn) {
  PyObject* p = fn->obj.get();
  auto part = [&](const char* name) {
    PyRef v = PyRef::steal(PyObject_GetAttrString(p, name));
    if (!v) throw PythonError();
    return ctx_.wrap(v.get(), fn->source ? ir::Source::attr(fn->source, name) : nullptr);
  };
  ValuePtr out = Value::of_kind(VKind::Partial);
  out->self = part("func");
  ValuePtr args = part("args");
  out->items = iterate(args);
  ValuePtr kw = part("keywords");
  if (kw->kind == VKind::Dict) {
    out->keys = kw->keys;
    out->kwdefaults = kw->items;
  } else if (kw->is_const() && PyDict_Check(kw->obj.get()) && PyDict_Size(kw->obj.get()) == 0) {
  } else {
    graph_break("unsupported_value", "functools.partial keywords");
  }
  return out;
}

ValuePtr Tracer::make_namedtuple(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  PyRef fields = PyRef::steal(PyObject_GetAttrString(cls, "_fields"));
  if (!fields || !PyTuple_Check(fields.get())) throw PythonError();
  PyRef defaults = PyRef::steal(PyObject_GetAttrString(cls, "_field_defaults"));
  if (!defaults) PyErr_Clear();
  Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  std::vector<ValuePtr> items(n);
  if (static_cast<Py_ssize_t>(args.size()) > n) graph_break("user_exception", "too many fields for namedtuple");
  for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
  for (auto& [k, v] : kwargs) {
    bool found = false;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (utf8(PyTuple_GET_ITEM(fields.get(), i)) == k) {
        items[i] = v;
        found = true;
      }
    if (!found) graph_break("user_exception", "namedtuple got an unexpected field '" + k + "'");
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (items[i]) continue;
    PyObject* d = defaults ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields.get(), i)) : nullptr;
    if (!d) graph_break("user_exception", "namedtuple missing field " + utf8(PyTuple_GET_ITEM(fields.get(), i)));
    items[i] = ctx_.from_result(d);
  }
  ValuePtr t = Value::tuple(std::move(items));
  t->named_type = PyRef::borrow(cls);
  return t;
}

ValuePtr Tracer::construct_object(PyObject* cls, std::vector<ValuePtr> args, KwArgs kwargs) {
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef inst = PyRef::steal(PyBaseObject_Type.tp_new(reinterpret_cast<PyTypeObject*>(cls), empty.get(), nullptr));
  if (!inst) throw PythonError();
  ValuePtr obj = Value::of_kind(VKind::Object);
  obj->obj = inst;
  obj->flag = true;  // created by traced code: attribute writes stay symbolic
  ctx_.keep_alive.push_back(inst);
  PyRef init_name = PyRef::steal(PyUnicode_FromString("__init__"));
  PyObject* init = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), init_name.get());
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    inline_function(init, nullptr, nullptr, std::move(args), kwargs);
  } else if (init && init != _PyType_Lookup(&PyBaseObject_Type, init_name.get())) {
    graph_break("unsupported_callable", std::string("constructing ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name);
  } else if (!args.empty() || !kwargs.empty()) {
    graph_break("user_exception", "object() takes no arguments");
  }
  return obj;
}

ValuePtr Tracer::call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs) {
  PyObject* m = module->obj.get();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(m));
  for (const char* hooks : {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                            "_backward_pre_hooks"}) {
    PyRef d = PyRef::steal(PyObject_GetAttrString(m, hooks));
    if (!d) {
      PyErr_Clear();
      continue;
    }
    Py_ssize_t n = PyObject_Length(d.get());
    if (n < 0) throw PythonError();
    if (n > 0) graph_break("unsupported_callable", std::string("module with ") + hooks + " registered");
    if (module->source && (hooks[1] == 'f'))
      ctx_.guards().add_length_match(ir::Source::attr(module->source, hooks), 0);
  }
  PyRef mod_module = PyRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
  if (!mod_module) throw PythonError();
  for (const char* g : {"_global_forward_hooks", "_global_forward_pre_hooks",
                        "_global_backward_hooks", "_global_backward_pre_hooks"}) {
    PyRef d = PyRef::steal(PyObject_GetAttrString(mod_module.get(), g));
    if (d && PyObject_Length(d.get()) > 0) graph_break("unsupported_callable", "global module hooks registered");
    PyErr_Clear();
  }
  PyRef call_name = PyRef::steal(PyUnicode_FromString("__call__"));
  PyObject* call_impl = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), call_name.get());
  if (call_impl != torch_api().module_call.get()) {
    if (call_impl && PyFunction_Check(call_impl)) {
      args.insert(args.begin(), module);
      return inline_function(call_impl, nullptr, nullptr, std::move(args), kwargs);
    }
    graph_break("unsupported_callable", "module with a custom __call__");
  }
  ValuePtr forward = get_attr(module, "forward");
  return call(forward, std::move(args), std::move(kwargs));
}

ValuePtr Tracer::inline_function(PyObject* func, ir::SourcePtr func_src, const ValuePtr& made,
                                 std::vector<ValuePtr> args, const KwArgs& kwargs) {
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(func ? PyFunction_GET_CODE(func) : made->obj.get());
  PyObject* globals = func ? PyFunction_GET_GLOBALS(func) : globals_;
  int argcount = code->co_argcount, posonly = code->co_posonlyargcount,
      kwonly = code->co_kwonlyargcount;
  bool varargs = code->co_flags & CO_VARARGS, varkw = code->co_flags & CO_VARKEYWORDS;
  std::string fname = utf8(code->co_name);
  std::vector<ValuePtr> locals(code->co_nlocalsplus);
  auto param_name = [&](int i) { return utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)); };

  std::vector<ValuePtr> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < argcount) locals[i] = args[i];
    else extra.push_back(args[i]);
  }
  if (!extra.empty() && !varargs)
    graph_break("user_exception", fname + "() got too many positional arguments");
  ValuePtr kwdict = Value::of_kind(VKind::Dict);
  for (auto& [k, v] : kwargs) {
    int found = -1;
    for (int i = posonly; i < argcount + kwonly; ++i)
      if (param_name(i) == k) found = i;
    if (found >= 0) {
      if (locals[found]) graph_break("user_exception", fname + "() got multiple values for '" + k + "'");
      locals[found] = v;
    } else if (varkw) {
      kwdict->keys.push_back(PyRef::steal(PyUnicode_FromString(k.c_str())));
      kwdict->items.push_back(v);
    } else {
      graph_break("user_exception", fname + "() got an unexpected keyword argument '" + k + "'");
    }
  }
  // Defaults.
  std::vector<ValuePtr> defaults;
  if (func) {
    PyObject* d = PyFunction_GET_DEFAULTS(func);
    if (d) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d); ++i)
        defaults.push_back(ctx_.wrap(PyTuple_GET_ITEM(d, i),
                                     ir::Source::item(ir::Source::held(PyRef::borrow(d), "defaults of " + fname),
                                                      PyRef::steal(PyLong_FromSsize_t(i))),
                                     false));
    }
  } else {
    defaults = made->items;
  }
  int first_default = argcount - static_cast<int>(defaults.size());
  for (int i = 0; i < argcount; ++i) {
    if (locals[i]) continue;
    if (i >= first_default) locals[i] = defaults[i - first_default];
    else graph_break("user_exception", fname + "() missing required argument '" + param_name(i) + "'");
  }
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (locals[i]) continue;
    std::string n = param_name(i);
    bool filled = false;
    if (func) {
      PyObject* kwd = PyFunction_GET_KW_DEFAULTS(func);
      PyObject* v = kwd ? PyDict_GetItemString(kwd, n.c_str()) : nullptr;
      if (v) {
        locals[i] = ctx_.wrap(v, ir::Source::item(ir::Source::held(PyRef::borrow(kwd), "kwdefaults of " + fname),
                                                  PyRef::steal(PyUnicode_FromString(n.c_str()))),
                              false);
        filled = true;
      }
    } else {
      for (size_t j = 0; j < made->keys.size(); ++j)
        if (utf8(made->keys[j].get()) == n) {
          locals[i] = made->kwdefaults[j];
          filled = true;
        }
    }
    if (!filled) graph_break("user_exception", fname + "() missing keyword-only argument '" + n + "'");
  }
  int slot = argcount + kwonly;
  if (varargs) locals[slot++] = Value::tuple(std::move(extra));
  if (varkw) locals[slot++] = kwdict;

  std::vector<ValuePtr> cells;
  if (func) {
    PyObject* closure = PyFunction_GET_CLOSURE(func);
    if (closure) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(closure); ++i) {
        PyObject* cell = PyTuple_GET_ITEM(closure, i);
        PyObject* contents = PyCell_GET(cell);
        if (!contents) {
          cells.push_back(Value::cell(nullptr));
          continue;
        }
        ValuePtr cv = ctx_.wrap(contents, ir::Source::attr(ir::Source::held(PyRef::borrow(cell), "cell"), "cell_contents"));
        ValuePtr c = Value::cell(cv);
        c->source = cv->source;
        cells.push_back(c);
      }
    }
  } else {
    cells = made->cells;
  }
  (void)func_src;
  Tracer sub(ctx_, code, globals, builtins_, depth_ + 1, (code->co_flags & CO_GENERATOR) != 0);
  return sub.run(std::move(locals), std::move(cells));
}

ValuePtr Tracer::call_method_on(const ValuePtr& self, const std::string& name,
                                std::vector<ValuePtr>& args, KwArgs& kwargs) {
  if (self->is_tensor()) {
    if (name == "get_device") {
      PyRef idx = PyRef::steal(PyObject_GetAttrString(self->device.get(), "index"));
      if (!idx) throw PythonError();
      return idx.get() == Py_None ? const_int(-1) : Value::constant(idx);
    }
    if (name == "type" && args.empty() && kwargs.empty())
      graph_break("unsupported_value", "Tensor.type() without arguments");
    if (name == "__len__" || name == "__bool__")
      graph_break("data_dependent_op", "Tensor." + name);
    std::vector<ValuePtr> all{self};
    all.insert(all.end(), args.begin(), args.end());
    return ctx_.call_op(nullptr, name, all, kwargs);
  }
  if (self->kind == VKind::List) {
    if (name == "append" && args.size() == 1) {
      self->items.push_back(args[0]);
      mark_mutated(self);
      return none();
    }
    if (name == "extend" && args.size() == 1) {
      auto items = iterate(args[0]);
      self->items.insert(self->items.end(), items.begin(), items.end());
      mark_mutated(self);
      return none();
    }
    if (name == "insert" && args.size() == 2 && args[0]->is_const()) {
      Py_ssize_t i = PyLong_AsSsize_t(args[0]->obj.get());
      Py_ssize_t n = self->items.size();
      if (i < 0) i = std::max<Py_ssize_t>(0, i + n);
      i = std::min(i, n);
      self->items.insert(self->items.begin() + i, args[1]);
      mark_mutated(self);
      return none();
    }
    if (name == "pop" && args.size() <= 1) {
      if (self->items.empty()) graph_break("user_exception", "pop from empty list");
      Py_ssize_t i = args.empty() ? -1 : PyLong_AsSsize_t(args[0]->obj.get());
      i = normalize_index(PyRef::steal(PyLong_FromSsize_t(i)).get(), self->items.size());
      ValuePtr v = self->items[i];
      self->items.erase(self->items.begin() + i);
      mark_mutated(self);
      return v;
    }
    if (name == "clear") {
      self->items.clear();
      mark_mutated(self);
      return none();
    }
    if (name == "copy") return Value::list(self->items);
    if (name == "reverse") {
      std::reverse(self->items.begin(), self->items.end());
      mark_mutated(self);
      return none();
    }
  }
  if (self->kind == VKind::Dict) {
    auto key_of = [&](size_t i) {
      if (args.size() <= i || !args[i]->is_const()) graph_break("unsupported_value", "dict key must be a constant");
      return args[i]->obj.get();
    };
    if (name == "get") {
      int i = dict_find(self, key_of(0));
      if (i >= 0) return self->items[i];
      return args.size() > 1 ? args[1] : none();
    }
    if (name == "keys") {
      std::vector<ValuePtr> ks;
      for (auto& k : self->keys) ks.push_back(Value::constant(k));
      return Value::list(std::move(ks));
    }
    if (name == "values") return Value::list(self->items);
    if (name == "items") {
      std::vector<ValuePtr> out;
      for (size_t i = 0; i < self->keys.size(); ++i)
        out.push_back(Value::tuple({Value::constant(self->keys[i]), self->items[i]}));
      return Value::list(std::move(out));
    }
    if (name == "__contains__") return const_bool(dict_find(self, key_of(0)) >= 0);
    if (name == "__getitem__") return subscript(self, args.at(0));
    if (name == "pop") {
      int i = dict_find(self, key_of(0));
      if (i < 0) {
        if (args.size() > 1) return args[1];
        graph_break("user_exception", "KeyError in dict.pop");
      }
      ValuePtr v = self->items[i];
      self->keys.erase(self->keys.begin() + i);
      self->items.erase(self->items.begin() + i);
      mark_mutated(self);
      return v;
    }
    if (name == "setdefault") {
      int i = dict_find(self, key_of(0));
      if (i >= 0) return self->items[i];
      ValuePtr v = args.size() > 1 ? args[1] : none();
      self->keys.push_back(args[0]->obj);
      self->items.push_back(v);
      mark_mutated(self);
      return v;
    }
    if (name == "update") {
      std::vector<std::pair<PyRef, ValuePtr>> pairs;
      if (!args.empty()) {
        if (args[0]->kind != VKind::Dict) graph_break("unsupported_value", "dict.update with a non-dict");
        for (size_t i = 0; i < args[0]->keys.size(); ++i) pairs.emplace_back(args[0]->keys[i], args[0]->items[i]);
      }
      for (auto& [k, v] : kwargs) pairs.emplace_back(PyRef::steal(PyUnicode_FromString(k.c_str())), v);
      for (auto& [k, v] : pairs) {
        int i = dict_find(self, k.get());
        if (i >= 0) self->items[i] = v;
        else {
          self->keys.push_back(k);
          self->items.push_back(v);
        }
      }
      mark_mutated(self);
      return none();
    }
    if (name == "copy") {
      ValuePtr d = Value::of_kind(VKind::Dict);
      d->keys = self->keys;
      d->items = self->items;
      return d;
    }
  }
  if (self->is_sequence() && (name == "count" || name == "index")) {
    PyRef t = const_tuple(self);
    if (t && all_const(args, kwargs)) {
      PyRef m = PyRef::steal(PyObject_GetAttrString(t.get(), name.c_str()));
      return call_pure(ctx_, m.get(), args, kwargs);
    }
  }
  if (self->kind == VKind::Module || self->kind == VKind::Object) {
    // A C-level method of a traced object (e.g. dict methods of a subclass).
    graph_break("unsupported_callable", "method " + name + " of " + self->type_name());
  }
  graph_break("unsupported_callable", self->type_name() + "." + name + "()");
}

ValuePtr Tracer::call_builtin(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs,
                              bool& handled) {
  handled = true;
  const TorchApi& api = torch_api();
  bool is_builtin_fn = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == api.builtins.get();
  bool is_builtin_type = PyType_Check(fn) && attr_str(fn, "__module__") == "builtins";
  std::string name = attr_str(fn, "__name__");
  if (is_builtin_fn || is_builtin_type) {
    if (forbidden_builtins().count(name))
      graph_break("unsupported_builtin", "call to builtin " + name + "()");
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
      if (v->is_sequence() || v->kind == VKind::Dict) return const_int(v->items.size());
      if (v->kind == VKind::Iterator) return const_int(v->items.size() - v->pos);
      if (v->is_tensor()) {
        PyRef shape = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "shape"));
        if (!shape || PyTuple_GET_SIZE(shape.get()) == 0)
          graph_break("user_exception", "len() of a 0-d tensor");
        return Value::constant(PyRef::borrow(PyTuple_GET_ITEM(shape.get(), 0)));
      }
      if (v->is_const() || v->kind == VKind::Module) {
        Py_ssize_t n = PyObject_Length(v->obj.get());
        if (n < 0) graph_break("user_exception", "len() raised: " + error_text());
        return const_int(n);
      }
    }
    PyRef cls_ref = args.size() == 2 ? const_tuple(args[1]) : PyRef();
    if (name == "isinstance" && cls_ref) {
      const ValuePtr& v = args[0];
      PyObject* cls = cls_ref.get();
      PyObject* type = nullptr;
      switch (v->kind) {
        case VKind::Tensor: type = v->obj.get(); break;
        case VKind::Tuple: type = v->named_type ? v->named_type.get() : reinterpret_cast<PyObject*>(&PyTuple_Type); break;
        case VKind::List: type = reinterpret_cast<PyObject*>(&PyList_Type); break;
        case VKind::Dict: type = reinterpret_cast<PyObject*>(&PyDict_Type); break;
        case VKind::Function: type = reinterpret_cast<PyObject*>(&PyFunction_Type); break;
        case VKind::Const:
        case VKind::Module:
        case VKind::Object: type = reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())); break;
        default: graph_break("unsupported_value", "isinstance() of a " + v->type_name());
      }
      int r = PyObject_IsSubclass(type, cls);
      if (r < 0) graph_break("user_exception", "isinstance() raised: " + error_text());
      return const_bool(r);
    }
    if (name == "type" && args.size() == 1) {
      const ValuePtr& v = args[0];
      if (v->is_tensor()) return Value::constant(v->obj);
      if (v->kind == VKind::List) return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(&PyList_Type)));
      if (v->kind == VKind::Dict) return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)));
      if (v->kind == VKind::Tuple)
        return Value::constant(v->named_type ? v->named_type : PyRef::borrow(reinterpret_cast<PyObject*>(&PyTuple_Type)));
      if (v->obj) return Value::constant(PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()))));
    }
    if ((name == "getattr" || name == "hasattr") && args.size() >= 2 && args[1]->is_const() &&
        PyUnicode_Check(args[1]->obj.get())) {
      auto r = try_get_attr(args[0], utf8(args[1]->obj.get()));
      if (name == "hasattr") return const_bool(r.has_value());
      if (r) return *r;
      if (args.size() == 3) return args[2];
      graph_break("user_exception", "getattr(): no attribute " + utf8(args[1]->obj.get()));
    }
    if (name == "setattr" && args.size() == 3 && args[1]->is_const()) {
      store_attr(args[0], utf8(args[1]->obj.get()), args[2]);
      return none();
    }
    if (name == "enumerate" && !args.empty()) {
      long long start = 0;
      ValuePtr s = args.size() > 1 ? args[1] : (!kwargs.empty() ? kwargs[0].second : nullptr);
      if (s) {
        if (!s->is_const()) graph_break("unsupported_value", "enumerate start");
        start = PyLong_AsLongLong(s->obj.get());
      }
      ValuePtr it = Value::of_kind(VKind::Iterator);
      for (auto& item : iterate(args[0])) it->items.push_back(Value::tuple({const_int(start++), item}));
      return it;
    }
    if (name == "zip") {
      std::vector<std::vector<ValuePtr>> seqs;
      size_t n = SIZE_MAX;
      for (auto& a : args) {
        seqs.push_back(iterate(a));
        n = std::min(n, seqs.back().size());
      }
      ValuePtr it = Value::of_kind(VKind::Iterator);
      if (seqs.empty()) n = 0;
      for (size_t i = 0; i < n; ++i) {
        std::vector<ValuePtr> t;
        for (auto& s : seqs) t.push_back(s[i]);
        it->items.push_back(Value::tuple(std::move(t)));
      }
      return it;
    }
    if (name == "reversed" && args.size() == 1) {
      ValuePtr it = Value::of_kind(VKind::Iterator);
      it->items = iterate(args[0]);
      std::reverse(it->items.begin(), it->items.end());
      return it;
    }
    if (name == "iter" && args.size() == 1) {
      if (args[0]->kind == VKind::Iterator) return args[0];
      ValuePtr it = Value::of_kind(VKind::Iterator);
      it->items = iterate(args[0]);
      return it;
    }
    if (name == "next" && !args.empty() && args[0]->kind == VKind::Iterator) {
      ValuePtr it = args[0];
      if (it->pos < it->items.size()) return it->items[it->pos++];
      if (args.size() > 1) return args[1];
      graph_break("user_exception", "StopIteration from next()");
    }
    if ((name == "list" || name == "tuple") && args.size() <= 1 && kwargs.empty()) {
      std::vector<ValuePtr> items = args.empty() ? std::vector<ValuePtr>{} : iterate(args[0]);
      return name == "list" ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (name == "dict") {
      ValuePtr d = Value::of_kind(VKind::Dict);
      if (args.size() == 1) {
        if (args[0]->kind == VKind::Dict) {
          d->keys = args[0]->keys;
          d->items = args[0]->items;
        } else {
          for (auto& pair : iterate(args[0])) {
            auto kv = iterate(pair);
            if (kv.size() != 2 || !kv[0]->is_const()) graph_break("unsupported_value", "dict() from pairs");
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
      std::vector<std::vector<ValuePtr>> seqs;
      size_t n = SIZE_MAX;
      for (size_t i = 1; i < args.size(); ++i) {
        seqs.push_back(iterate(args[i]));
        n = std::min(n, seqs.back().size());
      }
      ValuePtr it = Value::of_kind(VKind::Iterator);
      for (size_t i = 0; i < n; ++i) {
        std::vector<ValuePtr> a;
        for (auto& s : seqs) a.push_back(s[i]);
        it->items.push_back(call(args[0], std::move(a), {}));
      }
      return it;
    }
    if (name == "sum" && !args.empty()) {
      ValuePtr acc = args.size() > 1 ? args[1] : const_int(0);
      for (auto& item : iterate(args[0])) acc = binary_op(operator_fn("add"), acc, item);
      return acc;
    }
    if ((name == "all" || name == "any") && args.size() == 1) {
      bool all = name == "all";
      for (auto& item : iterate(args[0])) {
        bool t = truth(item);
        if (all && !t) return const_bool(false);
        if (!all && t) return const_bool(true);
      }
      return const_bool(all);
    }
    if (name == "abs" && args.size() == 1 && args[0]->is_tensor())
      return unary_op(operator_fn("abs"), args[0]);
    if ((name == "int" || name == "float" || name == "bool" || name == "complex") && args.size() == 1 &&
        args[0]->is_tensor())
      graph_break("data_dependent_op", name + "() of a tensor needs its value");
    if (name == "sorted" && args.size() == 1 && !args[0]->is_const()) {
      std::vector<ValuePtr> items = iterate(args[0]);
      PyRef t = const_tuple(Value::tuple(items));
      if (!t) graph_break("unsupported_value", "sorted() of traced values");
      return call_pure(ctx_, fn, {Value::constant(t)}, kwargs);
    }
    if ((name == "min" || name == "max") && !all_const(args, kwargs)) {
      std::vector<ValuePtr> items = args.size() == 1 ? iterate(args[0]) : args;
      if (all_const(items, {})) {
        PyRef t = const_tuple(Value::tuple(items));
        return call_pure(ctx_, fn, {Value::constant(t)}, kwargs);
      }
      graph_break("unsupported_value", name + "() over tensors (use torch.minimum/maximum)");
    }
    if (pure_builtins().count(name) || is_builtin_type) {
      if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
      if (name == "str" || name == "repr")
        graph_break("unsupported_value", name + "() of a " + (args.empty() ? "?" : args[0]->type_name()));
      std::vector<ValuePtr> consts;
      for (auto& a : args) {
        PyRef t = const_tuple(a);
        if (!t) graph_break("unsupported_value", name + "() of a " + a->type_name());
        consts.push_back(Value::constant(t));
      }
      return call_pure(ctx_, fn, consts, kwargs);
    }
    handled = false;
    return nullptr;
  }
  // operator.* and math.*: the same rules as the bytecode operators.
  PyObject* self = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : nullptr;
  if (self == api.operator_module.get() || (self && PyModule_Check(self) &&
                                            std::string(PyModule_GetName(self)) == "_operator")) {
    static const std::unordered_set<std::string> binary = {
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_",
        "xor", "lshift", "rshift", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod",
        "ipow", "imatmul", "iand", "ior", "ixor", "lt", "le", "eq", "ne", "gt", "ge"};
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
    if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
  }
  if (self == api.math_module.get()) {
    if (all_const(args, kwargs)) return call_pure(ctx_, fn, args, kwargs);
    graph_break("unsupported_value", "math." + name + "() of a traced value (use torch." + name + ")");
  }
  // Bound methods of immutable constants: "abc".upper(), (1, 2).index(2), dtype.is_floating_point.
  if (self && (PyCFunction_Check(fn) || Py_TYPE(fn) == &PyMethodDescr_Type) && is_immutable_constant(self)) {
    std::vector<ValuePtr> consts;
    for (auto& a : args) {
      PyRef c = const_tuple(a);
      if (!c) graph_break("unsupported_value", name + "() of a " + a->type_name());
      consts.push_back(Value::constant(c));
    }
    if (all_const(consts, kwargs)) return call_pure(ctx_, fn, consts, kwargs);
  }
  handled = false;
  return nullptr;
}

}  // namespace tl::capture
