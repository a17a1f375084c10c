#pragma once
// The memory plan of a schedule (ir::StepMemory, one per step): steps never run (empty factories
// only kernels read, views nothing reads), view chains folded into a kernel's allocation or one
// as_strided, kernel inputs read through the value they view, and after which step each value
// is released so peak memory matches eager. Decided here from the schedule, its view facts
// (passes/view_facts.h) and the trace-time values, so the runtime only executes it.
#include "ir/graph.h"
#include "ir/schedule.h"

namespace tl::passes {

// Fills schedule.memory; call after describe_views (partition_graph does both).
void plan_memory(const ir::Graph& graph, ir::Schedule& schedule);

// Every op node of `graph` run through torch in graph order, with values released after their
// last use: what a graph without kernels runs (runtime::GraphRunner).
ir::Schedule op_by_op_schedule(const ir::Graph& graph);

}  // namespace tl::passes
