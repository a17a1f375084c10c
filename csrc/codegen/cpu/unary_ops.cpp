// Unary loop-IR ops in LLVM IR, matching torch's CPU semantics (NaN handling,
// integer behaviour). Transcendentals go to LLVM intrinsics or libm.
#include "codegen/cpu/scalar_ops.h"
#include "core/errors.h"

namespace tl::codegen::cpu {

using ir::ExprOp;
using ir::ScalarType;
using llvm::Intrinsic::ID;
namespace In = llvm::Intrinsic;

namespace {
llvm::Value* fconst(Builder& b, llvm::Value* like, double v) {
  return llvm::ConstantFP::get(like->getType(), v);
}
llvm::Value* iconst(llvm::Value* like, int64_t v) {
  return llvm::ConstantInt::get(like->getType(), static_cast<uint64_t>(v), true);
}

llvm::Value* float_unary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x) {
  auto intr = [&](ID id) { return b.CreateUnaryIntrinsic(id, x); };
  auto libm = [&](const char* name) { return call_math(b, name, t, {x}); };
  switch (op) {
    case ExprOp::Neg:
      return b.CreateFNeg(x);
    case ExprOp::Abs:
      return intr(In::fabs);
    case ExprOp::Sign: {
      llvm::Value* s = b.CreateSelect(b.CreateFCmpOLT(x, fconst(b, x, 0)), fconst(b, x, -1), x);
      return b.CreateSelect(b.CreateFCmpOGT(x, fconst(b, x, 0)), fconst(b, x, 1), s);
    }
    case ExprOp::Reciprocal:
      return b.CreateFDiv(fconst(b, x, 1), x);
    case ExprOp::Sqrt:
      return intr(In::sqrt);
    case ExprOp::Rsqrt:
      return b.CreateFDiv(fconst(b, x, 1), intr(In::sqrt));
    case ExprOp::Exp:
      return intr(In::exp);
    case ExprOp::Exp2:
      return intr(In::exp2);
    case ExprOp::Expm1:
      return libm("expm1");
    case ExprOp::Log:
      return intr(In::log);
    case ExprOp::Log2:
      return intr(In::log2);
    case ExprOp::Log10:
      return intr(In::log10);
    case ExprOp::Log1p:
      return libm("log1p");
    case ExprOp::Sin:
      return intr(In::sin);
    case ExprOp::Cos:
      return intr(In::cos);
    case ExprOp::Tan:
      return libm("tan");
    case ExprOp::Asin:
      return libm("asin");
    case ExprOp::Acos:
      return libm("acos");
    case ExprOp::Atan:
      return libm("atan");
    case ExprOp::Sinh:
      return libm("sinh");
    case ExprOp::Cosh:
      return libm("cosh");
    case ExprOp::Tanh:
      return libm("tanh");
    case ExprOp::Sigmoid: {
      llvm::Value* e = b.CreateUnaryIntrinsic(In::exp, b.CreateFNeg(x));
      return b.CreateFDiv(fconst(b, x, 1), b.CreateFAdd(fconst(b, x, 1), e));
    }
    case ExprOp::Erf:
      return libm("erf");
    case ExprOp::Erfc:
      return libm("erfc");
    case ExprOp::Erfinv:
      return libm("tl_erfinv");  // runtime/cpu/math_support.cpp
    case ExprOp::Floor:
      return intr(In::floor);
    case ExprOp::Ceil:
      return intr(In::ceil);
    case ExprOp::Round:
      return intr(In::roundeven);  // torch.round: half to even
    case ExprOp::Trunc:
      return intr(In::trunc);
    case ExprOp::Frac:
      return b.CreateFSub(x, intr(In::trunc));
    case ExprOp::Relu:  // NaN passes through, as in torch.relu
      return b.CreateSelect(b.CreateFCmpOLT(x, fconst(b, x, 0)), fconst(b, x, 0), x);
    case ExprOp::IsNan:
      return b.CreateFCmpUNO(x, x);
    case ExprOp::IsInf:
      return b.CreateFCmpOEQ(intr(In::fabs), llvm::ConstantFP::getInfinity(x->getType()));
    case ExprOp::IsFinite:
      return b.CreateFCmpOLT(intr(In::fabs), llvm::ConstantFP::getInfinity(x->getType()));
    default:
      return nullptr;
  }
}

llvm::Value* int_unary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x) {
  bool is_unsigned = is_unsigned_type(t);
  switch (op) {
    case ExprOp::Neg:
      return b.CreateNeg(x);
    case ExprOp::Abs:
      return is_unsigned ? x : b.CreateBinaryIntrinsic(In::abs, x, b.getFalse());
    case ExprOp::Sign: {
      if (is_unsigned) return b.CreateZExt(b.CreateICmpNE(x, iconst(x, 0)), x->getType());
      llvm::Value* s =
          b.CreateSelect(b.CreateICmpSLT(x, iconst(x, 0)), iconst(x, -1), iconst(x, 0));
      return b.CreateSelect(b.CreateICmpSGT(x, iconst(x, 0)), iconst(x, 1), s);
    }
    case ExprOp::Floor:
    case ExprOp::Ceil:
    case ExprOp::Round:
    case ExprOp::Trunc:
      return x;
    case ExprOp::Frac:
      return iconst(x, 0);
    case ExprOp::Relu:
      return is_unsigned ? x : b.CreateBinaryIntrinsic(In::smax, x, iconst(x, 0));
    case ExprOp::IsNan:
    case ExprOp::IsInf:
      return b.getFalse();
    case ExprOp::IsFinite:
      return b.getTrue();
    default:
      return nullptr;
  }
}
}  // namespace

llvm::Value* emit_unary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x) {
  if (op == ExprOp::Not) return b.CreateNot(convert(b, x, t, ScalarType::Bool));
  if (op == ExprOp::BitNot) {
    TL_CHECK(!is_float_type(t)) << "bitwise_not of " << type_name(t);
    return b.CreateNot(x);
  }
  llvm::Value* r = is_float_type(t) ? float_unary(b, op, t, x) : int_unary(b, op, t, x);
  TL_CHECK(r) << "unary op " << static_cast<int>(op) << " is not defined for " << type_name(t);
  return r;
}

}  // namespace tl::codegen::cpu
