// torch.autocast regions in traced code.
//
// Design: the graph never depends on autocast state. Inside a region every op is recorded
// after the casts autocast would make, as explicit `.to(dtype)` nodes, so linear/matmul/conv
// inputs become bf16 under CPU autocast while ops autocast leaves alone keep their dtypes.
// Any backend then computes what eager autocast computes, and running the graph again under a
// real autocast (a function called inside `with torch.autocast(...)`, whose state
// GLOBAL_STATE guards) changes nothing: the casts it would add are already there.
// Rejected: enter/exit nodes in the graph (every backend and the autograd split would have
// to honour a stateful node) and hand-written copies of autocast's per-op lists
// (docs/internals/capture.md: torch semantics come from torch).
//
// The policy of an op comes from torch itself: the op runs once on fake tensors of the real
// device (FakeTensorMode) with the real autocast state set, which gives the dtype autocast
// produces; when a plain meta run gives another dtype (or fails), the floating-point tensors
// autocast may cast (not float64, on the device of an enabled region) are cast to it. Policies
// depend on the op, the input dtypes and the autocast state only, so they are cached per
// process under that key (a fake run costs milliseconds).
//
// The real thread-local autocast state follows the trace (entered and left as
// torch.autocast.__enter__/__exit__ do), so fake runs and torch.is_autocast_enabled() see the
// region; CaptureContext's destructor leaves regions a graph break left open.
//
// Graph breaks: the value standing for a region's __exit__ on the stack is a tuple of the
// region's (device, dtype, enabled, cache_enabled) whose builder, when CPython takes over at a
// break, enters a real torch.autocast and returns its __exit__, just as the bridge needs (the
// resume machinery already rebuilds such tuples; no new stack-slot kind). The resume function
// then starts inside the real region; leaving it there is an `autocast_exit` break, because
// the graph cannot leave the real region before the ops that follow it run.
#include "capture/autocast.h"

#include <unordered_map>

#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/warning_call.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

