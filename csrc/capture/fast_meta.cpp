#include "capture/fast_meta.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "capture/dtype_promotion.h"
#include "capture/fast_meta_ops.h"
#include "capture/meta_layout.h"
#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

struct DTypes {
  std::vector<std::pair<PyObject*, DType>> table;  // torch.<dtype> -> DType
  PyObject* strided;
};

const DTypes& dtypes() {
  // NOTE: built once under the GIL; torch's dtype objects are immortal singletons.
  static const DTypes* d = [] {
    auto* d = new DTypes();
    PyObject* torch = torch_api().torch.get();
    const std::pair<const char*, DType> names[] = {
        {"bool", DType::Bool},       {"uint8", DType::UInt8},       {"int8", DType::Int8},
        {"int16", DType::Int16},     {"int32", DType::Int32},       {"int64", DType::Int64},
        {"float16", DType::Float16}, {"bfloat16", DType::BFloat16}, {"float32", DType::Float32},
        {"float64", DType::Float64}};
    for (auto [name, dt] : names) {
      PyObject* o = PyObject_GetAttrString(torch, name);
      if (!o) throw PythonError();
      d->table.emplace_back(o, dt);
    }
    d->strided = PyObject_GetAttrString(torch, "strided");
    if (!d->strided) throw PythonError();
    return d;
  }();
  return *d;
}

DType to_dtype(PyObject* o) {
  for (auto [obj, dt] : dtypes().table)
    if (obj == o) return dt;
  return DType::Other;
}

PyObject* from_dtype(DType d) {
  for (auto [obj, dt] : dtypes().table)
    if (dt == d) return obj;
  return nullptr;
}

// Thrown (and caught in fast_meta_call) when a call is not one answered here.
struct NotHandled {};

PyRef attr(PyObject* o, const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!r) throw PythonError();
  return r;
}

Dims ints_of(PyObject* seq) {
  if (!PyTuple_Check(seq)) throw NotHandled();
  Dims out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i) {
    PyObject* v = PyTuple_GET_ITEM(seq, i);
    if (!PyLong_CheckExact(v)) throw NotHandled();  // SymInts and the like
    out.push_back(PyLong_AsLongLong(v));
  }
  throw_if_python_error();
  return out;
}

struct Tensor {
  Layout layout;
  DType dtype;
  bool requires_grad;
};

bool is_plain_tensor(PyObject* o) {
  return Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get());
}

// A plain strided meta tensor of a modelled dtype with elements, or NotHandled.
Tensor read_tensor(PyObject* o) {
  if (!is_plain_tensor(o)) throw NotHandled();
  if (attr(o, "is_meta").get() != Py_True || attr(o, "layout").get() != dtypes().strided)
    throw NotHandled();
  Tensor t;
  t.dtype = to_dtype(attr(o, "dtype").get());
  if (t.dtype == DType::Other) throw NotHandled();
  t.layout.sizes = ints_of(attr(o, "shape").get());
  PyRef strides = PyRef::steal(PyObject_CallMethod(o, "stride", nullptr));
  if (!strides) throw PythonError();
  t.layout.strides = ints_of(strides.get());
  // NOTE: empty tensors have corner cases (legacy cat of 1-d empties, size-0 strides).
  if (numel(t.layout.sizes) == 0) throw NotHandled();
  t.requires_grad = attr(o, "requires_grad").get() == Py_True;
  return t;
}

// One operand: a tensor or a Python bool/int/float.
struct Operand {
  std::optional<Tensor> tensor;
  PromotionArg promo;
};

Operand read_operand(PyObject* o) {
  Operand op;
  if (PyBool_Check(o)) {
    op.promo.kind = PromotionArg::Bool;
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    throw_if_python_error();
    // NOTE: wide integers overflow some dtypes; such calls go to torch.
    if (overflow || v > (1LL << 31) || v < -(1LL << 31)) throw NotHandled();
    op.promo.kind = PromotionArg::Int;
  } else if (PyFloat_CheckExact(o)) {
    op.promo.kind = PromotionArg::Float;
  } else {
    op.tensor = read_tensor(o);
    op.promo = {PromotionArg::Tensor, op.tensor->dtype, op.tensor->layout.sizes.empty()};
  }
  return op;
}

