#include "capture/scalar_inputs.h"

#include <cmath>
#include <unordered_set>

#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture {

namespace {

bool is_scalar(const ValuePtr& v) { return v && v->is_const() && v->scalar; }

PyRef torch_attr(const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(torch_api().torch.get(), name));
  if (!r) throw PythonError();
  return r;
}

// torch.result_type(a, b) of two objects (meta tensors, numbers), a new reference.
PyRef result_type(PyObject* a, PyObject* b) {
  static PyObject* fn = torch_attr("result_type").release();  // NOTE: kept for the process
  PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(fn, a, b, nullptr));
  if (!r) throw PythonError();
  return r;
}

bool dtype_is(PyObject* dtype, const char* attr) {
  PyRef flag = PyRef::steal(PyObject_GetAttrString(dtype, attr));
  if (!flag) throw PythonError();
  return flag.get() == Py_True;
}

PyRef dtype_of(PyObject* meta) {
  PyRef d = PyRef::steal(PyObject_GetAttrString(meta, "dtype"));
  if (!d) throw PythonError();
  return d;
}

int dim_of(PyObject* meta) {
  PyRef d = PyRef::steal(PyObject_CallMethod(meta, "dim", nullptr));
  if (!d) throw PythonError();
  return static_cast<int>(PyLong_AsLong(d.get()));
}

// A 0-d meta tensor of `dtype`, for promotion checks.
PyRef meta_scalar(PyObject* dtype) {
  static PyObject* empty = torch_attr("empty").release();
  PyRef args = PyRef::steal(Py_BuildValue("(())"));
  PyRef kwargs = PyRef::steal(
      Py_BuildValue("{s:O,s:O}", "dtype", dtype, "device", torch_api().meta_device.get()));
  if (!args || !kwargs) throw PythonError();
  PyRef t = PyRef::steal(PyObject_Call(empty, args.get(), kwargs.get()));
  if (!t) throw PythonError();
  return t;
}

bool same_dtype(PyObject* a, PyObject* b) {
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) throw PythonError();
  return eq == 1;
}

// The graph input of scalar `s` on `device` (borrowed), cast to `dtype` (no cast when it is the
// input's own dtype).
ValuePtr operand(CaptureContext& ctx, const ValuePtr& s, PyObject* device, PyObject* dtype) {
  ValuePtr t = ctx.scalar_input_tensor(s, device);
  if (same_dtype(dtype_of(t->meta.get()).get(), dtype)) return t;
  return ctx.record_op(nullptr, "to", {t, Value::constant(PyRef::borrow(dtype))}, {});
}

// Arithmetic and comparisons with a tensor and a number, where the number may be a 0-d tensor
// of the dtype the op converts it to: eager's result dtype and values.
const std::unordered_set<std::string>& binary_ops() {
  static const std::unordered_set<std::string> names = {
      "add",         "sub",          "mul",          "div",        "true_divide", "truediv",
      "multiply",    "subtract",     "divide",       "rsub",       "pow",         "iadd",
      "isub",        "imul",         "itruediv",     "ipow",       "add_",        "sub_",
      "mul_",        "div_",         "pow_",         "__add__",    "__radd__",    "__iadd__",
      "__sub__",     "__rsub__",     "__isub__",     "__mul__",    "__rmul__",    "__imul__",
      "__truediv__", "__rtruediv__", "__itruediv__", "__div__",    "__rdiv__",    "__pow__",
      "__rpow__",    "__ipow__",     "lt",           "le",         "gt",          "ge",
      "eq",          "ne",           "__lt__",       "__le__",     "__gt__",      "__ge__",
      "__eq__",      "__ne__",       "less",         "less_equal", "greater",     "greater_equal",
      "not_equal"};
  return names;
}

bool is_operator_module_fn(PyObject* target, const std::string& name) {
  if (!target) return false;
  PyRef f = PyRef::steal(PyObject_GetAttrString(torch_api().operator_module.get(), name.c_str()));
  if (!f) {
    PyErr_Clear();
    return false;
  }
  return f.get() == target;
}

