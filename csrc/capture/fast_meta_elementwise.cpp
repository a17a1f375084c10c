// Elementwise ops: broadcast, promote, and lay out as torch's elementwise meta does.
#include <algorithm>

#include "capture/fast_meta_rules.h"

namespace tl::capture::fast_meta {
namespace {

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

// Python type of a number is weakly lower than the tensor's dtype category.
bool number_fits(const PromotionArg& n, DType t) {
  if (n.kind == PromotionArg::Float) return is_float(t);
  if (n.kind == PromotionArg::Int) return t != DType::Bool;
  return true;
}

}  // namespace

Result unary(const OpRule& rule, const Call& c) {
  if (c.args.empty()) throw NotHandled();
  std::string name = rule.name;
  c.only_keywords({"inplace", "approximate"});
  bool inplace = false;
  if (!is_false_or_absent(c.arg(1, "inplace")) && name != "gelu") {
    if (c.arg(1, "inplace") != Py_True) throw NotHandled();
    inplace = true;
  }
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
  Result r = elementwise(rule, {x});
  if (inplace) {
    // NOTE: F.relu(x, inplace=True) returns x itself; an input autograd tracks gets a new
    // grad_fn from the real call, so that case is left to it.
    // Writing an overlapping input (expanded) raises.
    if (r.dtype != x.tensor->dtype || x.tensor->requires_grad ||
        !is_non_overlapping_and_dense(x.tensor->layout))
      throw NotHandled();
    r.same_as = c.args[0];
  }
  return r;
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

}  // namespace tl::capture::fast_meta
