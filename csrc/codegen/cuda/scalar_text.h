#pragma once
// Per-point CUDA C text for loop-IR scalars, the counterpart of
// codegen/cpu/scalar_ops.h with the same semantics (torch's). Values live in
// "register types": float for f32/f16/bf16 (half types compute in f32),
// double, the C integer types, bool. Memory types differ for f16/bf16
// (unsigned short bit patterns) and bool (unsigned char). Operands passed in
// are variable names or other side-effect-free expressions; each may be
// repeated in the returned text.
#include <string>

#include "codegen/common/scalar_types.h"
#include "ir/loop_ir.h"

namespace tl::codegen::cuda {

using ST = ir::ScalarType;

const char* reg_type(ST t);
const char* mem_type(ST t);

// Helpers every kernel's source starts with (conversions, NaN-aware max/min,
// floor division, integer division that never traps, vector packs).
const std::string& prelude();

std::string convert(const std::string& v, ST from, ST to);
// A value of register type from the memory element `ref` (an lvalue text).
std::string from_memory(const std::string& ref, ST t);
// The memory representation of register value `v`.
std::string to_memory(const std::string& v, ST t);
std::string constant(const ir::Expr& e);
// Whether float `v` is exactly a value of 16-bit float type `h` (bfloat16 or
// float16), and its bits.
bool half_bits(double v, ST h, unsigned* bits);
// Smallest / largest value of `t` (-inf / +inf for floats).
std::string lowest(ST t);
std::string highest(ST t);

// Unary op computed in `t`; predicates give bool. Throws tl::Error (Internal)
// for an op the type does not support.
std::string unary(ir::ExprOp op, ST t, const std::string& x);
// Binary op with both operands in `t`; comparisons and logical ops give bool.
std::string binary(ir::ExprOp op, ST t, const std::string& x, const std::string& y);
// Reductions: start value and one combine step of sum/prod/max/min.
std::string reduce_identity(ir::ExprOp op, ST t);
std::string reduce_combine(ir::ExprOp op, ST t, const std::string& acc, const std::string& v);
// argmax/argmin: whether (v, vi) replaces (acc, ai); lower index wins ties,
// the first NaN wins (torch).
std::string arg_better(ir::ExprOp op, ST t, const std::string& v, const std::string& vi,
                       const std::string& acc, const std::string& ai);

}  // namespace tl::codegen::cuda
