// Calling an nn.Module: what nn.Module._call_impl does, inlined. Forward pre-hooks (global
// then the module's), forward, then forward hooks run as traced calls, so a hook that scales
// an input or replaces the output lands in the graph like any other code.
//
// Guards: each hook dict is read through its source, so its length, every key and every hook's
// identity are guarded (registering or removing a hook recompiles); an empty dict costs one
// length guard. Backward hooks still break: they wrap the module's inputs and outputs in
// autograd BackwardHook nodes (torch.utils.hooks), which a captured graph does not create.
// `always_call` forward hooks only differ from the others when forward raises, and an
// exception in traced code runs the module call eagerly, where _call_impl calls them.
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

PyObject* module_module() {  // torch.nn.modules.module, borrowed (kept for the process lifetime)
  static PyObject* m = [] {
    PyObject* r = PyImport_ImportModule("torch.nn.modules.module");
    if (!r) throw PythonError();
    return r;
  }();
  return m;
}

// The hook dicts of one module call: the module's own and torch's global ones.
class Hooks {
 public:
  Hooks(CaptureContext& ctx, const ValuePtr& module) : ctx_(ctx), module_(module) {}

  // dict `name` of the module (global: of torch.nn.modules.module) as a Dict value, or null
  // when it is empty. Guarded either way; a constant when the module has no source.
  ValuePtr dict(const char* name, bool global) {
    PyObject* owner = global ? module_module() : module_->obj.get();
    PyRef d = PyRef::steal(PyObject_GetAttrString(owner, name));
    if (!d) {
      clear_expected_error();  // a module whose __init__ did not run Module.__init__: no hooks
      return nullptr;
    }
    if (!PyDict_Check(d.get())) graph_break("module_hooks", std::string(name) + " is not a dict");
    ir::SourcePtr src;
    if (global)
      src =
          ir::Source::attr(ir::Source::held(PyRef::borrow(owner), "torch.nn.modules.module"), name);
    else if (module_->source)
      src = ir::Source::attr(module_->source, name);
    Py_ssize_t n = PyDict_Size(d.get());
    if (n == 0) {
      if (src) ctx_.guards().add_empty_dict_attr(src->base, owner, name);
      return nullptr;
    }
    if (!src) return Value::constant(d);   // not guardable: forward() refuses it below
    ValuePtr v = ctx_.wrap(d.get(), src);  // TYPE + LENGTH, and each key's item by identity
    TL_CHECK(v->kind == VKind::Dict) << "hook dict " << name << " did not wrap as a dict";
    return v;
  }

 private:
  CaptureContext& ctx_;
  const ValuePtr& module_;
};

bool dict_has(const ValuePtr& d, PyObject* key) { return d && dict_find(d, key) >= 0; }

std::vector<std::pair<PyRef, ValuePtr>> entries(const ValuePtr& a, const ValuePtr& b) {
  std::vector<std::pair<PyRef, ValuePtr>> out;
  for (const ValuePtr& d : {a, b})
    if (d)
      for (size_t i = 0; i < d->keys.size(); ++i) out.emplace_back(d->keys[i], d->items[i]);
  return out;
}

bool is_none(const ValuePtr& v) { return v->is_const() && v->obj.get() == Py_None; }

bool is_tuple(const ValuePtr& v) {
  return v->kind == VKind::Tuple || (v->is_const() && PyTuple_Check(v->obj.get()));
}

ValuePtr kwargs_dict(const KwArgs& kwargs) {
  ValuePtr d = Value::of_kind(VKind::Dict);
  for (auto& [k, v] : kwargs) {
    d->keys.push_back(PyRef::steal(PyUnicode_FromString(k.c_str())));
    d->items.push_back(v);
  }
  return d;
}

}  // namespace

