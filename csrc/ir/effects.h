#pragma once
// What running a graph node does beyond computing its result: the effects the
// caller can see, and whether the op checks its operands' values when it runs.
#include "ir/graph.h"

namespace tl::ir {

// A node whose run is visible after the graph: an in-place op (`add_`, `x[i] = v`, `out=`,
// `inplace=True`), a random draw (it advances the generator) or one that runs hooks.
bool visible_effect(const Node& n);

// True if some node of `graph` has a visible effect.
bool any_visible_effect(const Graph& graph);

}  // namespace tl::ir
