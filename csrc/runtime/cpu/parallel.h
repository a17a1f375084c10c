#pragma once
// Runs a JIT-compiled kernel over [0, outer_numel) on OpenMP threads. The
// kernel itself is a serial loop over any sub-range (docs/internals/codegen.md).
#include <cstdint>
#include <vector>

#include "runtime/cpu/jit.h"

namespace tl::runtime::cpu {

// Work below this many elements (outer points x reduction length) runs on the
// calling thread: waking a thread team costs more than it saves.
constexpr int64_t kSerialElements = 32 * 1024;

// `work_per_point` is the reduction length (1 for pointwise kernels).
// `num_threads` <= 1 runs serially.
void parallel_run(KernelFn fn, int64_t outer_numel, int64_t work_per_point, char* const* bufs,
                  int num_threads);

// One range of a kernel group's member: fn over [begin, end) of its buffers.
struct GroupPiece {
  KernelFn fn;
  char* const* bufs;
  int64_t begin, end;
};

// A group of independent pointwise kernels (passes/group_kernels.h) in one OpenMP region:
// every member's range is cut into pieces of about equal work, and the threads take pieces
// from the whole table (num_threads <= 1, or little work in all: one thread, in order).
// `members`: (fn, bufs, outer) per member.
void parallel_run_group(const std::vector<GroupPiece>& members, int num_threads);

}  // namespace tl::runtime::cpu
