#pragma once
// Horizontal fusion: independent pointwise kernels with the same body over different tensors
// (an optimizer's update of each parameter) become one launch. In a window of consecutive
// kernel steps none of which reads or writes what another writes (so any order of them is
// right), the kernels that compute the same expressions over buffers of the same types are
// made neighbours, marked launch_with_next (ir/schedule.h) and take their sizes at run time (so
// they share one compiled code); the window's releases move to its end. The CPU runs all
// members' ranges in one OpenMP region, CUDA launches one grid over a table of the members'
// buffers (codegen/cuda: the group entry). Turned on by the `group_kernels` setting.
#include <cstddef>

#include "ir/schedule.h"

namespace tl::passes {

// Marks the groups; returns the number of launches it saved (kernels grouped minus groups).
// `copies_only`: only kernels that store one input as it is (a layout change: the graph's
// channels-last weight copies, passes/conv_weights.h), which the pipeline groups by default.
size_t group_kernels(ir::Schedule& schedule, bool copies_only = false);

// One input stored as it is (through casts), in another layout or the same.
bool is_copy_kernel(const ir::Kernel& k);

}  // namespace tl::passes
