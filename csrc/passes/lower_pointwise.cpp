// Pointwise rules: arithmetic, math, comparisons, logic, where/clamp and casts.
// Operands are cast to the compute type of the node's dtype (taken from its
// TensorMeta); only comparisons derive a type, through torch's promotion.
#include "passes/dtype.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::ExprOp;
using ir::ScalarType;

ScalarType ct(RuleCtx& c) { return compute_type(c.out_type()); }

// Integer division by zero traps; torch raises instead. Only constant non-zero
// divisors are lowered for integer types.
bool safe_divisor(RuleCtx& c, const ir::Arg* b) {
  if (ir::is_floating(ct(c))) return true;
  auto v = c.number(b);
  return v && *v != 0;
}

template <ExprOp Op>
bool unary(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x)) return false;
  int v = c.value(x, ct(c));
  bool rounding =
      Op == ExprOp::Floor || Op == ExprOp::Ceil || Op == ExprOp::Round || Op == ExprOp::Trunc;
  if (!ir::is_floating(ct(c))) {
    if (rounding) return c.finish(v);  // identity on integers, as in torch
    if (Op > ExprOp::Sign && Op != ExprOp::Relu) return false;
    if (c.type(v) == ScalarType::Bool) return false;
  }
  if (Op == ExprOp::Round && c.arg(1, "decimals")) return false;
  if (Op == ExprOp::Relu && c.number(c.arg(1, "inplace")).value_or(0) != 0) return false;
  return c.finish(c.unary(Op, v));
}

template <ExprOp Op>
bool predicate(RuleCtx& c) {  // isnan/isinf/isfinite
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x)) return false;
  ScalarType t = compute_type(c.type_of(x));
  if (!ir::is_floating(t)) return c.finish(c.constant(Op == ExprOp::IsFinite, ScalarType::Bool));
  return c.finish(c.unary(Op, c.value(x, t)));
}

// add/sub with alpha: a op b * alpha. Reversed (rsub): b op a * alpha.
template <ExprOp Op, bool Reversed = false>
bool arith(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "other");
  if (!c.is_operand(a) || !c.is_operand(b) || c.out_type() == ScalarType::Bool) return false;
  if (Reversed) std::swap(a, b);
  int va = c.value(a, ct(c)), vb = c.value(b, ct(c));
  if (const ir::Arg* alpha = c.arg(2, "alpha"))
    vb = c.binary(ExprOp::Mul, vb, c.value(alpha, ct(c)));
  return c.finish(c.binary(Op, va, vb));
}

template <ExprOp Op>
bool binary(RuleCtx& c) {  // mul, maximum, atan2, remainder, ...
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "other");
  if (!c.is_operand(a) || !c.is_operand(b)) return false;
  bool divides = Op == ExprOp::Remainder || Op == ExprOp::Fmod || Op == ExprOp::FloorDiv;
  if (divides && !safe_divisor(c, b)) return false;
  if (Op == ExprOp::Atan2 && !ir::is_floating(ct(c))) return false;
  if (ct(c) == ScalarType::Bool && Op != ExprOp::Mul) return false;
  int va = c.value(a, ct(c)), vb = c.value(b, ct(c));
  ExprOp op = Op == ExprOp::Mul && ct(c) == ScalarType::Bool ? ExprOp::And : Op;
  return c.finish(c.binary(op, va, vb));
}

bool div(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "other");
  auto mode = c.str(c.arg(2, "rounding_mode"));
  if (!c.is_operand(a) || !c.is_operand(b)) return false;
  if (mode && !safe_divisor(c, b)) return false;
  int va = c.value(a, ct(c)), vb = c.value(b, ct(c));
  bool fp = ir::is_floating(ct(c));
  if (!mode) return fp && c.finish(c.binary(ExprOp::Div, va, vb));
  if (*mode == "floor") return c.finish(c.binary(ExprOp::FloorDiv, va, vb));
  if (*mode != "trunc") return false;
  if (!fp) return c.finish(c.binary(ExprOp::TruncDiv, va, vb));
  // torch truncates an f16/bf16 quotient after rounding it to that type (its scalar
  // operator/ does), so 7.98 -> 8.0 -> 8, not 7.
  int q = c.cast(c.cast(c.binary(ExprOp::Div, va, vb), c.out_type()), ct(c));
  return c.finish(c.unary(ExprOp::Trunc, q));
}

