#include "runtime/cuda/cubin_cache.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/flags.h"
#include "runtime/cuda/sha256.h"

namespace tl::runtime::cuda {

namespace {
constexpr char kMagic[8] = {'T', 'L', 'C', 'U', 'B', 'v', '1', '\0'};
constexpr size_t kSumLen = 16;  // hex characters of the body's SHA-256 kept in the trailer
constexpr size_t kTrailer = 8 + kSumLen + sizeof(kMagic);

std::mutex g_mu;
std::optional<std::string> g_dir;  // set_cache_dir's override
}  // namespace

std::string cache_dir() {
  std::lock_guard<std::mutex> lock(g_mu);
  // NOTE: read on every compile, so a later torchlite.config.cache_dir applies.
  return g_dir ? *g_dir : process_settings().cache_dir;
}

void set_cache_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_dir = dir;
}

std::string cubin_path(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / "cuda" / (key + ".cubin")).string();
}

std::optional<std::string> cubin_load(const std::string& dir, const std::string& key) {
  if (dir.empty()) return std::nullopt;
  std::ifstream in(cubin_path(dir, key), std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  if (data.size() < kTrailer) return std::nullopt;
  size_t body = data.size() - kTrailer;
  uint64_t size = 0;
  std::memcpy(&size, data.data() + body, 8);
  if (size != body || std::memcmp(data.data() + body + 8 + kSumLen, kMagic, sizeof(kMagic)) != 0)
    return std::nullopt;
  std::string sum = sha256_hex(std::string_view(data.data(), body)).substr(0, kSumLen);
  if (data.compare(body + 8, kSumLen, sum) != 0) return std::nullopt;
  data.resize(body);
  return data;
}

void cubin_store(const std::string& dir, const std::string& key, const std::string& image) {
  if (dir.empty()) return;
  std::error_code ec;
  std::string final_path = cubin_path(dir, key);
  std::filesystem::create_directories(std::filesystem::path(final_path).parent_path(), ec);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    uint64_t size = image.size();
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    out.write(reinterpret_cast<const char*>(&size), 8);
    out << sha256_hex(image).substr(0, kSumLen);
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

}  // namespace tl::runtime::cuda