PyRef checked(PyObject* p) {  // steals p
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

// torch's autocast functions, looked up once; kept for the process lifetime like torch.
struct AutocastApi {
  PyObject* autocast_cls;  // torch.amp.autocast_mode.autocast
  PyObject *is_enabled, *set_enabled, *get_dtype, *set_dtype;
  PyObject *is_cache_enabled, *set_cache_enabled, *clear_cache, *inc_nesting, *dec_nesting;
  PyObject* any_enabled;  // torch._C._is_any_autocast_enabled
  PyObject* fake_mode_cls;
};

PyObject* attr_of(PyObject* obj, const char* name) {  // new reference, kept forever
  return checked(PyObject_GetAttrString(obj, name)).release();
}

const AutocastApi& api() {
  static AutocastApi* a = nullptr;  // the GIL serialises initialisation
  if (a) return *a;
  PyObject* torch = torch_api().torch.get();
  PyRef mode = checked(PyImport_ImportModule("torch.amp.autocast_mode"));
  PyRef c = checked(PyImport_ImportModule("torch._C"));
  PyRef fake = checked(PyImport_ImportModule("torch._subclasses.fake_tensor"));
  auto* n = new AutocastApi{attr_of(mode.get(), "autocast"),
                            attr_of(torch, "is_autocast_enabled"),
                            attr_of(torch, "set_autocast_enabled"),
                            attr_of(torch, "get_autocast_dtype"),
                            attr_of(torch, "set_autocast_dtype"),
                            attr_of(torch, "is_autocast_cache_enabled"),
                            attr_of(torch, "set_autocast_cache_enabled"),
                            attr_of(torch, "clear_autocast_cache"),
                            attr_of(torch, "autocast_increment_nesting"),
                            attr_of(torch, "autocast_decrement_nesting"),
                            attr_of(c.get(), "_is_any_autocast_enabled"),
                            attr_of(fake.get(), "FakeTensorMode")};
  a = n;
  return *a;
}

PyRef call(PyObject* fn, std::initializer_list<PyObject*> args) {  // borrows fn and args
  PyRef t = checked(PyTuple_New(args.size()));
  Py_ssize_t i = 0;
  for (PyObject* a : args) PyTuple_SET_ITEM(t.get(), i++, PyRef::borrow(a).release());
  return checked(PyObject_Call(fn, t.get(), nullptr));
}

PyRef str(const std::string& s) { return checked(PyUnicode_FromString(s.c_str())); }

std::string repr(PyObject* o) {
  PyRef r = PyRef::steal(PyObject_Repr(o));
  if (!r) {
    clear_expected_error();
    return "?";
  }
  return utf8(r.get());
}

// Recomputes ctx.autocast_on and the policy-cache key of the state now.
void refresh(CaptureContext& ctx) {
  const AutocastApi& a = api();
  ctx.autocast_on = call(a.any_enabled, {}).get() == Py_True;
  ctx.autocast_key.clear();
  if (!ctx.autocast_on) return;
  for (const char* dev : {"cpu", "cuda"}) {
    PyRef d = str(dev);
    if (call(a.is_enabled, {d.get()}).get() != Py_True) continue;
    ctx.autocast_key += std::string(dev) + "=" + repr(call(a.get_dtype, {d.get()}).get()) + ";";
  }
}

// As torch.autocast.__enter__ (torch/amp/autocast_mode.py), minus torch.export's modes.
void enter(CaptureContext& ctx, AutocastRegion r) {
  const AutocastApi& a = api();
  PyRef dev = str(r.device);
  r.prev_cache = call(a.is_cache_enabled, {});
  r.prev_enabled = call(a.is_enabled, {dev.get()});
  r.prev_dtype = call(a.get_dtype, {dev.get()});
  call(a.set_enabled, {dev.get(), C(r.enabled)});
  call(a.set_dtype, {dev.get(), r.dtype.get()});
  call(a.inc_nesting, {});
  call(a.set_cache_enabled, {C(r.cache_enabled)});
  ctx.autocast_regions.push_back(std::move(r));
  refresh(ctx);
}

// As torch.autocast.__exit__.
void leave(CaptureContext& ctx) {
  const AutocastApi& a = api();
  AutocastRegion r = std::move(ctx.autocast_regions.back());
  ctx.autocast_regions.pop_back();
  PyRef dev = str(r.device);
  PyRef depth = call(a.dec_nesting, {});
  if (PyLong_AsLong(depth.get()) == 0) call(a.clear_cache, {});
  call(a.set_enabled, {dev.get(), r.prev_enabled.get()});
  call(a.set_dtype, {dev.get(), r.prev_dtype.get()});
  call(a.set_cache_enabled, {r.prev_cache.get()});
  refresh(ctx);
}

// At a graph break: enters a real torch.autocast(device, dtype=, enabled=, cache_enabled=)
// from the tuple (borrowed) and returns its bound __exit__ (new reference), or null with an
// error set.
PyObject* reenter(PyObject*, PyObject* spec) {
  try {
    PyRef args = checked(PyTuple_Pack(1, PyTuple_GET_ITEM(spec, 0)));
    PyRef kw = checked(Py_BuildValue("{s:O,s:O,s:O}", "dtype", PyTuple_GET_ITEM(spec, 1), "enabled",
                                     PyTuple_GET_ITEM(spec, 2), "cache_enabled",
                                     PyTuple_GET_ITEM(spec, 3)));
    PyRef mgr = checked(PyObject_Call(api().autocast_cls, args.get(), kw.get()));
    checked(PyObject_CallMethod(mgr.get(), "__enter__", nullptr));
    return PyObject_GetAttrString(mgr.get(), "__exit__");
  } catch (const PythonError&) {
    return nullptr;
  }
}

PyMethodDef reenter_def = {"torchlite_reenter_autocast", reenter, METH_O,
                           "Enters a torch.autocast region again where CPython takes over."};

PyObject* reenter_fn() {  // borrowed, made once and kept for the process lifetime
  static PyObject* fn = checked(PyCFunction_New(&reenter_def, nullptr)).release();
  return fn;
}

// ---------------------------------------------------------------- per-op policy

bool is_floating(PyObject* dtype) {
  PyRef f = checked(PyObject_GetAttrString(dtype, "is_floating_point"));
  return f.get() == Py_True;
}

void tensors_of(const ValuePtr& v, std::vector<const Value*>& out) {
  if (v->is_tensor()) out.push_back(v.get());
  if (v->is_sequence() || v->kind == VKind::Dict)
    for (auto& item : v->items) tensors_of(item, out);
}

// A cache key piece for an argument: tensors by dtype and device type, dtypes/str/bool/None
// by value, other constants by type (they do not change what autocast casts).
void key_of(const ValuePtr& v, std::string& key) {
  switch (v->kind) {
    case VKind::Tensor: {
      PyRef type = checked(PyObject_GetAttrString(v->device.get(), "type"));
      key.append("T").append(repr(v->node->meta->dtype.get())).append("@");
      key.append(utf8(type.get()));
      return;
    }
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict:
      key += "(";
      for (size_t i = 0; i < v->items.size(); ++i) {
        if (v->kind == VKind::Dict) key += repr(v->keys[i].get()) + ":";
        key_of(v->items[i], key);
        key += ",";
      }
      key += ")";
      return;
    case VKind::Const: {
      PyObject* o = v->obj.get();
      if (o == Py_None || PyBool_Check(o) || PyUnicode_Check(o) ||
          is_type(o, torch_api().dtype_type))
        key += repr(o);
      else
        key += Py_TYPE(o)->tp_name;
      return;
    }
    default:
      key += v->type_name();
  }
}

bool castable_dtype(PyObject* dtype) {
  static PyObject* f64 = attr_of(torch_api().torch.get(), "float64");
  return dtype != f64 && is_floating(dtype);
}

// Fake tensor (real device) or constant for one argument; new reference. `dtype` (when set)
// replaces the dtype of every tensor autocast may cast, `device` (when set) the device.
PyRef fake_arg(const ValuePtr& v, PyObject* dtype = nullptr, PyObject* device = nullptr) {
  if (v->is_tensor()) {
    const ir::TensorMeta& m = *v->node->meta;
    PyObject* dt = dtype && castable_dtype(m.dtype.get()) ? dtype : m.dtype.get();
    PyRef size = checked(PyTuple_New(m.sizes.size()));
    PyRef stride = checked(PyTuple_New(m.strides.size()));
    for (size_t i = 0; i < m.sizes.size(); ++i)
      PyTuple_SET_ITEM(size.get(), i, checked(PyLong_FromLongLong(m.sizes[i])).release());
    for (size_t i = 0; i < m.strides.size(); ++i)
      PyTuple_SET_ITEM(stride.get(), i, checked(PyLong_FromLongLong(m.strides[i])).release());
    PyRef args = checked(PyTuple_Pack(2, size.get(), stride.get()));
    PyRef kw = checked(
        Py_BuildValue("{s:O,s:O}", "dtype", dt, "device", device ? device : v->device.get()));
    return checked(PyObject_Call(torch_api().empty_strided.get(), args.get(), kw.get()));
  }
  if (v->is_sequence()) {
    PyRef out = checked(PyList_New(v->items.size()));
    for (size_t i = 0; i < v->items.size(); ++i)
      PyList_SET_ITEM(out.get(), i, fake_arg(v->items[i], dtype, device).release());
    return v->kind == VKind::Tuple ? checked(PyList_AsTuple(out.get())) : out;
  }
  if (v->kind == VKind::Dict) {
    PyRef d = checked(PyDict_New());
    for (size_t i = 0; i < v->items.size(); ++i)
      if (PyDict_SetItem(d.get(), v->keys[i].get(), fake_arg(v->items[i], dtype, device).get()) < 0)
        throw PythonError();
    return d;
  }
  return to_meta_arg(v);
}

// dtype of the first floating-point tensor in a (nested) result, borrowed; or null.
PyObject* first_float(PyObject* r) {
  if (is_type(r, torch_api().tensor_type)) {
    PyRef dt = checked(PyObject_GetAttrString(r, "dtype"));
    return is_floating(dt.get()) ? dt.get() : nullptr;  // NOTE: dtypes are immortal singletons
  }
  if (PyTuple_Check(r) || PyList_Check(r))
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(r); ++i)
      if (PyObject* d = first_float(PySequence_Fast_GET_ITEM(r, i))) return d;
  return nullptr;
}

