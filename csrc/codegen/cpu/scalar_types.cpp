// Types, conversions, loads and stores of loop-IR scalars in LLVM IR.
#include <limits>

#include "codegen/cpu/scalar_ops.h"
#include "core/errors.h"

namespace tl::codegen::cpu {

using ir::ScalarType;
using ST = ir::ScalarType;

const char* type_name(ScalarType t) {
  static const char* names[] = {"f32", "f64", "f16", "bf16", "i8",
                                "i16", "i32", "i64", "u8",   "bool"};
  return names[static_cast<int>(t)];
}

llvm::Type* reg_type(llvm::LLVMContext& c, ScalarType t) {
  switch (t) {
    case ST::F64:
      return llvm::Type::getDoubleTy(c);
    case ST::F32:
    case ST::F16:
    case ST::BF16:
      return llvm::Type::getFloatTy(c);
    case ST::Bool:
      return llvm::Type::getInt1Ty(c);
    default:
      return llvm::Type::getIntNTy(c, 8 * elem_bytes(t));
  }
}

llvm::Type* mem_type(llvm::LLVMContext& c, ScalarType t) {
  switch (t) {
    case ST::F16:
      return llvm::Type::getHalfTy(c);
    case ST::BF16:
      return llvm::Type::getInt16Ty(c);
    case ST::Bool:
      return llvm::Type::getInt8Ty(c);
    default:
      return reg_type(c, t);
  }
}

namespace {
// f32 -> bf16 bit pattern in the upper half of an i32: round to nearest even,
// NaN kept quiet (what c10::BFloat16 does).
llvm::Value* bf16_round_bits(Builder& b, llvm::Value* f) {
  auto* i32 = b.getInt32Ty();
  llvm::Value* bits = b.CreateBitCast(f, i32);
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* r = b.CreateAdd(bits, b.CreateAdd(lsb, b.getInt32(0x7FFF)));
  r = b.CreateAnd(r, b.getInt32(0xFFFF0000u));
  return b.CreateSelect(b.CreateFCmpUNO(f, f), b.getInt32(0x7FC00000), r);
}

llvm::Value* round_to_half_type(Builder& b, llvm::Value* v, ScalarType to) {
  if (to == ST::F16) return b.CreateFPExt(b.CreateFPTrunc(v, b.getHalfTy()), b.getFloatTy());
  if (v->getType()->isDoubleTy()) v = b.CreateFPTrunc(v, b.getFloatTy());
  return b.CreateBitCast(bf16_round_bits(b, v), b.getFloatTy());
}
}  // namespace

llvm::Value* convert(Builder& b, llvm::Value* v, ScalarType from, ScalarType to) {
  if (from == to) return v;
  llvm::Type* dst = reg_type(b.getContext(), to);
  bool ff = is_float_type(from), ft = is_float_type(to);
  if (to == ST::Bool) {
    return ff ? b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0))
              : b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (ff && ft) {
    if (to == ST::F16 || to == ST::BF16) return round_to_half_type(b, v, to);
    return b.CreateFPCast(v, dst);
  }
  if (ff) {  // float -> int: through i64 so u8 wraps like torch's CPU casts
    llvm::Value* i = b.CreateFPToSI(v, b.getInt64Ty());
    return b.CreateTrunc(i, dst);
  }
  if (ft) {
    llvm::Value* f = is_unsigned_type(from) ? b.CreateUIToFP(v, dst) : b.CreateSIToFP(v, dst);
    if (to == ST::F16 || to == ST::BF16) return round_to_half_type(b, f, to);
    return f;
  }
  return b.CreateIntCast(v, dst, !is_unsigned_type(from));
}

llvm::Value* load_elem(Builder& b, llvm::Value* base, llvm::Value* off, ScalarType t) {
  llvm::Type* mt = mem_type(b.getContext(), t);
  llvm::Value* p = b.CreateInBoundsGEP(mt, base, off);
  llvm::Value* v = b.CreateAlignedLoad(mt, p, llvm::Align(elem_bytes(t)));
  switch (t) {
    case ST::F16:
      return b.CreateFPExt(v, b.getFloatTy());
    case ST::BF16:
      return b.CreateBitCast(b.CreateShl(b.CreateZExt(v, b.getInt32Ty()), 16), b.getFloatTy());
    case ST::Bool:
      return b.CreateICmpNE(v, b.getInt8(0));
    default:
      return v;
  }
}

void store_elem(Builder& b, llvm::Value* v, llvm::Value* base, llvm::Value* off, ScalarType t) {
  llvm::Type* mt = mem_type(b.getContext(), t);
  switch (t) {
    case ST::F16:
      v = b.CreateFPTrunc(v, mt);
      break;
    case ST::BF16:
      v = b.CreateTrunc(b.CreateLShr(bf16_round_bits(b, v), 16), mt);
      break;
    case ST::Bool:
      v = b.CreateZExt(v, mt);
      break;
    default:
      break;
  }
  llvm::Value* p = b.CreateInBoundsGEP(mt, base, off);
  b.CreateAlignedStore(v, p, llvm::Align(elem_bytes(t)));
}

llvm::Value* make_constant(Builder& b, const ir::Expr& e) {
  llvm::Type* t = reg_type(b.getContext(), e.type);
  if (is_float_type(e.type)) {
    llvm::Value* c = llvm::ConstantFP::get(t, e.value);
    return e.type == ST::F16 || e.type == ST::BF16 ? round_to_half_type(b, c, e.type) : c;
  }
  // Integers come in `ivalue`; a constant lowered from a Python float to an
  // int type still arrives in `value`.
  int64_t v = e.ivalue != 0 || e.value == 0 ? e.ivalue : static_cast<int64_t>(e.value);
  if (e.type == ST::Bool) return b.getInt1(v != 0);
  return llvm::ConstantInt::get(t, static_cast<uint64_t>(v), true);
}

llvm::Value* lowest(Builder& b, ScalarType t) {
  llvm::Type* ty = reg_type(b.getContext(), t);
  if (is_float_type(t)) return llvm::ConstantFP::getInfinity(ty, true);
  if (is_unsigned_type(t)) return llvm::ConstantInt::get(ty, 0);
  return llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
}

llvm::Value* highest(Builder& b, ScalarType t) {
  llvm::Type* ty = reg_type(b.getContext(), t);
  if (is_float_type(t)) return llvm::ConstantFP::getInfinity(ty, false);
  unsigned bits = ty->getIntegerBitWidth();
  return llvm::ConstantInt::get(ty, is_unsigned_type(t) ? llvm::APInt::getMaxValue(bits)
                                                        : llvm::APInt::getSignedMaxValue(bits));
}

llvm::Value* call_math(Builder& b, const char* name, ScalarType t,
                       llvm::ArrayRef<llvm::Value*> args) {
  TL_CHECK(is_float_type(t)) << name << " needs a floating type, got " << type_name(t);
  llvm::Type* ft = reg_type(b.getContext(), t);
  std::string fname = std::string(name) + (t == ST::F64 ? "" : "f");
  std::vector<llvm::Type*> params(args.size(), ft);
  llvm::Module* m = b.GetInsertBlock()->getModule();
  llvm::FunctionCallee callee =
      m->getOrInsertFunction(fname, llvm::FunctionType::get(ft, params, false));
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    f->setDoesNotAccessMemory();
    f->setDoesNotThrow();
    f->setWillReturn();
  }
  return b.CreateCall(callee, args);
}

}  // namespace tl::codegen::cpu
