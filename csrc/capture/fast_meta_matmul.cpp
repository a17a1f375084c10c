// Matrix products and attention.
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

// torch.addmm(bias, mat1, mat2) of one floating dtype: a fresh contiguous [n, p] (whatever
// the operands' layouts), bias broadcast to it. beta=/alpha= are left to torch.
Result addmm(const OpRule&, const Call& c) {
  c.only_keywords({});
  if (c.args.size() != 3) throw NotHandled();
  Tensor b = read_tensor(c.args[0]), x = read_tensor(c.args[1]), w = read_tensor(c.args[2]);
  const Dims &xs = x.layout.sizes, &ws = w.layout.sizes;
  if (xs.size() != 2 || ws.size() != 2 || xs[1] != ws[0]) throw NotHandled();
  if (!is_float(x.dtype) || w.dtype != x.dtype || b.dtype != x.dtype) throw NotHandled();
  Dims sizes = {xs[0], ws[1]};
  if (b.layout.sizes.size() > 2) throw NotHandled();
  std::optional<Dims> joined = broadcast_shapes({&b.layout.sizes, &sizes});
  if (!joined || *joined != sizes) throw NotHandled();
  return contiguous_result(sizes, x.dtype, {&b, &x, &w});
}

// scaled_dot_product_attention(q, k, v[, attn_mask, dropout_p, is_causal], scale=,
// enable_gqa=) over 3-d or 4-d operands of one floating dtype with equal leading dimensions:
// torch's meta kernel (its math path) gives a fresh contiguous q.shape[:-1] + (v.shape[-1],)
// in q's dtype. Capture lays it out as the fused kernels do afterwards (fused_attention_layout).
// enable_gqa=True over 4-d operands (Llama's, Mistral's: 1.8 ms a call on torch's meta path,
// per layer at every new length) when key and value have one head count that divides the
// query's. Other GQA forms (3-d, where the "heads" are the batch; key and value head counts
// that differ, which torch's meta path broadcasts), a mask that does not broadcast, and a
// mask together with is_causal (torch raises) are left to torch.
Result attention(const OpRule&, const Call& c) {
  c.only_keywords({"attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"});
  // NOTE: scale= and enable_gqa= are keyword-only.
  if (c.args.size() < 3 || c.args.size() > 6) throw NotHandled();
  Tensor q = read_tensor(c.args[0]), k = read_tensor(c.args[1]), v = read_tensor(c.args[2]);
  const Dims &qs = q.layout.sizes, &ks = k.layout.sizes, &vs = v.layout.sizes;
  const size_t n = qs.size();
  if ((n != 3 && n != 4) || ks.size() != n || vs.size() != n) throw NotHandled();
  if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype) throw NotHandled();
  if (ks[n - 1] != qs[n - 1] || vs[n - 2] != ks[n - 2]) throw NotHandled();
  PyObject* gqa = c.kw("enable_gqa");
  const bool grouped = gqa == Py_True;
  if (!grouped && !is_false_or_absent(gqa)) throw NotHandled();
  for (size_t d = 0; d + 2 < n; ++d) {
    // NOTE: with enable_gqa the query's heads (dim -3) are key/value heads repeated.
    if (grouped && d + 3 == n) {
      if (n != 4 || ks[d] != vs[d] || ks[d] <= 0 || qs[d] % ks[d] != 0) throw NotHandled();
      continue;
    }
    if (ks[d] != qs[d] || vs[d] != qs[d]) throw NotHandled();
  }
  PyObject* dropout = c.arg(4, "dropout_p");
  if (dropout && !PyFloat_CheckExact(dropout) && !PyLong_CheckExact(dropout)) throw NotHandled();
  PyObject* causal = c.arg(5, "is_causal");
  if (causal && !PyBool_Check(causal)) throw NotHandled();
  PyObject* scale = c.kw("scale");
  if (scale && scale != Py_None && !PyFloat_CheckExact(scale) && !PyLong_CheckExact(scale))
    throw NotHandled();
  std::vector<const Tensor*> inputs = {&q, &k, &v};
  std::optional<Tensor> mask;
  PyObject* mask_obj = c.arg(3, "attn_mask");
  if (mask_obj && mask_obj != Py_None) {
    if (causal == Py_True) throw NotHandled();
    mask = read_tensor(mask_obj);
    if (mask->dtype != DType::Bool && mask->dtype != q.dtype) throw NotHandled();
    Dims scores(qs.begin(), qs.end() - 1);
    scores.push_back(ks[n - 2]);
    if (mask->layout.sizes.size() > n) throw NotHandled();
    std::optional<Dims> joined = broadcast_shapes({&mask->layout.sizes, &scores});
    if (!joined || *joined != scores) throw NotHandled();
    inputs.push_back(&*mask);
  }
  Dims sizes(qs.begin(), qs.end() - 1);
  sizes.push_back(vs[n - 1]);
  return contiguous_result(sizes, q.dtype, inputs);
}

}  // namespace tl::capture::fast_meta
