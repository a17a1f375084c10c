#pragma once
// Per-pass facts of a reduction kernel that the CPU emitter acts on and that
// tests and partition_summary read: which values a pass stores for later
// passes to read back (softmax's exp), which buffers each pass touches, and
// how each pass groups the reduction axes into loops.
#include <cstddef>
#include <vector>

#include "codegen/common/loop_space.h"
#include "codegen/common/pass_plan.h"
#include "ir/loop_ir.h"

namespace tl::codegen {

// output[i] = o: expr i (a reduction's operand in pass pass[i]) is also stored
// to output o then, and later passes read it back instead of computing it
// again; -1 otherwise.
struct Stash {
  std::vector<int> output, pass;
};
Stash plan_stash(const ir::Kernel& k, const PassPlan& plan);

// Per buffer of `s` (kernel inputs, outputs, index pseudo-buffers): whether
// pass `p` (1-based) reads or writes it.
std::vector<char> pass_buffers(const ir::Kernel& k, const LoopSpace& s, const PassPlan& plan,
                               const Stash& stash, int p);

// A pass's loops over the reduction axes of `s`, as the first axis of each:
// neighbouring axes run as one loop where every buffer the pass touches
// (`used`, from pass_buffers) walks them contiguously. Runtime-size kernels
// keep one loop per axis.
std::vector<size_t> pass_loops(const ir::Kernel& k, const LoopSpace& s,
                               const std::vector<char>& used);

}  // namespace tl::codegen