// `x <op> s` (either side for operator-module functions, the number second for torch functions
// and methods, as they take it): the op on a 0-d tensor of the number. Null when not one.
ValuePtr binary(CaptureContext& ctx, PyObject* target, const std::string& method,
                const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!kwargs.empty() || args.size() != 2 || !binary_ops().count(name)) return nullptr;
  const bool either = method.empty() && is_operator_module_fn(target, name);
  int at = -1;
  if (is_scalar(args[1]) && args[0]->is_tensor())
    at = 1;
  else if (either && is_scalar(args[0]) && args[1]->is_tensor())
    at = 0;
  if (at < 0) return nullptr;
  const ValuePtr& s = args[at];
  const ValuePtr& other = args[1 - at];
  // Eager converts the number to the operands' common dtype (torch.result_type with the
  // number as a Python scalar).
  PyRef common = result_type(other->meta.get(), s->obj.get());
  // NOTE: `x ** n` with ints raises for a negative n in eager, a tensor exponent does not.
  if (name.find("pow") != std::string::npos && !dtype_is(common.get(), "is_floating_point"))
    return nullptr;
  // NOTE: half and bfloat16 arithmetic keeps a number in float32 (opmath) next to a tensor
  // with dimensions, whose dtype the result keeps; a 0-d tensor of another dtype changes the
  // result dtype only next to another 0-d tensor. A comparison converts the number to the
  // common dtype (`x == 0.1` of a half x compares with half(0.1)).
  static const std::unordered_set<std::string> comparisons = {
      "lt",       "le",     "gt",     "ge",     "eq",   "ne",         "__lt__",  "__le__",
      "__gt__",   "__ge__", "__eq__", "__ne__", "less", "less_equal", "greater", "greater_equal",
      "not_equal"};
  PyRef cast = common;
  if (!comparisons.count(name) && dim_of(other->meta.get()) > 0 &&
      (same_dtype(common.get(), torch_attr("float16").get()) ||
       same_dtype(common.get(), torch_attr("bfloat16").get())))
    cast = torch_attr("float32");
  if (!same_dtype(result_type(other->meta.get(), meta_scalar(cast.get()).get()).get(),
                  common.get()))
    return nullptr;
  std::vector<ValuePtr> rewritten = args;
  rewritten[at] = operand(ctx, s, other->device.get(), cast.get());
  return ctx.record_op(target, method, rewritten, kwargs);
}

// `x.masked_fill(mask, s)`, `torch.masked_fill(x, mask, s)` of a floating x: the number is
// converted to x's dtype, as eager converts it.
ValuePtr masked_fill(CaptureContext& ctx, PyObject* target, const std::string& method,
                     const std::string& name, const std::vector<ValuePtr>& args,
                     const KwArgs& kwargs) {
  if (name != "masked_fill" && name != "masked_fill_") return nullptr;
  if (!kwargs.empty() || args.size() != 3 || !is_scalar(args[2]) || !args[0]->is_tensor() ||
      !args[1]->is_tensor())
    return nullptr;
  if (method.empty() && target != torch_attr("masked_fill").get()) return nullptr;
  PyRef dtype = dtype_of(args[0]->meta.get());
  // NOTE: an int tensor raises in eager for a number out of its range; a cast would wrap.
  if (!dtype_is(dtype.get(), "is_floating_point")) return nullptr;
  std::vector<ValuePtr> rewritten = args;
  rewritten[2] = operand(ctx, args[2], args[0]->device.get(), dtype.get());
  return ctx.record_op(target, method, rewritten, kwargs);
}

