#pragma once
// The facts about torch views that the runtime's view plan reads
// (ir::ViewFact): which nodes are views of which, at what element offset, and
// who reads them. Decided here, from op names and trace-time values, so the
// runtime plans from the schedule alone.
#include "ir/graph.h"
#include "ir/schedule.h"

namespace tl::passes {

// Fills schedule.views for every node of `graph`.
void describe_views(const ir::Graph& graph, ir::Schedule& schedule);

}  // namespace tl::passes
