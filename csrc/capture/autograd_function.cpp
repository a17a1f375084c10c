// torch.autograd.Function.apply in traced code. When autograd will not record the call (grad
// mode off, or no tensor argument requires grad), apply only runs `forward` with grad mode
// off and hands its outputs back: that is inlined, with a torch FunctionCtx (plain Python:
// save_for_backward and friends only store attributes on it) as `ctx`. A call autograd records
// needs the Function's backward: the graph gets one node calling `Fn.apply`
// (torchlite/_custom_function.py), run on meta tensors here. Run op by op, autograd records
// the user's Function as in eager; compiled for training, the joint trace runs the node under
// its recording dispatch mode, so the user's forward joins the compiled forward and the user's
// backward (ctx.saved_tensors, needs_input_grad, once_differentiable, non-differentiable
// outputs) the compiled backward.
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"
#include "core/python_helpers.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

PyObject* function_attr(const char* name) {  // borrowed, kept for the process lifetime
  PyRef m = PyRef::steal(PyImport_ImportModule("torch.autograd.function"));
  PyObject* a = m ? PyObject_GetAttrString(m.get(), name) : nullptr;
  if (!a) throw PythonError();
  return a;  // NOTE: a reference kept for the process lifetime, like the module
}

bool requires_grad(const ValuePtr& v) {
  if (!v->is_tensor()) return false;
  PyRef rg = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "requires_grad"));
  if (!rg) throw PythonError();
  return rg.get() == Py_True;
}

// True when some tensor of `out` (a tensor or a tuple/list of them) is one of `args`.
bool returns_an_input(const ValuePtr& out, const std::vector<ValuePtr>& args) {
  if (out->is_sequence()) {
    for (auto& item : out->items)
      if (returns_an_input(item, args)) return true;
    return false;
  }
  if (!out->is_tensor()) return false;
  for (auto& a : args)
    if (a == out || (a->is_tensor() && a->node == out->node)) return true;
  return false;
}

}  // namespace

namespace {
// Function.apply as torch defines it: up to torch 2.13 a Python classmethod
// (its __func__ is kept), from 2.14 a C classmethod (the descriptor is kept).
PyObject* function_apply() {
  static PyObject* apply = [] {
    PyRef descr = PyRef::steal(
        PyObject_GetAttrString(function_attr("Function"), "__dict__"));  // mappingproxy
    PyObject* cm = descr ? PyMapping_GetItemString(descr.get(), "apply") : nullptr;
    if (!cm) throw PythonError();
    if (Py_TYPE(cm) == &PyClassMethodDescr_Type) return cm;
    PyObject* f = PyObject_GetAttrString(cm, "__func__");
    Py_DECREF(cm);
    if (!f) throw PythonError();
    return f;  // NOTE: kept for the process lifetime, like the class
  }();
  return apply;
}
}  // namespace

bool detail::is_autograd_function_apply(PyObject* fn) { return fn == function_apply(); }

PyObject* detail::autograd_function_of_c_apply(PyObject* fn) {
  PyObject* apply = function_apply();
  if (Py_TYPE(apply) != &PyClassMethodDescr_Type || !PyCFunction_Check(fn)) return nullptr;
  // `Cls.apply` of a C classmethod: a builtin method bound to the class, running the
  // descriptor's C function.
  auto* descr = reinterpret_cast<PyMethodDescrObject*>(apply);
  PyObject* self = PyCFunction_GET_SELF(fn);
  if (!self || !PyType_Check(self) ||
      reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_meth != descr->d_method->ml_meth)
    return nullptr;
  return self;
}

// The compiled halves fix what the Function's forward, setup_context and backward read from
// their module when traced (`x * SCALE`): each global holding a number or string is guarded
// by value, so a new value compiles again; one holding a mutable value breaks the graph
// (torchlite/_custom_function.py, state_reads).
void Tracer::guard_state_reads(PyObject* cls, const char* hint) {
  PyRef reads =
      PyRef::steal(PyObject_CallOneArg(python_helper("custom_function.state_reads").get(), cls));
  if (!reads) throw PythonError();
  if (PyUnicode_Check(reads.get()))
    graph_break("autograd_function", utf8(reads.get()) + ": it runs eagerly", hint);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(reads.get()); ++i) {
    PyObject* read = PyList_GET_ITEM(reads.get(), i);  // (globals, name, value), borrowed
    PyObject* globals = PyTuple_GET_ITEM(read, 0);
    ir::SourcePtr src = ir::Source::item(ir::Source::held(PyRef::borrow(globals), "globals"),
                                         PyRef::borrow(PyTuple_GET_ITEM(read, 1)));
    ctx_.guards().add_equals_match(src, PyTuple_GET_ITEM(read, 2));
  }
}

