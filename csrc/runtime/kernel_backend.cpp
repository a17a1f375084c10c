#include "runtime/kernel_backend.h"

#include "core/errors.h"
#include "runtime/cuda/backend.h"
#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/backend.h"
#endif

namespace tl::runtime {

std::unique_ptr<KernelBackend> make_kernel_backend(const KernelDevice& device) {
  if (device.cuda) return cuda::make_backend(device.index);
#ifdef TORCHLITE_HAVE_LLVM
  return cpu::make_backend();
#else
  TL_THROW(NotImplemented) << "this torchlite build has no LLVM, so it cannot compile CPU kernels";
#endif
}

}  // namespace tl::runtime
