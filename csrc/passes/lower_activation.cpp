// Activation rules, written as the expressions torch's CPU kernels compute.
// `inplace=True` never lowers (it is also a barrier, graph_info.cpp).
#include <cmath>

#include "passes/dtype.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::ExprOp;
using ir::ScalarType;

struct Act {
  RuleCtx& c;
  ScalarType t;
  int x = -1;
  int k(double v) { return c.constant(v, t); }
  int add(int a, int b) { return c.binary(ExprOp::Add, a, b); }
  int mul(int a, int b) { return c.binary(ExprOp::Mul, a, b); }
  int max(int a, int b) { return c.binary(ExprOp::Maximum, a, b); }
  int min(int a, int b) { return c.binary(ExprOp::Minimum, a, b); }
  int gt(int a, int b) { return c.binary(ExprOp::Gt, a, b); }
  int un(ExprOp op, int a) { return c.unary(op, a); }
  int sel(int cond, int a, int b) { return c.where(cond, a, b); }
};

// Reads the input (floating only) and a false `inplace` at `inplace_pos`.
std::optional<Act> start(RuleCtx& c, size_t inplace_pos) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x) || !ir::is_floating(c.out_type())) return std::nullopt;
  auto inplace = c.number(c.arg(inplace_pos, "inplace"));
  if (inplace && *inplace != 0) return std::nullopt;
  Act a{c, compute_type(c.out_type())};
  a.x = c.value(x, a.t);
  return a;
}

double num(RuleCtx& c, size_t pos, const char* name, double dflt, bool* ok) {
  const ir::Arg* a = c.arg(pos, name);
  if (!a) return dflt;
  auto v = c.number(a);
  *ok = *ok && v.has_value();
  return v.value_or(dflt);
}

bool relu6(RuleCtx& c) {
  auto a = start(c, 1);
  return a && c.finish(a->min(a->max(a->x, a->k(0)), a->k(6)));
}

bool leaky_relu(RuleCtx& c) {
  bool ok = true;
  double slope = num(c, 1, "negative_slope", 0.01, &ok);
  auto a = start(c, 2);
  return a && ok && c.finish(a->sel(a->gt(a->x, a->k(0)), a->x, a->mul(a->x, a->k(slope))));
}

// elu family: x > 0 ? scale * x : scale * alpha * expm1(x * input_scale).
bool elu_like(RuleCtx& c, double alpha, double scale, double input_scale, size_t inplace_pos) {
  auto a = start(c, inplace_pos);
  if (!a) return false;
  int neg = a->un(ExprOp::Expm1, a->mul(a->x, a->k(input_scale)));
  neg = a->mul(neg, a->k(alpha * scale));
  return c.finish(a->sel(a->gt(a->x, a->k(0)), a->mul(a->x, a->k(scale)), neg));
}

bool elu(RuleCtx& c) {
  bool ok = true;
  double alpha = num(c, 1, "alpha", 1.0, &ok);
  return ok && elu_like(c, alpha, 1.0, 1.0, 2);
}

bool selu(RuleCtx& c) {
  return elu_like(c, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0, 1);
}

bool celu(RuleCtx& c) {
  bool ok = true;
  double alpha = num(c, 1, "alpha", 1.0, &ok);
  return ok && alpha != 0 && elu_like(c, alpha, 1.0, 1.0 / alpha, 2);
}

bool gelu(RuleCtx& c) {
  auto mode = c.str(c.arg(1, "approximate"));
  auto a = start(c, 99);
  if (!a || (mode && *mode != "none" && *mode != "tanh")) return false;
  int half_x = a->mul(a->x, a->k(0.5));
  if (mode && *mode == "tanh") {
    int cube = a->mul(a->mul(a->x, a->x), a->x);
    int inner = a->mul(a->k(std::sqrt(2.0 / M_PI)), a->add(a->x, a->mul(cube, a->k(0.044715))));
    return c.finish(a->mul(half_x, a->add(a->k(1), a->un(ExprOp::Tanh, inner))));
  }
  int e = a->un(ExprOp::Erf, a->mul(a->x, a->k(M_SQRT1_2)));
  return c.finish(a->mul(half_x, a->add(a->k(1), e)));
}