bool pow(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "exponent");
  if (!c.is_operand(a) || !c.is_operand(b)) return false;
  auto e = c.number(b);
  if (!ir::is_floating(ct(c)) && !(e && *e >= 0 && *e <= 8 && *e == static_cast<int>(*e)))
    return false;
  int x = c.value(a, ct(c));
  if (!c.is_tensor(a) || !e || !ir::is_floating(ct(c))) {
    if (e && !ir::is_floating(ct(c))) {  // small integer power by repeated multiplication
      int r = c.constant(1, ct(c));
      for (int i = 0; i < static_cast<int>(*e); ++i) r = c.binary(ExprOp::Mul, r, x);
      return c.finish(r);
    }
    return c.finish(c.binary(ExprOp::Pow, x, c.value(b, ct(c))));
  }
  if (*e == 1) return c.finish(x);
  // The exponents ATen special-cases (so results match it, and no powf runs:
  // GPT-2's gelu cubes its input, a powf per element made it compute-bound).
  if (*e == 2) return c.finish(c.binary(ExprOp::Mul, x, x));
  if (*e == 3) return c.finish(c.binary(ExprOp::Mul, c.binary(ExprOp::Mul, x, x), x));
  if (*e == 0.5) return c.finish(c.unary(ExprOp::Sqrt, x));
  if (*e == -0.5) return c.finish(c.unary(ExprOp::Rsqrt, x));
  if (*e == -1) return c.finish(c.unary(ExprOp::Reciprocal, x));
  if (*e == -2) return c.finish(c.unary(ExprOp::Reciprocal, c.binary(ExprOp::Mul, x, x)));
  return c.finish(c.binary(ExprOp::Pow, x, c.constant(*e, ct(c))));
}

PromoteOperand promote_operand(RuleCtx& c, const ir::Arg* a) {
  using K = PromoteOperand::Kind;
  if (!c.is_tensor(a)) return {c.type_of(a), K::Scalar};
  return {c.type_of(a), a->node->meta->sizes.empty() ? K::ZeroDim : K::Tensor};
}

template <ExprOp Op>
bool compare(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = c.arg(1, "other");
  if (!c.is_operand(a) || !c.is_operand(b)) return false;
  ScalarType t = compute_type(result_type({promote_operand(c, a), promote_operand(c, b)}));
  return c.finish(c.binary(Op, c.value(a, t), c.value(b, t)));
}

// logical_* (any dtype, truthiness) and bitwise_* / & | ^ ~ (bool or integer).
template <ExprOp LogicalOp, ExprOp BitOp, bool Logical>
bool logic(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "input");
  const ir::Arg* b = LogicalOp == ExprOp::Not ? nullptr : c.arg(1, "other");
  if (!c.is_operand(a) || (LogicalOp != ExprOp::Not && !c.is_operand(b))) return false;
  bool boolean = Logical || c.out_type() == ScalarType::Bool;
  if (!boolean && ir::is_floating(c.out_type())) return false;
  ScalarType t = boolean ? ScalarType::Bool : ct(c);
  if (Logical && c.out_type() != ScalarType::Bool) return false;
  int va = c.value(a, t);
  if (LogicalOp == ExprOp::Not) return c.finish(c.unary(boolean ? ExprOp::Not : BitOp, va));
  return c.finish(c.binary(boolean ? LogicalOp : BitOp, va, c.value(b, t)));
}

