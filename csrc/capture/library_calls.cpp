// Library functions that real model code calls and that capture gives their effect directly
// instead of inlining them (their bodies use try/except, locks or C state):
// dataclasses.fields/is_dataclass, torch.finfo/iinfo, object.__setattr__/__getattribute__,
// logging.Logger calls, skipped when the level is disabled, warnings.warn (warning_call.cpp) and
// torch.autocast (autocast.cpp).
#include <unordered_set>

#include "capture/autocast.h"
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "capture/warning_call.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

PyObject* module_attr(const char* module, const char* name) {  // borrowed, lives forever
  PyRef m = PyRef::steal(PyImport_ImportModule(module));
  PyObject* a = m ? PyObject_GetAttrString(m.get(), name) : nullptr;
  if (!a) clear_expected_error();
  return a;  // NOTE: a reference kept for the process lifetime, like the module
}

// Level of a Logger method call, or -1 when `name` is not a logging call.
int log_level(const std::string& name, const std::vector<ValuePtr>& args) {
  if (name == "debug") return 10;
  if (name == "info" || name == "info_once") return 20;
  if (name == "warning" || name == "warn" || name == "warning_once") return 30;
  if (name == "error" || name == "exception") return 40;
  if (name == "critical" || name == "fatal") return 50;
  if (name == "log" && !args.empty() && args[0]->is_const() && PyLong_Check(args[0]->obj.get()))
    return static_cast<int>(PyLong_AsLong(args[0]->obj.get()));
  return -1;
}

// The type of a value for dataclasses.fields: the class itself or the object's class.
PyObject* class_of(const ValuePtr& v) {  // borrowed
  if (v->is_const())
    return PyType_Check(v->obj.get()) ? v->obj.get()
                                      : reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
  if (v->kind == VKind::Object || v->kind == VKind::Module)
    return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
  return nullptr;
}

bool from_typing(PyObject* obj) {  // List[int], Optional: immutable once made
  return attr_str(reinterpret_cast<PyObject*>(Py_TYPE(obj)), "__module__") == "typing";
}