bool silu(RuleCtx& c) {
  auto a = start(c, 1);
  return a && c.finish(a->mul(a->x, a->un(ExprOp::Sigmoid, a->x)));
}

int softplus_of(Act& a, int bx, double beta, double threshold) {
  int soft = a.un(ExprOp::Log1p, a.un(ExprOp::Exp, bx));
  if (beta != 1) soft = a.c.binary(ExprOp::Div, soft, a.k(beta));
  int lin = beta != 1 ? a.c.binary(ExprOp::Div, bx, a.k(beta)) : bx;
  return a.sel(a.gt(bx, a.k(threshold)), lin, soft);
}

bool softplus(RuleCtx& c) {
  bool ok = true;
  double beta = num(c, 1, "beta", 1.0, &ok), threshold = num(c, 2, "threshold", 20.0, &ok);
  auto a = start(c, 99);
  if (!a || !ok || beta == 0) return false;
  return c.finish(softplus_of(*a, beta != 1 ? a->mul(a->x, a->k(beta)) : a->x, beta, threshold));
}

bool mish(RuleCtx& c) {
  auto a = start(c, 1);
  return a && c.finish(a->mul(a->x, a->un(ExprOp::Tanh, softplus_of(*a, a->x, 1, 20))));
}

bool hardtanh(RuleCtx& c) {
  bool ok = true;
  double lo = num(c, 1, "min_val", -1, &ok), hi = num(c, 2, "max_val", 1, &ok);
  auto a = start(c, 3);
  return a && ok && c.finish(a->min(a->max(a->x, a->k(lo)), a->k(hi)));
}

int relu6_of(Act& a, int v) { return a.min(a.max(v, a.k(0)), a.k(6)); }

bool hardsigmoid(RuleCtx& c) {
  auto a = start(c, 1);
  return a && c.finish(a->c.binary(ExprOp::Div, relu6_of(*a, a->add(a->x, a->k(3))), a->k(6)));
}

bool hardswish(RuleCtx& c) {
  auto a = start(c, 1);
  if (!a) return false;
  int r = a->c.binary(ExprOp::Div, relu6_of(*a, a->add(a->x, a->k(3))), a->k(6));
  return c.finish(a->mul(a->x, r));
}

bool threshold(RuleCtx& c) {
  bool ok = c.number(c.arg(1, "threshold")) && c.number(c.arg(2, "value"));
  if (!ok) return false;
  double th = *c.number(c.arg(1, "threshold")), v = *c.number(c.arg(2, "value"));
  auto a = start(c, 3);
  return a && c.finish(a->sel(a->gt(a->x, a->k(th)), a->x, a->k(v)));
}

// Eval-mode dropout, detach and contiguous are the identity on values.
bool identity_view(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x) || c.type_of(x) != c.out_type()) return false;
  if (x->node->meta->sizes != c.node.meta->sizes) return false;
  std::string name = op_base_name(c.node);
  if (name == "dropout") {
    c.arg(1, "p");
    auto training = c.number(c.arg(2, "training"));
    auto inplace = c.number(c.arg(3, "inplace"));
    if (!training || *training != 0 || (inplace && *inplace != 0)) return false;
  }
  if (name == "contiguous" && c.arg(1, "memory_format")) return false;
  c.out.kind = OpLowering::Kind::View;
  c.out.inputs = {x->node};
  for (size_t i = 0; i < c.node.meta->sizes.size(); ++i) c.out.base_axes.push_back(int(i));
  return c.all_kwargs_read();
}

}  // namespace

void add_activation_rules(RuleTable& t) {
  t["relu6"] = relu6, t["leaky_relu"] = leaky_relu, t["elu"] = elu, t["selu"] = selu;
  t["celu"] = celu, t["gelu"] = gelu, t["silu"] = silu, t["softplus"] = softplus;
  t["mish"] = mish, t["hardtanh"] = hardtanh, t["hardsigmoid"] = hardsigmoid;
  // F.threshold is the Python function _threshold, captured under that name.
  for (const char* n : {"threshold", "_threshold"}) t[n] = threshold;
  t["hardswish"] = hardswish;
  for (const char* n : {"dropout", "detach", "contiguous"}) t[n] = identity_view;
}

}  // namespace tl::passes
