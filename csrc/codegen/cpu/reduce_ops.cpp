// Accumulator steps of loop-IR reductions: identities and combine steps, with
// torch's NaN rules (max/min propagate NaN; argmax/argmin pick the first NaN).
#include "codegen/cpu/scalar_ops.h"

namespace tl::codegen::cpu {

using ir::ExprOp;
using ir::ScalarType;

llvm::Value* reduce_identity(Builder& b, ExprOp op, ScalarType t) {
  llvm::Type* rt = reg_type(b.getContext(), t);
  switch (op) {
    case ExprOp::ReduceSum:
      return llvm::Constant::getNullValue(rt);
    case ExprOp::ReduceProd:
      return is_float_type(t) ? llvm::ConstantFP::get(rt, 1.0) : llvm::ConstantInt::get(rt, 1);
    case ExprOp::ReduceMax:
    case ExprOp::ReduceArgMax:
      return lowest(b, t);
    default:
      return highest(b, t);
  }
}

llvm::Value* reduce_combine(Builder& b, ExprOp op, ScalarType t, llvm::Value* acc, llvm::Value* v) {
  static const ExprOp combine[] = {ExprOp::Add, ExprOp::Mul, ExprOp::Maximum, ExprOp::Minimum};
  ExprOp bin = combine[static_cast<int>(op) - static_cast<int>(ExprOp::ReduceSum)];
  // NOTE: reassociation lets LLVM vectorise float sums (torch's own sums are
  // blocked too, so results differ from eager only by rounding).
  llvm::IRBuilderBase::FastMathFlagGuard guard(b);
  llvm::FastMathFlags fmf;
  fmf.setAllowReassoc();
  b.setFastMathFlags(fmf);
  return emit_binary(b, bin, t, acc, v);
}

llvm::Value* arg_reduce_better(Builder& b, ExprOp op, ScalarType t, llvm::Value* acc,
                               llvm::Value* v) {
  ExprOp cmp = op == ExprOp::ReduceArgMax ? ExprOp::Gt : ExprOp::Lt;
  llvm::Value* better = emit_binary(b, cmp, t, v, acc);
  if (is_float_type(t))
    better = b.CreateOr(better, b.CreateAnd(b.CreateFCmpUNO(v, v), b.CreateFCmpORD(acc, acc)));
  return better;
}

}  // namespace tl::codegen::cpu
