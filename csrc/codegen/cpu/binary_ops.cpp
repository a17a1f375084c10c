// Binary loop-IR ops in LLVM IR with torch's CPU semantics: Python-style floor
// division and remainder, NaN-propagating maximum/minimum, and integer
// division that never traps (x86 raises SIGFPE on /0 and INT_MIN/-1).
#include "codegen/cpu/scalar_ops.h"
#include "core/errors.h"

namespace tl::codegen::cpu {

using ir::ExprOp;
using ir::ScalarType;
namespace In = llvm::Intrinsic;

namespace {
llvm::Value* fc(llvm::Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }
llvm::Value* ic(llvm::Value* like, int64_t v) {
  return llvm::ConstantInt::get(like->getType(), static_cast<uint64_t>(v), true);
}

// c10's div_floor_floating: exact for values where floor(a / b) would round wrongly.
llvm::Value* float_floor_div(Builder& b, llvm::Value* x, llvm::Value* y) {
  llvm::Value* mod = b.CreateFRem(x, y);
  llvm::Value* div = b.CreateFDiv(b.CreateFSub(x, mod), y);
  llvm::Value* fix =
      b.CreateAnd(b.CreateFCmpUNE(mod, fc(mod, 0)),
                  b.CreateICmpNE(b.CreateFCmpOLT(y, fc(y, 0)), b.CreateFCmpOLT(mod, fc(mod, 0))));
  div = b.CreateSelect(fix, b.CreateFSub(div, fc(div, 1)), div);
  llvm::Value* fl = b.CreateUnaryIntrinsic(In::floor, div);
  fl = b.CreateSelect(b.CreateFCmpOGT(b.CreateFSub(div, fl), fc(fl, 0.5)),
                      b.CreateFAdd(fl, fc(fl, 1)), fl);
  llvm::Value* quot = b.CreateFDiv(x, y);
  llvm::Value* zero = b.CreateBinaryIntrinsic(In::copysign, fc(x, 0), quot);
  fl = b.CreateSelect(b.CreateFCmpUNE(div, fc(div, 0)), fl, zero);
  return b.CreateSelect(b.CreateFCmpOEQ(y, fc(y, 0)), quot, fl);
}

llvm::Value* float_binary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x, llvm::Value* y) {
  switch (op) {
    case ExprOp::Add:
      return b.CreateFAdd(x, y);
    case ExprOp::Sub:
      return b.CreateFSub(x, y);
    case ExprOp::Mul:
      return b.CreateFMul(x, y);
    case ExprOp::Div:
      return b.CreateFDiv(x, y);
    case ExprOp::FloorDiv:
      return float_floor_div(b, x, y);
    case ExprOp::TruncDiv:
      return b.CreateUnaryIntrinsic(In::trunc, b.CreateFDiv(x, y));
    case ExprOp::Remainder: {
      llvm::Value* m = b.CreateFRem(x, y);
      llvm::Value* fix =
          b.CreateAnd(b.CreateFCmpUNE(m, fc(m, 0)),
                      b.CreateICmpNE(b.CreateFCmpOLT(y, fc(y, 0)), b.CreateFCmpOLT(m, fc(m, 0))));
      return b.CreateSelect(fix, b.CreateFAdd(m, y), m);
    }
    case ExprOp::Fmod:
      return b.CreateFRem(x, y);
    case ExprOp::Pow:
      return b.CreateBinaryIntrinsic(In::pow, x, y);
    case ExprOp::Atan2:
      return call_math(b, "atan2", t, {x, y});
    case ExprOp::Maximum:
      return b.CreateBinaryIntrinsic(In::maximum, x, y);
    case ExprOp::Minimum:
      return b.CreateBinaryIntrinsic(In::minimum, x, y);
    case ExprOp::Copysign:
      return b.CreateBinaryIntrinsic(In::copysign, x, y);
    case ExprOp::Eq:
      return b.CreateFCmpOEQ(x, y);
    case ExprOp::Ne:
      return b.CreateFCmpUNE(x, y);
    case ExprOp::Lt:
      return b.CreateFCmpOLT(x, y);
    case ExprOp::Le:
      return b.CreateFCmpOLE(x, y);
    case ExprOp::Gt:
      return b.CreateFCmpOGT(x, y);
    case ExprOp::Ge:
      return b.CreateFCmpOGE(x, y);
    default:
      return nullptr;
  }
}

// Integer pow by squaring (runtime/cpu/math_support.cpp), in i64.
llvm::Value* int_pow(Builder& b, ScalarType t, llvm::Value* x, llvm::Value* y) {
  bool s = !is_unsigned_type(t);
  auto* i64 = b.getInt64Ty();
  llvm::Module* m = b.GetInsertBlock()->getModule();
  auto callee = m->getOrInsertFunction("tl_ipow", llvm::FunctionType::get(i64, {i64, i64}, false));
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) f->setDoesNotAccessMemory();
  llvm::Value* r = b.CreateCall(callee, {b.CreateIntCast(x, i64, s), b.CreateIntCast(y, i64, s)});
  return b.CreateTrunc(r, x->getType());
}

