// libcuda through dlopen. The few types and prototypes below are the driver's
// stable C ABI (unchanged since CUDA 4 for these entry points), declared here
// so no cuda.h is needed to build.
#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "core/errors.h"

namespace tl::runtime::cuda {

namespace {
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
constexpr int kAttrMultiprocessors = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrCcMajor = 75;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kAttrSharedOptin = 97;      // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kFuncMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kFuncLocalBytes = 3;        // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
constexpr int kErrorInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr int kErrorNotSupported = 801;   // CUDA_ERROR_NOT_SUPPORTED

// cuLaunchKernelEx's configuration (CUDA 12.0+): CUlaunchConfig, CUlaunchAttribute,
// and CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
constexpr int kLaunchProgrammaticSerialization = 6;
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
  } value;
};
struct LaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  LaunchAttribute* attrs;
  unsigned n_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56,
              "cuda.h's CUlaunchAttribute and CUlaunchConfig layouts on 64-bit Linux");

struct Api {
  CUresult (*Init)(unsigned);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*CtxSynchronize)();
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*FuncGetAttribute)(int*, int, CUfunction);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**);
  CUresult (*LaunchKernelEx)(const LaunchConfig*, CUfunction, void**, void**);  // may be null
};

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;
  std::vector<CUcontext> contexts;  // retained primary context per device, null until used
};

template <typename F>
bool bind(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    l.why = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") +
            (err ? err : "not found") + ". Install the NVIDIA driver to run CUDA kernels.";
    return l;
  }
  Api& a = l.api;
  bool all =
      bind(h, "cuInit", a.Init) && bind(h, "cuGetErrorString", a.GetErrorString) &&
      bind(h, "cuGetErrorName", a.GetErrorName) && bind(h, "cuDeviceGet", a.DeviceGet) &&
      bind(h, "cuDeviceGetCount", a.DeviceGetCount) &&
      bind(h, "cuDeviceGetAttribute", a.DeviceGetAttribute) &&
      bind(h, "cuDevicePrimaryCtxRetain", a.PrimaryCtxRetain) &&
      bind(h, "cuCtxGetCurrent", a.CtxGetCurrent) && bind(h, "cuCtxSetCurrent", a.CtxSetCurrent) &&
      bind(h, "cuModuleLoadData", a.ModuleLoadData) &&
      bind(h, "cuModuleGetFunction", a.ModuleGetFunction) &&
      bind(h, "cuModuleUnload", a.ModuleUnload) && bind(h, "cuCtxSynchronize", a.CtxSynchronize) &&
      bind(h, "cuFuncSetAttribute", a.FuncSetAttribute) &&
      bind(h, "cuFuncGetAttribute", a.FuncGetAttribute) &&
      bind(h, "cuLaunchKernel", a.LaunchKernel);
  if (!bind(h, "cuLaunchKernelEx", a.LaunchKernelEx)) a.LaunchKernelEx = nullptr;  // before 12.0
  if (!all) {
    l.why = "libcuda.so.1 lacks a driver entry point torchlite needs (driver older than CUDA 9?)";
    return l;
  }
  if (CUresult rc = a.Init(0); rc != 0) {
    const char* msg = nullptr;
    a.GetErrorString(rc, &msg);
    l.why = std::string("cuInit failed: ") + (msg ? msg : "unknown error") + " (CUDA error " +
            std::to_string(rc) + ")";
    return l;
  }
  int n = 0;
  a.DeviceGetCount(&n);
  l.contexts.assign(n, nullptr);
  l.ok = true;
  return l;
}

std::mutex g_mu;  // first load and context retains

// NOTE: loaded once and never unloaded: handles it gave out must stay valid for
// the process, and a failed load is final (the driver cannot appear later).
Loaded& driver() {
  static Loaded* l = [] { return new Loaded(load()); }();
  return *l;
}

const Api& api() {
  Loaded& l = driver();
  if (!l.ok) TL_THROW(Runtime) << l.why;
  return l.api;
}

void check(CUresult rc, const char* call, const std::string& what) {
  if (rc == 0) return;
  const Api& a = driver().api;
  const char *name = nullptr, *msg = nullptr;
  a.GetErrorName(rc, &name);
  a.GetErrorString(rc, &msg);
  TL_THROW(Runtime) << call << " failed" << (what.empty() ? "" : " for " + what) << ": "
                    << (name ? name : "CUDA error " + std::to_string(rc)) << " ("
                    << (msg ? msg : "no message") << ")";
}

