#pragma once
// One step of a CompiledGraph's plan (an extern call or a kernel launch),
// as compiled_graph.cpp builds it from the schedule and its memory plan.
#include <optional>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "runtime/compiled_graph.h"
#include "runtime/node_call.h"

namespace tl::runtime {

// The positional arguments of torch.empty_strided for one kernel output.
struct Alloc {
  PyRef sizes, strides, dtype, device;
  // A CPU output big enough for the buffer pool (buffer_pool.h): its sizes,
  // strides and type as numbers.
  bool pooled = false;
  std::vector<int64_t> size_list, stride_list;
  ir::ScalarType type = ir::ScalarType::F32;
  int into_slot = -1;  // >= 0: no allocation, the kernel stores into this input (store_in_place.h)
};

PyRef int_tuple(const std::vector<int64_t>& v);
Alloc alloc_of(const ir::TensorMeta& m);

struct CompiledGraph::Step {
  std::optional<NodeCall> call;  // an extern node, or a kernel:
  int kernel = -1;               // its index in the partition and the KernelBackend's batch
  std::vector<int> in_slots, out_slots;
  // Per input: bytes past the slot's data pointer where the input starts (a
  // view that was never made, read through its base; passes/memory_plan.h).
  std::vector<int64_t> in_offsets;
  std::vector<Alloc> allocs;
  int64_t outer = 1, red = 1;
  bool launch_with_next = false;  // launched at once with the next step (ir::ScheduleStep)
  bool skip = false;  // never made: an empty factory only kernels read, or a view no one needs
  const ir::Node* node = nullptr;  // reported when the step fails
  std::vector<int> release_after;  // slots whose last use is this step
  // An extern whose result a kernel reads: the layout the kernel was built for.
  std::optional<Alloc> kernel_layout;
  std::vector<int64_t> layout_sizes, layout_strides;
};

}  // namespace tl::runtime