// Quotient or remainder with a divisor that can never trap; x / 0 gives 0.
llvm::Value* int_divide(Builder& b, ExprOp op, bool is_unsigned, llvm::Value* x, llvm::Value* y) {
  llvm::Value* zero = b.CreateICmpEQ(y, ic(y, 0));
  llvm::Value* minus1 = is_unsigned ? b.getFalse() : b.CreateICmpEQ(y, ic(y, -1));
  llvm::Value* d = b.CreateSelect(b.CreateOr(zero, minus1), ic(y, 1), y);
  if (op == ExprOp::Fmod || op == ExprOp::Remainder) {
    llvm::Value* r = is_unsigned ? b.CreateURem(x, d) : b.CreateSRem(x, d);
    r = b.CreateSelect(b.CreateOr(zero, minus1), ic(r, 0), r);
    if (op == ExprOp::Fmod || is_unsigned) return r;
    llvm::Value* fix =
        b.CreateAnd(b.CreateICmpNE(r, ic(r, 0)),
                    b.CreateICmpNE(b.CreateICmpSLT(r, ic(r, 0)), b.CreateICmpSLT(y, ic(y, 0))));
    return b.CreateSelect(fix, b.CreateAdd(r, y), r);
  }
  llvm::Value* q = is_unsigned ? b.CreateUDiv(x, d) : b.CreateSDiv(x, d);
  q = b.CreateSelect(minus1, b.CreateNeg(x), q);
  if (op == ExprOp::FloorDiv && !is_unsigned) {
    llvm::Value* r = b.CreateSRem(x, d);
    llvm::Value* fix =
        b.CreateAnd(b.CreateICmpNE(r, ic(r, 0)),
                    b.CreateICmpNE(b.CreateICmpSLT(x, ic(x, 0)), b.CreateICmpSLT(y, ic(y, 0))));
    q = b.CreateSelect(b.CreateAnd(fix, b.CreateNot(minus1)), b.CreateSub(q, ic(q, 1)), q);
  }
  return b.CreateSelect(zero, ic(q, 0), q);
}

llvm::Value* int_binary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x, llvm::Value* y) {
  bool u = is_unsigned_type(t);
  bool boolean = t == ScalarType::Bool;
  switch (op) {
    case ExprOp::Add:
      return boolean ? b.CreateOr(x, y) : b.CreateAdd(x, y);
    case ExprOp::Sub:
      return boolean ? b.CreateXor(x, y) : b.CreateSub(x, y);
    case ExprOp::Mul:
      return boolean ? b.CreateAnd(x, y) : b.CreateMul(x, y);
    case ExprOp::Div:
    case ExprOp::TruncDiv:
    case ExprOp::FloorDiv:
    case ExprOp::Remainder:
    case ExprOp::Fmod:
      return int_divide(b, op, u, x, y);
    case ExprOp::Pow:
      return int_pow(b, t, x, y);
    case ExprOp::Maximum:
      return b.CreateBinaryIntrinsic(u ? In::umax : In::smax, x, y);
    case ExprOp::Minimum:
      return b.CreateBinaryIntrinsic(u ? In::umin : In::smin, x, y);
    case ExprOp::Eq:
      return b.CreateICmpEQ(x, y);
    case ExprOp::Ne:
      return b.CreateICmpNE(x, y);
    case ExprOp::Lt:
      return u ? b.CreateICmpULT(x, y) : b.CreateICmpSLT(x, y);
    case ExprOp::Le:
      return u ? b.CreateICmpULE(x, y) : b.CreateICmpSLE(x, y);
    case ExprOp::Gt:
      return u ? b.CreateICmpUGT(x, y) : b.CreateICmpSGT(x, y);
    case ExprOp::Ge:
      return u ? b.CreateICmpUGE(x, y) : b.CreateICmpSGE(x, y);
    case ExprOp::BitAnd:
      return b.CreateAnd(x, y);
    case ExprOp::BitOr:
      return b.CreateOr(x, y);
    case ExprOp::BitXor:
      return b.CreateXor(x, y);
    default:
      return nullptr;
  }
}
}  // namespace

llvm::Value* emit_binary(Builder& b, ExprOp op, ScalarType t, llvm::Value* x, llvm::Value* y) {
  if (op == ExprOp::And || op == ExprOp::Or || op == ExprOp::Xor) {
    x = convert(b, x, t, ScalarType::Bool);
    y = convert(b, y, t, ScalarType::Bool);
    if (op == ExprOp::And) return b.CreateAnd(x, y);
    return op == ExprOp::Or ? b.CreateOr(x, y) : b.CreateXor(x, y);
  }
  llvm::Value* r = is_float_type(t) ? float_binary(b, op, t, x, y) : int_binary(b, op, t, x, y);
  TL_CHECK(r) << "binary op " << static_cast<int>(op) << " is not defined for " << type_name(t);
  return r;
}

}  // namespace tl::codegen::cpu
