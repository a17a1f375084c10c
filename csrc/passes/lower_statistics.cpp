// Statistics and tests over reduced dims: var, std, argmax/argmin, all/any, norm,
// group_norm. Variances are two-pass (mean, then the sum of squared deviations):
// both passes read a row that is still in cache, and unlike a one-pass sum of
// squares they do not cancel catastrophically when |mean| >> std. The second pass
// also sums the deviations, which corrects the mean (exact for a constant row, as
// eager's Welford mean) and the variance (the corrected two-pass formula of Chan,
// Golub and LeVeque), and each deviation is scaled by 1/sqrt(divisor) before it
// is squared, so a variance that fits the type is computed without the squares
// overflowing ([3e19, 1, 2, 3] in float32; eager accumulates in double on the CPU).
// Rejected: Welford's one-pass update (a division per element, and a merge the
// row-parallel CUDA reductions would need as a new reduction kind).
#include <cmath>

#include "passes/dtype.h"
#include "passes/lower_reduction.h"

namespace tl::passes {
namespace reduction {

using ir::ExprOp;
using ir::ScalarType;

bool var_args(RuleCtx& c, std::optional<std::vector<int64_t>>* dims, double* correction) {
  bool ok = true;
  const ir::Arg* a1 = c.arg(1, "dim");
  *correction = 1;
  if (is_bool_const(a1)) {
    *correction = *c.number(a1);  // var(x, unbiased)
  } else {
    *dims = dims_arg(c, 1, "dim", &ok);
  }
  if (const ir::Arg* u = c.arg(2, "unbiased")) {
    ok = ok && is_bool_const(u);
    *correction = c.number(u).value_or(1);
  }
  c.arg(3, "keepdim");
  if (const ir::Arg* corr = none_to_null(c.arg(kKeywordOnly, "correction"))) {
    auto v = c.number(corr);
    ok = ok && v.has_value();
    *correction = v.value_or(1);
  }
  return ok;
}

Moments moments(RuleCtx& c, int v, double correction, ScalarType t) {
  // NOTE: the counts as c.count (a dims number with runtime sizes): a variance over a dynamic
  // length keeps one kernel text for every length.
  const int64_t numel = reduced_numel(c.out);
  double n = double(numel);
  int rough = c.binary(ExprOp::Div, c.reduce(ExprOp::ReduceSum, v), c.count(numel, t));
  int d = c.binary(ExprOp::Sub, v, rough);
  int sd = c.reduce(ExprOp::ReduceSum, d);
  Moments m;
  m.mean = c.binary(ExprOp::Add, rough, c.binary(ExprOp::Div, sd, c.count(numel, t)));
  double divisor = std::max(0.0, n - correction);
  if (divisor == 0) {  // inf or NaN, like eager
    int ss = c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Mul, d, d));
    m.var = c.binary(ExprOp::Div, ss, c.constant(0, t));
    return m;
  }
  // 1 / sqrt(n - correction), computed in the kernel from the count (row-invariant: hoisted).
  int counted = c.count(numel, t);
  if (correction != 0) counted = c.binary(ExprOp::Sub, counted, c.constant(correction, t));
  int k = c.binary(ExprOp::Div, c.constant(1, t), c.unary(ExprOp::Sqrt, counted));
  int e = c.binary(ExprOp::Mul, d, k);
  int ss = c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Mul, e, e));
  int se = c.binary(ExprOp::Mul, sd, k);
  int var = c.binary(ExprOp::Sub, ss,
                     c.binary(ExprOp::Div, c.binary(ExprOp::Mul, se, se), c.count(numel, t)));
  // NOTE: rounding can take a zero variance below 0 (a NaN std); NaN stays NaN.
  m.var = c.binary(ExprOp::Maximum, var, c.constant(0, t));
  return m;
}

int normalized(RuleCtx& c, int v, double eps, ScalarType t) {
  Moments m = moments(c, v, 0, t);
  int rstd = c.unary(ExprOp::Rsqrt, c.binary(ExprOp::Add, m.var, c.constant(eps, t)));
  return c.binary(ExprOp::Mul, c.binary(ExprOp::Sub, v, m.mean), rstd);
}

}  // namespace reduction

namespace {

using ir::ExprOp;
using ir::ScalarType;
using namespace reduction;

// var/std(input, dim=None, *, correction=1, keepdim=False).
template <bool Std>
bool var(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  std::optional<std::vector<int64_t>> dims;
  double correction = 1;
  ScalarType t = compute_type(c.out_type());
  if (!var_args(c, &dims, &correction) || !ir::is_floating(t) || !setup(c, x, dims)) return false;
  int r = moments(c, c.value(x, t), correction, t).var;
  return c.finish(Std ? c.unary(ExprOp::Sqrt, r) : r);
}

// argmax/argmin(input, dim=None, keepdim=False): the first index of the extreme
// (or of the first NaN), row-major over the input when dim is None.
template <ExprOp Op>
bool argextreme(RuleCtx& c) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  auto dims = dims_arg(c, 1, "dim", &ok);
  c.arg(2, "keepdim");
  if (!ok || (dims && dims->size() != 1) || !c.is_tensor(x) || !setup(c, x, dims)) return false;
  return c.finish(extreme(c, x, Op));
}

