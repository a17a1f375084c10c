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
  // A kernel launched in one launch with the kernel of the next step (passes/group_kernels.h):
  // the runtime prepares both steps' buffers, then launches the run of such steps, ending at
  // the first step without the flag, at once.
  bool launch_with_next = false;
};

// What the memory plan (passes/memory_plan.cpp: view chains folded into
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

// How one step of `order` uses memory (passes/memory_plan.h), in graph nodes: the runtime
// numbers values into slots and does what this says, deciding nothing itself.
struct StepMemory {
  // Never run: an empty factory only kernels read, a view folded into a kernel's allocation, or
  // a view nothing reads any more.
  bool skip = false;
  // An extern whose result a kernel reads: copied into the layout of its TensorMeta (what the
  // kernel was built for) when torch chose another on real data.
  bool kernel_layout = false;
  // An extern computed as one torch.as_strided of `strided_base`'s value (a fresh value it
  // views through a chain of views) at this element offset, with its own sizes and strides.
  const Node* strided_base = nullptr;
  int64_t strided_offset = 0;
  // A kernel: per output, the node whose value the output becomes and whose TensorMeta it is
  // allocated with (the last view of a chain folded into its allocation, else the output).
  std::vector<const Node*> outputs;
  // A kernel: per input, the value whose buffer it reads and the bytes past its data pointer
  // where the input starts (a view never made, read through the value it views).
  std::vector<const Node*> inputs;
  std::vector<int64_t> input_byte_offsets;
  // Values (never graph outputs) released after this step: its last reader, or the step
  // itself for a value nothing reads. A graph input is released after its last reader (the
  // runtime's reference: freed there when the caller handed its own over).
  std::vector<const Node*> release_after;
};

struct Schedule {
  std::vector<ScheduledKernel> kernels;
  // Every op node of the graph is covered exactly once, except lowered nodes
  // whose value nothing reads (never run) and copies a kernel's store does.
  std::vector<ScheduleStep> order;
  // Per node of the graph; empty for a hand-made schedule (then no view folds).
  std::unordered_map<const Node*, ViewFact> views;
  // Per step of `order` (passes::plan_memory); the runtime requires it.
  std::vector<StepMemory> memory;

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
