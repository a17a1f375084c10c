// Reductions and softmax.
#include "capture/fast_meta_rules.h"

namespace tl::capture::fast_meta {
namespace {

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

}  // namespace

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

}  // namespace tl::capture::fast_meta
