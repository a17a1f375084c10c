// Calling symbolic values: dispatch, partials, namedtuples, objects (modules: module_call.cpp).

#include <cstring>

#include "capture/autocast.h"
#include "capture/deque.h"
#include "capture/graph_break.h"
#include "capture/optimizer_step.h"
#include "capture/polyfills.h"
#include "capture/py_helpers.h"
#include "capture/scalar_inputs.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
namespace {
PyObject* simple_namespace_type() {  // borrowed; kept for the process, as the types module
  static PyObject* t = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("types"));
    PyObject* r = m ? PyObject_GetAttrString(m.get(), "SimpleNamespace") : nullptr;
    if (!r) PyErr_Clear();
    return r;
  }();
  return t;
}
}  // namespace

using namespace detail;  // NOTE: helpers of this file family only

namespace {

// The first class of `type`'s MRO whose own __dict__ holds `name` (borrowed), or null.
PyObject* defining_class(PyObject* type, const char* name) {
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* c = PyTuple_GET_ITEM(mro, i);
    PyRef d = type_dict(reinterpret_cast<PyTypeObject*>(c));
    if (d && PyDict_GetItemString(d.get(), name)) return c;
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------- calls

namespace {

// torch.ops.aten.add.Tensor and torch.ops.aten.add: recorded as the operator itself, not as
// the nameless C binding their __call__ forwards to, which no fx backend could name.
bool is_torch_operator(PyObject* f) {  // borrows
  int is_op = PyObject_IsInstance(f, torch_api().op_overload_types.get());
  if (is_op < 0) throw PythonError();
  return is_op;
}

// collections.OrderedDict itself (a C type): made like a dict subclass, with symbolic items.
bool is_ordered_dict_class(PyObject* f) {
  static PyObject* od = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("collections"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "OrderedDict") : nullptr;
    if (!t) throw PythonError();
    return t;  // NOTE: kept for the process lifetime, like the collections module
  }();
  return f == od;
}

}  // namespace

namespace {

// The callee keeps symbolic sizes in its arguments symbolic: a torch op records them as
// expressions, an inlined Python function traces them on. Anything else (a builtin, a
// library function, a class) reads them as numbers: they are specialised first.
// isinstance() and callable(): their answer follows from their arguments' types, never from
// a number's value (`isinstance(q_offset, torch.Tensor)` on a cache length in transformers'
// mask helpers), so a size passed to them stays symbolic. len(): from how many items a tuple,
// list or dict holds (a tensor's is its first size, a symbol itself; an object's __len__ is
// traced), never from the items' values: `len(mask.shape) == 4` (transformers 5.17's mask
// preprocessing) must not pin every size of `mask`.
bool reads_only_types(PyObject* f) {
  if (!f || !PyCFunction_Check(f)) return false;
  PyObject* module = PyCFunction_GET_SELF(f);  // borrowed: the builtins module
  if (!module || !PyModule_Check(module)) return false;
  const char* name = PyModule_GetName(module);
  if (!name) {
    PyErr_Clear();
    return false;
  }
  const char* fn = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
  return std::strcmp(name, "builtins") == 0 &&
         (std::strcmp(fn, "isinstance") == 0 || std::strcmp(fn, "callable") == 0 ||
          std::strcmp(fn, "len") == 0);
}

bool keeps_sym_args(const ValuePtr& fn) {
  switch (fn->kind) {
    case VKind::Method:
      if (!fn->method_name.empty()) return fn->self && fn->self->is_tensor();
      return fn->obj && PyFunction_Check(fn->obj.get()) && !is_torch_function(fn->obj.get());
    case VKind::Function:
    case VKind::Module:
      return true;
    case VKind::Partial:
      return fn->self && keeps_sym_args(fn->self);
    case VKind::Const:
    case VKind::Object:
      return fn->obj && (is_torch_operator(fn->obj.get()) || is_torch_function(fn->obj.get()) ||
                         PyFunction_Check(fn->obj.get()) || reads_only_types(fn->obj.get()));
    default:
      return false;
  }
}

// NOTE: a Python function of torch's own files is run while tracing, on meta tensors, and
// recorded as one op the graph calls again on every call. That is right only while its effects
// are on tensors: a user callback, a bound method or a mutable object among its arguments or
// in its closure would be called or changed once, at trace time (pytree.tree_map(cb, (1, 2)),
// a @torch.no_grad()-decorated user helper, a sourceless bound method of a scheduler), and its
// effect would be missing on every later call. Such a call is inlined instead.
bool runs_as_torch_op(PyObject* f, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!PyFunction_Check(f)) return true;
  if (!inert_closure(f)) return false;
  for (auto& a : args)
    if (!inert_value(a)) return false;
  for (auto& kv : kwargs)
    if (!inert_value(kv.second)) return false;
  return true;
}

// torch.compiler.disable / torch._dynamo.disable: the function must run eagerly, every call.
bool is_dynamo_disabled(PyObject* f) {
  if (!PyFunction_Check(f)) return false;
  PyObject* d = reinterpret_cast<PyFunctionObject*>(f)->func_dict;
  PyObject* flag = d ? PyDict_GetItemString(d, "_torchdynamo_disable") : nullptr;  // borrowed
  return flag && PyObject_IsTrue(flag) == 1;
}

}  // namespace

