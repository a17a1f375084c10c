#pragma once
// In-place ops on values the graph itself made become their out-of-place
// forms: `F.relu(x, inplace=True)`, `x += y`, `x.mul_(2)` on an intermediate
// are then ordinary pointwise ops that fuse with their neighbours (a ResNet
// block's bn -> relu_ -> += -> relu_ is one kernel instead of four passes).
// Inputs, parameters and anything a view shares storage with keep their
// in-place ops: those mutations are visible to the caller or to the view.
#include "ir/graph.h"

namespace tl::passes {

// Rewrites every such op; returns how many.
int functionalize(ir::Graph& graph);

}  // namespace tl::passes
