#pragma once
// On-disk cache of CUDA images (CUBIN), beside the CPU JIT's objects:
// <cache dir>/cuda/<key>.cubin. Each file ends with a trailer (size, SHA-256
// prefix, magic), so a truncated or corrupt file reads as a miss, never loads.
#include <optional>
#include <string>

namespace tl::runtime::cuda {

// The cache_dir setting (process_settings()); set_cache_dir overrides it ("" turns it off).
std::string cache_dir();
void set_cache_dir(const std::string& dir);

std::optional<std::string> cubin_load(const std::string& dir, const std::string& key);
// Best effort (a read-only cache is skipped); written to a temporary file then
// renamed, so readers never see half a file.
void cubin_store(const std::string& dir, const std::string& key, const std::string& image);
std::string cubin_path(const std::string& dir, const std::string& key);

}  // namespace tl::runtime::cuda
