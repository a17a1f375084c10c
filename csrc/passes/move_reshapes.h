#pragma once
// Pointwise ops commute with reshapes of contiguous values: `x.float().view(-1, V)`
// is `x.view(-1, V).float()`. Fusion indexes a node's axes one kernel axis
// each (fuse.h's AxisMap), so a reshape that splits or merges axes is read
// through memory and stops fusion: the producer before it is written out
// (GPT-2's float32 logits before log_softmax: 822 MB at 8x512), and a
// reduction's pointwise epilogue after it runs as a kernel of its own. This
// pass moves such reshapes toward the values they start from, where the
// index math stays exact:
// - reshape(p(a, b, ...)), p pointwise and read only by the reshape, becomes
//   p(reshape(a), reshape(b), ...), each operand reshaped along (a broadcast
//   operand stays broadcast where the merged or split axes all broadcast);
// - a reshape of a contiguous reshape reshapes the first one's base;
// - a reshape to its base's own sizes is the base.
// Both values are contiguous and the reshape is a view of the same elements
// in the same order, so every element gets the same operands as before. An
// operand that is a strided view of memory (a padded product narrowed back:
// passes/pad_matmuls.h) is reshaped too where torch views it at the new sizes
// and the moved op keeps the reshape's layout: a causal LM's
// `logits.float().view(-1, V)` over a padded head then fuses into the loss's
// logsumexp instead of writing the float32 logits (GPT-2 8x512: 823 MB).
#include "ir/graph.h"

namespace tl::passes {

// Rewrites as above until nothing changes; returns the number of rewrites.
// NOTE: the new reshapes take the sizes of this graph (size arguments computed
// from sizes are their values here). A graph whose kernels take their sizes at
// run time is still compiled for one layout of its inputs (frame/size_generic.h:
// each new layout compiles its own graph), so it may run it too.
// `saved_outputs_from`: a training forward's outputs from this index on are saved for its
// backward (a reshape may move below such a value); -1: every output goes to the caller.
int move_reshapes(ir::Graph& g, int64_t saved_outputs_from = -1);

}  // namespace tl::passes
