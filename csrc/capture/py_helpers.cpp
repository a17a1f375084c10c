#include "capture/py_helpers.h"

#include "capture/graph_break.h"
#include "capture/torch_api.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture::detail {

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) {
    clear_expected_error();
    return "";
  }
  return c;
}

std::string attr_str(PyObject* o, const char* name) {
  PyRef v = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!v) {
    clear_expected_error();
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
  if (fatal_python_error_pending()) throw PythonError();
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
  std::string out = type ? reinterpret_cast<PyTypeObject*>(type.get())->tp_name : "error";
  if (value) {
    PyRef s = PyRef::steal(PyObject_Str(value.get()));
    if (s) out += ": " + utf8(s.get());
  }
  clear_expected_error();
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
  // NOTE: a Python function computing on a symbolic size sees only its number.
  for (const auto& a : args) ctx.specialise(a);
  for (const auto& kv : kwargs) ctx.specialise(kv.second);
  PyRef pos = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(pos.get(), i, PyRef(args[i]->obj).release());
  PyRef kw;
  if (!kwargs.empty()) {
    kw = PyRef::steal(PyDict_New());
    for (auto& [k, v] : kwargs) PyDict_SetItemString(kw.get(), k.c_str(), v->obj.get());
  }
  PyRef r = PyRef::steal(PyObject_Call(fn, pos.get(), kw.get()));
  if (!r) raise_current_error(callable_desc(fn) + " raised while tracing");
  return ctx.from_result(r.get());
}

bool is_type(PyObject* o, const PyRef& t) {
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t.get()));
}

const std::unordered_set<std::string>& pure_builtins() {
  static const std::unordered_set<std::string> s = {
      "abs",      "all",        "any",   "bool",  "chr",  "divmod", "float",   "format",
      "hash",     "int",        "max",   "min",   "ord",  "pow",    "repr",    "round",
      "sorted",   "str",        "slice", "bin",   "hex",  "oct",    "complex", "frozenset",
      "callable", "issubclass", "range", "bytes", "ascii"};
  return s;
}

const std::unordered_set<std::string>& forbidden_builtins() {
  static const std::unordered_set<std::string> s = {
      "print",   "input",   "open",   "exec",       "eval",    "breakpoint",
      "vars",    "globals", "locals", "id",         "compile", "__import__",
      "delattr", "dir",     "help",   "memoryview", "object"};
  return s;
}

const std::unordered_set<std::string>& torch_side_effect_fns() {
  static const std::unordered_set<std::string> s = {"manual_seed",
                                                    "seed",
                                                    "initial_seed",
                                                    "set_default_dtype",
                                                    "set_default_tensor_type",
                                                    "set_num_threads",
                                                    "set_num_interop_threads",
                                                    "set_printoptions",
                                                    "save",
                                                    "load",
                                                    "use_deterministic_algorithms",
                                                    "set_rng_state",
                                                    "get_rng_state",
                                                    "set_default_device",
                                                    "set_float32_matmul_precision",
                                                    "set_anomaly_enabled",
                                                    "synchronize",
                                                    "empty_cache",
                                                    "set_flush_denormal",
                                                    "compile",
                                                    "_set_grad_enabled",
                                                    "set_autocast_enabled",
                                                    "autocast_increment_nesting",
                                                    "autocast_decrement_nesting",
                                                    "grad",
                                                    "backward"};
  return s;
}