// `math.sqrt(d)` or `float(d)` of an int or float computed from sizes: CPython's value,
// carrying its float expression (ir/sym_float.h); null for any other call.
ValuePtr float_of_size(const ValuePtr& fn, const ValuePtr& arg) {
  if (!(fn->is_const() || fn->kind == VKind::Object) || !fn->obj) return nullptr;
  if (!arg->is_const() || !(arg->sym || arg->fsym)) return nullptr;
  // NOTE: looked up once under the GIL and never changed.
  static PyObject* sqrt = [] {
    PyRef math = PyRef::steal(PyImport_ImportModule("math"));
    PyObject* f = math ? PyObject_GetAttrString(math.get(), "sqrt") : nullptr;
    if (!f) PyErr_Clear();
    return f;  // NOTE: kept for the life of the process
  }();
  bool is_sqrt = sqrt && fn->obj.get() == sqrt;
  if (!is_sqrt && fn->obj.get() != reinterpret_cast<PyObject*>(&PyFloat_Type)) return nullptr;
  ir::SymFloatPtr e = float_expr(arg);
  if (!e) return nullptr;
  PyRef r = PyRef::steal(PyObject_CallOneArg(fn->obj.get(), arg->obj.get()));
  if (!r) {
    PyErr_Clear();  // NOTE: the ordinary call raises it again (math.sqrt(-1))
    return nullptr;
  }
  if (!PyFloat_CheckExact(r.get())) return nullptr;
  ValuePtr v = Value::constant(r);
  v->fsym = is_sqrt ? ir::sym_float_sqrt(e) : e;
  return v;
}

namespace {
// `Cls(value)` of an enum class runs only enum's own lookup: no _missing_ or __new__ of the
// class's own in Python (they would run at trace time).
bool plain_enum_lookup(PyObject* cls) {
  PyRef enum_mod = PyRef::steal(PyImport_ImportModule("enum"));
  if (!enum_mod) throw PythonError();
  for (const char* name : {"_missing_", "__new__"}) {
    PyRef mine = PyRef::steal(PyObject_GetAttrString(cls, name));
    if (!mine) throw PythonError();
    PyObject* func = PyMethod_Check(mine.get()) ? PyMethod_GET_FUNCTION(mine.get()) : mine.get();
    if (!PyFunction_Check(func)) continue;
    PyRef module = PyRef::steal(PyObject_GetAttrString(func, "__module__"));
    if (!module) throw PythonError();
    if (!PyUnicode_Check(module.get()) || PyUnicode_CompareWithASCIIString(module.get(), "enum"))
      return false;
  }
  return true;
}
}  // namespace

