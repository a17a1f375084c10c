#pragma once
// What the text emit_kernel writes for a kernel depends on, computed without emitting it, so
// the JIT (runtime/cpu/jit.cpp) finds a kernel it already linked from the lowered kernel alone:
// a graph compiled again for new sizes lowers to kernels whose text is the same, and emitting,
// printing and hashing 14 modules cost ~8 ms of a new length's first call (tiny GPT-2).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/common/loop_space.h"
#include "ir/loop_ir.h"

namespace tl::codegen::cpu {

// The loop space the CPU emitter runs (and the JIT keys kernels by): index
// pseudo-buffers for coordinates, reduction axes in their cheapest order.
inline LoopSpace cpu_loop_space(const ir::Kernel& k) {
  return coalesce(k, /*index_buffers=*/true, /*order_reduction=*/true);
}

// Where a number of the loop space is used in the code (Emitter::num): with runtime sizes each
// site other than 0 and 1 is one slot of the dims array, in the order the emitter first uses it.
inline int64_t outer_site(size_t d) { return static_cast<int64_t>(d); }
inline int64_t red_site(size_t d) { return (int64_t{1} << 20) + static_cast<int64_t>(d); }
inline int64_t stride_site(size_t buffer, size_t axis) {
  return (int64_t{2} << 20) + static_cast<int64_t>(buffer * 64 + axis);
}
inline int64_t offset_site(size_t buffer) {
  return (int64_t{3} << 20) + static_cast<int64_t>(buffer);
}
// An integer constant of the exprs read at run time (codegen/common/runtime_constants.h).
inline int64_t constant_site(size_t expr) {
  return (int64_t{4} << 20) + static_cast<int64_t>(expr);
}
// The magic multiplier (its bits) and shift (codegen/common/runtime_constants.h magic_u64) of a
// runtime divisor, expr `expr`: computed per size from its value, always read from the dims
// array (a multiplier or shift of 0 or 1 at one size is another number at the next).
inline int64_t magic_site(size_t expr) { return (int64_t{5} << 20) + static_cast<int64_t>(expr); }
inline int64_t shift_site(size_t expr) { return (int64_t{6} << 20) + static_cast<int64_t>(expr); }

// Bench only (bench/runtime_divisors.py --device cpu): runtime divisors divided plainly (a
// hardware divide by the loaded number) instead of by their magic numbers; in the emission key.
void set_plain_runtime_division(bool on);
bool plain_runtime_division();

// The number at `site` of kernel `k` and its loop space `s`.
int64_t site_value(const ir::Kernel& k, const LoopSpace& s, int64_t site);

// Whether the number at `site` is the same at every size a runtime-size kernel's text serves, so
// the emitter writes it as a literal (constant trip counts and divisions, vector loops without a
// remainder): the size of an axis whose kernel axes are all model constants (LoopSpace::fixed,
// from ir::Kernel::static_axes), or a buffer's stride along an axis that equals the product of
// the sizes of every axis after it (outer, then reduction axes) when those are all fixed (a
// contiguous walk over constant inner axes). Never an offset.
bool literal_site(const LoopSpace& s, int64_t site);

// A runtime-size kernel's literal sites and their values, in site order (empty without runtime
// sizes). Code emitted with literals L serves every kernel of the same emission key whose values
// at L's sites are L's values (its other numbers come from its dims array): a size that equals a
// model constant only at some lengths (a length of 16 in a model with 16-wide heads is marked
// static there) still finds the code emitted at other lengths.
using Literals = std::vector<std::pair<int64_t, int64_t>>;
Literals literal_values(const ir::Kernel& k, const LoopSpace& s);
// Whether kernel `k` and its loop space `s` hold the values of `lits` at their sites.
bool holds_literals(const ir::Kernel& k, const LoopSpace& s, const Literals& lits);

// Two kernels with equal keys get the same text from emit_kernel given the same literals (and
// so the same function of their buffers and dims array). The key holds everything the emitter
// reads: the exprs (ops, types, operands, buffers, constants), the flags, buffer types, the ranks,
// and every number of the kernel's views and of its loop space `s` (= cpu_loop_space(k), the
// emitter's) — with runtime sizes, a number other than 0 and 1 (and an integer constant the emitter
// reads at run time: runtime_constants) only as its sign: the emitter writes
// such a number as a load from the dims array and decides nothing from its value (its decisions
// test a number against 0 and 1: pass_plan.cpp, plan_stash, choose_tile), except the literal sites,
// whose values the text holds and the JIT matches apart (literal_values, holds_literals).
// Without runtime sizes every number is in the key.
// NOTE: a new decision the emitter takes from a number's value must put that value in the key
// or make it a literal (TORCHLITE_VERIFY checks keyed reuses against the text).
std::string emission_key(const ir::Kernel& k, const LoopSpace& s);

}  // namespace tl::codegen::cpu
