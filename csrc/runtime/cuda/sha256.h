#pragma once
// SHA-256 for cache keys of CUDA images. Own implementation: the LLVM one is
// only linked into builds with the CPU back end, and the GPU build may have no LLVM.
#include <string>
#include <string_view>

namespace tl::runtime::cuda {

// Lower-case hex digest (64 characters) of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace tl::runtime::cuda