// all/any(input, dim=None, keepdim=False): min/max of the truth values as u8
// (bool's identity for an empty row: all -> true, any -> false).
template <ExprOp Op>
bool all_any(RuleCtx& c) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  auto dims = dims_arg(c, 1, "dim", &ok);
  c.arg(2, "keepdim");
  ScalarType out = c.out_type();
  if (!ok || (out != ScalarType::Bool && out != ScalarType::U8) || !setup(c, x, dims)) return false;
  int truth = c.cast(c.value(x, ScalarType::Bool), ScalarType::U8);
  return c.finish(c.cast(c.reduce(Op, truth), out));
}

// norm(input, p='fro', dim=None, keepdim=False, dtype=None) for vector norms:
// p = 'fro'/2, 1, inf, -inf, 0 and any other number.
bool norm(RuleCtx& c) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  const ir::Arg* pa = none_to_null(c.arg(1, "p"));
  auto dims = dims_arg(c, 2, "dim", &ok);
  c.arg(3, "keepdim"), c.arg(kKeywordOnly, "dtype");
  // NOTE: torch.norm (torch/functional.py) has `out` at position 4; Tensor.norm has no `out`.
  if (none_to_null(c.arg(4, "out"))) return false;
  std::optional<double> p = 2.0;
  if (pa) {
    auto s = c.str(pa);
    p = s ? (*s == "fro" ? std::optional<double>(2.0) : std::nullopt) : c.number(pa);
  }
  ScalarType t = compute_type(c.out_type());
  if (!ok || !p || !ir::is_floating(t) || !setup(c, x, dims)) return false;
  int v = c.value(x, t), a = c.unary(ExprOp::Abs, v);
  int r;
  if (*p == 2) {
    r = c.unary(ExprOp::Sqrt, c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Mul, v, v)));
  } else if (*p == 1) {
    r = c.reduce(ExprOp::ReduceSum, a);
  } else if (std::isinf(*p)) {
    r = c.reduce(*p > 0 ? ExprOp::ReduceMax : ExprOp::ReduceMin, a);
  } else if (*p == 0) {
    int nz = c.cast(c.binary(ExprOp::Ne, v, c.constant(0, t)), t);
    r = c.reduce(ExprOp::ReduceSum, nz);
  } else {
    int s = c.reduce(ExprOp::ReduceSum, c.binary(ExprOp::Pow, a, c.constant(*p, t)));
    r = c.binary(ExprOp::Pow, s, c.constant(1.0 / *p, t));
  }
  return c.finish(r);
}

// group_norm(input, num_groups, weight, bias, eps) when a group is all channels
// (num_groups 1) or one channel (num_groups C): a reduction over whole axes.
// Other group counts need a channel split the iteration space cannot express: extern.
bool group_norm(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  auto groups = c.number(c.arg(1, "num_groups"));
  const ir::Arg *w = c.arg(2, "weight"), *b = c.arg(3, "bias");
  double eps = c.number(c.arg(4, "eps")).value_or(1e-5);
  c.arg(5, "cudnn_enabled");
  ScalarType t = compute_type(c.out_type());
  if (!groups || !c.is_tensor(x) || !ir::is_floating(t)) return false;
  const auto& sizes = x->node->meta->sizes;
  int64_t rank = static_cast<int64_t>(sizes.size());
  if (rank < 2) return false;
  int64_t channels = sizes[1];
  std::vector<int64_t> dims;
  if (*groups == 1) {
    for (int64_t d = 1; d < rank; ++d) dims.push_back(d);
  } else if (*groups == double(channels) && rank > 2) {
    for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  } else {
    return false;
  }
  if (!setup(c, x, dims)) return false;
  c.out.full_result = true;
  int r = normalized(c, c.value(x, t), eps, t);
  if (!affine(c, &r, w, b, t)) return false;
  c.out.input_axes.assign(c.out.inputs.size(), {});
  for (size_t i = 1; i < c.out.inputs.size(); ++i) {
    if (c.out.inputs[i]->meta->sizes.size() != 1) return false;
    c.out.input_axes[i] = {1};  // weight and bias are per channel
  }
  return c.finish(r);
}

}  // namespace

void add_statistics_rules(RuleTable& t) {
  t["var"] = var<false>, t["std"] = var<true>;
  t["argmax"] = argextreme<ExprOp::ReduceArgMax>, t["argmin"] = argextreme<ExprOp::ReduceArgMin>;
  t["all"] = all_any<ExprOp::ReduceMin>, t["any"] = all_any<ExprOp::ReduceMax>;
  t["norm"] = norm, t["group_norm"] = group_norm;
}

}  // namespace tl::passes
