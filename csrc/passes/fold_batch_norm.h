#pragma once
// Inference batch norm folded into the convolution that feeds it:
//   bn(conv(x, W, b)) == conv(x, W * s[:, None, ...], (b - mean) * s + beta),
//   s = gamma * rsqrt(var + eps).
// The folded weight and bias are new graph nodes computed on every call (one
// small pointwise kernel), not constants: parameters are guarded by identity,
// not value, so an in-place update between calls must still be seen.
#include <string>

#include "ir/graph.h"

namespace tl::passes {

// Why batch norm node `bn` is not folded, or "" when it is foldable: an
// inference batch norm (F.batch_norm / torch.batch_norm with training=False,
// aten._native_batch_norm_legit_no_training) with running stats, whose input
// is a convolution that nothing else reads, nothing requiring grad, one
// floating dtype (f32/f64/f16/bf16) throughout, no side effect in between.
std::string fold_batch_norm_blocker(const ir::Graph& graph, const ir::Node& bn);

// Folds every foldable batch norm; returns how many. Off by default: the
// pipeline runs it only with the fold_batch_norm setting.
int fold_batch_norm(ir::Graph& graph);

}  // namespace tl::passes
