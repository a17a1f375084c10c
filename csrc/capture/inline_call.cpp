// Inlining a Python function: argument binding, defaults, closures.
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

// The real object behind a value whose identity the guards pin down: a
// constant, a module or object, or a bound method of one (made anew). Null
// when there is none (tensors, containers built while tracing).
PyRef materialize(const ValuePtr& v) {
  if (v->is_const()) return v->obj;
  if ((v->kind == VKind::Module || v->kind == VKind::Object) && v->obj && !v->attrs) return v->obj;
  if (v->kind == VKind::Method && v->obj && PyFunction_Check(v->obj.get()) && v->self) {
    PyRef self = materialize(v->self);
    if (!self) return {};
    PyRef m = PyRef::steal(PyMethod_New(v->obj.get(), self.get()));
    if (!m) throw PythonError();
    return m;
  }
  return {};
}

// inspect.signature reads a callable's code and attributes only; its body
// (id() memo tables, enum-heavy Parameter objects) is not worth tracing, so it
// runs for real on the materialised callable and its result is a constant.
bool is_introspection(PyObject* func) {
  static PyObject* signature = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("inspect"));
    PyObject* f = m ? PyObject_GetAttrString(m.get(), "signature") : nullptr;
    if (!f) clear_expected_error();
    return f;  // NOTE: kept for the process lifetime, like the module
  }();
  return func && func == signature;
}

}  // namespace