bool is_side_effecting_torch_fn(PyObject* fn) {
  std::string mod = attr_str(fn, "__module__");
  std::string name = attr_str(fn, "__name__");
  if (torch_side_effect_fns().count(name)) return true;
  // NOTE: torch's stack pushes and pops (saved-tensor hooks' __enter__/__exit__ call
  // torch._C._autograd._push_/_pop_saved_tensors_default_hooks) change thread state: run at
  // trace time they took effect once, during capture (the user's pack hooks were popped
  // before the compiled graph ran, and never called).
  if (name.rfind("_push_", 0) == 0 || name.rfind("_pop_", 0) == 0) return true;
  // Queries such as torch.backends.mha.get_fastpath_enabled() or
  // torch.cuda.is_available() only read global state: they run at trace time.
  if (name.rfind("get_", 0) == 0 || name.rfind("is_", 0) == 0) return false;
  for (const char* prefix : {"torch.cuda", "torch.distributed", "torch.random", "torch.backends",
                             "torch.autograd", "torch.profiler", "torch.utils.data", "torch.hub",
                             "torch.serialization", "torch.testing", "torch.multiprocessing"}) {
    if (mod.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

namespace {

bool inert_object(PyObject* o, int depth);

bool inert_cells(PyObject* func, int depth) {
  PyObject* cells = PyFunction_GET_CLOSURE(func);
  for (Py_ssize_t i = 0; cells && i < PyTuple_GET_SIZE(cells); ++i) {
    PyObject* c = PyCell_GET(PyTuple_GET_ITEM(cells, i));  // borrowed; null while unbound
    if (c && !inert_object(c, depth + 1)) return false;
  }
  return true;
}

bool inert_object(PyObject* o, int depth) {
  if (depth > 4) return false;
  if (PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get())) ||
      is_immutable_constant(o) || PyType_Check(o) || PyModule_Check(o) ||
      Py_TYPE(o) == &PyMethodDescr_Type || Py_TYPE(o) == &PyWrapperDescr_Type ||
      Py_TYPE(o) == &PyClassMethodDescr_Type)
    return true;
  if (PyCFunction_Check(o)) {  // a builtin (module self) or a C method bound to its object
    PyObject* self = PyCFunction_GET_SELF(o);
    return !self || PyModule_Check(self) || inert_object(self, depth + 1);
  }
  if (PyFunction_Check(o)) return is_torch_function(o) && inert_cells(o, depth);
  if (PyMethod_Check(o))
    return inert_object(PyMethod_GET_FUNCTION(o), depth + 1) &&
           inert_object(PyMethod_GET_SELF(o), depth + 1);
  if (PyTuple_CheckExact(o)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!inert_object(PyTuple_GET_ITEM(o, i), depth + 1)) return false;
    return true;
  }
  // NOTE: torch's C objects (torch.Generator, torch.finfo, enum-like singletons) are read, not
  // changed, by the Python functions that take them; any other object may be changed.
  return std::string(Py_TYPE(o)->tp_name).rfind("torch._C.", 0) == 0;
}

}  // namespace

bool inert_at_trace_time(PyObject* o) { return inert_object(o, 0); }

bool inert_closure(PyObject* func) { return inert_cells(func, 0); }

bool inert_value(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Const:
      return inert_object(v->obj.get(), 0);
    case VKind::Deque:
    case VKind::Dict:
      // NOTE: a dict handed to a torch-file function may be written by it
      // (torch.optim.lr_scheduler's _update_param_group_val sets `param_group[key]`): run at
      // trace time, that write would reach a copy once and never the caller's dict.
      return false;
    case VKind::Tuple:
    case VKind::List:
      for (auto& item : v->items)
        if (!inert_value(item)) return false;
      return true;
    default:
      return true;  // a tensor, or a value to_meta_arg refuses (a graph break)
  }
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
bool is_enum_class(PyObject* o) {
  if (!PyType_Check(o)) return false;
  // NOTE: kept for the process lifetime (the enum module is never unloaded).
  static PyObject* meta = [] {
    PyRef mod = PyRef::steal(PyImport_ImportModule("enum"));
    PyObject* m = mod ? PyObject_GetAttrString(mod.get(), "EnumMeta") : nullptr;
    if (!m) throw PythonError();
    return m;
  }();
  int r = PyObject_IsInstance(o, meta);
  if (r < 0) throw PythonError();
  return r;
}