ValuePtr Tracer::call_recorded_function(const ValuePtr& cls, const std::string& name,
                                        std::vector<ValuePtr>& args) {
  const char* hint =
      "run inference under torch.no_grad() or torch.inference_mode(), or write the op with "
      "torch functions so autograd derives its backward";
  // NOTE: under autocast eager casts inside the user's forward (custom_fwd decides how); the
  // joint trace runs without autocast (its casts are the graph's own nodes).
  if (ctx_.autocast_on)
    graph_break("autograd_function",
                name + ".apply() with an input that requires grad inside an autocast region: " +
                    "it runs eagerly",
                hint);
  PyRef forward = PyRef::steal(PyObject_GetAttrString(cls->obj.get(), "forward"));
  if (!forward) throw PythonError();
  if (!PyFunction_Check(forward.get()))
    graph_break("autograd_function", name + ".forward is not a Python function");
  guard_state_reads(cls->obj.get(), hint);
  std::vector<ValuePtr> call_args{cls};
  call_args.insert(call_args.end(), args.begin(), args.end());
  try {
    return ctx_.record_op(python_helper("custom_function.apply").get(), "", call_args, {});
  } catch (const GraphBreak& b) {
    graph_break("autograd_function",
                name + ".apply() with an input that requires grad could not run on meta " +
                    "tensors (" + b.reason() + "); it runs eagerly",
                hint);
  }
}

ValuePtr Tracer::call_autograd_function(const ValuePtr& cls, std::vector<ValuePtr>& args,
                                        KwArgs& kwargs) {
  if (!cls->is_const() || !PyType_Check(cls->obj.get()) || !kwargs.empty())
    graph_break("autograd_function",
                "autograd.Function.apply on a " + cls->type_name() + " or with keyword arguments");
  std::string name = reinterpret_cast<PyTypeObject*>(cls->obj.get())->tp_name;
  bool records = false;
  if (ctx_.grad_enabled())
    for (auto& a : args) records = records || requires_grad(a);
  PyObject* type = cls->obj.get();
  if (records) return call_recorded_function(cls, name, args);
  PyRef forward = PyRef::steal(PyObject_GetAttrString(type, "forward"));
  PyRef setup = PyRef::steal(PyObject_GetAttrString(type, "setup_context"));
  PyRef base_setup =
      PyRef::steal(PyObject_GetAttrString(function_attr("_SingleLevelFunction"), "setup_context"));
  if (!forward || !setup || !base_setup) throw PythonError();
  if (!PyFunction_Check(forward.get()))
    graph_break("autograd_function", name + ".forward is not a Python function");
  // NOTE: forward(*args) with a separate setup_context(ctx, inputs, output) is the newer style.
  bool separate_setup = setup.get() != base_setup.get();
  ValuePtr fctx = call(Value::constant(PyRef::borrow(function_attr("FunctionCtx"))), {}, {});
  std::vector<ValuePtr> needs;
  for (size_t i = 0; i < args.size(); ++i) needs.push_back(const_bool(false));
  store_attr(fctx, "needs_input_grad", Value::tuple(needs));
  struct NoGrad {  // apply runs forward without grad; restored on every way out
    CaptureContext& ctx;
    bool was = ctx.grad_enabled();
    explicit NoGrad(CaptureContext& c) : ctx(c) {
      if (was) ctx.set_grad_mode(false);
    }
    ~NoGrad() {
      if (was) ctx.set_grad_mode(true);
    }
  };
  ValuePtr out;
  {
    NoGrad no_grad(ctx_);
    std::vector<ValuePtr> fwd_args = args;
    if (!separate_setup) fwd_args.insert(fwd_args.begin(), fctx);
    out = call(Value::constant(forward), fwd_args, {});
    if (separate_setup) call(Value::constant(setup), {fctx, Value::tuple(args), out}, {});
  }
  // NOTE: apply hands back an input returned as is as a new view of it.
  if (returns_an_input(out, args))
    graph_break("autograd_function", name + ".forward returns one of its inputs unchanged");
  return out;
}

}  // namespace tl::capture
