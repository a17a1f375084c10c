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
  // With index buffers: kernel axis -> a pseudo-buffer (after the outputs)
  // with stride 1 along that axis and 0 elsewhere, so its offset is the axis
  // coordinate and merging axes stays exact. Empty otherwise.
  std::map<int64_t, size_t> index_buffer;
};

// Pointwise kernels walk their first output in memory order; reductions keep
// row-major order (argmax/argmin indices rely on it). `index_buffers`: one
// pseudo-buffer per axis an Index expr reads, whose offset is the coordinate;
// without them a kernel that reads coordinates keeps row-major order, and the
// emitter derives coordinates from the linear index.
LoopSpace coalesce(const ir::Kernel& k, bool index_buffers);

}  // namespace tl::codegen