// `x.add(y, alpha=s)`, `torch.add/sub(x, y, alpha=s)`, `x.add_(y, alpha=s)` of tensors with a
// floating result: `x + y * a` with `a` the number as a 0-d tensor of the op's compute dtype
// (float32 for half/bfloat16); a 16-bit result takes the number rounded to its dtype, computes
// in float32 and rounds once, as eager. NOTE: an integral result raises in eager for a
// float alpha; an in-place form with a 16-bit or promoted result would round differently: both
// keep the value guard.
ValuePtr add_alpha(CaptureContext& ctx, PyObject* target, const std::string& method,
                   const std::string& name, const std::vector<ValuePtr>& args,
                   const KwArgs& kwargs) {
  static const std::unordered_set<std::string> names = {"add",  "sub",  "subtract",
                                                        "add_", "sub_", "subtract_"};
  if (!names.count(name) || args.size() != 2 || kwargs.size() != 1 || kwargs[0].first != "alpha" ||
      !is_scalar(kwargs[0].second) || !args[0]->is_tensor() || !args[1]->is_tensor())
    return nullptr;
  if (method.empty() && target != torch_attr(name.c_str()).get()) return nullptr;
  const bool inplace = name.back() == '_';
  const bool subtract = name.rfind("sub", 0) == 0;
  const ValuePtr &x = args[0], &y = args[1];
  PyRef result = result_type(x->meta.get(), y->meta.get());
  if (!dtype_is(result.get(), "is_floating_point") || dtype_is(result.get(), "is_complex"))
    return nullptr;
  PyRef compute = result;
  if (same_dtype(result.get(), torch_attr("float16").get()) ||
      same_dtype(result.get(), torch_attr("bfloat16").get()))
    compute = torch_attr("float32");
  if (inplace && !(same_dtype(compute.get(), result.get()) &&
                   same_dtype(dtype_of(x->meta.get()).get(), result.get())))
    return nullptr;
  auto to = [&](const ValuePtr& t, PyObject* dtype) {
    if (same_dtype(dtype_of(t->meta.get()).get(), dtype)) return t;
    return ctx.record_op(nullptr, "to", {t, Value::constant(PyRef::borrow(dtype))}, {});
  };
  // NOTE: eager rounds alpha to the result dtype first (half(s)), then computes in float32
  ValuePtr a = to(operand(ctx, kwargs[0].second, x->device.get(), result.get()), compute.get());
  ValuePtr scaled = ctx.record_op(nullptr, "mul", {to(y, compute.get()), a}, {});
  if (inplace) return ctx.record_op(nullptr, subtract ? "sub_" : "add_", {x, scaled}, {});
  ValuePtr r = ctx.record_op(nullptr, subtract ? "sub" : "add", {to(x, compute.get()), scaled}, {});
  return to(r, result.get());
}

// `torch.where(cond, x, s)` / `torch.where(cond, s, x)`: the number in the dtype eager
// promotes it to with x.
ValuePtr where(CaptureContext& ctx, PyObject* target, const std::string& method,
               const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!method.empty() || !kwargs.empty() || args.size() != 3 || !args[0]->is_tensor() ||
      target != torch_attr("where").get())
    return nullptr;
  int at = is_scalar(args[2]) && args[1]->is_tensor()   ? 2
           : is_scalar(args[1]) && args[2]->is_tensor() ? 1
                                                        : -1;
  if (at < 0) return nullptr;
  const ValuePtr& other = args[at == 1 ? 2 : 1];
  PyRef common = result_type(other->meta.get(), args[at]->obj.get());
  if (!same_dtype(result_type(other->meta.get(), meta_scalar(common.get()).get()).get(),
                  common.get()))
    return nullptr;
  std::vector<ValuePtr> rewritten = args;
  rewritten[at] = operand(ctx, args[at], other->device.get(), common.get());
  return ctx.record_op(target, method, rewritten, kwargs);
}

// `x.clamp(min=s)`, `torch.clamp(x, lo, hi)`, `clip`, `clamp_min`/`clamp_max` of a floating x
// with every bound given a scalar value (or None): the bounds in x's dtype, as eager converts
// them.
ValuePtr clamp(CaptureContext& ctx, PyObject* target, const std::string& method,
               const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  static const std::unordered_set<std::string> names = {
      "clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max", "clamp_min_", "clamp_max_"};
  if (!names.count(name) || args.empty() || !args[0]->is_tensor()) return nullptr;
  if (method.empty() && target != torch_attr(name.c_str()).get()) return nullptr;
  PyRef dtype = dtype_of(args[0]->meta.get());
  if (!dtype_is(dtype.get(), "is_floating_point")) return nullptr;
  auto none = [](const ValuePtr& v) { return v->is_const() && v->obj.get() == Py_None; };
  bool any = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (!is_scalar(args[i]) && !none(args[i])) return nullptr;
    any = any || is_scalar(args[i]);
  }
  for (const auto& [k, v] : kwargs) {
    if ((k != "min" && k != "max") || (!is_scalar(v) && !none(v))) return nullptr;
    any = any || is_scalar(v);
  }
  if (!any) return nullptr;
  PyObject* device = args[0]->device.get();
  std::vector<ValuePtr> a = args;
  KwArgs k = kwargs;
  for (size_t i = 1; i < a.size(); ++i)
    if (is_scalar(a[i])) a[i] = operand(ctx, a[i], device, dtype.get());
  for (auto& kv : k)
    if (is_scalar(kv.second)) kv.second = operand(ctx, kv.second, device, dtype.get());
  return ctx.record_op(target, method, a, k);
}