ValuePtr Tracer::call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs) {
  PyObject* m = module->obj.get();
  PyTypeObject* type = Py_TYPE(m);
  Hooks hooks(ctx_, module);
  for (const char* name : {"_backward_hooks", "_backward_pre_hooks"})
    if (hooks.dict(name, false))
      graph_break("unsupported_callable",
                  std::string("module with ") + name +
                      " registered: backward hooks wrap the module's inputs and outputs in "
                      "autograd BackwardHook nodes, which torchlite does not capture; the module "
                      "call runs eagerly");
  for (const char* name : {"_global_backward_hooks", "_global_backward_pre_hooks"})
    if (hooks.dict(name, true))
      graph_break("unsupported_callable",
                  std::string("global backward hooks registered (") + name +
                      "): they wrap module inputs and outputs in autograd BackwardHook nodes, "
                      "which torchlite does not capture; module calls run eagerly");
  ValuePtr pre = hooks.dict("_forward_pre_hooks", false);
  ValuePtr post = hooks.dict("_forward_hooks", false);
  ValuePtr global_pre = hooks.dict("_global_forward_pre_hooks", true);
  ValuePtr global_post = hooks.dict("_global_forward_hooks", true);

  for (const ValuePtr& d : {pre, post})
    if (d && d->kind != VKind::Dict)
      graph_break("unsupported_callable",
                  "module with forward hooks that is not reachable from the frame's arguments, "
                  "globals or attributes (its hooks cannot be guarded)");
  PyRef call_name = PyRef::steal(PyUnicode_FromString("__call__"));
  PyObject* call_impl = _PyType_Lookup(type, call_name.get());
  if (call_impl != torch_api().module_call.get()) {
    if (pre || post || global_pre || global_post)
      graph_break("unsupported_callable", "module with a custom __call__ and forward hooks");
    if (call_impl && PyFunction_Check(call_impl)) {
      args.insert(args.begin(), module);
      return inline_function(call_impl, nullptr, nullptr, std::move(args), kwargs);
    }
    graph_break("unsupported_callable", "module with a custom __call__");
  }
  // NOTE: _call_impl reads self.forward before any pre-hook runs.
  const bool direct = ctx_.direct_call.caller == this && ctx_.direct_call.module == module.get();
  ctx_.direct_call = {};
  ValuePtr forward = get_attr(module, "forward");
  if (!pre && !post && !global_pre && !global_post) {
    // NOTE: with no hook, the module call's result is forward's: forward's frame stands for it.
    if (direct && forward->kind == VKind::Method && !forward->flag &&
        forward->method_name.empty() && forward->obj && PyFunction_Check(forward->obj.get()))
      ctx_.direct_call = {this, forward->obj.get(), nullptr};
    return call(forward, std::move(args), std::move(kwargs));
  }

  if (pre || global_pre) {
    ValuePtr with_kwargs = pre ? hooks.dict("_forward_pre_hooks_with_kwargs", false) : nullptr;
    for (auto& [id, hook] : entries(global_pre, pre)) {
      if (dict_has(with_kwargs, id.get())) {
        ValuePtr kw = kwargs_dict(kwargs);
        ValuePtr r = call(hook, {module, Value::tuple(args), kw}, {});
        if (is_none(r)) {
          kwargs.clear();  // the hook may have changed the dict in place
          for (size_t i = 0; i < kw->keys.size(); ++i)
            kwargs.emplace_back(utf8(kw->keys[i].get()), kw->items[i]);
          continue;
        }
        std::vector<ValuePtr> pair;
        if (!is_tuple(r) || (pair = iterate(r)).size() != 2)
          graph_break("user_exception",
                      "forward pre-hook must return None or a tuple of (new_args, new_kwargs)");
        args = iterate(pair[0]);
        if (pair[1]->kind != VKind::Dict)
          graph_break("module_hooks", "forward pre-hook returned kwargs that are not a dict");
        kwargs.clear();
        for (size_t i = 0; i < pair[1]->keys.size(); ++i)
          kwargs.emplace_back(utf8(pair[1]->keys[i].get()), pair[1]->items[i]);
      } else {
        ValuePtr r = call(hook, {module, Value::tuple(args)}, {});
        if (is_none(r)) continue;
        args = is_tuple(r) ? iterate(r) : std::vector<ValuePtr>{r};
      }
    }
  }
  ValuePtr result = call(forward, args, kwargs);
  if (post || global_post) {
    ValuePtr with_kwargs = post ? hooks.dict("_forward_hooks_with_kwargs", false) : nullptr;
    ValuePtr global_with_kwargs =
        global_post ? hooks.dict("_global_forward_hooks_with_kwargs", true) : nullptr;
    for (auto& [id, hook] : entries(global_post, post)) {
      ValuePtr r;
      if (dict_has(with_kwargs, id.get()) || dict_has(global_with_kwargs, id.get()))
        r = call(hook, {module, Value::tuple(args), kwargs_dict(kwargs), result}, {});
      else
        r = call(hook, {module, Value::tuple(args), result}, {});
      if (!is_none(r)) result = r;
    }
  }
  return result;
}

}  // namespace tl::capture
