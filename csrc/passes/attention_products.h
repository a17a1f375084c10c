#pragma once
// scaled_dot_product_attention with a floating attn_mask (an additive bias:
// T5's relative position bias, ALiBi, swin's relative bias, a padding mask
// made additive) runs torch's math path on CUDA whenever the fused kernels
// decline it (a mask layout or head size they cannot read): float32 products of every head's
// scores, then softmax, then the product with v, several kernels and full float32 score tensors.
// Written out as torch.compile does it, the scores are one batched product in the inputs' dtype
// (cuBLAS, f32 accumulate), scale + bias + softmax are one generated kernel that reads the scores
// and the bias (any broadcast) once and writes the probabilities in the inputs' dtype, and a second
// batched product gives the result. The softmax is torch._safe_softmax, as in the math path: a row
// that is masked throughout gives zeros.
#include "ir/graph.h"

namespace tl::passes {

// Rewrites every such call (no grad, dropout_p 0, not causal, no enable_gqa,
// q/k/v of one floating dtype and the same leading sizes, a floating mask of
// q's dtype or float32; a result the graph does not return) that torch would
// run on its math path on CUDA (a fused kernel that takes it reads the bias
// once and stores no scores), or, with `every_call`, every such call on every
// device (CPU tests, A/B timing); returns how many.
int decompose_biased_attention(ir::Graph& graph, bool every_call);

}  // namespace tl::passes
