#pragma once
// What the passes hand the runtime (issue 19 part 3): the fused kernels of a
// graph in loop IR and the graph nodes still run through torch, in execution
// order. A plain record over the graph's nodes, so the runtime executes it
// without including passes/ (docs/internals/layering.md). Device-independent:
// the same schedule feeds the CPU (LLVM) and CUDA (NVRTC) back ends.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/loop_ir.h"

namespace tl::ir {

struct ScheduledKernel {
  Kernel kernel;
  // Graph values read, one per kernel.inputs entry (placeholders or earlier nodes).
  std::vector<const Node*> inputs;
  // Graph nodes whose values the kernel produces, one per kernel.outputs entry;
  // their TensorMeta (sizes, strides, dtype, device) says how to allocate them.
  std::vector<const Node*> outputs;
  std::vector<const Node*> members;  // every graph node fused into the kernel
  // Empty, or per output: the graph input whose buffer the output is stored
  // into instead of a fresh one (passes/store_in_place.h), or null.
  std::vector<const Node*> store_into;
};

struct ScheduleStep {
  const Node* extern_node = nullptr;  // run this node through torch, or
  int kernel = -1;                    // run kernels[kernel]
};

// What the runtime's view plan (runtime/view_steps.cpp: view chains folded into
// a kernel's allocation or one as_strided) needs to know of a node, decided by
// the passes from its op and its trace-time value (passes/view_facts.h).
struct ViewFact {
  bool view_op = false;             // view, reshape, permute, getitem, select, ...
  bool split = false;               // split, chunk, unbind, ...: a tuple of views
  bool fresh_result = false;        // mm, linear, embedding, ... without out=: a new tensor
  const Node* viewed = nullptr;     // the tensor it is a torch view of (a split piece: the
                                    // split's input), or null
  const Node* sole_user = nullptr;  // its one reader (the output node counts), or null
  // Element offset of its trace-time value from each tensor up its chain of
  // views (`viewed`, or the first argument of a view op), where torch aliased.
  std::vector<std::pair<const Node*, int64_t>> offsets;
};

struct Schedule {
  std::vector<ScheduledKernel> kernels;
  // Every op node of the graph is covered exactly once, except lowered nodes
  // whose value nothing reads (never run) and copies a kernel's store does.
  std::vector<ScheduleStep> order;
  // Per node of the graph; empty for a hand-made schedule (then no view folds).
  std::unordered_map<const Node*, ViewFact> views;

  const ViewFact& view_fact(const Node& n) const {
    static const ViewFact none;
    auto it = views.find(&n);
    return it == views.end() ? none : it->second;
  }
  // Element offset of n's value from base's, when n views base's memory.
  std::optional<int64_t> view_offset(const Node& n, const Node& base) const {
    for (const auto& [b, offset] : view_fact(n).offsets)
      if (b == &base) return offset;
    return std::nullopt;
  }
};

}  // namespace tl::ir
