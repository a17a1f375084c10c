#pragma once
// A kernel output copied into a graph input at the end (`p.copy_(new_p)`: how a
// compiled optimizer step writes parameters and state back) is stored by the
// kernel straight into the input's buffer; the copy and the fresh buffer go.
// Only for graphs whose caller promises its inputs share no memory
// (PassContext::inputs_unaliased): a kernel writing one input while another
// input aliasing it is read elsewhere would change what that read sees.
#include "passes/fuse.h"
#include "passes/graph_info.h"
#include "passes/partition.h"

namespace tl::passes {

// Sets kernels' `store_into` and drops the absorbed copies from `p.order`;
// returns how many copies were absorbed.
int store_in_place(const ir::Graph& graph, const GraphInfo& info, const Fusion& fusion,
                   Partition& p);

}  // namespace tl::passes
