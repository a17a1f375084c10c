#pragma once
// Which integer constants of a runtime-size kernel the code reads from its dims array (the CPU
// and CUDA emitters alike), so that one text serves every size. Lowering writes sizes into
// constants: a cat's part bound and clamp, the first position of a slice or of GPT-2's
// `wpe[past + arange(1)]`, the strides and sizes a reshape of a non-contiguous value divides its
// linear index by (Llama's repeat_kv: n_rep x length x head size). As literals, each new length
// of a generate() loop gave those kernels a new text: a compile per token.
#include <cstdint>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::codegen {

// Per expr of `k` (runtime sizes): an integer Constant of 2 or more, except
//  - a divisor or modulus equal to a model constant (ir::Kernel::static_constants): a division
//    by a number the compiler sees is a multiply and a shift, and no other size changes it;
//  - an exponent (integer pow stays a literal loop count).
// 0, 1 and negative numbers stay literals (as every size). Empty flags without runtime sizes.
// NOTE: a constant equal to a model constant only at some sizes (a length of 64 with a head size
// of 64) makes another text at those sizes: one compile, never a wrong result (the literal is in
// the text and in both emission keys).
std::vector<char> runtime_constants(const ir::Kernel& k);

// Granlund-Montgomery numbers for dividing a 64-bit 0 <= u < 2^63 by 2 <= d < 2^63 (the CPU
// emitter's runtime divisors, passed in the dims array per size): with l = ceil(log2 d) and
// m = floor(2^64 (2^l - d) / d) + 1 (< 2^64), u / d = (mulhi64(u, m) + u) >> l, exact because
// mulhi64(u, m) < u keeps the sum below 2^64. The multiplier is returned as its bits.
struct Magic64 {
  uint64_t multiplier = 0;
  int shift = 0;
};
Magic64 magic_u64(int64_t d);

}  // namespace tl::codegen