// Runs the op on fake (or meta, `fake` false) tensors, every castable one of dtype `uniform`
// when that is set; returns its first floating dtype (borrowed), null when it has none, or
// throws PythonError when the op raised.
PyObject* run_for_dtype(PyObject* target, const std::string& method,
                        const std::vector<ValuePtr>& args, const KwArgs& kwargs, bool fake,
                        PyObject* uniform = nullptr) {
  auto arg = [&](const ValuePtr& v) {
    if (fake) return fake_arg(v, uniform);
    return uniform ? fake_arg(v, uniform, torch_api().meta_device.get()) : to_meta_arg(v);
  };
  size_t first = method.empty() ? 0 : 1;
  PyRef pos = checked(PyTuple_New(args.size() - first));
  for (size_t i = first; i < args.size(); ++i)
    PyTuple_SET_ITEM(pos.get(), i - first, arg(args[i]).release());
  PyRef kw = checked(PyDict_New());
  for (auto& [k, v] : kwargs)
    if (PyDict_SetItemString(kw.get(), k.c_str(), arg(v).get()) < 0) throw PythonError();
  PyRef fn = method.empty() ? PyRef::borrow(target)
                            : checked(PyObject_GetAttrString(arg(args[0]).get(), method.c_str()));
  PyRef r = checked(PyObject_Call(fn.get(), pos.get(), kw.get()));
  return first_float(r.get());
}

