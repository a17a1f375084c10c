#pragma once
// Index arithmetic in 32 bits: the i64 exprs a kernel computes from its
// coordinates (Index) and constants only (window positions, clamped
// coordinates, offsets of gathers) whose every value provably fits in int32
// are retyped i32, so an emitter computes them without 64-bit multiplies and
// divisions. Values read from memory are never narrowed.
#include "ir/loop_ir.h"

namespace tl::codegen {

// A copy of `k` with those exprs' type i32; operands keep their meaning
// (an i64 consumer converts a narrowed operand back).
ir::Kernel narrow_index_math(const ir::Kernel& k);

}  // namespace tl::codegen