// A constant int that `where`/`masked_fill` convert to their result type `t` with torch's
// overflow check (eager raises "value cannot be converted to type int8_t without overflow"
// where a kernel would wrap): true when it fits, or when it is no int constant.
bool fits_result(RuleCtx& c, const ir::Arg* a, ScalarType t) {
  if (!a || a->kind != ir::Arg::Kind::Const || ir::is_floating(t) || t == ScalarType::Bool)
    return true;
  std::optional<double> v = c.number(a);
  if (!v) return true;
  double lo = 0, hi = 0;
  switch (t) {
    case ScalarType::I8:
      lo = -128, hi = 127;
      break;
    case ScalarType::I16:
      lo = -32768, hi = 32767;
      break;
    case ScalarType::I32:
      lo = -2147483648.0, hi = 2147483647.0;
      break;
    case ScalarType::U8:
      lo = 0, hi = 255;
      break;
    default:
      return true;  // NOTE: int64 holds every int number() returns
  }
  return *v >= lo && *v <= hi;
}

bool where(RuleCtx& c) {
  bool method = c.node.op == ir::OpKind::CallMethod;  // x.where(cond, y)
  const ir::Arg* cond = c.arg(method ? 1 : 0, "condition");
  const ir::Arg* a = c.arg(method ? 0 : 1, "input");
  const ir::Arg* b = c.arg(2, "other");
  if (!c.is_tensor(cond) || c.type_of(cond) != ScalarType::Bool) return false;
  if (!c.is_operand(a) || !c.is_operand(b)) return false;
  if (!fits_result(c, a, c.out_type()) || !fits_result(c, b, c.out_type())) return false;
  return c.finish(c.where(c.value(cond, ScalarType::Bool), c.value(a, ct(c)), c.value(b, ct(c))));
}

bool masked_fill(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  const ir::Arg* mask = c.arg(1, "mask");
  const ir::Arg* v = c.arg(2, "value");
  if (!c.is_tensor(x) || !c.is_tensor(mask) || c.type_of(mask) != ScalarType::Bool) return false;
  if (!c.is_operand(v) || !fits_result(c, v, c.out_type())) return false;
  return c.finish(c.where(c.value(mask, ScalarType::Bool), c.value(v, ct(c)), c.value(x, ct(c))));
}

// clamp(min, max), clamp_min, clamp_max: NaN-propagating maximum/minimum.
template <bool Lo, bool Hi>
bool clamp(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  const ir::Arg* lo = Lo ? c.arg(1, "min") : nullptr;
  const ir::Arg* hi = Hi ? c.arg(Lo ? 2 : 1, "max") : nullptr;
  if (!c.is_tensor(x) || (!lo && !hi) || c.out_type() == ScalarType::Bool) return false;
  auto none = [](const ir::Arg* a) {
    return a && a->kind == ir::Arg::Kind::Const && a->value.get() == Py_None;
  };
  if (none(lo)) lo = nullptr;
  if (none(hi)) hi = nullptr;
  int v = c.value(x, ct(c));
  if (lo) v = c.binary(ExprOp::Maximum, v, c.value(lo, ct(c)));
  if (hi) v = c.binary(ExprOp::Minimum, v, c.value(hi, ct(c)));
  return c.finish(v);
}

// Casts: the target dtype is the node's own (from TensorMeta); only the
// arguments are checked. f16/bf16 targets round through their storage type.
// True when the cast returned its input itself (`y.to(y.dtype)`, `y.float()` of a float
// tensor): in eager it is that tensor, and an in-place op through it writes the input, so it
// is lowered as a view of the input rather than a copy.
bool returned_input(RuleCtx& c, const ir::Arg* x) {
  if (!c.node.example || !x->node->example || c.node.example.get() != x->node->example.get())
    return false;
  c.out.kind = OpLowering::Kind::View;
  c.out.inputs = {x->node};
  for (size_t i = 0; i < c.node.meta->sizes.size(); ++i) c.out.base_axes.push_back(int(i));
  return true;
}

