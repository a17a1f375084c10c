// Reduction rules. A reduction's body runs over its operand's shape (`space`)
// and folds `reduce_dims`; fuse.cpp makes those the kernel's trailing axes.
// softmax, log_softmax, logsumexp, layer_norm, rms_norm and normalize are one kernel each:
// two chained reductions (the second reads the first's result) plus a
// pointwise tail over the full row (see the execution model in loop_ir.h).
#include "passes/lower_reduction.h"

#include <algorithm>
#include <cmath>

#include "passes/dtype.h"

namespace tl::passes {
namespace reduction {

bool setup(RuleCtx& c, const ir::Arg* x, std::optional<std::vector<int64_t>> dims) {
  if (!c.is_tensor(x)) return false;
  const auto& sizes = x->node->meta->sizes;
  int64_t rank = static_cast<int64_t>(sizes.size());
  OpLowering& o = c.out;
  o.kind = OpLowering::Kind::Reduction;
  o.space = sizes;
  if (!dims || dims->empty()) {
    for (int64_t d = 0; d < rank; ++d) o.reduce_dims.push_back(static_cast<int>(d));
    return true;
  }
  for (int64_t d : *dims) {
    int64_t nd = d < 0 ? d + std::max<int64_t>(rank, 1) : d;
    if (nd < 0 || nd >= std::max<int64_t>(rank, 1)) return false;
    if (rank > 0) o.reduce_dims.push_back(static_cast<int>(nd));
  }
  std::sort(o.reduce_dims.begin(), o.reduce_dims.end());
  return std::adjacent_find(o.reduce_dims.begin(), o.reduce_dims.end()) == o.reduce_dims.end();
}

const ir::Arg* none_to_null(const ir::Arg* a) {
  return a && a->kind == ir::Arg::Kind::Const && a->value.get() == Py_None ? nullptr : a;
}

std::optional<std::vector<int64_t>> dims_arg(RuleCtx& c, size_t pos, const char* name, bool* ok) {
  const ir::Arg* a = none_to_null(c.arg(pos, name));
  if (!a) return std::nullopt;
  auto d = c.ints(a);
  *ok = *ok && d.has_value();
  return d;
}

int64_t reduced_numel(const OpLowering& o) {
  int64_t n = 1;
  for (int d : o.reduce_dims) n *= o.space[d];
  return n;
}

bool affine(RuleCtx& c, int* v, const ir::Arg* w, const ir::Arg* b, ir::ScalarType t) {
  w = none_to_null(w), b = none_to_null(b);
  if ((w && !c.is_tensor(w)) || (b && !c.is_tensor(b))) return false;
  if (w) *v = c.binary(ir::ExprOp::Mul, *v, c.value(w, t));
  if (b) *v = c.binary(ir::ExprOp::Add, *v, c.value(b, t));
  return true;
}

bool is_bool_const(const ir::Arg* a) {
  return a && a->kind == ir::Arg::Kind::Const && PyBool_Check(a->value.get());
}

int extreme(RuleCtx& c, const ir::Arg* x, ir::ExprOp op) {
  using ir::ScalarType;
  bool arg = op == ir::ExprOp::ReduceArgMax || op == ir::ExprOp::ReduceArgMin;
  if (arg && reduced_numel(c.out) == 1) return c.constant(0, ScalarType::I64);
  ScalarType in = compute_type(c.type_of(x));
  int r = c.reduce(op, c.value(x, in == ScalarType::Bool ? ScalarType::U8 : in));
  if (!arg) return c.cast(r, in);
  c.out.body[r].type = ScalarType::I64;  // the index; the accumulator keeps the operand type
  return r;
}

}  // namespace reduction

namespace {

using ir::ExprOp;
using ir::ScalarType;
using namespace reduction;

// max(a, b) / min(a, b): torch.maximum / torch.minimum (NaN-propagating), pointwise.
bool elementwise_extreme(RuleCtx& c, ExprOp op) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "other");
  ScalarType t = compute_type(c.out_type());
  if (!c.is_tensor(a) || !c.is_tensor(b) || t == ScalarType::Bool) return false;
  return c.finish(c.binary(op, c.value(a, t), c.value(b, t)));
}

// sum, mean, prod, amax, amin; max/min without dim.
template <ExprOp Op, bool Mean = false>
bool reduce(RuleCtx& c) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  if (c.node.args.size() > 1 && c.is_tensor(&c.node.args[1])) {
    if (Op == ExprOp::ReduceMax) return elementwise_extreme(c, ExprOp::Maximum);
    if (Op == ExprOp::ReduceMin) return elementwise_extreme(c, ExprOp::Minimum);
    return false;
  }
  auto dims = dims_arg(c, 1, "dim", &ok);
  c.arg(2, "keepdim"), c.arg(3, "dtype");
  ScalarType t = compute_type(c.out_type());
  if (!ok || !setup(c, x, dims) || t == ScalarType::Bool) return false;
  if (Mean && !ir::is_floating(t)) return false;
  int r = c.reduce(Op, c.value(x, t));
  if (Mean) r = c.binary(ExprOp::Div, r, c.count(reduced_numel(c.out), t));
  return c.finish(r);
}

