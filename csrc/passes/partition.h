#pragma once
// Splits a captured graph into fused kernels (loop IR) and extern nodes that
// still run through torch, in execution order. Device-independent: the same
// partition feeds the CPU (LLVM) and CUDA (NVRTC) code generators.
#include <functional>

#include "ir/graph.h"
#include "ir/schedule.h"

namespace tl::passes {

// NOTE: the partition is the schedule the runtime runs (ir/schedule.h); the
// passes keep their own names for its parts.
using FusedKernel = ir::ScheduledKernel;
using PlanItem = ir::ScheduleStep;
using Partition = ir::Schedule;

// True for tensor metadata on the device the kernels will run on.
using OnKernelDevice = std::function<bool(const ir::TensorMeta&)>;

// Never fails on unknown ops: they become extern nodes. `inputs_unaliased`: the
// caller promises no two inputs share memory (passes/store_in_place.h).
// `on_device` (null: every tensor is): values elsewhere, and every op reading
// one, stay extern nodes, so a graph that mixes devices still fuses the rest.
Partition partition_graph(const ir::Graph& graph, bool inputs_unaliased = false,
                          const OnKernelDevice& on_device = nullptr);

}  // namespace tl::passes
