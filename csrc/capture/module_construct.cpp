// nn.Module instances constructed inside traced code (`nn.Softmax(dim=-1)(x)`,
// `SiLUActivation()(x)`): made at trace time, for real, then called like any module.
//
// NOTE: eager builds a new module on every call; the trace builds one, whose state follows
// from the guarded constants it was given. That is only sound for a module that holds no
// tensors (a parameter would be a fresh random or zero tensor on every eager call, a
// different one from the trace's) and whose construction has no effect outside the instance,
// so:
//  - a class whose __init__ is torch.nn's own runs it for real, on constants and modules made
//    the same way only, under torch.device("meta") (a parameter it makes draws no random
//    numbers there, and the module is then refused);
//  - a class with a Python __init__ of its own has it traced on the fresh instance: its
//    attribute writes are applied to the real instance when they store constants or fresh
//    modules (anything else breaks), and the torch.nn code it reaches (super().__init__())
//    runs for real as above;
//  - a module left holding a parameter, a buffer or a tensor attribute breaks the graph.
// The module has no source, so nothing about it is guarded (it is made anew every call);
// returning it or keeping it live across a graph break breaks (as any object made here).
#include "capture/graph_break.h"
#include "capture/module_tensors.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

const char* const kHint =
    "create the module once in __init__ and call it in forward (a module built in forward "
    "is rebuilt on every call)";

// A Python function defined by torch.nn (Module.__init__, Softmax.__init__...), borrowed.
// NOTE: importing torch._dynamo (torch.compile, torch._decomp users) replaces Module.__init__
// with mutation_guard's wrapper, which calls the original and tags the instance: as safe to run.
bool is_torch_nn_function(PyObject* f) {
  if (!f || !PyFunction_Check(f)) return false;
  PyObject* mod = PyFunction_GET_MODULE(f);
  if (!mod || !PyUnicode_Check(mod)) return false;
  std::string name = utf8(mod);
  return name.rfind("torch.nn.", 0) == 0 || name == "torch._dynamo.mutation_guard";
}

// The real object for a constructor argument, or null when it is a traced value.
PyRef real_arg(const ValuePtr& v) {
  if (v->kind == VKind::Module && !v->source) return v->obj;
  if (v->kind == VKind::Module || v->kind == VKind::Object) return {};
  PyRef c = const_tuple(v);
  if (c && (v->is_const() || v->kind == VKind::Tuple)) return c;
  return {};
}

// Runs `fn(*args, **kwargs)` for real under torch.device("meta"); throws a break when an
// argument is a traced value.
PyRef call_real_meta(PyObject* fn, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                     const std::string& what) {
  PyRef pos = PyRef::steal(PyTuple_New(args.size()));
  if (!pos) throw PythonError();
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef a = real_arg(args[i]);
    if (!a)
      graph_break("module_built_in_forward", what + " with a " + args[i]->type_name() + " argument",
                  kHint);
    PyTuple_SET_ITEM(pos.get(), i, a.release());
  }
  PyRef kw = PyRef::steal(PyDict_New());
  if (!kw) throw PythonError();
  for (auto& [k, v] : kwargs) {
    PyRef a = real_arg(v);
    if (!a)
      graph_break("module_built_in_forward", what + " with a " + v->type_name() + " argument " + k,
                  kHint);
    if (PyDict_SetItemString(kw.get(), k.c_str(), a.get()) < 0) throw PythonError();
  }
  PyRef meta = torch_api().meta_device;
  PyRef enter = PyRef::steal(PyObject_CallMethod(meta.get(), "__enter__", nullptr));
  if (!enter) throw PythonError();
  PyRef r = PyRef::steal(PyObject_Call(fn, pos.get(), kw.get()));
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyRef exit =
      PyRef::steal(PyObject_CallMethod(meta.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!exit) throw PythonError();
  PyErr_Restore(t, v, tb);
  if (!r) raise_current_error(what + " raised while tracing");
  return r;
}

// Breaks unless `m` and its submodules hold no parameter, buffer or tensor attribute.
void check_tensor_free(PyObject* m, const std::string& what) {
  std::string held = first_tensor_held(m);
  if (!held.empty())
    graph_break("module_built_in_forward",
                what + " holds " + held + ", which eager makes anew on every call", kHint);
}

// A real functools.partial for a Partial value of constants; null when a part is traced.
PyRef real_partial(const ValuePtr& p) {
  static PyObject* partial_type = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("functools"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "partial") : nullptr;
    if (!t) throw PythonError();
    return t;  // NOTE: kept for the process lifetime, like the module
  }();
  PyRef args = PyRef::steal(PyTuple_New(p->items.size() + 1));
  PyRef kw = PyRef::steal(PyDict_New());
  if (!args || !kw) throw PythonError();
  PyTuple_SET_ITEM(args.get(), 0, PyRef(p->self->obj).release());
  for (size_t i = 0; i < p->items.size(); ++i) {
    PyRef c = p->items[i]->is_tensor() ? PyRef() : const_tuple(p->items[i]);
    if (!c) return {};
    PyTuple_SET_ITEM(args.get(), i + 1, c.release());
  }
  for (size_t i = 0; i < p->keys.size(); ++i) {
    PyRef c = p->kwdefaults[i]->is_tensor() ? PyRef() : const_tuple(p->kwdefaults[i]);
    if (!c || PyDict_SetItem(kw.get(), p->keys[i].get(), c.get()) < 0) return {};
  }
  PyRef r = PyRef::steal(PyObject_Call(partial_type, args.get(), kw.get()));
  if (!r) throw PythonError();
  return r;
}

}  // namespace