// The call's arguments as one list (self first for methods) and its keywords.
struct Call {
  std::vector<PyObject*> args;
  PyObject* kwargs;           // may be null
  bool number_first = false;  // operator.add(2, x); torch.add and methods take a tensor first

  PyObject* kw(const char* name) const {
    return kwargs ? PyDict_GetItemString(kwargs, name) : nullptr;
  }
  // Argument `i` given by position or keyword `name`, or null.
  PyObject* arg(size_t i, const char* name) const {
    PyObject* by_kw = kw(name);
    if (i < args.size()) {
      if (by_kw) throw NotHandled();
      return args[i];
    }
    return by_kw;
  }
  // Every keyword is one of `allowed`.
  void only_keywords(std::initializer_list<const char*> allowed) const {
    if (!kwargs) return;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      const char* s = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : nullptr;
      if (!s) throw NotHandled();
      bool ok = false;
      for (const char* a : allowed) ok = ok || std::string(a) == s;
      if (!ok) throw NotHandled();
    }
  }
};

bool is_false_or_absent(PyObject* o) { return !o || o == Py_False; }

struct Result {
  Layout layout;
  DType dtype;
  bool requires_grad;
  std::optional<Dims> viewed_as;  // the op returns a view of this size of its result
};

// Autograd records the op when grad mode is on, an input needs grad and the
// result can hold gradients (integer and bool results never do).
bool needs_grad(const std::vector<const Tensor*>& inputs, DType out) {
  if (!is_float(out)) return false;
  bool any = false;
  for (const Tensor* t : inputs) any = any || t->requires_grad;
  if (!any) return false;
  PyRef on = PyRef::steal(PyObject_CallNoArgs(torch_api().is_grad_enabled_fn.get()));
  if (!on) throw PythonError();
  return on.get() == Py_True;
}

DType default_float() {
  static PyObject* get_default = PyObject_GetAttrString(torch_api().torch.get(),
                                                        "get_default_dtype");  // kept
  if (!get_default) throw PythonError();
  PyRef d = PyRef::steal(PyObject_CallNoArgs(get_default));
  if (!d) throw PythonError();
  DType dt = to_dtype(d.get());
  if (!is_float(dt)) throw NotHandled();
  return dt;
}

// NOTE: ops that copy a contiguous input as is (x.contiguous() returns x) keep
// its strides of size-1 dimensions, whatever they are; answered only when
// those are the canonical ones, so the result is plainly contiguous.
void require_canonical_if_contiguous(const Tensor& t) {
  if (is_contiguous(t.layout) && t.layout.strides != contiguous_strides(t.layout.sizes))
    throw NotHandled();
}

int64_t wrap_dim(PyObject* o, size_t ndim) {
  if (!PyLong_CheckExact(o)) throw NotHandled();
  long long d = PyLong_AsLongLong(o);
  throw_if_python_error();
  auto n = static_cast<long long>(ndim);
  if (d < -n || d >= n) throw NotHandled();
  return d < 0 ? d + n : d;
}

// ------------------------------------------------------------------ rules

// Elementwise over operands (tensors and numbers): broadcast, promote, and lay
// out as torch's elementwise meta does.
Result elementwise(const OpRule& rule, const std::vector<Operand>& ops,
                   DType forced = DType::Other) {
  std::vector<const Dims*> shapes;
  std::vector<PromotionArg> promo;
  std::vector<const Tensor*> tensors;
  for (const Operand& op : ops) {
    if (op.tensor) {
      shapes.push_back(&op.tensor->layout.sizes);
      tensors.push_back(&*op.tensor);
      if (rule.float_only && !is_float(op.tensor->dtype)) throw NotHandled();
      if (rule.no_bool && op.tensor->dtype == DType::Bool) throw NotHandled();
      // NOTE: strides of size-1 dimensions decide ties, and some of these ops
      // (where, relu) lay out through TensorIterator, others through torch's
      // prims: answered only when such strides are the canonical ones.
      const Dims& sz = op.tensor->layout.sizes;
      if (std::find(sz.begin(), sz.end(), 1) != sz.end() &&
          op.tensor->layout.strides != contiguous_strides(sz))
        throw NotHandled();
    } else if (rule.tensors_only) {
      throw NotHandled();
    }
    promo.push_back(op.promo);
  }
  if (tensors.empty()) throw NotHandled();
  std::optional<Dims> shape = broadcast_shapes(shapes);
  if (!shape) throw NotHandled();  // torch raises the error
  DType out = forced != DType::Other ? forced : promote(promo, rule.promotion, default_float());
  if (out == DType::Other || (rule.no_bool && out == DType::Bool)) throw NotHandled();
  std::vector<Layout> expanded;
  for (const Tensor* t : tensors) expanded.push_back(expand_to(t->layout, *shape));
  Result r{{*shape, elementwise_strides(expanded)}, out, false};
  r.requires_grad = needs_grad(tensors, out);
  return r;
}