// A floating input whose dtype is not `dt` and that autocast may cast, borrowed; or null.
PyObject* other_castable_dtype(const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                               PyObject* dt) {
  std::vector<const Value*> tensors;
  for (auto& a : args) tensors_of(a, tensors);
  for (auto& [k, v] : kwargs) tensors_of(v, tensors);
  for (const Value* t : tensors) {
    PyObject* d = t->node->meta->dtype.get();
    if (d != dt && castable_dtype(d)) return d;
  }
  return nullptr;
}

struct Policy {
  PyRef dtype;        // what autocast makes of the result; null: nothing floating
  bool cast = false;  // the plain op does not give `dtype`: cast the inputs to it
};

Policy probe(PyObject* target, const std::string& method, const std::vector<ValuePtr>& args,
             const KwArgs& kwargs) {
  static PyObject* mode = checked(PyObject_CallNoArgs(api().fake_mode_cls)).release();  // kept
  const AutocastApi& a = api();
  // NOTE: an op that raises is reported by the graph break; FakeTensorMode would also log it.
  static PyObject* log = [] {
    PyRef logging = checked(PyImport_ImportModule("logging"));
    return checked(PyObject_CallMethod(logging.get(), "getLogger", "s",
                                       "torch._subclasses.fake_tensor"))
        .release();  // kept, like the logger itself
  }();
  Policy p;
  PyRef prev_cache = call(a.is_cache_enabled, {});
  PyRef prev_disabled = checked(PyObject_GetAttrString(log, "disabled"));
  call(a.set_cache_enabled, {Py_False});  // NOTE: no fake tensor may enter autocast's cache
  if (PyObject_SetAttrString(log, "disabled", Py_True) < 0) throw PythonError();
  checked(PyObject_CallMethod(mode, "__enter__", nullptr));
  PyObject* dt = nullptr;
  // NOTE: meta kernels accept mixed dtypes (mm of bf16 and float32 gives bf16 on meta, raises
  // on a real device), so `linear(bf16 activation, float32 weight)` would look uncast below.
  // The op runs again with every castable input of that other dtype: when autocast then changes
  // the result's dtype, the op is on one of autocast's cast lists and its inputs are cast (an op
  // autocast leaves alone, batch_norm with float32 running statistics say, keeps its inputs).
  PyObject* other = nullptr;
  PyObject* uniform_dt = nullptr;
  bool ok = true;
  try {
    dt = run_for_dtype(target, method, args, kwargs, true);
    other = dt ? other_castable_dtype(args, kwargs, dt) : nullptr;
    if (other) {
      try {
        uniform_dt = run_for_dtype(target, method, args, kwargs, true, other);
      } catch (const PythonError&) {
        clear_expected_error();
        other = nullptr;  // NOTE: no evidence either way: the inputs are kept
      }
    }
  } catch (const PythonError&) {
    ok = false;
  }
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyRef exited =
      PyRef::steal(PyObject_CallMethod(mode, "__exit__", "OOO", Py_None, Py_None, Py_None));
  PyRef restored = PyRef::steal(PyObject_CallOneArg(a.set_cache_enabled, prev_cache.get()));
  if (!exited || !restored || PyObject_SetAttrString(log, "disabled", prev_disabled.get()) < 0)
    PyErr_Clear();  // NOTE: the error fetched above is restored, whatever it is
  PyErr_Restore(t, v, tb);
  if (!ok) {
    std::string err = error_text();
    graph_break("op_error", (method.empty() ? callable_desc(target) : "Tensor." + method) +
                                " raised under autocast while tracing (it runs eagerly): " + err);
  }
  if (!dt) return p;
  p.dtype = PyRef::borrow(dt);
  PyObject* plain = nullptr;
  try {
    plain = run_for_dtype(target, method, args, kwargs, false);
  } catch (const PythonError&) {
    clear_expected_error();
  }
  p.cast = !plain || PyObject_RichCompareBool(plain, dt, Py_EQ) != 1;
  if (!p.cast && other && uniform_dt) {
    PyObject* uniform_plain = nullptr;
    try {
      uniform_plain = run_for_dtype(target, method, args, kwargs, false, other);
    } catch (const PythonError&) {
      clear_expected_error();
    }
    p.cast = uniform_plain && PyObject_RichCompareBool(uniform_plain, uniform_dt, Py_EQ) != 1;
  }
  return p;
}