// A NumPy array (or a tuple/list holding one) that code could write to, borrowed.
bool is_writeable_array(PyObject* o) {
  if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i)
      if (is_writeable_array(PySequence_Fast_GET_ITEM(o, i))) return true;
    return false;
  }
  if (attr_str(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__") != "ndarray") return false;
  PyRef flags = PyRef::steal(PyObject_GetAttrString(o, "flags"));
  PyRef w = flags ? PyRef::steal(PyObject_GetAttrString(flags.get(), "writeable")) : PyRef();
  if (!w) throw PythonError();
  return w.get() == Py_True;
}

// A folded NumPy result that is an array is made read-only, as every fold's is: a later write
// to it would change a constant the graph already holds (copy(), astype() and flatten() make
// writeable arrays).
ValuePtr read_only_if_array(ValuePtr r) {
  if (!r->is_const()) return r;
  PyObject* o = r->obj.get();
  if (attr_str(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__") != "ndarray") return r;
  PyRef flags = PyRef::steal(PyObject_GetAttrString(o, "flags"));
  if (!flags || PyObject_SetAttrString(flags.get(), "writeable", Py_False) < 0) throw PythonError();
  return r;
}

}  // namespace

bool detail::is_lru_cache_wrapper(PyObject* fn) {  // functools.lru_cache / functools.cache
  static PyObject* type = module_attr("functools", "_lru_cache_wrapper");
  return type && PyType_Check(type) &&
         PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(type));
}

// A call of an lru_cache-wrapped function. With arguments known at trace time, the wrapper
// itself runs (so the cache fills exactly as in eager, and an impure body runs when eager
// would run it: on a miss); objects among them are pinned by identity, as the cache keys
// them. Otherwise the wrapped function is inlined, as Dynamo does: a cache keyed on fresh
// tensors would miss on every call anyway.
ValuePtr Tracer::call_lru_cached(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs) {
  std::vector<ValuePtr> real;
  auto known = [&](const ValuePtr& v) -> PyRef {
    if (v->is_const()) return v->obj;
    if ((v->kind == VKind::Object || v->kind == VKind::Module) && v->source && !v->attrs) {
      ctx_.guards().add_id_match(v->source, v->obj.get());
      return v->obj;
    }
    return {};
  };
  bool all_known = true;
  for (auto& a : args) {
    PyRef r = known(a);
    if (!r) all_known = false;
    real.push_back(Value::constant(r ? r : none()->obj));
  }
  KwArgs real_kw;
  for (auto& [k, v] : kwargs) {
    PyRef r = known(v);
    if (!r) all_known = false;
    real_kw.emplace_back(k, Value::constant(r ? r : none()->obj));
  }
  if (!all_known) {
    PyRef wrapped = PyRef::steal(PyObject_GetAttrString(fn, "__wrapped__"));
    if (!wrapped) throw PythonError();
    return call(Value::constant(wrapped), std::move(args), std::move(kwargs));
  }
  PyRef pos = PyRef::steal(PyTuple_New(real.size()));
  if (!pos) throw PythonError();
  for (size_t i = 0; i < real.size(); ++i)
    PyTuple_SET_ITEM(pos.get(), i, PyRef(real[i]->obj).release());
  PyRef kw;
  if (!real_kw.empty()) {
    kw = PyRef::steal(PyDict_New());
    for (auto& [k, v] : real_kw)
      if (!kw || PyDict_SetItemString(kw.get(), k.c_str(), v->obj.get()) < 0) throw PythonError();
  }
  PyRef r = PyRef::steal(PyObject_Call(fn, pos.get(), kw.get()));
  if (!r) raise_current_error(callable_desc(fn) + " raised while tracing");
  PyObject* o = r.get();
  if (is_immutable_constant(o) || from_typing(o) || PyType_Check(o) || PyFunction_Check(o) ||
      PyCFunction_Check(o))
    return Value::constant(r);
  // NOTE: eager returns this very object on every hit, so traced code reads and mutates it.
  return ctx_.wrap(o, ir::Source::held(r, "lru_cache result of " + callable_desc(fn)));
}

// NumPy called on constants (np.sqrt(2.0), np.float32(0.5), np.array([1, 2]), np.prod(shape)):
// folded at trace time; the arguments are guarded constants, so the result is too. An array
// result is made read-only: it is shared by every call, where eager makes a fresh one, so
// code that would write to it (np.add(a, 1, out=a)) raises at trace time and runs eagerly.
// `arr.sum()`, `arr.tolist()`... on an array NumPy folding made in traced code (read-only, no
// source: nothing can change it) or on a NumPy scalar, with constant arguments: folded as the
// NumPy call was. An array
// from outside, or one that can be written, keeps its break.
std::optional<ValuePtr> Tracer::call_numpy_method(const ValuePtr& fn, std::vector<ValuePtr>& args,
                                                  KwArgs& kwargs) {
  PyObject* f = fn->obj.get();
  if (fn->source || !f || !PyCFunction_Check(f)) return std::nullopt;
  PyObject* self = PyCFunction_GET_SELF(f);
  static PyObject* scalar_type = module_attr("numpy", "generic");  // np.float64(1.5): immutable
  if (!self) return std::nullopt;
  int scalar = scalar_type ? PyObject_IsInstance(self, scalar_type) : 0;
  if (scalar < 0) throw PythonError();
  bool array = attr_str(reinterpret_cast<PyObject*>(Py_TYPE(self)), "__name__") == "ndarray" &&
               attr_str(reinterpret_cast<PyObject*>(Py_TYPE(self)), "__module__") == "numpy";
  if (!scalar && (!array || is_writeable_array(self))) return std::nullopt;
  static const std::unordered_set<std::string> reads = {
      "sum",       "mean",    "prod",   "max",    "min",     "std",     "var",
      "any",       "all",     "argmax", "argmin", "cumsum",  "cumprod", "round",
      "clip",      "tolist",  "item",   "astype", "reshape", "ravel",   "flatten",
      "transpose", "squeeze", "copy",   "dot",    "nonzero", "__len__"};
  if (!reads.count(attr_str(f, "__name__"))) return std::nullopt;
  std::vector<ValuePtr> consts;
  KwArgs kw;
  for (auto& a : args) {
    PyRef c = a->is_tensor() ? PyRef() : const_tuple(a);
    if (!c || is_writeable_array(c.get())) return std::nullopt;
    consts.push_back(Value::constant(c));
  }
  for (auto& [k, v] : kwargs) {
    PyRef c = v->is_tensor() ? PyRef() : const_tuple(v);
    if (!c || is_writeable_array(c.get())) return std::nullopt;
    kw.emplace_back(k, Value::constant(c));
  }
  return read_only_if_array(call_pure(ctx_, f, consts, kw));
}

std::optional<ValuePtr> Tracer::call_numpy(PyObject* fn, std::vector<ValuePtr>& args,
                                           KwArgs& kwargs) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(fn));
  // NOTE: NumPy folds numbers: a symbolic size becomes its value (np.prod(x.shape)).
  if (ctx_.any_sym && (attr_str(type, "__module__").rfind("numpy", 0) == 0 ||
                       attr_str(fn, "__module__").rfind("numpy", 0) == 0)) {
    for (auto& a : args) ctx_.specialise(a);
    for (auto& kv : kwargs) ctx_.specialise(kv.second);
  }
  bool numpy_type = PyType_Check(fn) && attr_str(fn, "__module__") == "numpy";
  // ufuncs and array-function dispatchers (np.prod) are of numpy's own types; plain functions
  // must live in `numpy` itself (numpy.random's draw from global state).
  bool numpy_fn =
      attr_str(type, "__module__") == "numpy" ||
      ((PyFunction_Check(fn) || PyCFunction_Check(fn)) && attr_str(fn, "__module__") == "numpy");
  if (!numpy_type && !numpy_fn) {
    if (!PyType_Check(fn) && attr_str(fn, "__module__").rfind("numpy", 0) == 0)
      graph_break("numpy_call",
                  callable_desc(fn) +
                      "() is not folded (it may draw random "
                      "numbers or change NumPy's state)",
                  "make the value outside the compiled function and pass it in");
    return std::nullopt;
  }
  // NOTE: effects outside the returned value (files, NumPy's settings, writes into an
  // argument, uninitialised memory) cannot be folded into a constant.
  static const std::unordered_set<std::string> effects = {
      "save",           "savez",        "savez_compressed",
      "savetxt",        "load",         "loadtxt",
      "genfromtxt",     "fromfile",     "seterr",
      "seterrcall",     "setbufsize",   "printoptions",
      "errstate",       "copyto",       "put",
      "place",          "putmask",      "fill_diagonal",
      "empty",          "empty_like",   "set_printoptions",
      "put_along_axis", "shares_memory"};
  if (effects.count(attr_str(fn, "__name__")))
    graph_break("numpy_call", callable_desc(fn) + "() has effects a constant cannot replay",
                "call it outside the compiled function");
  std::vector<ValuePtr> consts;
  KwArgs kw;
  for (auto& a : args) {
    PyRef c = a->is_tensor() ? PyRef() : const_tuple(a);
    if (c && is_writeable_array(c.get()))
      graph_break("numpy_call", callable_desc(fn) + "() of a writeable array from outside",
                  "pass a tuple or a tensor; NumPy is folded only on values that cannot change");
    if (!c)
      graph_break("numpy_call", callable_desc(fn) + "() of a " + a->type_name(),
                  "use the torch function of the same name on tensors; NumPy is folded only on "
                  "constants");
    consts.push_back(Value::constant(c));
  }
  for (auto& [k, v] : kwargs) {
    PyRef c = v->is_tensor() ? PyRef() : const_tuple(v);
    if (c && is_writeable_array(c.get())) c = PyRef();
    if (!c)
      graph_break("numpy_call", callable_desc(fn) + "() with a " + v->type_name() + " " + k,
                  "use the torch function of the same name on tensors; NumPy is folded only on "
                  "constants");
    kw.emplace_back(k, Value::constant(c));
  }
  return read_only_if_array(call_pure(ctx_, fn, consts, kw));
}

