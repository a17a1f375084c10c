#pragma once
// NVRTC, loaded at run time (dlopen) so the extension imports without it.
// Searched, in order: $TORCHLITE_NVRTC (a file path), the `nvidia` wheels'
// lib folders next to torch (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib),
// $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the loader path.
// NVRTC is thread-safe; these functions may be called from any thread.
#include <string>
#include <vector>

namespace tl::runtime::cuda {

struct NvrtcVersion {
  int major = 0, minor = 0;
};

// True once NVRTC is loaded; otherwise false and `why` (if given) names the
// places searched.
bool nvrtc_available(std::string* why = nullptr);
// Throws tl::Error (Unsupported) naming the places searched when NVRTC is missing.
NvrtcVersion nvrtc_version();

// Compiles one translation unit. `arch` is a real architecture ("sm_90") for
// a CUBIN or a virtual one ("compute_90") for PTX text. Returns the image
// bytes. Throws tl::Error (Value) with NVRTC's log and `kernel_name` on a
// compile error.
std::string nvrtc_compile(const std::string& source, const std::string& kernel_name,
                          const std::string& arch);
// The same with extra NVRTC options appended (e.g. "--Ofast-compile=max", which
// CI uses to check many kernels quickly).
std::string nvrtc_compile(const std::string& source, const std::string& kernel_name,
                          const std::string& arch, const std::vector<std::string>& extra_options);

}  // namespace tl::runtime::cuda
