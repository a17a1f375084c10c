#pragma once
// On-disk cache of compiled kernel objects. Each file is the object followed
// by a trailer (size, checksum, magic) so a truncated or corrupt file is
// detected and treated as a miss, never loaded.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tl::runtime::cpu {

// The object stored under `key` in `dir`, or nullopt (missing, truncated, corrupt).
std::optional<std::vector<char>> cache_load(const std::string& dir, const std::string& key);
// Best effort: a cache that cannot be written (read-only home) is skipped.
// Written to a temporary file then renamed, so readers never see half a file.
void cache_store(const std::string& dir, const std::string& key, std::string_view object);
std::string cache_path(const std::string& dir, const std::string& key);

}  // namespace tl::runtime::cpu