// softmax / log_softmax over one dim, and logsumexp over dims. `Safe`: torch._safe_softmax,
// which SDPA's math path uses: a row that is -inf throughout (a fully masked query) gives
// zeros, not NaN; torchlite's own attention decomposition (attention_products.h) calls it.
template <bool Log, bool Safe = false>
bool softmax(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  auto dim = c.ints(none_to_null(c.arg(1, "dim")));
  c.arg(2, "_stacklevel"), c.arg(3, "dtype");
  ScalarType t = compute_type(c.out_type());
  if (!dim || dim->size() != 1 || !ir::is_floating(t) || !setup(c, x, dim)) return false;
  // NOTE: torch's f16/bf16 log_softmax rounds its intermediates to the storage type in a
  // kernel-specific order (x - max and log(sum) differ by up to one bf16 ulp of the row
  // max, so a result near 0 comes out as exactly 0); computed once in f32 it does not match
  // eager within bf16 tolerance, so it stays extern.
  if (Log && c.out_type() != t) return false;
  c.out.full_result = true;
  int v = c.value(x, t);
  int max = c.reduce(ExprOp::ReduceMax, v);
  int shifted = c.binary(ExprOp::Sub, v, max);
  int e = c.unary(ExprOp::Exp, shifted);
  int sum = c.reduce(ExprOp::ReduceSum, e);
  if (Log) return c.finish(c.binary(ExprOp::Sub, shifted, c.unary(ExprOp::Log, sum)));
  int r = c.binary(ExprOp::Div, e, sum);
  // NOTE: the row max is -inf exactly when every element is (a NaN makes it NaN, as torch's
  // all(x == -inf) is then false).
  if (Safe) r = c.where(c.binary(ExprOp::Eq, max, c.constant(-INFINITY, t)), c.constant(0, t), r);
  return c.finish(r);
}

bool logsumexp(RuleCtx& c) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  auto dims = dims_arg(c, 1, "dim", &ok);
  c.arg(2, "keepdim");
  ScalarType t = compute_type(c.out_type());
  if (!ok || !dims || !ir::is_floating(t) || !setup(c, x, dims)) return false;
  int v = c.value(x, t);
  int m = c.reduce(ExprOp::ReduceMax, v);
  // torch shifts by 0 where the max is infinite, so -inf rows give -inf, not NaN.
  int inf = c.unary(ExprOp::IsInf, m);
  m = c.where(inf, c.constant(0, t), m);
  int s = c.reduce(ExprOp::ReduceSum, c.unary(ExprOp::Exp, c.binary(ExprOp::Sub, v, m)));
  return c.finish(c.binary(ExprOp::Add, c.unary(ExprOp::Log, s), m));
}

// The trailing dims named by normalized_shape, or nullopt if they do not match.
std::optional<std::vector<int64_t>> trailing_dims(RuleCtx& c, const ir::Arg* x,
                                                  const ir::Arg* shape) {
  auto ns = c.ints(shape);
  if (!ns || !c.is_tensor(x) || ns->empty()) return std::nullopt;
  const auto& sizes = x->node->meta->sizes;
  if (ns->size() > sizes.size()) return std::nullopt;
  std::vector<int64_t> dims;
  size_t off = sizes.size() - ns->size();
  for (size_t i = 0; i < ns->size(); ++i) {
    if ((*ns)[i] != sizes[off + i]) return std::nullopt;
    dims.push_back(static_cast<int64_t>(off + i));
  }
  return dims;
}

bool layer_norm(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  auto dims = trailing_dims(c, x, c.arg(1, "normalized_shape"));
  auto eps = c.number(c.arg(4, "eps")).value_or(1e-5);
  c.arg(5, "cudnn_enable");
  ScalarType t = compute_type(c.out_type());
  if (!dims || !ir::is_floating(t) || !setup(c, x, dims)) return false;
  c.out.full_result = true;
  int r = normalized(c, c.value(x, t), eps, t);
  return affine(c, &r, c.arg(2, "weight"), c.arg(3, "bias"), t) && c.finish(r);
}

bool rms_norm(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  auto dims = trailing_dims(c, x, c.arg(1, "normalized_shape"));
  ScalarType t = compute_type(c.out_type());
  if (!dims || !ir::is_floating(t)) return false;
  // eps=None: the epsilon of the type torch computes in (float32 for f16/bf16 inputs, whose
  // own epsilon the docs name but eager does not use).
  double dflt = c.type_of(x) == ScalarType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  const ir::Arg* eps_arg = none_to_null(c.arg(3, "eps"));
  auto eps = eps_arg ? c.number(eps_arg) : std::optional<double>(dflt);
  if (!eps || !setup(c, x, dims)) return false;
  c.out.full_result = true;
  int v = c.value(x, t);
  int n = c.count(reduced_numel(c.out), t);
  int ms = c.binary(ExprOp::Div, c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Mul, v, v)), n);
  int rstd = c.unary(ExprOp::Rsqrt, c.binary(ExprOp::Add, ms, c.constant(*eps, t)));
  int r = c.binary(ExprOp::Mul, v, rstd);
  return affine(c, &r, c.arg(2, "weight"), nullptr, t) && c.finish(r);
}