// `torch.full(size, s)` (dtype= and device= as constants at most): the number as a 0-d tensor
// of the result's dtype, expanded to the size and copied (a fresh contiguous tensor, as full's).
ValuePtr full(CaptureContext& ctx, PyObject* target, const std::string& method,
              const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!method.empty() || args.size() != 2 || !is_scalar(args[1]) ||
      target != torch_attr("full").get())
    return nullptr;
  PyRef dtype, device;
  for (const auto& [k, v] : kwargs) {
    if (!v->is_const() || v->sym || v->scalar) return nullptr;
    if (k == "dtype" && v->obj.get() != Py_None)
      dtype = v->obj;
    else if (k == "device" && v->obj.get() != Py_None)
      device = PyRef::steal(PyObject_CallOneArg(torch_api().device_type.get(), v->obj.get()));
    else if (k != "dtype" && k != "device")
      return nullptr;
    if (k == "device" && v->obj.get() != Py_None && !device) throw PythonError();
  }
  const ValuePtr& s = args[1];
  if (!dtype) {
    PyRef fn = torch_attr("get_default_dtype");
    dtype = PyFloat_CheckExact(s->obj.get()) ? PyRef::steal(PyObject_CallNoArgs(fn.get()))
                                             : torch_attr("int64");
    if (!dtype) throw PythonError();
  }
  if (!device)
    device = PyRef::steal(PyObject_CallFunction(torch_api().device_type.get(), "s", "cpu"));
  if (!device) throw PythonError();
  ValuePtr t = operand(ctx, s, device.get(), dtype.get());
  ValuePtr expanded = ctx.record_op(nullptr, "expand", {t, args[0]}, {});
  return ctx.record_op(nullptr, "clone", {expanded}, {});
}

// `torch.full_like(x, s)` (dtype= as a constant at most) of a contiguous x whose result is
// floating: the number as a 0-d tensor of the result's dtype, expanded to x's size and copied
// (contiguous, as full_like of a contiguous x). NOTE: an integer result converts the number in
// eager with its own range checks, and other layouts keep their strides: those keep the value
// guard.
ValuePtr full_like(CaptureContext& ctx, PyObject* target, const std::string& method,
                   const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!method.empty() || args.size() != 2 || !args[0]->is_tensor() || !is_scalar(args[1]) ||
      target != torch_attr("full_like").get())
    return nullptr;
  PyRef dtype = dtype_of(args[0]->meta.get());
  for (const auto& [k, v] : kwargs) {
    if (k != "dtype" || !v->is_const() || v->sym || v->scalar) return nullptr;
    if (v->obj.get() != Py_None) dtype = v->obj;
  }
  if (!dtype_is(dtype.get(), "is_floating_point")) return nullptr;
  PyRef contiguous =
      PyRef::steal(PyObject_CallMethod(args[0]->meta.get(), "is_contiguous", nullptr));
  if (!contiguous) throw PythonError();
  if (contiguous.get() != Py_True) return nullptr;
  ValuePtr t = operand(ctx, args[1], args[0]->device.get(), dtype.get());
  ValuePtr expanded = ctx.record_op(nullptr, "expand_as", {t, args[0]}, {});
  return ctx.record_op(nullptr, "clone", {expanded}, {});
}

}  // namespace

ValuePtr scalar_argument(CaptureContext& ctx, PyObject* n, const ir::SourcePtr& src) {
  if (!src || !(PyFloat_CheckExact(n) || PyLong_CheckExact(n))) return nullptr;
  if (PyLong_CheckExact(n)) {
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(n, &overflow);
    if (overflow) return nullptr;
  }
  ValuePtr v = Value::constant(PyRef::borrow(n), src);
  v->scalar = true;
  ctx.any_scalar = true;
  ctx.guards().add_number_type(src, n);
  return v;
}

