#pragma once
// Loop-IR kernels -> CUDA functions loaded on one device: CUDA C from
// codegen/cuda, one NVRTC program per distinct kernel body (kernels that
// differ only in their name, like one layer's kernels in every layer, share
// one) compiled on parallel threads, CUBINs cached on disk and modules shared
// process-wide by cache key.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_kernel.h"
#include "ir/loop_ir.h"

namespace tl::runtime::cuda {

struct LoadedKernel {
  std::string name;           // the loop-IR kernel's name, for errors
  void* fn = nullptr;         // CUfunction of the scalar entry
  void* vector_fn = nullptr;  // the 16-byte vector entry, or null
  void* group_fn = nullptr;   // the group entry (CudaKernel::group), or null
  codegen::cuda::CudaKernel::Group group;
  std::vector<int> aligned_params;  // vector_fn only when these pointers are 16-byte aligned
  unsigned grid = 1, block = 256, shared_bytes = 0;
  bool dependent_launch = false;  // CudaKernel::dependent_launch
  // Runtime sizes: the entries' last parameter (CudaKernel::dims, each number dim_bytes wide),
  // passed by value at every launch; empty: no such parameter.
  std::vector<unsigned char> dims;
  std::string tune_key;           // the body's hash (same for kernels differing only in name)
  std::vector<int> other_blocks;  // CudaKernel::other_blocks: max-autotune's other builds
  // Keeps fn's module loaded: the module is unloaded once the last kernel
  // using it is gone (unload_dead_modules). Launch fn only while holding it.
  std::shared_ptr<const void> module;
};

// The code generator's target for `device`: its exact compute capability and SM count.
codegen::cuda::Target target_for(int device);

// Emits, compiles (disk cache first) and loads every kernel for `device`.
// Bumps counters().kernels per kernel, counters().cache_hits per CUBIN read
// from disk or body already compiled, counters().nvrtc_compiles per NVRTC compile. Throws
// tl::Error: Unsupported when NVRTC or the driver is missing, Value with NVRTC's log and the
// numbered source on a compile error.
std::vector<LoadedKernel> compile_kernels(const std::vector<const ir::Kernel*>& kernels,
                                          int device);

// The same built at `block` threads a block (Target::pointwise_block for pointwise kernels,
// Target::reduce_block for reductions): max-autotune's other launch configurations. Not
// counted in counters().kernels.
std::vector<LoadedKernel> compile_block_variants(const std::vector<const ir::Kernel*>& kernels,
                                                 int device, int block);

// The same from CUDA C already written (tests, hand-written kernels).
std::vector<LoadedKernel> load_kernels(const std::vector<codegen::cuda::CudaKernel>& specs,
                                       int device);

// Unloads the modules whose last LoadedKernel is gone (each after waiting for
// its device's queued work). Run at every compile_kernels / load_kernels and on
// torchlite.reset(), not from destructors (which may run inside a stream
// capture); when the wait fails, the modules stay queued. Never throws.
void unload_dead_modules();
// Modules loaded and not unloaded yet (tests: modules go with their last user).
int64_t live_modules();
// Kernels emitted as CUDA C so far (tests: a kernel whose emission key names loaded code,
// codegen/cuda/emission_key.h, is not emitted again).
int64_t kernel_emits();

}  // namespace tl::runtime::cuda
