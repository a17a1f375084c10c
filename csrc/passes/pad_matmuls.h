#pragma once
// Matrix products whose sizes are not multiples of 8 elements (a vocabulary
// of 50257 words) send cuBLAS to its align-1 kernels, 3-5x slower in half
// precision. This pass zero-pads the operands of torch.mm / torch.addmm up to
// multiples of 8 (as inductor's pad_mm does) where a size is a contiguous
// width (an operand's rows or columns as laid out, or the result's row) and
// narrows the product back:
// the values are eager's (the padded products meet only zeros). Training's
// joint trace records every linear and its gradients as these two ops, so the
// forward and backward halves both get it.
#include <cstdint>
#include <optional>

#include "ir/graph.h"

namespace tl::passes {

// Whether padding an (m x k) @ (k x n) product of `elem_bytes`-wide elements
// to (mp x kp) @ (kp x np) pays, given `copied_bytes` that the padding copies
// (read and written) and `copies` padding launches. A cost model in bytes of
// memory traffic (H100-like: ~300 flops per byte moved; a launch ~15 MB):
// the unpadded product counted 3x its flops (the measured align-1 slowdown is
// 3.6x for GPT-2's 4096 x 768 x 50257), the padded one its padded flops plus
// the copies. Small products (a decode step's single row) do not pay.
bool padding_pays(int64_t m, int64_t k, int64_t n, int64_t mp, int64_t kp, int64_t np,
                  int64_t copied_bytes, int copies);

// `setting` is the pad_matmuls setting: nullopt pads CUDA float16/bfloat16
// products where padding_pays; true pads every unaligned floating product on
// any device (for tests: the CPU shows the same rewrite); false none. Graph
// outputs whose strides the narrowed product changed are copied back into
// their traced layout (a training forward's saved values are read by kernels
// compiled for it); outputs that are the product or reshapes of it (the logits
// returned to the caller and those saved for backward) share one copy, each a
// view of it. Returns how many products were padded.
int pad_unaligned_matmuls(ir::Graph& graph, std::optional<bool> setting);

}  // namespace tl::passes
