#pragma once
// scaled_dot_product_attention with a floating attn_mask (an additive bias:
// T5's relative position bias, ALiBi, swin's relative bias, a padding mask
// made additive) runs torch's math path on CUDA whenever the fused kernels
// decline it: float32 products of every head's scores, then softmax, then the
// product with v, several kernels and full float32 score tensors. Written out
// as torch.compile does it, the scores are one batched product in the inputs'
// dtype (cuBLAS, f32 accumulate), scale + bias + softmax are one generated
// kernel that reads the scores and the bias (any broadcast) once and writes the
// probabilities in the inputs' dtype, and a second batched product gives the
// result. The softmax is torch._safe_softmax, as in the math path: a row that
// is masked throughout gives zeros.
#include "ir/graph.h"

namespace tl::passes {

// Rewrites every such call (no grad, dropout_p 0, not causal, no enable_gqa,
// q/k/v of one floating dtype and the same leading sizes, a floating mask of
// q's dtype or float32; a result the graph does not return) on CUDA, or on
// every device with `any_device` (CPU tests of the rewrite); returns how many.
int decompose_biased_attention(ir::Graph& graph, bool any_device);

}  // namespace tl::passes
