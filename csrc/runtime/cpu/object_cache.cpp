#include "runtime/cpu/object_cache.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

namespace tl::runtime::cpu {

namespace {
constexpr char kMagic[8] = {'T', 'L', 'O', 'B', 'J', 'v', '1', '\0'};
constexpr size_t kTrailer = 8 + 8 + sizeof(kMagic);

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}
}  // namespace

std::string cache_path(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / (key + ".o")).string();
}

std::optional<std::vector<char>> cache_load(const std::string& dir, const std::string& key) {
  if (dir.empty()) return std::nullopt;
  std::ifstream in(cache_path(dir, key), std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  std::streamoff n = in.tellg();
  if (n < static_cast<std::streamoff>(kTrailer)) return std::nullopt;
  std::vector<char> data(static_cast<size_t>(n));
  in.seekg(0);
  if (!in.read(data.data(), n)) return std::nullopt;
  size_t body = data.size() - kTrailer;
  uint64_t size = 0, sum = 0;
  std::memcpy(&size, data.data() + body, 8);
  std::memcpy(&sum, data.data() + body + 8, 8);
  if (std::memcmp(data.data() + body + 16, kMagic, sizeof(kMagic)) != 0 || size != body ||
      sum != fnv1a(data.data(), body))
    return std::nullopt;
  data.resize(body);
  return data;
}

void cache_store(const std::string& dir, const std::string& key, std::string_view object) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string final_path = cache_path(dir, key);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    uint64_t size = object.size(), sum = fnv1a(object.data(), object.size());
    out.write(object.data(), static_cast<std::streamsize>(object.size()));
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(kMagic, sizeof(kMagic));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace tl::runtime::cpu