ValuePtr scalar_conversion(CaptureContext& ctx, const ValuePtr& fn, const ValuePtr& arg) {
  if (!is_scalar(arg) || !fn->is_const()) return nullptr;
  PyObject* f = fn->obj.get();
  const bool to_int = f == reinterpret_cast<PyObject*>(&PyLong_Type);
  if (!to_int && f != reinterpret_cast<PyObject*>(&PyFloat_Type)) return nullptr;
  const bool is_int = PyLong_CheckExact(arg->obj.get());
  if (is_int == to_int) return arg;  // NOTE: int(n) and float(s) are n and s themselves
  if (to_int) {
    // NOTE: int() of inf or nan raises: the guard keeps the float finite and within int64,
    // which only a number read from the frame can have.
    const double d = PyFloat_AS_DOUBLE(arg->obj.get());
    if (!arg->source ||
        !(std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      return nullptr;
    ctx.guards().add_number_type(arg->source, arg->obj.get(), /*narrow=*/true);
  }
  PyRef r = PyRef::steal(PyObject_CallOneArg(f, arg->obj.get()));
  if (!r) throw PythonError();
  ValuePtr v = Value::constant(r);
  v->scalar = true;
  v->scalar_fn = PyRef::borrow(f);
  v->scalar_args = {arg};
  return v;
}

namespace {

constexpr double kNarrow = 2147483648.0;  // 2**31: the range guard of an int input (narrow)

// A bound on |v| for an int operand of scalar int arithmetic, over every call its guards pass:
// a plain int its own size, an int input 2**31 (the narrow guard it gets when the graph computes
// with it; infinite when this call's number is beyond it), int(s) of a float 2**63, and an
// expression its operands' bounds combined.
double int_bound(const ValuePtr& v, int depth = 0) {
  PyObject* o = v->obj.get();
  if (!v->scalar) return std::fabs(PyLong_AsDouble(o));
  if (!v->scalar_fn) return std::fabs(PyLong_AsDouble(o)) <= kNarrow ? kNarrow : INFINITY;
  if (v->scalar_fn.get() == reinterpret_cast<PyObject*>(&PyLong_Type) || depth > 16)
    return INFINITY;
  const std::string name = detail::attr_str(v->scalar_fn.get(), "__name__");
  const double a = int_bound(v->scalar_args[0], depth + 1);
  if (name == "neg" || name == "floordiv") return a;  // NOTE: |n // c| <= |n| for |c| >= 1
  const double b = int_bound(v->scalar_args[1], depth + 1);
  if (name == "mod") return b;
  return name == "mul" ? a * b : a + b;
}

}  // namespace

ValuePtr scalar_arith(PyObject* op, const std::vector<ValuePtr>& args) {
  std::string name = detail::attr_str(op, "__name__");
  // NOTE: `s += 1` on a number is `s = s + 1`
  static const std::unordered_set<std::string> inplace = {"iadd",     "isub",      "imul",
                                                          "itruediv", "ifloordiv", "imod"};
  if (inplace.count(name)) name = name.substr(1);
  const bool unary = args.size() == 1;
  const bool divides = name == "floordiv" || name == "mod";
  if (unary ? name != "neg"
            : !(name == "add" || name == "sub" || name == "mul" || name == "truediv" || divides))
    return nullptr;
  bool any = false, any_float = false;
  for (const ValuePtr& a : args) {
    if (!a->is_const() || a->sym || a->fsym || a->sym_slice) return nullptr;
    PyObject* o = a->obj.get();
    if (!PyFloat_CheckExact(o) && !PyLong_CheckExact(o)) return nullptr;
    any = any || a->scalar;
    any_float = any_float || PyFloat_CheckExact(o);
  }
  if (!any) return nullptr;
  if (name == "truediv" && (args[1]->scalar || !any_float)) return nullptr;
  // NOTE: `//` and `%` only of ints by a plain nonzero int (Python raises for 0, CUDA does not;
  // float floor division rounds its own way).
  if (divides && (any_float || args[1]->scalar)) return nullptr;
  PyRef fn = PyRef::steal(PyObject_GetAttrString(torch_api().operator_module.get(), name.c_str()));
  if (!fn) throw PythonError();
  PyRef r = PyRef::steal(unary ? PyObject_CallOneArg(fn.get(), args[0]->obj.get())
                               : PyObject_CallFunctionObjArgs(fn.get(), args[0]->obj.get(),
                                                              args[1]->obj.get(), nullptr));
  if (!r) {
    PyErr_Clear();  // NOTE: the ordinary path raises it again
    return nullptr;
  }
  ValuePtr v = Value::constant(r);
  v->scalar = true;
  v->scalar_fn = fn;
  v->scalar_args = args;
  if (PyLong_CheckExact(r.get())) {
    // NOTE: CPython's ints do not overflow, the graph's int64 does: only where every call the
    // guards pass stays far within int64.
    if (!(int_bound(v) < 4611686018427387904.0)) return nullptr;  // 2**62
  } else if (!PyFloat_CheckExact(r.get())) {
    return nullptr;
  }
  return v;
}

ValuePtr scalar_expression_tensor(CaptureContext& ctx, const ValuePtr& v, PyObject* device) {
  PyObject* f = v->scalar_fn.get();
  const bool to_int = f == reinterpret_cast<PyObject*>(&PyLong_Type);
  const bool to_float = f == reinterpret_cast<PyObject*>(&PyFloat_Type);
  PyRef f64 = torch_attr("float64");
  auto to = [&](ValuePtr t, PyObject* dtype) {
    if (same_dtype(dtype_of(t->meta.get()).get(), dtype)) return t;
    return ctx.record_op(nullptr, "to", {t, Value::constant(PyRef::borrow(dtype))}, {});
  };
  // int arithmetic stays in int64: its int inputs get the narrow guard int_bound assumed
  const bool int_result = !to_int && PyLong_CheckExact(v->obj.get());
  std::vector<ValuePtr> operands;
  for (const ValuePtr& a : v->scalar_args) {
    if (!a->scalar) {
      operands.push_back(a);
      continue;
    }
    if (int_result && !a->scalar_fn)
      ctx.guards().add_number_type(a->source, a->obj.get(), /*narrow=*/true);
    ValuePtr t = ctx.scalar_input_tensor(a, device);
    // NOTE: arithmetic with a float result converts ints to doubles first, as CPython does.
    operands.push_back(to_int || int_result ? t : to(t, f64.get()));
  }
  bool any_tensor = false;
  for (const ValuePtr& o : operands) any_tensor = any_tensor || o->is_tensor();
  if (!any_tensor) {
    // NOTE: every number it was computed from was pinned since (guarded by value: another use
    // read it as a constant), so this one is a constant too: its trace-time number.
    PyRef fn = torch_attr("scalar_tensor");
    PyRef dtype = torch_attr(PyFloat_CheckExact(v->obj.get()) ? "float64" : "int64");
    return ctx.record_op(
        fn.get(), "", {Value::constant(v->obj)},
        {{"dtype", Value::constant(dtype)}, {"device", Value::constant(PyRef::borrow(device))}});
  }
  if (to_int) {
    // int(s): truncated toward zero (the guard holds s finite and within int64)
    ValuePtr t = ctx.record_op(nullptr, "trunc", {operands[0]}, {});
    return to(t, torch_attr("int64").get());
  }
  if (to_float) return operands[0];
  return ctx.record_op(f, "", operands, {});
}

ValuePtr scalar_op(CaptureContext& ctx, PyObject* target, const std::string& method,
                   const std::vector<ValuePtr>& args,
                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  bool any = false;
  for (const ValuePtr& a : args) any = any || is_scalar(a);
  for (const auto& kv : kwargs) any = any || is_scalar(kv.second);
  if (any) {
    const std::string name = method.empty() ? detail::attr_str(target, "__name__") : method;
    ValuePtr r = binary(ctx, target, method, name, args, kwargs);
    if (!r) r = masked_fill(ctx, target, method, name, args, kwargs);
    if (!r) r = clamp(ctx, target, method, name, args, kwargs);
    if (!r) r = where(ctx, target, method, args, kwargs);
    if (!r) r = full(ctx, target, method, args, kwargs);
    if (!r) r = full_like(ctx, target, method, args, kwargs);
    if (!r) r = add_alpha(ctx, target, method, name, args, kwargs);
    if (r) return r;
  }
  for (const ValuePtr& a : args) ctx.specialise_scalars(a);
  for (const auto& kv : kwargs) ctx.specialise_scalars(kv.second);
  return nullptr;
}

}  // namespace tl::capture