ValuePtr printable_value(CaptureContext& ctx, const ValuePtr& v) {
  if ((v->kind != VKind::Tuple && v->kind != VKind::List) ||
      (v->named_type && v->named_type.get() != torch_api().size_type.get()))
    return v;
  PyRef t = const_tuple(v);
  if (!t) return v;
  ctx.specialise(v);
  return Value::constant(t);
}

namespace {

// A module or user object reached from the frame whose class keeps object's __hash__ and
// __eq__ (created objects have no source: a new one every call).
bool hashed_by_identity(const ValuePtr& k) {
  if ((k->kind != VKind::Object && k->kind != VKind::Module) || !k->obj || !k->source) return false;
  PyTypeObject* type = Py_TYPE(k->obj.get());
  return type->tp_hash == PyBaseObject_Type.tp_hash &&
         type->tp_richcompare == PyBaseObject_Type.tp_richcompare;
}

}  // namespace

ValuePtr key_value(CaptureContext& ctx, const ValuePtr& k) {
  if (hashed_by_identity(k)) {
    // NOTE: an object of the frame (a module, a user object keying a registry) hashes and
    // compares by identity: it is its own key, pinned by an identity guard.
    ctx.guards().add_id_match(k->source, k->obj.get());
    return Value::constant(k->obj);
  }
  if (k->is_const() || k->kind != VKind::Tuple || k->named_type) return k;
  for (const auto& item : k->items)
    if (!item->is_const() && key_value(ctx, item) == item) return k;
  PyRef t = const_tuple(k);
  if (!t) return k;
  ctx.specialise(k);
  return Value::constant(t);
}

PyRef const_tuple(const ValuePtr& v) {
  if (v->is_const()) return v->obj;
  if (v->kind == VKind::Set) return v->flag ? PyRef() : PyRef::steal(PySet_New(v->obj.get()));
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
  // NOTE: a shape stays a torch.Size (kept in a set, compared, returned as a constant).
  if (v->named_type && v->named_type.get() == torch_api().size_type.get()) {
    PyRef size = PyRef::steal(PyObject_CallOneArg(v->named_type.get(), t.get()));
    if (!size) throw PythonError();
    return size;
  }
  return t;
}

