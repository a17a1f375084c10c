#pragma once
// Layouts that let torch's fused CUDA library kernels run where the captured
// graph would send them to slow paths. All only touch CUDA graphs and keep
// every value the user sees as eager computes it (strides may differ).
#include "ir/graph.h"

namespace tl::passes {

// scaled_dot_product_attention with an attention mask whose last dimension
// has stride 0 (transformers builds `mask[:, None, :, None].expand(...)`)
// falls back to the unfused math path (20x slower on an H100). Such masks get
// one dense copy, shared by every attention that reads them. Returns how many
// copies were made.
int dense_attention_masks(ir::Graph& graph);

// A boolean attention mask read by several scaled_dot_product_attention
// calls of one signature (a transformer's layers) is turned into torch's
// additive form once per run (torchlite/_attention_mask.py), not once per
// call. Returns how many masks are shared.
int share_attention_masks(ir::Graph& graph);

// F.linear whose output rows are not 16-byte aligned (a half-precision
// vocabulary projection of 50257 columns) runs cuBLAS's align-1 kernels, 6x
// slower: the weight (and bias) are zero-padded to an aligned row count
// (torchlite/_padded_weights.py), and the result is the padded one narrowed
// back: eager's values, with rows padded to 16 bytes as torch.compile returns
// them (not contiguous). Returns how many linears were padded.
int pad_unaligned_linears(ir::Graph& graph);

}  // namespace tl::passes