Result unary(const OpRule& rule, const Call& c) {
  if (c.args.empty()) throw NotHandled();
  std::string name = rule.name;
  c.only_keywords({"inplace", "approximate"});
  if (!is_false_or_absent(c.arg(1, "inplace")) && name != "gelu") throw NotHandled();
  if (name == "gelu") {
    PyObject* approx = c.arg(1, "approximate");
    if (approx) {
      const char* s = PyUnicode_Check(approx) ? PyUnicode_AsUTF8(approx) : nullptr;
      if (!s || (std::string(s) != "none" && std::string(s) != "tanh")) throw NotHandled();
    }
    if (c.kw("inplace")) throw NotHandled();
  }
  if (c.args.size() > 2) throw NotHandled();
  Operand x = read_operand(c.args[0]);
  if (!x.tensor) throw NotHandled();
  return elementwise(rule, {x});
}

Result binary(const OpRule& rule, const Call& c) {
  c.only_keywords({"alpha"});
  if (c.args.size() != 2) throw NotHandled();
  Operand a = read_operand(c.args[0]), b = read_operand(c.args[1]);
  if (!a.tensor && !c.number_first) throw NotHandled();
  Result r = elementwise(rule, {a, b});
  if (PyObject* alpha = c.kw("alpha")) {
    if (rule.variant != 'a') throw NotHandled();
    // An alpha of a higher kind than the result raises (int result, float alpha).
    bool ok = PyLong_CheckExact(alpha) ? r.dtype != DType::Bool
                                       : PyFloat_CheckExact(alpha) && is_float(r.dtype);
    if (!ok) throw NotHandled();
  }
  return r;
}

Result where(const OpRule& rule, const Call& c, bool method) {
  c.only_keywords({});
  if (c.args.size() != 3) throw NotHandled();
  // torch.where(cond, a, b); a.where(cond, b)
  PyObject* cond = method ? c.args[1] : c.args[0];
  PyObject* a = method ? c.args[0] : c.args[1];
  Operand k = read_operand(cond);
  if (!k.tensor || k.tensor->dtype != DType::Bool) throw NotHandled();
  Operand x = read_operand(a), y = read_operand(c.args[2]);
  std::vector<Operand> ops = {k, x, y};
  // The condition takes part in broadcasting and layout, not in promotion.
  std::vector<PromotionArg> promo = {x.promo, y.promo};
  DType out = promote(promo, rule.promotion, default_float());
  if (out == DType::Other) throw NotHandled();
  return elementwise(rule, ops, out);
}

// Python type of a number is weakly lower than the tensor's dtype category.
bool number_fits(const PromotionArg& n, DType t) {
  if (n.kind == PromotionArg::Float) return is_float(t);
  if (n.kind == PromotionArg::Int) return t != DType::Bool;
  return true;
}

