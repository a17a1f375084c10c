#pragma once
// The iteration space a kernel's loops actually run, the same for both
// emitters: axes of size 1 dropped and neighbours merged where every buffer
// walks them contiguously, so a [N, C, H, W] pointwise kernel over contiguous
// tensors becomes one flat loop and the innermost loop keeps constant strides.
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::codegen {

struct LoopSpace {
  std::vector<int64_t> outer;  // at least one axis (size 1 for a scalar kernel)
  std::vector<int64_t> red;    // empty iff the kernel has no reduction axes
  // Per buffer (kernel.inputs, kernel.outputs, then index pseudo-buffers):
  // strides over outer then red.
  std::vector<std::vector<int64_t>> strides;
  std::vector<int64_t> offsets;
  // Per axis (outer then red): every kernel axis merged into it is a model constant
  // (ir::Kernel::static_axes), so its size may be written as a literal with runtime sizes.
  std::vector<char> fixed;
  // With index buffers: kernel axis -> a pseudo-buffer (after the outputs)
  // with stride 1 along that axis and 0 elsewhere, so its offset is the axis
  // coordinate and merging axes stays exact. Empty otherwise.
  std::map<int64_t, size_t> index_buffer;
};

// Pointwise kernels walk their first output in memory order; reductions keep
// row-major order of their outer axes. `index_buffers`: one pseudo-buffer per
// axis an Index expr reads, whose offset is the coordinate; without them a
// kernel that reads coordinates keeps row-major order, and the emitter derives
// coordinates from the linear index. `order_reduction`: the reduction axes run
// in the order reduction_order() prices cheapest (the CPU emitter's loops);
// without it, or in a kernel with argmax/argmin (their first-index rule reads
// the row-major position), they keep row-major order.
LoopSpace coalesce(const ir::Kernel& k, bool index_buffers, bool order_reduction = false);

// The order (outermost first) of a reduction kernel's reduction axes that
// moves the fewest bytes when the innermost axis runs in the innermost loop:
// candidates are row-major order and each buffer's memory order; a buffer
// costs, per element it touches, its element size when the innermost axis
// walks it contiguously (or not at all), else a cache line (64 bytes) or
// `elem * |stride|`, whichever is smaller. Ties keep row-major order.
// `sizes` are the reduction axes' sizes, `strides[b]` a buffer's strides
// over them, `elem[b]` its element size.
std::vector<size_t> reduction_order(const std::vector<int64_t>& sizes,
                                    const std::vector<std::vector<int64_t>>& strides,
                                    const std::vector<int64_t>& elem);

// How many neighbouring outer points the CPU emitter's reduction kernel over `s`
// reduces together (its innermost loop runs over them, one accumulator each): 1024
// when an input is contiguous along the last outer axis and none is along the
// innermost reduction axis (a column sum), else 1. Reads the strides of inputs
// [0, n_inputs) only.
int outer_tile(const LoopSpace& s, size_t n_inputs);

}  // namespace tl::codegen
