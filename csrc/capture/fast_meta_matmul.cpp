// Matrix products.
#include "capture/fast_meta_rules.h"
#include "capture/torch_api.h"

namespace tl::capture::fast_meta {

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
  // NOTE: up to torch 2.14 linear with a bias over a >2-d input is addmm on the flattened
  // input, viewed back; from 2.15 on its result is a fresh tensor (measured on 2.15.0).
  const int version = torch_api().torch_version;
  if (b && xs.size() != 2 && is_contiguous(x.layout) && version != 0 && version < 215) {
    Dims flat = {numel(xs) / xs.back(), n};
    r.viewed_as = sizes;
    r.layout = {flat, contiguous_strides(flat)};
  }
  return r;
}

}  // namespace tl::capture::fast_meta
