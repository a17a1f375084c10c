#pragma once
// Splits a captured graph into fused kernels (loop IR) and extern nodes that
// still run through torch, in execution order. Device-independent: the same
// partition feeds the CPU (LLVM) and CUDA (NVRTC) code generators.
#include <vector>

#include "ir/graph.h"
#include "ir/loop_ir.h"

namespace tl::passes {

struct FusedKernel {
  ir::Kernel kernel;
  // Graph values read, one per kernel.inputs entry (placeholders or earlier nodes).
  std::vector<const ir::Node*> inputs;
  // Graph nodes whose values the kernel produces, one per kernel.outputs entry;
  // their TensorMeta (sizes, strides, dtype, device) says how to allocate them.
  std::vector<const ir::Node*> outputs;
  std::vector<const ir::Node*> members;  // every graph node fused into the kernel
  // Empty, or per output: the graph input whose buffer the output is stored
  // into instead of a fresh one (passes/store_in_place.h), or null.
  std::vector<const ir::Node*> store_into;
};

struct PlanItem {
  const ir::Node* extern_node = nullptr;  // run this node through torch, or
  int kernel = -1;                        // run kernels[kernel]
};

struct Partition {
  std::vector<FusedKernel> kernels;
  // Every op node of the graph is covered exactly once, except lowered nodes
  // whose value nothing reads (never run) and copies a kernel's store does.
  std::vector<PlanItem> order;
};

// Never fails on unknown ops: they become extern nodes. `inputs_unaliased`: the
// caller promises no two inputs share memory (passes/store_in_place.h).
Partition partition_graph(const ir::Graph& graph, bool inputs_unaliased = false);

}  // namespace tl::passes