ValuePtr Tracer::call(const ValuePtr& fn, std::vector<ValuePtr> args, KwArgs kwargs) {
  if (!fn) graph_break("unsupported_bytecode", "call of NULL");
  if (auto route = optimizer_step_route(fn))
    graph_break("optimizer_step",
                *route == StepRoute::Compiled
                    ? "opt.step() of a torch.optim optimizer: it runs as torchlite's compiled "
                      "step (fused in-place kernels), between this graph and the rest of the "
                      "function"
                    : "opt.step() of an optimizer torchlite does not compile: torch's step "
                      "runs eagerly, whole, between this graph and the rest of the function");
  if (ctx_.any_sym && args.size() == 1 && kwargs.empty())
    if (ValuePtr f = float_of_size(fn, args[0])) return f;
  if (ctx_.any_scalar && args.size() == 1 && kwargs.empty())
    if (ValuePtr v = scalar_conversion(ctx_, fn, args[0])) return v;
  if ((ctx_.any_sym || ctx_.any_scalar) && !keeps_sym_args(fn)) {
    if (fn->kind == VKind::Method) ctx_.specialise(fn->self);  // x.shape.index(t)
    for (auto& a : args) ctx_.specialise(a);
    for (auto& kv : kwargs) ctx_.specialise(kv.second);
  }
  const TorchApi& api = torch_api();
  if ((fn->kind == VKind::Object || fn->is_const()) && is_torch_operator(fn->obj.get()))
    return ctx_.call_op(fn->obj.get(), "", args, kwargs);
  switch (fn->kind) {
    case VKind::GradMode: {
      // `@torch.no_grad()` on a function made in traced code: the call runs under that mode
      // and the caller's mode comes back after it, as torch's decorator does.
      if (fn->self) {
        const bool before = ctx_.grad_enabled();
        ctx_.set_grad_mode(fn->flag);
        ValuePtr r;
        try {
          r = call(fn->self, std::move(args), std::move(kwargs));
        } catch (...) {
          ctx_.set_grad_mode(before);
          throw;
        }
        ctx_.set_grad_mode(before);
        return r;
      }
      if (fn->restore < 0 && args.size() == 1 && kwargs.empty() &&
          (args[0]->kind == VKind::Function || args[0]->kind == VKind::Partial ||
           args[0]->kind == VKind::Method)) {
        ValuePtr decorated = Value::of_kind(VKind::GradMode);
        decorated->flag = fn->flag;
        decorated->self = args[0];
        return decorated;
      }
      graph_break("unsupported_callable", "calling a " + fn->type_name());
    }
    case VKind::Method:
      if (fn->flag) return call_base_slot(fn->self, fn->method_name, args);
      if (!fn->method_name.empty()) return call_method_on(fn->self, fn->method_name, args, kwargs);
      if (auto r = call_library(fn->obj.get(), fn->self, args, kwargs)) return *r;
      args.insert(args.begin(), fn->self);
      if (PyFunction_Check(fn->obj.get()))
        return inline_function(fn->obj.get(), nullptr, nullptr, std::move(args), kwargs);
      return call(Value::constant(fn->obj), std::move(args), std::move(kwargs));
    case VKind::Function:
      return inline_function(nullptr, nullptr, fn, std::move(args), kwargs);
    case VKind::Module:
      return call_module(fn, std::move(args), std::move(kwargs));
    case VKind::Object: {
      if (is_lru_cache_wrapper(fn->obj.get())) {
        if (fn->source) ctx_.guards().add_id_match(fn->source, fn->obj.get());
        return call_lru_cached(fn->obj.get(), args, kwargs);
      }
      // operator.methodcaller: read through __reduce__, so one from outside is pinned by
      // identity (it is immutable); one a resume function is handed is new on every call.
      if (std::string(Py_TYPE(fn->obj.get())->tp_name) == "operator.methodcaller" &&
          (!fn->source || !ctx_.guarded_by_structure(fn->source))) {
        if (fn->source) ctx_.guards().add_id_match(fn->source, fn->obj.get());
        if (auto r = call_operator_getter(fn->obj.get(), args, kwargs)) return *r;
      }
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
    case VKind::Tuple:
      if (!is_autocast_exit(fn)) graph_break("unsupported_callable", "calling a tuple");
      exit_autocast(ctx_, fn);  // the __exit__ of a torch.autocast with-block
      return none();
    case VKind::Partial: {
      std::vector<ValuePtr> all = fn->items;
      all.insert(all.end(), args.begin(), args.end());
      KwArgs kw;
      for (size_t i = 0; i < fn->keys.size(); ++i)
        kw.emplace_back(utf8(fn->keys[i].get()), fn->kwdefaults[i]);
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
    case VKind::Const:
      break;
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
    if (!mode || !mode->is_const())
      graph_break("non_constant_argument", "set_grad_enabled(<traced value>)");
    ValuePtr g = Value::of_kind(VKind::GradMode);
    g->flag = PyObject_IsTrue(mode->obj.get());
    g->restore = ctx_.grad_enabled() ? 1 : 0;
    ctx_.set_grad_mode(g->flag);
    return g;
  }
  if (f == reinterpret_cast<PyObject*>(&_PyWeakref_RefType) || PyWeakref_CheckRefExact(f))
    return call_weakref(fn, args, kwargs);
  std::string qual = callable_desc(f);
  if (qual == "torch.compiler.is_compiling" ||
      qual == "torch._dynamo.external_utils.is_compiling" || qual == "torch._utils.is_compiling" ||
      qual == "torch._dynamo.is_compiling")
    return const_bool(true);
  if (auto r = call_library(f, nullptr, args, kwargs)) return *r;
  if (call_torch_assert(f, args, kwargs)) return none();  // data_dependent_assert.cpp
  if (auto r = call_operator_getter(f, args, kwargs)) return *r;
  if (is_enum_class(f) && args.size() == 1 && kwargs.empty() && args[0]->is_const() &&
      plain_enum_lookup(f))
    return call_pure(ctx_, f, args, kwargs);
  if (is_partial_type(reinterpret_cast<PyObject*>(Py_TYPE(f))))
    return call(wrap_partial(fn), std::move(args), std::move(kwargs));
  if (is_partial_type(f)) {
    if (args.empty()) graph_break("user_exception", "partial() needs a callable");
    ValuePtr p = Value::of_kind(VKind::Partial);
    p->self = args[0];
    // NOTE: as CPython does, a partial of a partial is one partial: the inner one's function,
    // its arguments first, its keywords updated by the new ones (`p.args`, `p.func` show it).
    if (args[0]->kind == VKind::Partial) {
      p->self = args[0]->self;
      p->items = args[0]->items;
      p->keys = args[0]->keys;
      p->kwdefaults = args[0]->kwdefaults;
    }
    p->items.insert(p->items.end(), args.begin() + 1, args.end());
    for (auto& [k, v] : kwargs) {
      bool replaced = false;
      for (size_t i = 0; i < p->keys.size(); ++i)
        if (utf8(p->keys[i].get()) == k) {
          p->kwdefaults[i] = v;
          replaced = true;
        }
      if (replaced) continue;
      p->keys.push_back(PyRef::steal(PyUnicode_FromString(k.c_str())));
      p->kwdefaults.push_back(v);
    }
    return p;
  }
  if (PyType_Check(f)) {
    if (is_module_type(f)) return construct_module(f, std::move(args), std::move(kwargs));
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
      PyObject_HasAttrString(f, "_fields") && PyObject_HasAttrString(f, "_make")) {
    // NOTE: only the generated constructor is modelled: a subclass's own __new__ or
    // __init__ would be skipped.
    if (defining_class(f, "__new__") != defining_class(f, "_make") ||
        defining_class(f, "__init__") != reinterpret_cast<PyObject*>(&PyBaseObject_Type))
      graph_break("unsupported_callable",
                  "constructing " + qual + ", a namedtuple subclass with its own __new__/__init__");
    return make_namedtuple(f, args, kwargs);
  }
  if (f == deque_type()) return make_deque(args, kwargs);
  if (is_plain_user_class(f) || is_ordered_dict_class(f))
    return construct_object(f, std::move(args), std::move(kwargs));
  // NOTE: `object()` (a sentinel, as heapq.nlargest makes one) and `types.SimpleNamespace(a=x)`
  // are objects made by traced code like a user class's instance: the keywords become its
  // attributes, and one that outlives the trace is made anew per call (lower_created_object).
  if ((f == reinterpret_cast<PyObject*>(&PyBaseObject_Type) && args.empty() && kwargs.empty()) ||
      (f == simple_namespace_type() && args.empty())) {
    ValuePtr obj = new_traced_object(f);
    for (auto& [k, v] : kwargs) {
      PyRef key = PyRef::steal(PyUnicode_FromString(k.c_str()));
      if (!key) throw PythonError();
      dict_set(obj->attrs, key.get(), v);
    }
    return obj;
  }
  // NOTE: a torch.nn method called unbound on a module (`nn.LayerNorm.forward(self, x)` in a
  // subclass's forward) is the module's own Python code, as a bound call runs it: inlined.
  if (PyFunction_Check(f) && !args.empty() && args[0]->kind == VKind::Module &&
      is_torch_function(f))
    return inline_function(f, fn->source, nullptr, std::move(args), kwargs);
  if (PyObject* stand_in = polyfill_for(f))
    return inline_function(stand_in, nullptr, nullptr, std::move(args), kwargs);
  if (is_dynamo_disabled(f))
    graph_break("unsupported_callable",
                "call to " + qual + ", which torch.compiler.disable keeps out of compiled code");
  if (is_torch_function(f)) {
    if (is_side_effecting_torch_fn(f))
      graph_break("unsupported_callable",
                  "call to " + qual + ", which has effects torchlite does not capture");
    if (!runs_as_torch_op(f, args, kwargs))
      return inline_function(f, fn->source, nullptr, std::move(args), kwargs);
    return ctx_.call_op(f, "", args, kwargs);
  }
  if (PyFunction_Check(f)) return inline_function(f, fn->source, nullptr, std::move(args), kwargs);
  if (PyMethod_Check(f)) {
    PyObject* self = PyMethod_GET_SELF(f);
    ir::SourcePtr self_src = fn->source ? ir::Source::attr(fn->source, "__self__") : nullptr;
    ValuePtr self_value = ctx_.wrap(self, self_src);
    if (auto r = call_library(PyMethod_GET_FUNCTION(f), self_value, args, kwargs)) return *r;
    args.insert(args.begin(), self_value);
    return call(Value::constant(PyRef::borrow(PyMethod_GET_FUNCTION(f))), std::move(args),
                std::move(kwargs));
  }
  bool handled = false;
  ValuePtr r = call_builtin(f, args, kwargs, handled);
  if (handled) return r;
  if (auto folded = call_numpy_method(fn, args, kwargs)) return *folded;
  graph_break("unsupported_callable", "call to " + qual + " (" + Py_TYPE(f)->tp_name +
                                          "), which torchlite cannot trace; it runs eagerly");
}

// operator.itemgetter/attrgetter: made from constants now; called, their items (or dotted
// names, as their __reduce__ lists them) are read from the argument as subscripts (attribute
// reads), one value or a tuple of them.
std::optional<ValuePtr> Tracer::call_operator_getter(PyObject* f, std::vector<ValuePtr>& args,
                                                     KwArgs& kwargs) {
  auto is_getter = [](PyObject* o) {
    if (!PyType_Check(o)) return 0;
    const std::string n = reinterpret_cast<PyTypeObject*>(o)->tp_name;
    return n == "operator.itemgetter"     ? 1
           : n == "operator.attrgetter"   ? 2
           : n == "operator.methodcaller" ? 3
                                          : 0;
  };
  if (is_getter(f)) {
    if (!all_const(args, kwargs)) return std::nullopt;
    return call_pure(ctx_, f, args, kwargs);
  }
  const int kind = is_getter(reinterpret_cast<PyObject*>(Py_TYPE(f)));
  if (!kind || args.size() != 1 || !kwargs.empty()) return std::nullopt;
  PyRef reduced = PyRef::steal(PyObject_CallMethod(f, "__reduce__", nullptr));
  if (!reduced) throw PythonError();
  if (kind == 3) return call_method_caller(f, reduced.get(), args[0]);
  PyObject* keys = PyTuple_Check(reduced.get()) && PyTuple_GET_SIZE(reduced.get()) >= 2
                       ? PyTuple_GET_ITEM(reduced.get(), 1)
                       : nullptr;
  if (!keys || !PyTuple_Check(keys)) return std::nullopt;
  std::vector<ValuePtr> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
    PyObject* key = PyTuple_GET_ITEM(keys, i);
    if (kind == 1) {
      out.push_back(subscript(args[0], Value::constant(PyRef::borrow(key))));
      continue;
    }
    ValuePtr v = args[0];
    const std::string path = utf8(key);
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      v = get_attr(v, path.substr(start, dot == std::string::npos ? dot : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    out.push_back(v);
  }
  if (out.size() == 1) return out[0];
  return Value::tuple(std::move(out));
}

// methodcaller(name, *a, **kw)(obj) is obj.name(*a, **kw): its __reduce__ gives
// (methodcaller, (name, *a)), or (partial(methodcaller, name, **kw), a) with keywords.
ValuePtr Tracer::call_method_caller(PyObject* f, PyObject* reduced, const ValuePtr& obj) {
  if (!PyTuple_Check(reduced) || PyTuple_GET_SIZE(reduced) < 2 ||
      !PyTuple_Check(PyTuple_GET_ITEM(reduced, 1)))
    graph_break("unsupported_callable", "calling an operator.methodcaller it cannot read");
  PyObject* head = PyTuple_GET_ITEM(reduced, 0);
  PyObject* rest = PyTuple_GET_ITEM(reduced, 1);
  PyRef name;
  std::vector<ValuePtr> call_args;
  KwArgs call_kwargs;
  Py_ssize_t first = 0;
  if (head == reinterpret_cast<PyObject*>(Py_TYPE(f))) {
    if (PyTuple_GET_SIZE(rest) < 1)
      graph_break("unsupported_callable", "methodcaller without a name");
    name = PyRef::borrow(PyTuple_GET_ITEM(rest, 0));
    first = 1;
  } else {
    PyRef pargs = PyRef::steal(PyObject_GetAttrString(head, "args"));
    PyRef pkw = PyRef::steal(PyObject_GetAttrString(head, "keywords"));
    if (!pargs || !pkw || !PyTuple_Check(pargs.get()) || PyTuple_GET_SIZE(pargs.get()) != 1 ||
        !PyDict_Check(pkw.get())) {
      clear_expected_error();
      graph_break("unsupported_callable", "calling an operator.methodcaller it cannot read");
    }
    name = PyRef::borrow(PyTuple_GET_ITEM(pargs.get(), 0));
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(pkw.get(), &pos, &k, &v))
      call_kwargs.emplace_back(utf8(k), ctx_.from_result(v));
  }
  for (Py_ssize_t i = first; i < PyTuple_GET_SIZE(rest); ++i)
    call_args.push_back(ctx_.from_result(PyTuple_GET_ITEM(rest, i)));
  if (!PyUnicode_Check(name.get()))
    graph_break("unsupported_callable", "methodcaller with a name that is not a str");
  return call(get_attr(obj, utf8(name.get())), std::move(call_args), std::move(call_kwargs));
}

// weakref.ref(obj) of an object the guards pin by identity: the real ref (CPython hands back
// the one it already has); calling it gives the same value back. Calling a ref read from the
// frame (nn.LSTM's `_flat_weight_refs`) reads its referent through a `ref()` source, so the
// guards check on every call what the referent is then (None once it died).
ValuePtr Tracer::call_weakref(const ValuePtr& fn, std::vector<ValuePtr>& args, KwArgs& kwargs) {
  const char* hint = "pass the object itself, or call the weakref outside the compiled function";
  PyObject* f = fn->obj.get();
  if (f != reinterpret_cast<PyObject*>(&_PyWeakref_RefType)) {
    if (!args.empty() || !kwargs.empty())
      graph_break("unsupported_callable", "calling a weakref with arguments", hint);
    auto it = ctx_.weakref_targets.find(f);
    if (it != ctx_.weakref_targets.end()) return it->second.second;
    if (!fn->source)
      graph_break("unsupported_callable", "calling a weakref that traced code did not make", hint);
    ir::SourcePtr src = ir::Source::deref(fn->source);
    PyObject* target = PyWeakref_GET_OBJECT(f);  // borrowed; Py_None once dead
    if (target == Py_None) {
      ctx_.guards().add_id_match(src, Py_None);
      return Value::constant(PyRef::borrow(Py_None));
    }
    PyRef keep = PyRef::borrow(target);
    return ctx_.wrap(keep.get(), src);
  }
  if (args.size() != 1 || !kwargs.empty())
    graph_break("unsupported_callable", "weakref.ref() with a callback", hint);
  const ValuePtr& v = args[0];
  bool pinned = v->source && (v->kind == VKind::Module || v->kind == VKind::Object ||
                              (v->is_const() && !is_immutable_constant(v->obj.get())));
  if (!pinned)
    graph_break("unsupported_callable",
                "weakref.ref() of a " + v->type_name() + " made in traced code", hint);
  if (v->kind == VKind::Object) ctx_.guards().add_id_match(v->source, v->obj.get());
  PyRef ref = PyRef::steal(PyWeakref_NewRef(v->obj.get(), nullptr));
  if (!ref) raise_current_error("weakref.ref() raised");
  ctx_.weakref_targets[ref.get()] = {ref, v};
  return Value::constant(ref);
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
  } else if (kw->is_const() && PyDict_CheckExact(kw->obj.get())) {
    PyObject *k, *v;  // a partial made at trace time (held by a module built in forward)
    Py_ssize_t pos = 0;
    while (PyDict_Next(kw->obj.get(), &pos, &k, &v)) {
      out->keys.push_back(PyRef::borrow(k));
      out->kwdefaults.push_back(ctx_.from_result(v));
    }
  } else {
    graph_break("unsupported_partial", "functools.partial keywords that are not a dict");
  }
  return out;
}

ValuePtr Tracer::make_namedtuple(PyObject* cls, const std::vector<ValuePtr>& args,
                                 const KwArgs& kwargs) {
  PyRef fields = PyRef::steal(PyObject_GetAttrString(cls, "_fields"));
  if (!fields || !PyTuple_Check(fields.get())) throw PythonError();
  PyRef defaults = PyRef::steal(PyObject_GetAttrString(cls, "_field_defaults"));
  if (!defaults) clear_expected_error();
  Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  std::vector<ValuePtr> items(n);
  if (static_cast<Py_ssize_t>(args.size()) > n)
    graph_break("user_exception", "too many fields for namedtuple");
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
    PyObject* d =
        defaults ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields.get(), i)) : nullptr;
    if (!d)
      graph_break("user_exception",
                  "namedtuple missing field " + utf8(PyTuple_GET_ITEM(fields.get(), i)));
    items[i] = ctx_.from_result(d);
  }
  ValuePtr t = Value::tuple(std::move(items));
  t->named_type = PyRef::borrow(cls);
  return t;
}

