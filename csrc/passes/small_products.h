#pragma once
// A linear whose weight is a few columns by a few rows (CaiT's talking-heads
// projections mix 4 attention heads: K = N = 4 over B*N*N rows) is a
// memory-bound product that cuBLAS runs with tiles sized for large matrices,
// after torch copies the (permuted) input dense for it. Computed as K
// multiply-adds per output element, in float32 and rounded once as the
// product is, it is a pointwise expression: it fuses into the kernels around
// it (the copy before it, the softmax or the layout copy after it) and reads
// its input in any layout. Inductor's decompose_mem_bound_mm does the same
// (off by default there).
#include "ir/graph.h"

namespace tl::passes {

// Rewrites every such linear (weight K <= 8 columns, N <= 16 rows, at least
// 1024 rows of input, floating, no grad) whose pointwise form has the
// linear's layout; returns how many.
int expand_small_products(ir::Graph& graph);

}  // namespace tl::passes