bool cast(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x)) return false;
  for (size_t i = 1; i < c.node.args.size(); ++i)
    if (c.node.args[i].kind != ir::Arg::Kind::Const) return false;
  // memory_format only changes the output strides, which kernels take from the node's meta.
  for (const char* kw : {"dtype", "device", "non_blocking", "copy", "memory_format"}) c.arg(99, kw);
  if (returned_input(c, x)) return c.all_kwargs_read();
  int v = c.value(x, compute_type(c.type_of(x)));
  return c.finish(c.cast(c.cast(v, c.out_type()), ct(c)));
}

bool type_as(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x) || !c.is_tensor(c.arg(1, "other"))) return false;
  if (returned_input(c, x)) return c.all_kwargs_read();
  int v = c.value(x, compute_type(c.type_of(x)));
  return c.finish(c.cast(c.cast(v, c.out_type()), ct(c)));
}

bool lerp(RuleCtx& c) {  // torch's two-sided formula keeps lerp(a, b, 1) == b exactly
  const ir::Arg *a = c.arg(0, "input"), *b = c.arg(1, "end"), *w = c.arg(2, "weight");
  if (!c.is_tensor(a) || !c.is_operand(b) || !c.is_operand(w) || !ir::is_floating(ct(c)))
    return false;
  int va = c.value(a, ct(c)), vb = c.value(b, ct(c)), vw = c.value(w, ct(c));
  int diff = c.binary(ExprOp::Sub, vb, va);
  int small = c.binary(ExprOp::Lt, c.unary(ExprOp::Abs, vw), c.constant(0.5, ct(c)));
  int lo = c.binary(ExprOp::Add, va, c.binary(ExprOp::Mul, vw, diff));
  int one_minus = c.binary(ExprOp::Sub, c.constant(1, ct(c)), vw);
  int hi = c.binary(ExprOp::Sub, vb, c.binary(ExprOp::Mul, diff, one_minus));
  return c.finish(c.where(small, lo, hi));
}

template <ExprOp Op>
bool addc(RuleCtx& c) {  // addcmul / addcdiv: input + value * (t1 op t2)
  const ir::Arg *x = c.arg(0, "input"), *t1 = c.arg(1, "tensor1"), *t2 = c.arg(2, "tensor2");
  const ir::Arg* s = c.arg(3, "value");
  if (!c.is_tensor(x) || !c.is_tensor(t1) || !c.is_tensor(t2)) return false;
  if (Op == ExprOp::Div && !ir::is_floating(ct(c))) return false;
  int r = c.binary(Op, c.value(t1, ct(c)), c.value(t2, ct(c)));
  if (s) r = c.binary(ExprOp::Mul, c.value(s, ct(c)), r);
  return c.finish(c.binary(ExprOp::Add, c.value(x, ct(c)), r));
}

}  // namespace