// copy.deepcopy(v) (dataclasses.asdict/astuple call it on every leaf value) where its result
// needs no object identity: a value deepcopy returns as it is (None, numbers, strings), and a
// tensor the graph computed that needs no grad, contiguous from offset 0, which
// Tensor.__deepcopy__ copies into new memory of the same layout: a clone. Anything else (an
// input or a parameter, whose grad and Python attributes are copied too; a tensor that needs
// grad) is traced as before, and breaks inside copy.deepcopy.
std::optional<ValuePtr> Tracer::deepcopy_value(const ValuePtr& v) {
  if (v->is_const()) {
    PyObject* o = v->obj.get();
    if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
        PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o))
      return v;
    return std::nullopt;
  }
  if (!v->is_tensor() || v->source || !v->meta || ctx_.real_input(v)) return std::nullopt;
  PyObject* m = v->meta.get();
  PyRef grad = PyRef::steal(PyObject_GetAttrString(m, "requires_grad"));
  PyRef contiguous = PyRef::steal(PyObject_CallMethod(m, "is_contiguous", nullptr));
  PyRef offset = PyRef::steal(PyObject_CallMethod(m, "storage_offset", nullptr));
  if (!grad || !contiguous || !offset) throw PythonError();
  if (grad.get() != Py_False || contiguous.get() != Py_True || PyLong_AsLong(offset.get()) != 0)
    return std::nullopt;
  return ctx_.call_op(nullptr, "clone", {v}, {});
}

