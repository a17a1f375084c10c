// cat and stack; gather (an index-shaped copy of its input).
#include "capture/fast_meta_rules.h"

namespace tl::capture::fast_meta {

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

// torch.gather(input, dim, index) / Tensor.gather(dim, index): a fresh contiguous tensor of
// index's sizes in input's dtype (torch's meta kernel: input.new_empty(index.shape)), for an
// int64 index of input's rank no larger than input off `dim` (else torch raises: left to it).
// transformers' BERT gathers its token type ids by position ids: a Python meta call (~1 ms)
// at every new length of a size-generic entry.
Result gather(const OpRule&, const Call& c) {
  c.only_keywords({"dim", "index", "sparse_grad"});
  if (c.args.empty() || c.args.size() > 3 || !is_false_or_absent(c.kw("sparse_grad")))
    throw NotHandled();
  PyObject* dim_obj = c.arg(1, "dim");
  PyObject* index_obj = c.arg(2, "index");
  if (!dim_obj || !index_obj) throw NotHandled();
  Tensor x = read_tensor(c.args[0]), index = read_tensor(index_obj);
  const Dims &xs = x.layout.sizes, &is = index.layout.sizes;
  if (index.dtype != DType::Int64 || xs.empty() || is.size() != xs.size()) throw NotHandled();
  const int64_t dim = wrap_dim(dim_obj, xs.size());
  for (size_t d = 0; d < xs.size(); ++d)
    if (static_cast<int64_t>(d) != dim && is[d] > xs[d]) throw NotHandled();
  return contiguous_result(is, x.dtype, {&x});
}

}  // namespace tl::capture::fast_meta