bool Tracer::is_fresh_module(const ValuePtr& v) {
  return v && v->kind == VKind::Module && !v->source && v->flag;
}

ValuePtr Tracer::construct_module(PyObject* cls, std::vector<ValuePtr> args, KwArgs kwargs) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  std::string what = std::string("constructing ") + type->tp_name + " in traced code";
  PyRef init_name = PyRef::steal(PyUnicode_FromString("__init__"));
  PyObject* init = _PyType_Lookup(type, init_name.get());  // borrowed
  PyRef new_name = PyRef::steal(PyUnicode_FromString("__new__"));
  bool plain_new =
      _PyType_Lookup(type, new_name.get()) == _PyType_Lookup(&PyBaseObject_Type, new_name.get());
  if (Py_TYPE(cls)->tp_call != PyType_Type.tp_call || !plain_new || !init ||
      !PyFunction_Check(init))
    graph_break("module_built_in_forward",
                what +
                    ": its class has a custom __new__, "
                    "metaclass or a C __init__",
                kHint);
  ValuePtr m = Value::of_kind(VKind::Module);
  m->flag = true;  // made by traced code: its own attribute writes are applied for real
  if (is_torch_nn_function(init)) {
    m->obj = call_real_meta(cls, args, kwargs, what);
  } else {
    m->obj = PyRef::steal(type->tp_new(type, PyRef::steal(PyTuple_New(0)).get(), nullptr));
    if (!m->obj) throw PythonError();
    args.insert(args.begin(), m);
    ValuePtr r = inline_function(init, nullptr, nullptr, std::move(args), kwargs);
    if (!(r->is_const() && r->obj.get() == Py_None))
      raise_user(PyExc_TypeError, "__init__() should return None, not '" + r->type_name() + "'");
  }
  ctx_.keep_alive.push_back(m->obj);
  check_tensor_free(m->obj.get(), what);
  return m;
}

std::optional<ValuePtr> Tracer::fresh_module_call(PyObject* func, const std::vector<ValuePtr>& args,
                                                  const KwArgs& kwargs) {
  if (args.empty() || !is_fresh_module(args[0]) || !is_torch_nn_function(func)) return std::nullopt;
  // NOTE: a Sequential slice holds the frame's own modules (Tracer::slice_sequential): torch.nn
  // code on it (`.eval()`, `.to()`) is traced, so what it does to them is too.
  if (sliced_children(args[0])) return std::nullopt;
  for (size_t i = 1; i < args.size(); ++i)
    if (!real_arg(args[i])) return std::nullopt;  // forward(x) and the like: traced
  for (auto& [k, v] : kwargs)
    if (!real_arg(v)) return std::nullopt;
  std::vector<ValuePtr> rest(args.begin() + 1, args.end());
  std::vector<ValuePtr> all = {Value::constant(args[0]->obj)};
  all.insert(all.end(), rest.begin(), rest.end());
  PyRef r = call_real_meta(func, all, kwargs, "torch.nn code on a module built in traced code");
  if (is_type(r.get(), torch_api().tensor_type))
    graph_break("module_built_in_forward",
                "torch.nn code on a module built in traced code "
                "returned a tensor",
                kHint);
  return ctx_.wrap(r.get(), nullptr);
}

void Tracer::store_fresh_module_attr(const ValuePtr& m, const std::string& name,
                                     const ValuePtr& v) {
  PyRef real;
  if (v->kind == VKind::Module && !v->source)
    real = v->obj;
  else if (v->is_const() && (is_immutable_constant(v->obj.get()) || PyCallable_Check(v->obj.get())))
    real = v->obj;
  else if (v->kind == VKind::Tuple)
    real = const_tuple(v);
  else if (v->kind == VKind::Method && v->self == m && v->obj && PyFunction_Check(v->obj.get()))
    real = PyRef::steal(PyMethod_New(v->obj.get(), m->obj.get()));  // self.act = self._impl
  else if (v->kind == VKind::Partial && v->self->is_const())  // functools.partial(F.gelu, ...)
    real = real_partial(v);
  if (!real)
    graph_break("module_built_in_forward",
                "storing a " + v->type_name() + " in attribute " + name +
                    " of a module built in traced code",
                kHint);
  if (PyObject_SetAttrString(m->obj.get(), name.c_str(), real.get()) < 0)
    raise_current_error("setting attribute " + name);
}

}  // namespace tl::capture