ValuePtr Tracer::new_traced_object(PyObject* cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef inst = PyRef::steal(empty ? type->tp_new(type, empty.get(), nullptr) : nullptr);
  if (!inst) throw PythonError();
  ctx_.keep_alive.push_back(inst);
  ValuePtr obj = Value::of_kind(VKind::Object);
  obj->obj = inst;
  obj->flag = true;
  obj->attrs = Value::of_kind(VKind::Dict);
  return obj;
}

ValuePtr Tracer::construct_object(PyObject* cls, std::vector<ValuePtr> args, KwArgs kwargs) {
  if (model_output_base(cls)) return construct_model_output(cls, args, kwargs);
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  ValuePtr obj = new_traced_object(cls);
  PyRef inst = obj->obj;
  if (PyDict_Check(inst.get())) obj->mapping = Value::of_kind(VKind::Dict);
  PyRef init_name = PyRef::steal(PyUnicode_FromString("__init__"));
  PyObject* init = _PyType_Lookup(type, init_name.get());
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    ValuePtr r = inline_function(init, nullptr, nullptr, std::move(args), kwargs);
    if (!(r->is_const() && r->obj.get() == Py_None))
      graph_break("user_exception", "__init__() should return None");
  } else if (obj->mapping && init && Py_TYPE(init) == &PyWrapperDescr_Type) {
    created_object_method(obj, "__init__", args, kwargs);  // dict(*args, **kwargs)
  } else if (init && init != _PyType_Lookup(&PyBaseObject_Type, init_name.get())) {
    graph_break("unsupported_callable", std::string("constructing ") + type->tp_name);
  } else if (!args.empty() || !kwargs.empty()) {
    graph_break("user_exception", "object() takes no arguments");
  }
  return obj;
}

}  // namespace tl::capture