Result masked_fill(const OpRule& rule, const Call& c) {
  c.only_keywords({});
  if (c.args.size() != 3) throw NotHandled();
  Operand self = read_operand(c.args[0]), mask = read_operand(c.args[1]);
  Operand value = read_operand(c.args[2]);
  if (!self.tensor || !mask.tensor || mask.tensor->dtype != DType::Bool || value.tensor)
    throw NotHandled();
  if (!number_fits(value.promo, self.tensor->dtype)) throw NotHandled();
  Result r = elementwise(rule, {mask, self}, self.tensor->dtype);
  if (r.layout.sizes != self.tensor->layout.sizes) throw NotHandled();
  // NOTE: torch's reference makes the result contiguous when where() did not.
  if (!is_contiguous(r.layout)) r.layout.strides = contiguous_strides(r.layout.sizes);
  return r;
}

Result clamp(const OpRule& rule, const Call& c) {
  c.only_keywords({"min", "max"});
  std::vector<Operand> ops = {read_operand(c.args.at(0))};
  if (!ops[0].tensor) throw NotHandled();
  PyObject* lo = rule.variant == 'h' ? nullptr : c.arg(1, "min");
  PyObject* hi = rule.variant == 'b'   ? c.arg(2, "max")
                 : rule.variant == 'h' ? c.arg(1, "max")
                                       : nullptr;
  if (c.args.size() > (rule.variant == 'b' ? 3u : 2u)) throw NotHandled();
  if (rule.variant != 'b' && (!lo && !hi)) throw NotHandled();
  int given = 0;
  for (PyObject* bound : {lo, hi}) {
    if (!bound || bound == Py_None) continue;
    Operand b = read_operand(bound);
    if (b.tensor) throw NotHandled();
    ops.push_back(b);
    ++given;
  }
  if (!given) throw NotHandled();  // torch raises
  return elementwise(rule, ops);
}

// The reduced dimensions (all when `dim` is None), or NotHandled.
std::vector<bool> reduced_dims(PyObject* dim, size_t ndim) {
  std::vector<bool> reduced(ndim, dim == nullptr || dim == Py_None);
  if (dim == nullptr || dim == Py_None) return reduced;
  if (PyLong_CheckExact(dim)) {
    reduced[static_cast<size_t>(wrap_dim(dim, ndim))] = true;
    return reduced;
  }
  if (!PyTuple_CheckExact(dim) && !PyList_CheckExact(dim)) throw NotHandled();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(dim);
  if (n == 0) throw NotHandled();  // dim=[] reduces all or nothing depending on the op
  for (Py_ssize_t i = 0; i < n; ++i) {
    auto d = static_cast<size_t>(wrap_dim(PySequence_Fast_GET_ITEM(dim, i), ndim));
    if (reduced[d]) throw NotHandled();  // torch raises on repeated dims
    reduced[d] = true;
  }
  return reduced;
}

Result reduce(const OpRule& rule, const Call& c) {
  bool takes_dtype = rule.variant == 's' || rule.variant == 'm';
  if (takes_dtype)
    c.only_keywords({"dim", "keepdim", "dtype"});
  else
    c.only_keywords({"dim", "keepdim"});
  if (c.args.empty() || c.args.size() > 3) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  size_t ndim = x.layout.sizes.size();
  if (ndim == 0) throw NotHandled();
  PyObject* dim = c.arg(1, "dim");
  PyObject* keep = c.arg(2, "keepdim");
  if (keep && !PyBool_Check(keep)) throw NotHandled();
  bool keepdim = keep == Py_True;
  PyObject* dt = c.kw("dtype");
  DType out = x.dtype;
  if (dt && dt != Py_None) {
    out = to_dtype(dt);
    if (out == DType::Other) throw NotHandled();
  } else if (rule.variant == 's' && is_integral(x.dtype, true)) {
    out = DType::Int64;
  }
  if (rule.variant == 'm' && (!is_float(x.dtype) || !is_float(out))) throw NotHandled();
  if (rule.variant == 's' && dt && dt != Py_None &&
      is_integral(x.dtype, true) != is_integral(out, true))
    throw NotHandled();
  std::vector<bool> reduced = reduced_dims(dim, ndim);
  Dims sizes;
  for (size_t i = 0; i < ndim; ++i) {
    if (!reduced[i])
      sizes.push_back(x.layout.sizes[i]);
    else if (keepdim)
      sizes.push_back(1);
  }
  Result r{{sizes, contiguous_strides(sizes)}, out, false};
  r.requires_grad = needs_grad({&x}, out);
  return r;
}