CUcontext primary_context(int device) {
  const Api& a = api();
  std::lock_guard<std::mutex> lock(g_mu);
  auto& ctxs = driver().contexts;
  if (device < 0 || device >= static_cast<int>(ctxs.size()))
    TL_THROW(Value) << "CUDA device " << device << " does not exist (" << ctxs.size()
                    << " device(s) visible)";
  if (!ctxs[device]) {
    CUdevice dev = 0;
    check(a.DeviceGet(&dev, device), "cuDeviceGet", "device " + std::to_string(device));
    // NOTE: retained for the process; the same context torch's runtime API uses.
    check(a.PrimaryCtxRetain(&ctxs[device], dev), "cuDevicePrimaryCtxRetain",
          "device " + std::to_string(device));
  }
  return ctxs[device];
}
}  // namespace

bool driver_available(std::string* why) {
  std::lock_guard<std::mutex> lock(g_mu);
  Loaded& l = driver();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

DeviceInfo device_info(int device) {
  const Api& a = api();
  primary_context(device);  // validates the index
  CUdevice dev = 0;
  check(a.DeviceGet(&dev, device), "cuDeviceGet", "device " + std::to_string(device));
  DeviceInfo info;
  auto attr = [&](int which, int& out) {
    check(a.DeviceGetAttribute(&out, which, dev), "cuDeviceGetAttribute",
          "device " + std::to_string(device));
  };
  attr(kAttrCcMajor, info.sm_major);
  attr(kAttrCcMinor, info.sm_minor);
  attr(kAttrMultiprocessors, info.multiprocessors);
  attr(kAttrSharedOptin, info.max_shared_optin);
  return info;
}

ContextScope::ContextScope(int device) {
  const Api& a = api();
  CUcontext want = primary_context(device);
  CUcontext cur = nullptr;
  check(a.CtxGetCurrent(&cur), "cuCtxGetCurrent", "");
  if (cur == want) return;
  check(a.CtxSetCurrent(want), "cuCtxSetCurrent", "device " + std::to_string(device));
  previous_ = cur;
  switched_ = true;
}

ContextScope::~ContextScope() {
  if (switched_) driver().api.CtxSetCurrent(previous_);  // NOTE: a destructor cannot throw
}

void* load_module(const std::string& image, const std::string& what) {
  CUmodule m = nullptr;
  check(api().ModuleLoadData(&m, image.data()), "cuModuleLoadData", what);
  return m;
}

void unload_module(void* module) {
  const Api& a = api();
  // NOTE: kernels of the module may still be queued on a stream: wait for them first.
  check(a.CtxSynchronize(), "cuCtxSynchronize", "unloading a module");
  check(a.ModuleUnload(static_cast<CUmodule>(module)), "cuModuleUnload", "");
}

void* module_function(void* module, const std::string& name) {
  CUfunction f = nullptr;
  check(api().ModuleGetFunction(&f, module, name.c_str()), "cuModuleGetFunction", name);
  return f;
}

void set_max_dynamic_shared(void* fn, int bytes, const std::string& name) {
  check(api().FuncSetAttribute(fn, kFuncMaxDynamicShared, bytes), "cuFuncSetAttribute", name);
}

int local_bytes(void* fn) {
  int bytes = 0;
  check(api().FuncGetAttribute(&bytes, kFuncLocalBytes, fn), "cuFuncGetAttribute", "");
  return bytes;
}

namespace {
// Cleared for the process when the driver refuses the attribute (a driver or
// device without it): later launches go the plain way.
std::atomic<bool> g_dependent_launch_works{true};
}  // namespace

void launch(void* fn, unsigned grid, unsigned block, unsigned shared_bytes, void* stream,
            void** args, const std::string& name, bool dependent) {
  const Api& a = api();
  if (dependent && a.LaunchKernelEx && g_dependent_launch_works.load(std::memory_order_relaxed)) {
    LaunchAttribute attr{};
    attr.id = kLaunchProgrammaticSerialization;
    attr.value.value = 1;
    LaunchConfig cfg{grid, 1, 1, block, 1, 1, shared_bytes, stream, &attr, 1};
    CUresult rc = a.LaunchKernelEx(&cfg, fn, args, nullptr);
    if (rc == 0) return;
    if (rc != kErrorInvalidValue && rc != kErrorNotSupported) check(rc, "cuLaunchKernelEx", name);
    // Refused: when the plain launch goes through, the attribute was the cause.
    CUresult plain =
        a.LaunchKernel(fn, grid, 1, 1, block, 1, 1, shared_bytes, stream, args, nullptr);
    if (plain == 0) g_dependent_launch_works = false;
    check(plain, "cuLaunchKernel", name);
    return;
  }
  check(a.LaunchKernel(fn, grid, 1, 1, block, 1, 1, shared_bytes, stream, args, nullptr),
        "cuLaunchKernel", name);
}

}  // namespace tl::runtime::cuda
