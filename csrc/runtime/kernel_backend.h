#pragma once
// The code generators' back ends behind one interface. A CompiledGraph picks
// the back end of its kernels' device (make_kernel_backend), hands it every
// kernel in one batch to compile and load (on the compile pool,
// runtime/compile_pool.h; the disk cache first) and launches the kernels
// through it, so it sees neither LLVM nor the CUDA driver. CPU:
// runtime/cpu/backend.cpp (the LLVM ORC JIT, OpenMP threads); CUDA:
// runtime/cuda/backend.cpp (NVRTC, the driver, torch's current stream).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/counters.h"
#include "ir/loop_ir.h"

namespace tl::runtime {

// Where a graph's fused kernels run: the CPU, or CUDA device `index`.
struct KernelDevice {
  bool cuda = false;
  int index = -1;
};

// What one run of a graph keeps between its launches (CPU: torch's thread
// count, read once; CUDA: the stream, and the device's context made current
// until the run ends).
class KernelRun {
 public:
  virtual ~KernelRun() = default;
  // Runs kernel `k` of the batch over `outer` points of `red` elements each;
  // `bufs` holds its inputs' then its outputs' data pointers (the call may
  // append to it). Returns false with the Python error set.
  virtual bool launch(size_t k, std::vector<char*>& bufs, int64_t outer, int64_t red) = 0;
  // Runs pointwise kernels `ks` (a group: passes/group_kernels.h), kernel ks[i] over
  // `outer[i]` points of buffers bufs[i], as one launch where the back end can (the calls may
  // append to each bufs[i]); the members are independent, so any order is right. Counts its
  // launches in counters().kernel_launches. This default launches them one by one.
  virtual bool launch_group(const std::vector<size_t>& ks, std::vector<std::vector<char*>>& bufs,
                            const std::vector<int64_t>& outer) {
    for (size_t i = 0; i < ks.size(); ++i) {
      counters().kernel_launches++;
      if (!launch(ks[i], bufs[i], outer[i], 1)) return false;
    }
    return true;
  }
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  // Compiles and loads `kernels` (read during the call only); their indices
  // are launch's `k`. Throws tl::Error naming the kernel that failed.
  virtual void compile(const std::vector<const ir::Kernel*>& kernels) = 0;
  // One run's launches go through the KernelRun; it lives until the run ends.
  virtual std::unique_ptr<KernelRun> start_run() = 0;
  // CUDA: times each kernel's launch configuration on its first launch
  // (runtime/cuda_autotune.h; kernels are also built at the other block sizes
  // their text takes, from `kernels`, the ones compile() was given, read during
  // the call only; empty: no other builds), the trials written to
  // <trace_dir>autotune.txt when trace_dir is not ""; the CPU has nothing to tune.
  virtual void enable_autotune(std::string trace_dir,
                               const std::vector<const ir::Kernel*>& kernels) {}
};

// Throws tl::Error (NotImplemented) for CPU kernels in a build without LLVM.
std::unique_ptr<KernelBackend> make_kernel_backend(const KernelDevice& device);

}  // namespace tl::runtime
