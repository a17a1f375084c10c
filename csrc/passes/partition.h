#pragma once
// Splits a captured graph into fused kernels (loop IR) and extern nodes that
// still run through torch, in execution order. Device-independent: the same
// partition feeds the CPU (LLVM) and CUDA (NVRTC) code generators.
#include "ir/graph.h"
#include "ir/schedule.h"

namespace tl::passes {

// NOTE: the partition is the schedule the runtime runs (ir/schedule.h); the
// passes keep their own names for its parts.
using FusedKernel = ir::ScheduledKernel;
using PlanItem = ir::ScheduleStep;
using Partition = ir::Schedule;

// Never fails on unknown ops: they become extern nodes. `inputs_unaliased`: the
// caller promises no two inputs share memory (passes/store_in_place.h).
Partition partition_graph(const ir::Graph& graph, bool inputs_unaliased = false);

}  // namespace tl::passes
