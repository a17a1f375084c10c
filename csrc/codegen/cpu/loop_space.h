#pragma once
// The iteration space a kernel's loops actually run: axes of size 1 dropped
// and neighbours merged where every buffer walks them contiguously, so a
// [N, C, H, W] pointwise kernel over contiguous tensors becomes one flat loop
// and the innermost loop of any kernel keeps constant strides.
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "codegen/cpu/scalar_ops.h"

namespace tl::codegen::cpu {

struct LoopSpace {
  std::vector<int64_t> outer;  // at least one axis (size 1 for a scalar kernel)
  std::vector<int64_t> red;    // empty iff the kernel has no reduction axes
  // Per buffer (kernel.inputs then kernel.outputs): strides over outer then red.
  std::vector<std::vector<int64_t>> strides;
  std::vector<int64_t> offsets;
  // Index exprs: kernel axis -> a pseudo-buffer (after the outputs) with stride
  // 1 along that axis and 0 elsewhere, so its offset is the axis coordinate and
  // merging axes stays exact.
  std::map<int64_t, size_t> index_buffer;
};

LoopSpace coalesce(const ir::Kernel& k);

// for (i = lo; i < hi; i += step) body(i); leaves the builder in the exit block.
void emit_for(Builder& b, llvm::Value* lo, llvm::Value* hi,
              const std::function<void(llvm::Value*)>& body, int64_t step = 1);

}  // namespace tl::codegen::cpu
