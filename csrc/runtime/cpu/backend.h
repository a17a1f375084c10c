#pragma once
// The CPU KernelBackend: kernels compiled by the LLVM ORC JIT (runtime/cpu/jit.h),
// run on OpenMP threads (runtime/cpu/parallel.h). Built only with LLVM.
#include <memory>

#include "runtime/kernel_backend.h"

namespace tl::runtime::cpu {

std::unique_ptr<KernelBackend> make_backend();

}  // namespace tl::runtime::cpu