void add_pointwise_rules(RuleTable& t) {
  using E = ExprOp;
  for (const char* n : {"neg", "negative"}) t[n] = unary<E::Neg>;
  for (const char* n : {"abs", "absolute"}) t[n] = unary<E::Abs>;
  for (const char* n : {"asin", "arcsin"}) t[n] = unary<E::Asin>;
  for (const char* n : {"acos", "arccos"}) t[n] = unary<E::Acos>;
  for (const char* n : {"atan", "arctan"}) t[n] = unary<E::Atan>;
  for (const char* n : {"sigmoid", "expit"}) t[n] = unary<E::Sigmoid>;
  for (const char* n : {"trunc", "fix"}) t[n] = unary<E::Trunc>;
  t["sign"] = unary<E::Sign>, t["reciprocal"] = unary<E::Reciprocal>, t["sqrt"] = unary<E::Sqrt>;
  t["rsqrt"] = unary<E::Rsqrt>, t["exp"] = unary<E::Exp>, t["exp2"] = unary<E::Exp2>;
  t["expm1"] = unary<E::Expm1>, t["log"] = unary<E::Log>, t["log2"] = unary<E::Log2>;
  t["log10"] = unary<E::Log10>, t["log1p"] = unary<E::Log1p>, t["sin"] = unary<E::Sin>;
  t["cos"] = unary<E::Cos>, t["tan"] = unary<E::Tan>, t["sinh"] = unary<E::Sinh>;
  t["cosh"] = unary<E::Cosh>, t["tanh"] = unary<E::Tanh>, t["erf"] = unary<E::Erf>;
  t["erfc"] = unary<E::Erfc>, t["erfinv"] = unary<E::Erfinv>, t["floor"] = unary<E::Floor>;
  t["ceil"] = unary<E::Ceil>, t["round"] = unary<E::Round>, t["frac"] = unary<E::Frac>;
  t["relu"] = unary<E::Relu>;
  t["isnan"] = predicate<E::IsNan>, t["isinf"] = predicate<E::IsInf>;
  t["isfinite"] = predicate<E::IsFinite>;
  t["add"] = arith<E::Add>, t["sub"] = arith<E::Sub>, t["subtract"] = arith<E::Sub>;
  t["rsub"] = arith<E::Sub, true>;
  for (const char* n : {"mul", "multiply"}) t[n] = binary<E::Mul>;
  for (const char* n : {"div", "divide", "true_divide", "truediv"}) t[n] = div;
  for (const char* n : {"floor_divide", "floordiv"}) t[n] = binary<E::FloorDiv>;
  for (const char* n : {"remainder", "mod"}) t[n] = binary<E::Remainder>;
  t["fmod"] = binary<E::Fmod>, t["maximum"] = binary<E::Maximum>;
  t["minimum"] = binary<E::Minimum>;
  for (const char* n : {"atan2", "arctan2"}) t[n] = binary<E::Atan2>;
  for (const char* n : {"pow", "float_power"}) t[n] = pow;
  t["eq"] = compare<E::Eq>;
  for (const char* n : {"ne", "not_equal"}) t[n] = compare<E::Ne>;
  for (const char* n : {"lt", "less"}) t[n] = compare<E::Lt>;
  for (const char* n : {"le", "less_equal"}) t[n] = compare<E::Le>;
  for (const char* n : {"gt", "greater"}) t[n] = compare<E::Gt>;
  for (const char* n : {"ge", "greater_equal"}) t[n] = compare<E::Ge>;
  t["logical_and"] = logic<E::And, E::BitAnd, true>, t["logical_or"] = logic<E::Or, E::BitOr, true>;
  t["logical_xor"] = logic<E::Xor, E::BitXor, true>;
  t["logical_not"] = logic<E::Not, E::BitNot, true>;
  for (const char* n : {"bitwise_and", "and_"}) t[n] = logic<E::And, E::BitAnd, false>;
  for (const char* n : {"bitwise_or", "or_"}) t[n] = logic<E::Or, E::BitOr, false>;
  for (const char* n : {"bitwise_xor", "xor"}) t[n] = logic<E::Xor, E::BitXor, false>;
  for (const char* n : {"bitwise_not", "invert"}) t[n] = logic<E::Not, E::BitNot, false>;
  t["where"] = where, t["masked_fill"] = masked_fill;
  for (const char* n : {"clamp", "clip"}) t[n] = clamp<true, true>;
  t["clamp_min"] = clamp<true, false>, t["clamp_max"] = clamp<false, true>;
  for (const char* n : {"to", "float", "double", "half", "bfloat16", "int", "long", "short", "char",
                        "byte", "bool", "type"})
    t[n] = cast;
  t["type_as"] = type_as, t["lerp"] = lerp;
  t["addcmul"] = addc<E::Mul>, t["addcdiv"] = addc<E::Div>;
}

}  // namespace tl::passes