Result softmax(const OpRule&, const Call& c) {
  c.only_keywords({"dim", "dtype", "_stacklevel"});
  if (c.args.empty() || c.args.size() > 2) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  PyObject* dim = c.arg(1, "dim");
  if (!dim || x.layout.sizes.empty()) throw NotHandled();  // dim=None warns and guesses
  wrap_dim(dim, x.layout.sizes.size());
  if (!is_float(x.dtype)) throw NotHandled();
  require_canonical_if_contiguous(x);
  DType out = x.dtype;
  PyObject* dt = c.kw("dtype");
  if (dt && dt != Py_None) {
    out = to_dtype(dt);
    if (!is_float(out)) throw NotHandled();
  }
  Result r{{x.layout.sizes, contiguous_strides(x.layout.sizes)}, out, false};
  r.requires_grad = needs_grad({&x}, out);
  return r;
}

Result layer_norm(const OpRule&, const Call& c) {
  c.only_keywords({"normalized_shape", "weight", "bias", "eps"});
  if (c.args.empty() || c.args.size() > 5) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  if (!is_float(x.dtype)) throw NotHandled();
  require_canonical_if_contiguous(x);
  PyObject* shape_obj = c.arg(1, "normalized_shape");
  if (!shape_obj) throw NotHandled();
  Dims normalized;
  if (PyLong_CheckExact(shape_obj)) {
    normalized.push_back(PyLong_AsLongLong(shape_obj));
  } else if (PyTuple_Check(shape_obj)) {
    normalized = ints_of(shape_obj);
  } else if (PyList_CheckExact(shape_obj)) {
    PyRef t = PyRef::steal(PyList_AsTuple(shape_obj));
    if (!t) throw PythonError();
    normalized = ints_of(t.get());
  } else {
    throw NotHandled();
  }
  const Dims& sizes = x.layout.sizes;
  if (normalized.empty() || normalized.size() > sizes.size() ||
      !std::equal(normalized.begin(), normalized.end(), sizes.end() - normalized.size()))
    throw NotHandled();
  std::vector<const Tensor*> inputs = {&x};
  std::optional<Tensor> params[2];
  const char* names[2] = {"weight", "bias"};
  for (size_t i = 0; i < 2; ++i) {
    PyObject* p = c.arg(2 + i, names[i]);
    if (!p || p == Py_None) continue;
    params[i] = read_tensor(p);
    if (params[i]->dtype != x.dtype || params[i]->layout.sizes != normalized) throw NotHandled();
    inputs.push_back(&*params[i]);
  }
  PyObject* eps = c.arg(4, "eps");
  if (eps && !PyFloat_CheckExact(eps)) throw NotHandled();
  Result r{{sizes, contiguous_strides(sizes)}, x.dtype, false};
  r.requires_grad = needs_grad(inputs, x.dtype);
  return r;
}

Result join(const OpRule& rule, const Call& c) {
  c.only_keywords({"dim"});
  if (c.args.empty() || c.args.size() > 2) throw NotHandled();
  PyObject* seq = c.args[0];
  if (!PyTuple_CheckExact(seq) && !PyList_CheckExact(seq)) throw NotHandled();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n == 0) throw NotHandled();
  std::vector<Tensor> parts;
  for (Py_ssize_t i = 0; i < n; ++i) parts.push_back(read_tensor(PySequence_Fast_GET_ITEM(seq, i)));
  const Dims& first = parts[0].layout.sizes;
  bool stack = rule.family == OpFamily::Stack;
  PyObject* dim_obj = c.arg(1, "dim");
  size_t ndim = first.size() + (stack ? 1 : 0);
  if (first.empty()) throw NotHandled();
  int64_t dim = dim_obj ? wrap_dim(dim_obj, ndim) : 0;
  std::vector<const Tensor*> inputs;
  Dims sizes = first;
  if (stack) sizes.insert(sizes.begin() + dim, n);
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    inputs.push_back(&t);
    if (t.dtype != parts[0].dtype || t.layout.sizes.size() != first.size()) throw NotHandled();
    for (size_t d = 0; d < first.size(); ++d)
      if (t.layout.sizes[d] != first[d] && (stack || d != static_cast<size_t>(dim)))
        throw NotHandled();
    if (!stack && i > 0)
      sizes[static_cast<size_t>(dim)] += t.layout.sizes[static_cast<size_t>(dim)];
    // NOTE: the result's memory format follows the inputs' suggested formats:
    // answered only when each input is contiguous and not also channels-last.
    Layout as_joined = t.layout;
    if (stack) {
      as_joined.sizes.insert(as_joined.sizes.begin() + dim, 1);
      int64_t s = static_cast<size_t>(dim) < t.layout.sizes.size()
                      ? t.layout.strides[static_cast<size_t>(dim)] *
                            t.layout.sizes[static_cast<size_t>(dim)]
                      : 1;
      as_joined.strides.insert(as_joined.strides.begin() + dim, s);
    }
    if (!is_contiguous(as_joined) || is_channels_last(as_joined) || as_joined.sizes.size() == 5)
      throw NotHandled();
  }
  Result r{{sizes, contiguous_strides(sizes)}, parts[0].dtype, false};
  r.requires_grad = needs_grad(inputs, r.dtype);
  return r;
}

