#include "kernel_builder.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/cpu/parallel.h"
#include "runtime/disk_cache.h"
#endif

namespace tl::test {

int64_t outer_numel(const ir::Kernel& k) {
  int64_t n = 1;
  for (size_t d = 0; d + k.reduction_axes < k.shape.size(); ++d) n *= k.shape[d];
  return n;
}

int64_t reduction_numel(const ir::Kernel& k) {
  int64_t n = 1;
  for (size_t d = k.shape.size() - k.reduction_axes; d < k.shape.size(); ++d) n *= k.shape[d];
  return n;
}

void run_kernel(const ir::Kernel& k, std::vector<void*> bufs) {
#ifdef TORCHLITE_HAVE_LLVM
  runtime::set_cache_dir("");
  auto fns = runtime::cpu::compile_kernels({&k});
  // A kernel with runtime sizes reads its dims array after the outputs.
  if (!fns.dims[0].empty()) bufs.push_back(fns.dims[0].data());
  runtime::cpu::parallel_run(fns.fns[0], outer_numel(k), reduction_numel(k),
                             reinterpret_cast<char* const*>(bufs.data()), 2);
#endif
}

}  // namespace tl::test
