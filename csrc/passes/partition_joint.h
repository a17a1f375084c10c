#pragma once
// Splits a joint forward+backward graph (traced by torchlite/_training.py from
// torch's own derivative formulas) into the graph that runs in the forward and
// the one that runs in backward, and says which forward values backward gets.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tl::passes {

struct JointSplit {
  std::shared_ptr<ir::Graph> forward;   // primals -> (forward outputs..., saved...)
  std::shared_ptr<ir::Graph> backward;  // (saved..., tangents...) -> gradients
  std::vector<std::string> saved;       // joint names of the saved values, in order
  std::vector<std::string> recomputed;  // joint names of forward values backward recomputes
};

// `joint` takes num_primals primals then the tangents, and returns
// num_forward_outputs forward outputs then the gradients. Backward recomputes
// cheap pointwise and view values from saved ones when that stores fewer
// bytes (`recompute`), and saves every forward value it reads otherwise. The backward's nodes
// run in autograd's order: those that need no tangent just before their first reader.
// Throws Unsupported when a forward value backward reads is not a tensor.
// `matmul_inputs`: a value the forward stores anyway for a matmul (or other extern op) is
// recomputed too when backward has every input of its recomputation already (a product of
// saved values: GELU's output beside its input, the dropped attention probabilities beside
// the softmax and the bool mask), as AOTAutograd's min cut does; off: it is saved.
// `mutated_primals`: the primal index of each of the last mutated_primals.size() forward
// outputs, the new value of an input the graph mutates (batch norm's running statistics): the
// forward copies each into its input at its end (`primal.copy_(value)`) and does not return
// it, and backward recomputes nothing from such an input.
JointSplit partition_joint(const ir::Graph& joint, size_t num_primals, size_t num_forward_outputs,
                           bool recompute, bool matmul_inputs = true,
                           const std::vector<size_t>& mutated_primals = {});

// `backward` (saved..., tangents...) -> gradients, with the tangents marked in `zero` (one flag
// per tangent) a constant zero instead of an input, and a gradient sum with such a zero (autograd
// adding an output's tangent to what flows back through a later use of it) the other operand
// itself. NOTE: autograd hands no gradient for an output nothing differentiated (a model's
// logits beside its loss); a zero made in memory is as large as that output (GPT-2 8x512's
// bf16 logits: 411 MB) and is read by the sum, where a constant costs nothing. With no flag
// set: a copy of `backward`.
std::shared_ptr<ir::Graph> with_zero_tangents(const ir::Graph& backward, size_t num_saved,
                                              const std::vector<bool>& zero);

}  // namespace tl::passes