ValuePtr cast_to(CaptureContext& ctx, const ValuePtr& v, const PyRef& dtype,
                 const std::vector<std::string>& devices) {
  if (v->is_tensor()) {
    PyObject* dt = v->node->meta->dtype.get();
    PyRef type = checked(PyObject_GetAttrString(v->device.get(), "type"));
    bool on_region = false;
    for (const std::string& d : devices) on_region |= utf8(type.get()) == d;
    // NOTE: autocast's cached_cast: floating point, not float64, on the region's device.
    static PyObject* f64 = attr_of(torch_api().torch.get(), "float64");
    if (!on_region || dt == dtype.get() || !is_floating(dt) || dt == f64) return v;
    return ctx.record_op(nullptr, "to", {v, Value::constant(dtype)}, {});
  }
  if (v->is_sequence() || v->kind == VKind::Dict) {
    ValuePtr copy = std::make_shared<Value>(*v);
    for (auto& item : copy->items) item = cast_to(ctx, item, dtype, devices);
    return copy;
  }
  return v;
}

}  // namespace

bool is_autocast_class(PyObject* fn) {
  return PyType_Check(fn) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(fn),
                                              reinterpret_cast<PyTypeObject*>(api().autocast_cls));
}

bool is_autocast_decorated(PyObject* fn) {
  static PyObject* code = [] {  // decorate_autocast's code, kept like its module
    PyRef mode = checked(PyImport_ImportModule("torch.amp.autocast_mode"));
    PyRef deco = checked(PyObject_GetAttrString(mode.get(), "autocast_decorator"));
    PyObject* consts = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(deco.get()))->co_consts;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i) {
      PyObject* c = PyTuple_GET_ITEM(consts, i);
      if (PyCode_Check(c) &&
          utf8(reinterpret_cast<PyCodeObject*>(c)->co_name) == "decorate_autocast")
        return PyRef::borrow(c).release();
    }
    return static_cast<PyObject*>(nullptr);
  }();
  return code && PyFunction_Check(fn) && PyFunction_GET_CODE(fn) == code;
}

bool is_autocast_manager(const ValuePtr& v) {
  return v && (v->is_const() || v->kind == VKind::Object) &&
         PyObject_TypeCheck(v->obj.get(), reinterpret_cast<PyTypeObject*>(api().autocast_cls));
}

ValuePtr construct_autocast(CaptureContext& ctx, PyObject* globals, PyObject* cls,
                            const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!all_const(args, kwargs))
    graph_break("non_constant_argument",
                "torch.autocast(...) with arguments computed by traced code");
  PyRef deprecated = PyRef::steal(PyObject_GetAttrString(cls, "__deprecated__"));
  if (!deprecated) clear_expected_error();
  if (deprecated && PyUnicode_Check(deprecated.get()))  // torch.cpu.amp.autocast's FutureWarning
    warning_call(ctx, globals,
                 {Value::constant(deprecated), Value::constant(PyRef::borrow(PyExc_FutureWarning))},
                 {});
  return call_pure(ctx, cls, args, kwargs);
}

