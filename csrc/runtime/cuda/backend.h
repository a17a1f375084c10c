#pragma once
// The CUDA KernelBackend: kernels compiled by NVRTC and loaded on one device
// (runtime/cuda/compile.h), launched through the driver on torch's current
// stream, their grids tuned under autotune (runtime/cuda_autotune.h).
#include <memory>

#include "runtime/kernel_backend.h"

namespace tl::runtime::cuda {

std::unique_ptr<KernelBackend> make_backend(int device);

}  // namespace tl::runtime::cuda
