// Unary, binary and reduction loop-IR ops as CUDA C text, matching the CPU
// emitter (codegen/cpu/unary_ops.cpp, binary_ops.cpp, reduce_ops.cpp) and so
// torch: NaN passes through relu/sign, maximum/minimum propagate NaN, Round is
// half-to-even (rint), integer division never traps.
#include "codegen/cuda/scalar_text.h"
#include "core/errors.h"

namespace tl::codegen::cuda {

using ir::ExprOp;

namespace {
std::string call(const char* name, ST t, const std::string& x) {
  return std::string(name) + (t == ST::F64 ? "" : "f") + "(" + x + ")";
}
std::string inf(ST t) { return highest(t == ST::F64 ? ST::F64 : ST::F32); }

std::string float_unary(ExprOp op, ST t, const std::string& x) {
  std::string c = t == ST::F64 ? "" : "f";
  auto m = [&](const char* n) { return call(n, t, x); };
  switch (op) {
    case ExprOp::Neg:
      return "(-" + x + ")";
    case ExprOp::Abs:
      return m("fabs");
    case ExprOp::Sign:
      return "(" + x + " > 0 ? 1 : (" + x + " < 0 ? -1 : " + x + "))";
    case ExprOp::Reciprocal:
      return "(1 / " + x + ")";
    case ExprOp::Sqrt:
      return m("sqrt");
    case ExprOp::Rsqrt:
      // NOTE: as eager's CUDA kernels (torch.rsqrt, batch norm's and layer
      // norm's inverse std): CUDA's rsqrt, not 1 / sqrt. Both correctly rounded
      // steps per element made a channels-last batch-norm kernel compute-bound
      // on an H100 (resnet50's bn+bn+add+relu, 64x256x56x56 bf16: 210 us
      // against 117 us).
      return m("rsqrt");
    case ExprOp::Exp:
      return m("exp");
    case ExprOp::Exp2:
      return m("exp2");
    case ExprOp::Expm1:
      return m("expm1");
    case ExprOp::Log:
      return m("log");
    case ExprOp::Log2:
      return m("log2");
    case ExprOp::Log10:
      return m("log10");
    case ExprOp::Log1p:
      return m("log1p");
    case ExprOp::Sin:
      return m("sin");
    case ExprOp::Cos:
      return m("cos");
    case ExprOp::Tan:
      return m("tan");
    case ExprOp::Asin:
      return m("asin");
    case ExprOp::Acos:
      return m("acos");
    case ExprOp::Atan:
      return m("atan");
    case ExprOp::Sinh:
      return m("sinh");
    case ExprOp::Cosh:
      return m("cosh");
    case ExprOp::Tanh:
      return m("tanh");
    case ExprOp::Sigmoid:
      return "(1 / (1 + " + call("exp", t, "-" + x) + "))";
    case ExprOp::Erf:
      return m("erf");
    case ExprOp::Erfc:
      return m("erfc");
    case ExprOp::Erfinv:
      return m("erfinv");
    case ExprOp::Floor:
      return m("floor");
    case ExprOp::Ceil:
      return m("ceil");
    case ExprOp::Round:
      return m("rint");  // half to even, as torch.round
    case ExprOp::Trunc:
      return m("trunc");
    case ExprOp::Frac:
      return "(" + x + " - " + m("trunc") + ")";
    case ExprOp::Relu:
      return "(" + x + " < 0 ? 0 : " + x + ")";  // NaN passes through
    case ExprOp::IsNan:
      return "(" + x + " != " + x + ")";
    case ExprOp::IsInf:
    case ExprOp::IsFinite: {
      // NOTE: a named string dodges GCC 12's -Wrestrict false positive.
      const std::string a = m("fabs");
      return "(" + a + (op == ExprOp::IsInf ? " == " : " < ") + inf(t) + ")";
    }
    default:
      return {};
  }
}

std::string int_unary(ExprOp op, ST t, const std::string& x) {
  bool u = is_unsigned_type(t);
  switch (op) {
    case ExprOp::Neg:
      return "(0ull - (unsigned long long)" + x + ")";
    case ExprOp::Abs:
      return u ? x : "(" + x + " < 0 ? 0ull - (unsigned long long)" + x + " : " + x + ")";
    case ExprOp::Sign:
      return u ? "(" + x + " != 0)" : "((" + x + " > 0) - (" + x + " < 0))";
    case ExprOp::Floor:
    case ExprOp::Ceil:
    case ExprOp::Round:
    case ExprOp::Trunc:
      return x;
    case ExprOp::Frac:
      return "0";
    case ExprOp::Relu:
      return u ? x : "(" + x + " < 0 ? 0 : " + x + ")";
    case ExprOp::IsNan:
    case ExprOp::IsInf:
      return "false";
    case ExprOp::IsFinite:
      return "true";
    default:
      return {};
  }
}

std::string float_binary(ExprOp op, ST t, const std::string& x, const std::string& y) {
  auto infix = [&](const char* o) { return "(" + x + " " + o + " " + y + ")"; };
  auto fn = [&](const std::string& n) { return n + "(" + x + ", " + y + ")"; };
  std::string c = t == ST::F64 ? "" : "f";
  switch (op) {
    case ExprOp::Add:
      return infix("+");
    case ExprOp::Sub:
      return infix("-");
    case ExprOp::Mul:
      return infix("*");
    case ExprOp::Div:
      return infix("/");
    case ExprOp::FloorDiv:
      return fn("tl_floordiv");
    case ExprOp::TruncDiv:
      return "trunc" + c + "(" + x + " / " + y + ")";
    case ExprOp::Remainder:
      return fn("tl_remainder");
    case ExprOp::Fmod:
      return fn("fmod" + c);
    case ExprOp::Pow:
      return fn("pow" + c);
    case ExprOp::Atan2:
      return fn("atan2" + c);
    case ExprOp::Maximum:
      return fn("tl_max");
    case ExprOp::Minimum:
      return fn("tl_min");
    case ExprOp::Copysign:
      return fn("copysign" + c);
    default:
      return {};
  }
}

std::string int_binary(ExprOp op, ST t, const std::string& x, const std::string& y) {
  bool boolean = t == ST::Bool;
  auto infix = [&](const char* o) { return "(" + x + " " + o + " " + y + ")"; };
  // NOTE: through unsigned types: signed overflow wraps (as in torch) instead of being UB.
  const std::string u = t == ST::I64 ? "(unsigned long long)" : "(unsigned)";
  auto wrap = [&](const char* o) { return "(" + u + x + " " + o + " " + u + y + ")"; };
  auto div = [&](int mode) {
    return "tl_idiv<" + std::string(reg_type(t)) + ">(" + x + ", " + y + ", " +
           std::to_string(mode) + ")";
  };
  switch (op) {
    case ExprOp::Add:
      return boolean ? infix("|") : wrap("+");
    case ExprOp::Sub:
      return boolean ? infix("^") : wrap("-");
    case ExprOp::Mul:
      return boolean ? infix("&") : wrap("*");
    case ExprOp::Div:
    case ExprOp::TruncDiv:
      return div(0);
    case ExprOp::FloorDiv:
      return div(1);
    case ExprOp::Fmod:
      return div(2);
    case ExprOp::Remainder:
      return div(3);
    case ExprOp::Pow:
      return "tl_ipow(" + x + ", " + y + ")";
    case ExprOp::CheckIndex:
      return "tl_check_index(" + x + ", " + y + ")";
    case ExprOp::Maximum:
      return "(" + x + " > " + y + " ? " + x + " : " + y + ")";
    case ExprOp::Minimum:
      return "(" + x + " < " + y + " ? " + x + " : " + y + ")";
    case ExprOp::BitAnd:
      return infix("&");
    case ExprOp::BitOr:
      return infix("|");
    case ExprOp::BitXor:
      return infix("^");
    default:
      return {};
  }
}
}  // namespace

std::string unary(ExprOp op, ST t, const std::string& x) {
  if (op == ExprOp::Not) return "(!" + convert(x, t, ST::Bool) + ")";
  if (op == ExprOp::BitNot) {
    TL_CHECK(!is_float_type(t)) << "bitwise_not of " << ir::scalar_type_name(t);
    return t == ST::Bool ? "(!" + x + ")" : "(~" + x + ")";
  }
  std::string r = is_float_type(t) ? float_unary(op, t, x) : int_unary(op, t, x);
  TL_CHECK(!r.empty()) << "unary op " << ir::expr_op_name(op) << " is not defined for "
                       << ir::scalar_type_name(t);
  return r;
}

std::string binary(ExprOp op, ST t, const std::string& x, const std::string& y) {
  if (op == ExprOp::And || op == ExprOp::Or || op == ExprOp::Xor) {
    std::string a = convert(x, t, ST::Bool), b = convert(y, t, ST::Bool);
    const char* o = op == ExprOp::And ? " && " : op == ExprOp::Or ? " || " : " != ";
    return "(" + a + o + b + ")";
  }
  if (ir::is_comparison(op)) {  // the same text for every type; != is true for NaN, as torch
    static const char* const symbols[] = {"==", "!=", "<", "<=", ">", ">="};
    const char* o = symbols[static_cast<int>(op) - static_cast<int>(ExprOp::Eq)];
    return "(" + x + " " + o + " " + y + ")";
  }
  std::string r = is_float_type(t) ? float_binary(op, t, x, y) : int_binary(op, t, x, y);
  TL_CHECK(!r.empty()) << "binary op " << ir::expr_op_name(op) << " is not defined for "
                       << ir::scalar_type_name(t);
  return r;
}

std::string reduce_identity(ExprOp op, ST t) {
  switch (op) {
    case ExprOp::ReduceSum:
      return t == ST::Bool ? "false" : is_float_type(t) ? "0.0" : "0";
    case ExprOp::ReduceProd:
      return t == ST::Bool ? "true" : is_float_type(t) ? "1.0" : "1";
    case ExprOp::ReduceMax:
    case ExprOp::ReduceArgMax:
      return lowest(t);
    default:
      return highest(t);
  }
}

std::string reduce_combine(ExprOp op, ST t, const std::string& acc, const std::string& v) {
  switch (op) {
    case ExprOp::ReduceSum:
      return binary(ExprOp::Add, t, acc, v);
    case ExprOp::ReduceProd:
      return binary(ExprOp::Mul, t, acc, v);
    case ExprOp::ReduceMax:
      return binary(ExprOp::Maximum, t, acc, v);
    case ExprOp::ReduceMin:
      return binary(ExprOp::Minimum, t, acc, v);
    default:
      TL_CHECK(false) << "not a plain reduction: " << ir::expr_op_name(op);
  }
  return {};
}

std::string arg_better(ExprOp op, ST t, const std::string& v, const std::string& vi,
                       const std::string& acc, const std::string& ai) {
  const char* cmp = op == ExprOp::ReduceArgMax ? " > " : " < ";
  std::string better = "(" + v + cmp + acc + ")";
  std::string tie = "(" + v + " == " + acc + " && " + vi + " < " + ai + ")";
  if (!is_float_type(t)) return "(" + better + " || " + tie + ")";
  std::string v_nan = "(" + v + " != " + v + ")", a_nan = "(" + acc + " != " + acc + ")";
  return "(" + better + " || " + tie + " || (" + v_nan + " && (!" + a_nan + " || " + vi + " < " +
         ai + ")))";
}

}  // namespace tl::codegen::cuda