Result tri(const OpRule&, const Call& c) {
  c.only_keywords({"diagonal"});
  if (c.args.empty() || c.args.size() > 2) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  if (x.layout.sizes.size() < 2) throw NotHandled();
  require_canonical_if_contiguous(x);
  PyObject* diag = c.arg(1, "diagonal");
  if (diag && !PyLong_CheckExact(diag)) throw NotHandled();
  Result r{{x.layout.sizes, contiguous_strides(x.layout.sizes)}, x.dtype, false};
  r.requires_grad = needs_grad({&x}, x.dtype);
  return r;
}

// F.linear as torch composes it (Linear.cpp): addmm for 2-d input with bias;
// for contiguous input with a 1-d bias addmm on the input flattened to 2-d and
// the result viewed back; otherwise matmul (a fresh result), plus bias in place.
Result linear(const OpRule&, const Call& c) {
  c.only_keywords({"weight", "bias"});
  if (c.args.empty() || c.args.size() > 3) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  PyObject* w_obj = c.arg(1, "weight");
  if (!w_obj) throw NotHandled();
  Tensor w = read_tensor(w_obj);
  std::vector<const Tensor*> inputs = {&x, &w};
  std::optional<Tensor> b;
  PyObject* b_obj = c.arg(2, "bias");
  if (b_obj && b_obj != Py_None) b = read_tensor(b_obj);
  const Dims& xs = x.layout.sizes;
  if (xs.empty() || w.layout.sizes.size() != 2 || w.layout.sizes[1] != xs.back())
    throw NotHandled();
  int64_t n = w.layout.sizes[0];
  if (!is_float(x.dtype) || w.dtype != x.dtype) throw NotHandled();
  if (b) {
    if (b->dtype != x.dtype || b->layout.sizes != Dims{n}) throw NotHandled();
    inputs.push_back(&*b);
  }
  Dims sizes = xs;
  sizes.back() = n;
  Result r{{sizes, contiguous_strides(sizes)}, x.dtype, false};
  r.requires_grad = needs_grad(inputs, x.dtype);
  if (b && xs.size() != 2 && is_contiguous(x.layout)) {
    Dims flat = {numel(xs) / xs.back(), n};
    r.viewed_as = sizes;
    r.layout = {flat, contiguous_strides(flat)};
  }
  return r;
}

Result infer(const OpRule& rule, const Call& c, bool method) {
  switch (rule.family) {
    case OpFamily::Unary:
      return unary(rule, c);
    case OpFamily::Binary:
      return binary(rule, c);
    case OpFamily::Where:
      return where(rule, c, method);
    case OpFamily::MaskedFill:
      return masked_fill(rule, c);
    case OpFamily::Clamp:
      return clamp(rule, c);
    case OpFamily::Reduce:
      return reduce(rule, c);
    case OpFamily::Softmax:
      return softmax(rule, c);
    case OpFamily::LayerNorm:
      return layer_norm(rule, c);
    case OpFamily::Cat:
    case OpFamily::Stack:
      return join(rule, c);
    case OpFamily::Tri:
      return tri(rule, c);
    case OpFamily::Linear:
      return linear(rule, c);
  }
  throw NotHandled();
}

