#pragma once
// The one pool of threads that compiles kernels, for the CPU (LLVM) and CUDA
// (NVRTC) back ends alike: a batch's jobs spread over the machine's cores.
#include <cstddef>
#include <functional>

namespace tl::runtime {

// Runs job(i) for every i in [0, n) on up to hardware_concurrency() threads,
// the calling one included, and returns when all are done; then rethrows the
// exception of the lowest i that threw, if any. `job` must be safe to call
// from several threads at once; the other threads hold no GIL, so it may not
// touch Python.
void compile_in_parallel(size_t n, const std::function<void(size_t)>& job);

}  // namespace tl::runtime
