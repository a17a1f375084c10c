#include "capture/constant_fold.h"

#include "capture/context.h"
#include "capture/torch_api.h"
#include "core/errors.h"
#include "ir/effects.h"

namespace tl::capture {
namespace {

// NOTE: a fold runs the real op at trace time: only results this small are worth it (a size, a
// count, a few offsets); `torch.zeros(4096, 4096)` of constants stays a graph node only.
constexpr int64_t kMaxFoldedElements = 64;

bool any_folded(const ValuePtr& v) {
  if (!v) return false;
  if (v->is_tensor()) return static_cast<bool>(v->folded);
  if (!v->is_sequence()) return false;
  for (const ValuePtr& item : v->items)
    if (any_folded(item)) return true;
  return false;
}

// The real value of `v` when the trace knows it: a constant, a folded tensor, or a tuple/list
// of those; null (no error set) otherwise. Symbolic ints it read go to `sized`.
PyRef real_value(const ValuePtr& v, std::vector<ValuePtr>& sized) {
  if (!v) return {};
  if (v->is_const()) {
    if (v->sym || v->fsym || v->sym_slice) sized.push_back(v);
    return v->obj;
  }
  if (v->is_tensor()) {
    if (!v->folded) return {};
    sized.insert(sized.end(), v->folded_sizes.begin(), v->folded_sizes.end());
    return v->folded;
  }
  if (!v->is_sequence()) return {};
  bool tuple = v->kind == VKind::Tuple;
  Py_ssize_t n = static_cast<Py_ssize_t>(v->items.size());
  PyRef seq = PyRef::steal(tuple ? PyTuple_New(n) : PyList_New(n));
  if (!seq) throw PythonError();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyRef item = real_value(v->items[i], sized);
    if (!item) return {};
    if (tuple)
      PyTuple_SET_ITEM(seq.get(), i, item.release());
    else
      PyList_SET_ITEM(seq.get(), i, item.release());
  }
  return seq;
}

// Ops whose result is not a function of their operands' values: random draws, uninitialised
// memory, generator state, hooks.
bool not_a_function_of_operands(const std::string& name) {
  for (const char* word :
       {"rand", "normal", "bernoulli", "multinomial", "poisson", "uniform", "exponential", "cauchy",
        "geometric", "dropout", "empty", "seed", "hook", "print"})
    if (name.find(word) != std::string::npos) return true;
  return false;
}

bool is_cpu(PyObject* device) {
  PyRef type = device ? PyRef::steal(PyObject_GetAttrString(device, "type")) : PyRef();
  if (!type) {
    clear_expected_error();
    return false;
  }
  return PyUnicode_CompareWithASCIIString(type.get(), "cpu") == 0;
}

// The call eager makes: target(*pos, **kw), or pos[0].<method>(*pos[1:], **kw). New reference,
// or null with the error cleared.
PyRef call_real(PyObject* target, const std::string& method, PyObject* pos, PyObject* kw) {
  PyRef result;
  if (method.empty()) {
    result = PyRef::steal(PyObject_Call(target, pos, kw));
  } else if (PyTuple_GET_SIZE(pos) > 0) {
    PyRef bound = PyRef::steal(PyObject_GetAttrString(PyTuple_GET_ITEM(pos, 0), method.c_str()));
    PyRef rest = bound ? PyRef::steal(PyTuple_GetSlice(pos, 1, PyTuple_GET_SIZE(pos))) : PyRef();
    if (rest) result = PyRef::steal(PyObject_Call(bound.get(), rest.get(), kw));
  }
  if (!result) clear_expected_error();
  return result;
}

// Whether the trace knows `v`'s real value: a constant, a folded tensor, a tuple/list of those.
bool known(const ValuePtr& v) {
  if (!v) return false;
  if (v->is_const()) return true;
  if (v->is_tensor()) return static_cast<bool>(v->folded);
  if (!v->is_sequence()) return false;
  for (const ValuePtr& item : v->items)
    if (!known(item)) return false;
  return true;
}

// `v` with each folded one-element tensor (also inside a tuple/list) replaced by its number;
// `changed` set when one was.
ValuePtr with_numbers(CaptureContext& ctx, const ValuePtr& v, bool& changed) {
  if (!v) return v;
  if (v->is_tensor() && v->folded) {
    PyRef numel = PyRef::steal(PyObject_CallMethod(v->folded.get(), "numel", nullptr));
    if (!numel) throw PythonError();
    if (PyLong_AsLongLong(numel.get()) != 1) return v;
    auto number = folded_call(ctx, v, "item");
    if (!number) return v;
    changed = true;
    return *number;
  }
  if (!v->is_sequence() || !any_folded(v)) return v;
  std::vector<ValuePtr> items;
  for (const ValuePtr& item : v->items) items.push_back(with_numbers(ctx, item, changed));
  ValuePtr copy =
      v->kind == VKind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  copy->named_type = v->named_type;
  return copy;
}

}  // namespace