Py_ssize_t normalize_index(PyObject* idx, size_t size, const char* message) {
  Py_ssize_t i = PyNumber_AsSsize_t(idx, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) {
    clear_expected_error();
    graph_break("unsupported_operand", "non-integer index into a sequence");
  }
  if (i < 0) i += static_cast<Py_ssize_t>(size);
  if (i < 0 || i >= static_cast<Py_ssize_t>(size)) raise_user(PyExc_IndexError, message);
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

void dict_set(const ValuePtr& d, PyObject* key, const ValuePtr& v) {
  int i = dict_find(d, key);
  if (i >= 0) {
    d->items[i] = v;
    return;
  }
  d->keys.push_back(PyRef::borrow(key));
  d->items.push_back(v);
}

ValuePtr make_set(const std::vector<ValuePtr>& items) {
  ValuePtr s = Value::of_kind(VKind::Set);
  s->obj = PyRef::steal(PySet_New(nullptr));
  if (!s->obj) throw PythonError();
  for (auto& item : items) set_add(s, item);
  return s;
}

PyRef set_key(const ValuePtr& item) {
  if (PyRef c = const_tuple(item)) return c;
  // Modules and objects from the frame are members by identity (a memo set
  // as nn.Module.named_children keeps); such a set is never iterated.
  bool existing = item->kind == VKind::Module || (item->kind == VKind::Object && !item->attrs);
  if (existing && item->obj && Py_TYPE(item->obj.get())->tp_hash == PyBaseObject_Type.tp_hash)
    return item->obj;
  return {};
}

void set_add(const ValuePtr& set, const ValuePtr& item) {
  PyRef c = set_key(item);
  if (!c) graph_break("set_of_objects", "a set of " + item->type_name() + " values");
  if (!const_tuple(item)) set->flag = true;
  if (PySet_Add(set->obj.get(), c.get()) < 0)
    graph_break("user_exception", "set.add raised: " + error_text());
}

ValuePtr import_loaded(const std::string& name, const ValuePtr& fromlist, const ValuePtr& level,
                       PyObject* globals, CaptureContext& ctx) {
  if (!fromlist->is_const() || !level->is_const() || !PyLong_Check(level->obj.get()))
    graph_break("unsupported_bytecode", "import statement with traced arguments");
  long lvl = PyLong_AsLong(level->obj.get());
  std::string full = name;
  if (lvl > 0) {
    PyRef util = PyRef::steal(PyImport_ImportModule("importlib.util"));
    PyObject* package = PyDict_GetItemString(globals, "__package__");  // borrowed
    if (!util || !package || !PyUnicode_Check(package)) {
      clear_expected_error();
      graph_break("unsupported_bytecode", "relative import without a package");
    }
    PyRef rel = PyRef::steal(PyUnicode_FromString((std::string(lvl, '.') + name).c_str()));
    PyRef r =
        PyRef::steal(PyObject_CallMethod(util.get(), "resolve_name", "OO", rel.get(), package));
    if (!r) graph_break("user_exception", "relative import failed: " + error_text());
    full = utf8(r.get());
  }
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  auto loaded = [&](const std::string& n) { return PyDict_GetItemString(modules, n.c_str()); };
  PyObject* mod = loaded(full);
  if (!mod || mod == Py_None)
    graph_break("unsupported_bytecode", "import of " + full + ", which is not loaded yet");
  PyObject* fl = fromlist->obj.get();
  if (fl != Py_None && PyTuple_Check(fl)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fl); ++i) {
      std::string item = utf8(PyTuple_GET_ITEM(fl, i));
      if (item != "*" && !PyObject_HasAttrString(mod, item.c_str()) && !loaded(full + "." + item))
        graph_break("unsupported_bytecode", "import of " + full + "." + item + ", not loaded yet");
    }
  }
  PyRef n = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyRef m = PyRef::steal(PyImport_ImportModuleLevelObject(n.get(), globals, nullptr, fl, lvl));
  if (!m) graph_break("user_exception", "import failed: " + error_text());
  std::string bound = attr_str(m.get(), "__name__");
  return ctx.wrap(m.get(), ir::Source::held(m, "module " + bound));
}

bool is_partial_type(PyObject* t) {
  static PyObject* partial = [] {
    PyRef ft = PyRef::steal(PyImport_ImportModule("functools"));
    PyObject* p = ft ? PyObject_GetAttrString(ft.get(), "partial") : nullptr;
    if (!p) clear_expected_error();
    return p;  // NOTE: kept for the process lifetime, like the functools module
  }();
  return partial && t == partial;
}

// A class whose instances torchlite can model: created by object.__new__ with
// the default metaclass, defined outside torch.
bool is_plain_user_class(PyObject* f) {
  if (!PyType_Check(f)) return false;
  auto* t = reinterpret_cast<PyTypeObject*>(f);
  // A metaclass that keeps type.__call__ (abc.ABCMeta) constructs like `type`;
  // a class with abstract methods raises TypeError there, so it runs eagerly.
  if (Py_TYPE(f)->tp_call != PyType_Type.tp_call || (t->tp_flags & Py_TPFLAGS_IS_ABSTRACT))
    return false;
  // dict subclasses (OrderedDict included) are modelled with symbolic items.
  bool dict_like = PyType_IsSubtype(t, &PyDict_Type) && t->tp_new == PyDict_Type.tp_new;
  if ((t->tp_new != PyBaseObject_Type.tp_new && !dict_like) || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE))
    return false;
  if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(torch_api().module_type.get())))
    return false;
  if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) return false;
  return t->tp_dictoffset != 0;
}

PyObject* operator_fn(const char* name) {
  PyObject* fn = PyObject_GetAttrString(torch_api().operator_module.get(), name);
  if (!fn) throw PythonError();
  Py_DECREF(fn);  // NOTE: the operator module keeps it alive
  return fn;
}

}  // namespace tl::capture::detail
