#pragma once
// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1) so the
// extension builds without CUDA headers and imports on machines without a GPU.
// Handles are opaque pointers (CUmodule, CUfunction, CUstream). Every failed
// driver call throws tl::Error (Runtime) naming the call and CUDA's message.
#include <string>

namespace tl::runtime::cuda {

// True once libcuda is loaded and cuInit succeeded; otherwise false and `why`
// (if given) says what failed. Cheap after the first call.
bool driver_available(std::string* why = nullptr);

struct DeviceInfo {
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  int max_shared_optin = 0;  // largest dynamic shared memory a kernel may opt into
};
// Throws when the driver is missing or `device` does not exist.
DeviceInfo device_info(int device);

// Makes the primary context of `device` (the one torch's runtime uses)
// current on this thread for the scope, and restores the previous one after,
// so torch's notion of the current device never changes under it.
class ContextScope {
 public:
  explicit ContextScope(int device);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  void* previous_ = nullptr;
  bool switched_ = false;
};

// Loads a CUBIN into the primary context of the current ContextScope.
// Modules are shared process-wide by cache key while any compiled graph uses
// them (compile.h), then unloaded with unload_module.
void* load_module(const std::string& image, const std::string& what);
// Waits for the current context's queued work, then unloads `module` from it.
void unload_module(void* module);
void* module_function(void* module, const std::string& name);
// Local memory a thread of `fn` uses (register spills, stack arrays).
int local_bytes(void* fn);
// Lets `fn` use up to `bytes` of dynamic shared memory (needed above 48 KiB).
void set_max_dynamic_shared(void* fn, int bytes, const std::string& name);
// One 1-D launch; `args` as cuLaunchKernel's kernelParams. `dependent`: the
// kernel waits for the prior grid itself (CudaKernel::dependent_launch), so it
// is launched with programmatic stream serialization where the driver has it.
void launch(void* fn, unsigned grid, unsigned block, unsigned shared_bytes, void* stream,
            void** args, const std::string& name, bool dependent = false);

}  // namespace tl::runtime::cuda