void fold_result(CaptureContext& ctx, PyObject* target, const std::string& method,
                 const std::vector<ValuePtr>& args, const FoldKwArgs& kwargs, const ir::Node& node,
                 const ValuePtr& out) {
  if (!ctx.folding_on) return;
  bool folded_operand = false;
  for (const ValuePtr& a : args) folded_operand = folded_operand || any_folded(a);
  for (const auto& kv : kwargs) folded_operand = folded_operand || any_folded(kv.second);
  if (ir::writes_operand(node) || ir::visible_effect(node)) {
    if (folded_operand) ctx.folding_on = false;
    return;
  }
  if (!out || !out->is_tensor() || !node.meta) return;
  for (const ValuePtr& a : args)
    if (!known(a)) return;
  for (const auto& kv : kwargs)
    if (!known(kv.second)) return;
  int64_t numel = 1;
  for (int64_t d : node.meta->sizes) numel *= d;
  if (numel > kMaxFoldedElements || not_a_function_of_operands(node.target_name) ||
      !is_cpu(out->device.get()))
    return;
  std::vector<ValuePtr> sized;
  PyRef pos = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  PyRef kw = PyRef::steal(PyDict_New());
  if (!pos || !kw) throw PythonError();
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef r = real_value(args[i], sized);
    if (!r) return;
    PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), r.release());
  }
  for (const auto& [k, v] : kwargs) {
    PyRef r = real_value(v, sized);
    if (!r) return;
    if (PyDict_SetItemString(kw.get(), k.c_str(), r.get()) < 0) throw PythonError();
  }
  PyRef result = call_real(target, method, pos.get(), kw.get());
  // NOTE: the exact tensor type only (a subclass would bring code of its own to __index__).
  if (!result ||
      Py_TYPE(result.get()) != reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get()))
    return;
  out->folded = result;
  out->folded_sizes = std::move(sized);
}

std::optional<std::pair<std::vector<ValuePtr>, FoldKwArgs>> with_folded_numbers(
    CaptureContext& ctx, const std::string& method, const std::vector<ValuePtr>& args,
    const FoldKwArgs& kwargs) {
  if (!ctx.folding_on) return std::nullopt;
  size_t first = method.empty() ? 0 : 1;
  bool any = false;
  for (size_t i = first; i < args.size(); ++i) any = any || any_folded(args[i]);
  for (const auto& kv : kwargs) any = any || any_folded(kv.second);
  if (!any) return std::nullopt;
  bool changed = false;
  std::vector<ValuePtr> new_args;
  for (size_t i = 0; i < args.size(); ++i)
    new_args.push_back(i < first ? args[i] : with_numbers(ctx, args[i], changed));
  FoldKwArgs new_kwargs;
  for (const auto& [k, v] : kwargs) new_kwargs.emplace_back(k, with_numbers(ctx, v, changed));
  // NOTE: nothing replaced (a folded tensor of several elements): no retry, so no loop.
  if (!changed) return std::nullopt;
  return std::make_pair(std::move(new_args), std::move(new_kwargs));
}

std::optional<ValuePtr> folded_call(CaptureContext& ctx, const ValuePtr& t, const char* method) {
  if (!ctx.folding_on || !t || !t->is_tensor() || !t->folded) return std::nullopt;
  PyRef r = PyRef::steal(PyObject_CallMethod(t->folded.get(), method, nullptr));
  if (!r) {
    clear_expected_error();
    return std::nullopt;  // NOTE: eager raises the same; the caller's break runs it there
  }
  for (const ValuePtr& s : t->folded_sizes) ctx.specialise(s);
  return ctx.from_result(r.get());
}

}  // namespace tl::capture