// F.normalize(x, p=2, dim, eps): x / max(||x||_2 over dim, eps). Before, it ran as torch's
// Python function: four torch ops (norm, clamp_min, expand_as, div), four launches (XCiT's
// cross-covariance attention normalizes q and k in every block; CLIP and cosine attention too).
bool normalize(RuleCtx& c) {
  if (c.node.target_name != "torch.nn.functional.normalize") return false;
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  auto p = c.number(c.arg(1, "p")).value_or(2.0);
  const ir::Arg* dim_arg = c.arg(2, "dim");
  auto dims = dim_arg ? c.ints(none_to_null(dim_arg)) : std::vector<int64_t>{1};
  double eps = c.number(c.arg(3, "eps")).value_or(1e-12);
  ok = !none_to_null(c.arg(4, "out"));
  ScalarType t = compute_type(c.out_type());
  if (!ok || p != 2.0 || !dims || dims->empty() || !ir::is_floating(t) || !setup(c, x, dims))
    return false;
  c.out.full_result = true;
  int v = c.value(x, t);
  int norm = c.unary(ExprOp::Sqrt, c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Mul, v, v)));
  // NOTE: eager's norm and clamp_min return the input's type: a bf16/f16 norm is rounded
  // before the division, as here.
  if (c.out_type() != t) norm = c.cast(c.cast(norm, c.out_type()), t);
  norm = c.binary(ExprOp::Maximum, norm, c.constant(eps, t));
  return c.finish(c.binary(ExprOp::Div, v, norm));
}

// F.batch_norm in training mode without running statistics (nf-resnet's weight
// standardization, `BatchNorm(track_running_stats=False)`): each channel normalized
// over every other axis with its biased variance, as eager does.
int batch_statistics(RuleCtx& c, const ir::Arg* x, double eps, ScalarType t) {
  const auto& sizes = x->node->meta->sizes;
  std::vector<int64_t> dims{0};
  for (size_t d = 2; d < sizes.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  if (!setup(c, x, dims)) return -1;
  // NOTE: eager raises for one value per channel; extern keeps that error.
  if (reduced_numel(c.out) <= 1) return -1;
  c.out.full_result = true;
  return normalized(c, c.value(x, t), eps, t);
}

// F.batch_norm: in inference, per-channel (axis 1) running statistics, pointwise; in
// training, only without running statistics to update (batch_statistics).
bool batch_norm(RuleCtx& c) {
  // NOTE: torch.batch_norm orders its arguments differently.
  if (c.node.target_name != "torch.nn.functional.batch_norm") return false;
  const ir::Arg* x = c.arg(0, "input");
  const ir::Arg *mean = c.arg(1, "running_mean"), *var = c.arg(2, "running_var");
  auto training = c.number(c.arg(5, "training"));
  c.arg(6, "momentum");
  double eps = c.number(c.arg(7, "eps")).value_or(1e-5);
  ScalarType t = compute_type(c.out_type());
  if (!c.is_tensor(x) || !training || !ir::is_floating(t) || x->node->meta->sizes.size() < 2)
    return false;
  int r = -1;
  if (*training != 0) {
    if (none_to_null(mean) || none_to_null(var)) return false;
    if ((r = batch_statistics(c, x, eps, t)) < 0) return false;
  } else {
    if (!c.is_tensor(mean) || !c.is_tensor(var)) return false;
    int v = c.value(x, t);
    r = c.binary(ExprOp::Sub, v, c.value(mean, t));
    int rstd = c.unary(ExprOp::Rsqrt, c.binary(ExprOp::Add, c.value(var, t), c.constant(eps, t)));
    r = c.binary(ExprOp::Mul, r, rstd);
  }
  if (!affine(c, &r, c.arg(3, "weight"), c.arg(4, "bias"), t)) return false;
  c.out.input_axes.assign(c.out.inputs.size(), {});
  for (size_t i = 1; i < c.out.inputs.size(); ++i) {
    if (c.out.inputs[i]->meta->sizes.size() != 1) return false;
    c.out.input_axes[i] = {1};  // the channel axis
  }
  return c.finish(r);
}

}  // namespace

void add_reduction_rules(RuleTable& t) {
  t["sum"] = reduce<ExprOp::ReduceSum>, t["mean"] = reduce<ExprOp::ReduceSum, true>;
  t["prod"] = reduce<ExprOp::ReduceProd>;
  for (const char* n : {"amax", "max"}) t[n] = reduce<ExprOp::ReduceMax>;
  for (const char* n : {"amin", "min"}) t[n] = reduce<ExprOp::ReduceMin>;
  t["softmax"] = softmax<false>, t["log_softmax"] = softmax<true>, t["logsumexp"] = logsumexp;
  t["_safe_softmax"] = softmax<false, true>;
  t["layer_norm"] = layer_norm, t["rms_norm"] = rms_norm, t["batch_norm"] = batch_norm;
  t["normalize"] = normalize;
  add_statistics_rules(t);
  add_tuple_rules(t);
}

}  // namespace tl::passes