std::optional<ValuePtr> Tracer::call_library(PyObject* fn, const ValuePtr& self,
                                             std::vector<ValuePtr>& args, KwArgs& kwargs) {
  static PyObject* fields = module_attr("dataclasses", "fields");
  static PyObject* is_dataclass = module_attr("dataclasses", "is_dataclass");
  static PyObject* finfo = module_attr("torch", "finfo");
  static PyObject* iinfo = module_attr("torch", "iinfo");
  static PyObject* logger_type = module_attr("logging", "Logger");
  static PyObject* deepcopy = module_attr("copy", "deepcopy");
  static PyObject* count = module_attr("itertools", "count");
  static PyObject* chain = module_attr("itertools", "chain");

  // Logger.<level>(...): a no-op when the level is disabled. The guards: the logger's level
  // cache (cleared by setLevel/logging.disable) and its `disabled` flag.
  if (self && self->kind == VKind::Object && logger_type &&
      PyObject_TypeCheck(self->obj.get(), reinterpret_cast<PyTypeObject*>(logger_type))) {
    std::string name = attr_str(fn, "__name__");
    int level = log_level(name, args);
    if (level < 0) return std::nullopt;
    PyRef enabled = PyRef::steal(PyObject_CallMethod(self->obj.get(), "isEnabledFor", "i", level));
    if (!enabled) throw PythonError();
    // NOTE: transformers' Logger.warning_once/info_once are lru_cache wrappers: run with the
    // logger and constant arguments at trace time, they write once, as eager does on its
    // first call, and every later call (the compiled one included) is a cache hit that writes
    // nothing. GPT-2's loss_function property calls one on every forward: a break per step.
    if (enabled.get() == Py_True && self->source && is_lru_cache_wrapper(fn)) {
      args.insert(args.begin(), self);
      return call_lru_cached(fn, args, kwargs);
    }
    if (enabled.get() == Py_True || !self->source)
      graph_break("logging_call",
                  "logger." + name + "() at an enabled level writes output; it runs eagerly");
    PyRef cache = PyRef::steal(PyObject_GetAttrString(self->obj.get(), "_cache"));
    if (!cache || !PyDict_Check(cache.get()))
      graph_break("logging_call", "logger without a level cache");
    ctx_.guards().add_dict_version(ir::Source::attr(self->source, "_cache"), cache.get());
    PyRef disabled = PyRef::steal(PyObject_GetAttrString(self->obj.get(), "disabled"));
    if (!disabled) throw PythonError();
    ctx_.guards().add_equals_match(ir::Source::attr(self->source, "disabled"), disabled.get());
    return none();
  }
  // A region CPython entered before this frame was captured (a resume function starts inside
  // it at a graph break) can only be left by CPython: the graph cannot leave the real region
  // before the ops after it run.
  if (self && is_autocast_manager(self)) {
    std::string name = attr_str(fn, "__name__");
    if (name == "__exit__")
      graph_break("autocast_exit",
                  "leaving a torch.autocast region that was entered before this code was "
                  "captured (it continues a function that broke inside the region); the exit "
                  "runs eagerly");
    if (name == "__enter__")
      graph_break("unsupported_callable", "torch.autocast.__enter__() called outside a with");
  }
  if (self && is_autograd_function_apply(fn)) return call_autograd_function(self, args, kwargs);
  if (PyObject* cls = self ? nullptr : autograd_function_of_c_apply(fn))
    return call_autograd_function(Value::constant(PyRef::borrow(cls)), args, kwargs);
  if (self) return std::nullopt;

  if (is_lru_cache_wrapper(fn)) return call_lru_cached(fn, args, kwargs);
  if (auto r = call_numpy(fn, args, kwargs)) return r;
  if (is_autocast_class(fn)) return construct_autocast(ctx_, globals_, fn, args, kwargs);
  if (is_autocast_decorated(fn)) return inline_function(fn, nullptr, nullptr, args, kwargs);

  if (is_warnings_warn(fn)) return warning_call(ctx_, globals_, args, kwargs);

  if ((fn == fields || fn == is_dataclass) && args.size() == 1 && kwargs.empty()) {
    PyObject* cls = class_of(args[0]);
    if (!cls) {
      if (fn == is_dataclass) return const_bool(false);
      graph_break("user_exception", "dataclasses.fields() of a " + args[0]->type_name());
    }
    return call_pure(ctx_, fn, {Value::constant(PyRef::borrow(cls))}, {});
  }
  // itertools.chain(*iterables) and chain.from_iterable(iterable) (a classmethod: bound anew
  // on every attribute read, so known by its self and name).
  if (fn == chain && kwargs.empty())
    return lazy_iterator(chain_iter(get_iter(Value::tuple(args))), "itertools.chain");
  if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == chain &&
      attr_str(fn, "__name__") == "from_iterable" && args.size() == 1 && kwargs.empty())
    return lazy_iterator(chain_iter(get_iter(args[0])), "itertools.chain");
  if (fn == count && args.size() + kwargs.size() <= 2) {
    // count(start=0, step=1): the arguments in that order, by position or keyword.
    std::vector<ValuePtr> given = args;
    given.resize(2);
    bool ints = true;
    for (auto& [k, v] : kwargs) {
      size_t i = k == "start" ? 0 : k == "step" ? 1 : 2;
      if (i == 2 || given[i]) ints = false;  // CPython raises its TypeError
      if (i < 2) given[i] = v;
    }
    long long start_step[2] = {0, 1};
    for (size_t i = 0; ints && i < 2; ++i) {
      if (!given[i]) continue;
      ctx_.specialise(given[i]);
      PyObject* o = given[i]->is_const() ? given[i]->obj.get() : nullptr;
      if (!o || !PyLong_CheckExact(o)) {
        ints = false;
        break;
      }
      start_step[i] = PyLong_AsLongLong(o);
      if (start_step[i] == -1 && PyErr_Occurred()) {
        clear_expected_error();  // too large for the counter: left to CPython
        ints = false;
        break;
      }
    }
    if (ints) return lazy_iterator(count_iter(start_step[0], start_step[1]), "count");
  }
  if (fn == deepcopy && args.size() == 1 && kwargs.empty())
    if (auto r = deepcopy_value(args[0])) return r;
  if ((fn == finfo || fn == iinfo) && all_const(args, kwargs))
    return call_pure(ctx_, fn, args, kwargs);
  // object.__setattr__(obj, name, value) and friends, as dataclasses' __init__ calls them.
  if (Py_TYPE(fn) == &PyWrapperDescr_Type &&
      reinterpret_cast<PyDescrObject*>(fn)->d_type == &PyBaseObject_Type && !args.empty() &&
      (args[0]->kind == VKind::Object || args[0]->kind == VKind::Module)) {
    std::string name = attr_str(fn, "__name__");
    std::vector<ValuePtr> rest(args.begin() + 1, args.end());
    if (name == "__setattr__" || name == "__getattribute__" || name == "__init__")
      return call_base_slot(args[0], name, rest);
  }
  return std::nullopt;
}

}  // namespace tl::capture
