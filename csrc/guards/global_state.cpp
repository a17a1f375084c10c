#include "guards/global_state.h"

#include "core/errors.h"
#include "core/torch_state.h"

namespace tl::guards {

namespace {
// torch's query functions, looked up once on first use; owned by a table that
// is never freed (it must outlive every GuardSet; Py_Finalize is not run).
struct Queries {
  NoArgsQuery grad;                      // torch.is_grad_enabled()
  NoArgsQuery inference;                 // torch.is_inference_mode_enabled()
  NoArgsQuery default_dtype;             // torch.get_default_dtype()
  NoArgsQuery any_autocast;              // torch._C._is_any_autocast_enabled(), may be absent
  PyObject* autocast = nullptr;          // torch.is_autocast_enabled(device_type)
  PyObject* autocast_dtype = nullptr;    // torch.get_autocast_dtype(device_type), may be null
  NoArgsQuery function_mode;             // torch._C._is_torch_function_mode_enabled()
  NoArgsQuery function_modes;            // torch._C._len_torch_function_stack()
  PyObject* function_mode_at = nullptr;  // torch._C._get_function_stack_at(i)
  NoArgsQuery dispatch_modes;            // torch._C._len_torch_dispatch_stack(), may be absent
  PyObject* dispatch_mode_at = nullptr;  // torch._C._get_dispatch_stack_at(i)
  PyObject* cpu = nullptr;               // "cpu"
  PyObject* cuda = nullptr;              // "cuda"
};

PyObject* must_get(PyObject* obj, const char* name) {
  PyObject* r = PyObject_GetAttrString(obj, name);  // new reference, kept forever
  if (!r) throw PythonError();
  return r;
}

const Queries& queries() {
  static Queries* q = nullptr;  // the GIL serialises initialisation
  if (q) return *q;
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  if (!torch) throw PythonError();
  PyRef c = PyRef::steal(PyImport_ImportModule("torch._C"));
  if (!c) throw PythonError();
  auto* n = new Queries();
  n->grad = NoArgsQuery(must_get(torch.get(), "is_grad_enabled"));
  n->inference = NoArgsQuery(must_get(torch.get(), "is_inference_mode_enabled"));
  n->default_dtype = NoArgsQuery(must_get(torch.get(), "get_default_dtype"));
  n->autocast = must_get(torch.get(), "is_autocast_enabled");
  n->autocast_dtype = PyObject_GetAttrString(torch.get(), "get_autocast_dtype");
  if (!n->autocast_dtype) PyErr_Clear();  // older torch: the dtype is not guarded
  PyObject* any_autocast = PyObject_GetAttrString(c.get(), "_is_any_autocast_enabled");
  if (!any_autocast) PyErr_Clear();  // older torch: query cpu and cuda instead
  n->any_autocast = NoArgsQuery(any_autocast);
  // NOTE: all five or none (an older torch without them: modes are not guarded).
  PyObject* function_mode = PyObject_GetAttrString(c.get(), "_is_torch_function_mode_enabled");
  PyObject* function_modes = PyObject_GetAttrString(c.get(), "_len_torch_function_stack");
  n->function_mode_at = PyObject_GetAttrString(c.get(), "_get_function_stack_at");
  PyObject* dispatch_modes = PyObject_GetAttrString(c.get(), "_len_torch_dispatch_stack");
  n->dispatch_mode_at = PyObject_GetAttrString(c.get(), "_get_dispatch_stack_at");
  if (!function_mode || !function_modes || !n->function_mode_at || !dispatch_modes ||
      !n->dispatch_mode_at) {
    PyErr_Clear();
  } else {
    n->function_mode = NoArgsQuery(function_mode);
    n->function_modes = NoArgsQuery(function_modes);
    n->dispatch_modes = NoArgsQuery(dispatch_modes);
  }
  n->cpu = PyUnicode_InternFromString("cpu");
  n->cuda = PyUnicode_InternFromString("cuda");
  q = n;
  return *q;
}

// Calls fn(arg?) and returns its result as a new reference; throws on error.
PyRef call(PyObject* fn, PyObject* arg = nullptr) {
  PyObject* r = arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn);
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

PyRef call(const NoArgsQuery& query) {
  PyObject* r = query.call();
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

bool call_bool(PyObject* fn, PyObject* arg = nullptr) { return call(fn, arg).get() == Py_True; }
bool call_bool(const NoArgsQuery& query) { return call(query).get() == Py_True; }

bool any_autocast(const Queries& q) {
  if (q.any_autocast) return call_bool(q.any_autocast);
  return call_bool(q.autocast, q.cpu) || call_bool(q.autocast, q.cuda);
}

// The autocast dtype of `device` when enabled there, else null.
PyRef autocast_dtype(const Queries& q, bool enabled, PyObject* device) {
  if (!enabled || !q.autocast_dtype) return {};
  return call(q.autocast_dtype, device);
}

// Whether a mode of a mode stack (stack_len() entries, stack_at(i) each) acts on the frame's
// ops: torchlite's own modes (explain's op counter, the training recorder) are marked
// `_torchlite_transparent_mode` and let capture go on.
bool stack_has_user_mode(const NoArgsQuery& stack_len, PyObject* stack_at) {
  PyRef n = call(stack_len);
  long len = PyLong_AsLong(n.get());
  if (len == -1 && PyErr_Occurred()) throw PythonError();
  for (long i = 0; i < len; ++i) {
    PyRef index = PyRef::steal(PyLong_FromLong(i));
    if (!index) throw PythonError();
    PyRef mode = call(stack_at, index.get());
    PyRef mark = PyRef::steal(PyObject_GetAttrString(mode.get(), "_torchlite_transparent_mode"));
    if (!mark) PyErr_Clear();
    if (mark.get() != Py_True) return true;
  }
  return false;
}

// NOTE: asked on every guard check, so the common case (no mode on either stack) is the one
// cheap check of core/torch_state.h; the stacks are walked only when one is not empty.
bool modes_active(const Queries& q) {
  if (!q.function_mode || torch_mode_stacks_empty()) return false;
  if (call_bool(q.function_mode) && stack_has_user_mode(q.function_modes, q.function_mode_at))
    return true;
  return stack_has_user_mode(q.dispatch_modes, q.dispatch_mode_at);
}

const char* py_bool(bool b) { return b ? "True" : "False"; }

std::string str_of(PyObject* v) {
  PyRef s = PyRef::steal(PyObject_Str(v));
  const char* c = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "?";
}
}  // namespace

bool torch_modes_active() { return modes_active(queries()); }

GlobalState::GlobalState() {
  const Queries& q = queries();
  grad_ = call_bool(q.grad);
  inference_ = call_bool(q.inference);
  modes_ = modes_active(q);
  default_dtype_ = call(q.default_dtype);
  any_autocast_ = any_autocast(q);
  if (any_autocast_) {
    autocast_cpu_ = call_bool(q.autocast, q.cpu);
    autocast_cuda_ = call_bool(q.autocast, q.cuda);
    autocast_cpu_dtype_ = autocast_dtype(q, autocast_cpu_, q.cpu);
    autocast_cuda_dtype_ = autocast_dtype(q, autocast_cuda_, q.cuda);
  }
}

bool GlobalState::check() const {
  const Queries& q = queries();
  if (call_bool(q.grad) != grad_) return false;
  if (call_bool(q.inference) != inference_) return false;
  if (modes_active(q) != modes_) return false;
  if (call(q.default_dtype).get() != default_dtype_.get()) return false;  // dtypes are singletons
  if (!any_autocast_) return !any_autocast(q);
  if (call_bool(q.autocast, q.cpu) != autocast_cpu_ ||
      call_bool(q.autocast, q.cuda) != autocast_cuda_)
    return false;
  // dtypes are singletons
  return autocast_dtype(q, autocast_cpu_, q.cpu).get() == autocast_cpu_dtype_.get() &&
         autocast_dtype(q, autocast_cuda_, q.cuda).get() == autocast_cuda_dtype_.get();
}

std::string GlobalState::mismatch() const {
  const Queries& q = queries();
  if (call_bool(q.grad) != grad_)
    return std::string("grad mode changed (was ") + py_bool(grad_) + ")";
  if (call_bool(q.inference) != inference_)
    return std::string("inference mode changed (was ") + py_bool(inference_) + ")";
  if (modes_active(q) != modes_)
    return std::string("a torch function or dispatch mode ") + (modes_ ? "was left" : "is active");
  PyRef dtype = call(q.default_dtype);
  if (dtype.get() != default_dtype_.get())
    return "default dtype changed (was " + str_of(default_dtype_.get()) + ", now " +
           str_of(dtype.get()) + ")";
  std::string was =
      std::string("cpu=") + py_bool(autocast_cpu_) + " cuda=" + py_bool(autocast_cuda_);
  if (autocast_cpu_dtype_) was += " cpu_dtype=" + str_of(autocast_cpu_dtype_.get());
  if (autocast_cuda_dtype_) was += " cuda_dtype=" + str_of(autocast_cuda_dtype_.get());
  return "autocast state changed (was " + was + ")";
}

std::string GlobalState::str() const {
  std::string s = std::string("GLOBAL_STATE grad_mode=") + py_bool(grad_) +
                  " inference_mode=" + py_bool(inference_) +
                  " default_dtype=" + str_of(default_dtype_.get());
  if (modes_) s += " torch_modes=True";
  if (!any_autocast_) return s + " autocast=False";
  s += " autocast_cpu=" + std::string(py_bool(autocast_cpu_)) +
       " autocast_cuda=" + py_bool(autocast_cuda_);
  if (autocast_cpu_dtype_) s += " autocast_cpu_dtype=" + str_of(autocast_cpu_dtype_.get());
  if (autocast_cuda_dtype_) s += " autocast_cuda_dtype=" + str_of(autocast_cuda_dtype_.get());
  return s;
}

}  // namespace tl::guards
