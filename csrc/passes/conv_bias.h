#pragma once
// A CUDA convolution with a bias runs as two kernels in torch: cuDNN's
// convolution, then a separate `output.add_(bias)` over the whole output
// (aten's _convolution). The bias moves out of the call into an explicit
// broadcast add after it, which the partitioner fuses into the kernel that
// reads the convolution's output (the activation, layer norm or residual add
// after it), as Inductor does: one pass over the output fewer per convolution.
// Where nothing of ours reads the output (another convolution, a graph
// output), the add is a kernel of ours in place of torch's: the same bytes.
#include "ir/graph.h"

namespace tl::passes {

// Rewrites conv(x, w, b) into conv(x, w, None) + b.view(C, 1, ...) for every
// inference convolution (conv1d/2d/3d, conv_transpose1d/2d/3d,
// torch.convolution) with a bias node. Returns how many were rewritten. The
// pipeline runs it on CUDA graphs only: CPU (oneDNN) convolutions add their
// bias inside the call.
int split_convolution_bias(ir::Graph& graph);

}  // namespace tl::passes
