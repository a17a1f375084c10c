#pragma once
// Runs a JIT-compiled kernel over [0, outer_numel) on OpenMP threads. The
// kernel itself is a serial loop over any sub-range (docs/internals/codegen.md).
#include <cstdint>

#include "runtime/cpu/jit.h"

namespace tl::runtime::cpu {

// Work below this many elements (outer points x reduction length) runs on the
// calling thread: waking a thread team costs more than it saves.
constexpr int64_t kSerialElements = 32 * 1024;

// `work_per_point` is the reduction length (1 for pointwise kernels).
// `num_threads` <= 1 runs serially.
void parallel_run(KernelFn fn, int64_t outer_numel, int64_t work_per_point, char* const* bufs,
                  int num_threads);

}  // namespace tl::runtime::cpu
