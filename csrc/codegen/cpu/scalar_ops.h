#pragma once
// Per-point scalar code for loop-IR exprs, shared by the kernel emitter. Values
// live in "register types": f32 for f32/f16/bf16 (DESIGN: half types compute in
// f32), f64, iN for integers, i1 for bool. Memory types differ only for f16
// (half), bf16 (i16 bit pattern) and bool (i8).
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "codegen/common/scalar_types.h"
#include "ir/loop_ir.h"

namespace tl::codegen::cpu {

using Builder = llvm::IRBuilder<>;

const char* type_name(ir::ScalarType t);

llvm::Type* reg_type(llvm::LLVMContext& c, ir::ScalarType t);
llvm::Type* mem_type(llvm::LLVMContext& c, ir::ScalarType t);

// Register-level conversion, with torch's rounding when narrowing to f16/bf16.
llvm::Value* convert(Builder& b, llvm::Value* v, ir::ScalarType from, ir::ScalarType to);
// Element `off` (i64, in elements) of the buffer at `base`.
llvm::Value* load_elem(Builder& b, llvm::Value* base, llvm::Value* off, ir::ScalarType t);
void store_elem(Builder& b, llvm::Value* v, llvm::Value* base, llvm::Value* off, ir::ScalarType t);
llvm::Value* make_constant(Builder& b, const ir::Expr& e);
// Smallest / largest value of `t` (-inf / +inf for floats): reduction identities.
llvm::Value* lowest(Builder& b, ir::ScalarType t);
llvm::Value* highest(Builder& b, ir::ScalarType t);

// Unary op computed in `t` (the operand is already in `t`); predicates return i1.
// Throws tl::Error (Internal) for an op the type does not support.
llvm::Value* emit_unary(Builder& b, ir::ExprOp op, ir::ScalarType t, llvm::Value* x);
// Binary op with both operands in `t`; comparisons and logical ops return i1.
llvm::Value* emit_binary(Builder& b, ir::ExprOp op, ir::ScalarType t, llvm::Value* x,
                         llvm::Value* y);
// Reductions: the accumulator's start value, one combine step (sum, prod,
// max, min), and for argmax/argmin whether `v` replaces the current best.
llvm::Value* reduce_identity(Builder& b, ir::ExprOp op, ir::ScalarType t);
llvm::Value* reduce_combine(Builder& b, ir::ExprOp op, ir::ScalarType t, llvm::Value* acc,
                            llvm::Value* v);
llvm::Value* arg_reduce_better(Builder& b, ir::ExprOp op, ir::ScalarType t, llvm::Value* acc,
                               llvm::Value* v);
// Calls a libm-style function: `name` + "f" for f32-computed types, as is for f64.
// Declared memory(none) so loops calling it stay vectorisable (-fno-math-errno).
llvm::Value* call_math(Builder& b, const char* name, ir::ScalarType t,
                       llvm::ArrayRef<llvm::Value*> args);

}  // namespace tl::codegen::cpu
