#pragma once
// Scalar-type facts both emitters share. Values compute in "register types":
// f32 for f32/f16/bf16 (half types compute in f32), f64, the integer types,
// bool; only how each back end spells those types differs.
#include "ir/loop_ir.h"

namespace tl::codegen {

inline bool is_float_type(ir::ScalarType t) { return ir::is_floating(t); }
bool is_unsigned_type(ir::ScalarType t);  // u8 and bool
inline int elem_bytes(ir::ScalarType t) { return ir::scalar_type_size(t); }
// The type both operands of a comparison or logical op are converted to
// (torch promotion; f16 with bf16 computes in f32 anyway).
ir::ScalarType promote_types(ir::ScalarType a, ir::ScalarType b);

}  // namespace tl::codegen