ValuePtr Tracer::inline_function(PyObject* func, ir::SourcePtr func_src, const ValuePtr& made,
                                 std::vector<ValuePtr> args, const KwArgs& kwargs) {
  // NOTE: only the first inline after a CALL may be that call (a hook or a dunder run first is
  // not).
  const bool direct = func && ctx_.direct_call.caller == this && ctx_.direct_call.func == func;
  ctx_.direct_call = {};
  if (auto r = fresh_module_call(func, args, kwargs)) return *r;
  if (is_introspection(func)) {
    std::vector<ValuePtr> real;
    for (auto& a : args)
      if (PyRef r = materialize(a)) real.push_back(Value::constant(r));
    bool kw_const = true;
    for (auto& [k, v] : kwargs) kw_const = kw_const && v->is_const();
    if (real.size() == args.size() && kw_const) return call_pure(ctx_, func, real, kwargs);
  }
  PyCodeObject* code =
      reinterpret_cast<PyCodeObject*>(func ? PyFunction_GET_CODE(func) : made->obj.get());
  PyObject* globals = func ? PyFunction_GET_GLOBALS(func) : globals_;
  int argcount = code->co_argcount, posonly = code->co_posonlyargcount,
      kwonly = code->co_kwonlyargcount;
  bool varargs = code->co_flags & CO_VARARGS, varkw = code->co_flags & CO_VARKEYWORDS;
  std::string fname = utf8(code->co_name);
  std::vector<ValuePtr> locals(code->co_nlocalsplus);
  auto param_name = [&](int i) { return utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)); };

  std::vector<ValuePtr> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < argcount)
      locals[i] = args[i];
    else
      extra.push_back(args[i]);
  }
  if (!extra.empty() && !varargs)
    graph_break("user_exception", fname + "() got too many positional arguments");
  ValuePtr kwdict = Value::of_kind(VKind::Dict);
  for (auto& [k, v] : kwargs) {
    int found = -1;
    for (int i = posonly; i < argcount + kwonly; ++i)
      if (param_name(i) == k) found = i;
    if (found >= 0) {
      if (locals[found])
        graph_break("user_exception", fname + "() got multiple values for '" + k + "'");
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
  // NOTE: a function defined in a function is a new object each run, guarded by its code
  // (CaptureContext::wrap): its defaults and cells are read through its source, and guarded
  // as values. Any other function's are read from the tuple, dict and cells it holds now;
  // assigning __defaults__ or __kwdefaults__ later must recompile.
  const bool through_source = func && guarded_by_code(func, func_src);
  if (!through_source && func &&
      (PyFunction_GET_DEFAULTS(func) || PyFunction_GET_KW_DEFAULTS(func)))
    ctx_.guards().add_function_defaults(ir::Source::held(PyRef::borrow(func), "function " + fname),
                                        func);
  if (func) {
    PyObject* d = PyFunction_GET_DEFAULTS(func);
    if (d) {
      ir::SourcePtr tuple = through_source
                                ? ir::Source::attr(func_src, "__defaults__")
                                : ir::Source::held(PyRef::borrow(d), "defaults of " + fname);
      if (through_source) ctx_.guards().add_length_match(tuple, PyTuple_GET_SIZE(d));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d); ++i)
        defaults.push_back(ctx_.wrap(PyTuple_GET_ITEM(d, i),
                                     ir::Source::item(tuple, PyRef::steal(PyLong_FromSsize_t(i))),
                                     through_source));
    }
  } else {
    defaults = made->items;
  }
  int first_default = argcount - static_cast<int>(defaults.size());
  for (int i = 0; i < argcount; ++i) {
    if (locals[i]) continue;
    if (i >= first_default)
      locals[i] = defaults[i - first_default];
    else
      graph_break("user_exception", fname + "() missing required argument '" + param_name(i) + "'");
  }
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (locals[i]) continue;
    std::string n = param_name(i);
    bool filled = false;
    if (func) {
      PyObject* kwd = PyFunction_GET_KW_DEFAULTS(func);
      PyObject* v = kwd ? PyDict_GetItemString(kwd, n.c_str()) : nullptr;
      if (v) {
        ir::SourcePtr dict = through_source
                                 ? ir::Source::attr(func_src, "__kwdefaults__")
                                 : ir::Source::held(PyRef::borrow(kwd), "kwdefaults of " + fname);
        locals[i] = ctx_.wrap(
            v, ir::Source::item(dict, PyRef::steal(PyUnicode_FromString(n.c_str()))));  // mutable
        filled = true;
      }
    } else {
      for (size_t j = 0; j < made->keys.size(); ++j)
        if (utf8(made->keys[j].get()) == n) {
          locals[i] = made->kwdefaults[j];
          filled = true;
        }
    }
    if (!filled)
      graph_break("user_exception", fname + "() missing keyword-only argument '" + n + "'");
  }
  int slot = argcount + kwonly;
  if (varargs) locals[slot++] = Value::tuple(std::move(extra));
  if (varkw) locals[slot++] = kwdict;

  std::vector<ValuePtr> cells;
  if (func) {
    PyObject* closure = PyFunction_GET_CLOSURE(func);
    if (closure) {
      ir::SourcePtr tuple = through_source ? ir::Source::attr(func_src, "__closure__") : nullptr;
      if (tuple) ctx_.guards().add_length_match(tuple, PyTuple_GET_SIZE(closure));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(closure); ++i) {
        PyObject* cell = PyTuple_GET_ITEM(closure, i);
        PyObject* contents = PyCell_GET(cell);
        ir::SourcePtr cell_src = tuple
                                     ? ir::Source::item(tuple, PyRef::steal(PyLong_FromSsize_t(i)))
                                     : ir::Source::held(PyRef::borrow(cell), "cell");
        ir::SourcePtr contents_src = ir::Source::attr(cell_src, "cell_contents");
        // NOTE: an empty cell keeps its source too: a write to it is a write to the real cell
        // (a graph break), never one the trace alone would see.
        ValuePtr c = Value::cell(contents ? ctx_.wrap(contents, contents_src) : nullptr);
        c->source = contents_src;
        cells.push_back(c);
      }
    }
  } else {
    cells = made->cells;
  }
  if (code->co_flags & CO_GENERATOR) {
    // NOTE: the body runs only when the generator is iterated, one yield at a time.
    auto body = std::make_shared<Tracer>(ctx_, code, globals, builtins_, depth_ + 1, true);
    body->start(std::move(locals), std::move(cells));
    ctx_.generators.push_back(body);
    return lazy_iterator(generator_iter(std::move(body)), "generator");
  }
  Tracer sub(ctx_, code, globals, builtins_, depth_ + 1, false);
  // A frame resumable on its own after a break inside it (capture.h, ResumePlan::nested): the
  // CALL's own frame, with no cells of its own (the resume function would need them in its
  // closure) and a closure that is the function's, not one made per call.
  PyObject* closure = func ? PyFunction_GET_CLOSURE(func) : nullptr;
  sub.nestable_ = direct && code->co_ncellvars == 0 &&
                  !(code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) &&
                  (!closure || !through_source);
  if (sub.nestable_ && closure) sub.closure_ = PyRef::borrow(closure);
  const auto& path = ctx_.stop_path;
  const size_t next = static_cast<size_t>(depth_) + 1;
  sub.on_path_ = on_path_ && sub.nestable_ && next < path.size() &&
                 static_cast<int>(pc_) - 1 == path[depth_].index && path[next].code == code;
  return sub.run(std::move(locals), std::move(cells));
}

}  // namespace tl::capture