ValuePtr enter_autocast(CaptureContext& ctx, const ValuePtr& mgr) {
  PyObject* m = mgr->obj.get();
  AutocastRegion r;
  auto field = [&](const char* name) {
    PyRef v = checked(PyObject_GetAttrString(m, name));
    if (mgr->source) ctx.guards().add_equals_match(ir::Source::attr(mgr->source, name), v.get());
    return v;
  };
  PyRef device = field("device");
  r.dtype = field("fast_dtype");
  r.enabled = field("_enabled").get() == Py_True;
  r.cache_enabled = field("_cache_enabled").get() == Py_True;
  if (!PyUnicode_Check(device.get()) || !is_type(r.dtype.get(), torch_api().dtype_type))
    graph_break("autocast_arguments", "torch.autocast object without a device or dtype");
  r.device = utf8(device.get());
  ValuePtr exit = Value::tuple({Value::constant(device), Value::constant(r.dtype),
                                const_bool(r.enabled), const_bool(r.cache_enabled)});
  exit->named_type = PyRef::borrow(reenter_fn());
  enter(ctx, std::move(r));
  return exit;
}

bool is_autocast_exit(const ValuePtr& fn) {
  return fn && fn->kind == VKind::Tuple && fn->named_type.get() == reenter_fn();
}

void exit_autocast(CaptureContext& ctx, const ValuePtr& exit) {
  if (ctx.autocast_regions.empty() ||
      ctx.autocast_regions.back().device != utf8(exit->items[0]->obj.get()))
    graph_break("unsupported_bytecode", "autocast regions left in another order than entered");
  leave(ctx);
}

void read_autocast_state(CaptureContext& ctx) { refresh(ctx); }

void restore_autocast(CaptureContext& ctx) {
  if (ctx.autocast_regions.empty()) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  try {
    while (!ctx.autocast_regions.empty()) leave(ctx);
  } catch (const PythonError&) {
    PyErr_Clear();  // NOTE: runs in ~CaptureContext: nothing may be thrown
  }
  PyErr_Restore(t, v, tb);
}

PyRef autocast_casts(CaptureContext& ctx, PyObject* target, const std::string& method,
                     std::vector<ValuePtr>& args, KwArgs& kwargs) {
  if (method == "to" || method == "size" || method == "dim") return {};
  std::vector<const Value*> tensors;
  for (auto& a : args) tensors_of(a, tensors);
  for (auto& [k, v] : kwargs) tensors_of(v, tensors);
  if (tensors.empty()) return {};
  std::string key = ctx.autocast_key + "|" +
                    (method.empty() ? callable_desc(target) + "@" +
                                          std::to_string(reinterpret_cast<uintptr_t>(target))
                                    : "." + method);
  for (auto& a : args) key_of(a, key += ",");
  for (auto& [k, v] : kwargs) key_of(v, key += "," + k + "=");
  static std::unordered_map<std::string, Policy> cache;  // per process: policies are torch's
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, probe(target, method, args, kwargs)).first;
  const Policy& p = it->second;
  if (!p.dtype || !p.cast) return p.dtype;
  std::vector<std::string> devices;  // NOTE: the real state, which follows the traced regions
  for (const char* dev : {"cpu", "cuda"}) {
    PyRef d = str(dev);
    if (call(api().is_enabled, {d.get()}).get() == Py_True) devices.emplace_back(dev);
  }
  for (auto& a : args) a = cast_to(ctx, a, p.dtype, devices);
  for (auto& [k, v] : kwargs) v = cast_to(ctx, v, p.dtype, devices);
  return p.dtype;
}

void check_autocast_result(const ValuePtr& result, const PyRef& want, const std::string& op) {
  std::vector<const Value*> tensors;
  tensors_of(result, tensors);
  for (const Value* t : tensors) {
    PyObject* dt = t->node->meta->dtype.get();
    if (!is_floating(dt)) continue;
    if (dt == want.get()) return;
    break;
  }
  graph_break("unsupported_callable",
              op + " under autocast: casting its inputs does not reproduce autocast's result "
                   "dtype; it runs eagerly");
}

}  // namespace tl::capture