PyRef int_tuple(const Dims& v) {
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  if (!t) throw PythonError();
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* n = PyLong_FromLongLong(v[i]);
    if (!n) throw PythonError();
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), n);
  }
  return t;
}

// A fresh meta tensor; one that needs grad is made by autograd (a clone of a
// leaf), so it is not a leaf, as the op's own result would not be.
PyRef make(const Result& r) {
  const TorchApi& api = torch_api();
  PyRef sizes = int_tuple(r.layout.sizes), strides = int_tuple(r.layout.strides);
  PyRef pos = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
  PyRef kw = PyRef::steal(Py_BuildValue("{s:O,s:O,s:O}", "dtype", from_dtype(r.dtype), "device",
                                        api.meta_device.get(), "requires_grad",
                                        r.requires_grad ? Py_True : Py_False));
  if (!pos || !kw) throw PythonError();
  PyRef t = PyRef::steal(PyObject_Call(api.empty_strided.get(), pos.get(), kw.get()));
  if (!t) throw PythonError();
  if (r.requires_grad) t = PyRef::steal(PyObject_CallMethod(t.get(), "clone", nullptr));
  if (t && r.viewed_as) {
    PyRef shape = int_tuple(*r.viewed_as);
    t = PyRef::steal(PyObject_CallMethodOneArg(
        t.get(), PyRef::steal(PyUnicode_FromString("view")).get(), shape.get()));
  }
  if (!t) throw PythonError();
  return t;
}

}  // namespace

PyRef fast_meta_call(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
                     PyObject* kwargs) {
  const OpRule* rule = method.empty() ? rule_for_function(target) : rule_for_method(method);
  if (!rule || !PyTuple_Check(pos)) return PyRef();
  Call c;
  c.kwargs = kwargs;
  c.number_first = method.empty() && is_python_operator(target);
  if (!method.empty()) c.args.push_back(self);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pos); ++i) c.args.push_back(PyTuple_GET_ITEM(pos, i));
  try {
    return make(infer(*rule, c, !method.empty()));
  } catch (const NotHandled&) {
    return PyRef();
  } catch (const PythonError&) {
    clear_expected_error();
    return PyRef();
  }
}

void check_fast_meta(const std::string& op, PyObject* fast, PyObject* real) {
  if (!real) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
    PyRef s = value ? PyRef::steal(PyObject_Str(value.get())) : PyRef();
    const char* text = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    PyErr_Clear();
    TL_CHECK(false) << "fast meta inference answered " << op
                    << " but torch's meta kernel raised: " << (text ? text : "?");
  }
  auto describe = [](PyObject* t) -> std::string {
    if (!is_plain_tensor(t)) return "not a tensor";
    std::string out;
    for (const char* a : {"shape", "dtype", "requires_grad", "device", "_base"}) {
      PyRef v = attr(t, a);
      if (std::string(a) == "_base") v = PyRef::borrow(v.get() == Py_None ? Py_True : Py_False);
      PyRef s = PyRef::steal(PyObject_Str(v.get()));
      if (!s) throw PythonError();
      out += std::string(a == std::string("_base") ? "fresh" : a) + "=" +
             PyUnicode_AsUTF8(s.get()) + " ";
    }
    for (const char* m : {"stride", "storage_offset"}) {
      PyRef v = PyRef::steal(PyObject_CallMethod(t, m, nullptr));
      PyRef s = v ? PyRef::steal(PyObject_Str(v.get())) : PyRef();
      if (!s) throw PythonError();
      out += std::string(m) + "=" + PyUnicode_AsUTF8(s.get()) + " ";
    }
    return out;
  };
  std::string a = describe(fast), b = describe(real);
  TL_CHECK(a == b) << "fast meta inference of " << op
                   << " differs from torch's meta kernel:\n  fast: " << a << "\n  meta: " << b;
}

}  // namespace tl::capture
