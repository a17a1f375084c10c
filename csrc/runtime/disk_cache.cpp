#include "runtime/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/flags.h"
#include "core/log.h"
#include "core/secure_fs.h"
#include "core/sha256.h"

namespace tl::runtime {

namespace {
// Bump when the entry layout or what the HMAC covers changes.
constexpr char kMagic[8] = {'T', 'L', 'C', 'A', 'C', 'H', 'E', '2'};
constexpr size_t kHeader = sizeof(kMagic) + 32;  // magic, then HMAC-SHA-256
constexpr size_t kSecretBytes = 32;
// NOTE: kernels are kilobytes, a large cubin a few MB: anything bigger is not ours.
constexpr uint64_t kMaxEntryBytes = 256ull << 20;
constexpr const char* kSubdirs[] = {"cpu", "cuda", "tune"};

std::mutex g_mu;  // the override and the per-folder usage estimates
std::optional<std::string> g_dir_override;
std::map<std::string, int64_t> g_usage;  // folder -> bytes of entries (scanned once, then counted)

const char* subdir(EntryKind k) {
  return k == EntryKind::CpuObject ? "cpu" : k == EntryKind::CudaImage ? "cuda" : "tune";
}
const char* suffix(EntryKind k) {
  return k == EntryKind::CpuObject ? ".o" : k == EntryKind::CudaImage ? ".cubin" : ".tune";
}

bool valid_key(const std::string& key) {
  return !key.empty() && key.size() <= 128 && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

Digest entry_mac(const std::string& secret, EntryKind kind, const std::string& key,
                 std::string_view body) {
  return hmac_sha256(
      secret, {std::string_view(kMagic, sizeof kMagic), subdir(kind), "\n", key, "\n", body});
}

bool is_entry_name(const std::string& name) {
  auto ends = [&](const char* s) {
    size_t n = std::strlen(s);
    return name.size() > n && name.compare(name.size() - n, n, s) == 0;
  };
  return name[0] != '.' && (ends(".o") || ends(".cubin") || ends(".tune"));
}

struct FileInfo {
  std::string path;
  int64_t bytes;
  struct timespec mtime;
};

// Entries (and, with `temporaries`, leftover temporaries) in the cache's subfolders.
std::vector<FileInfo> list_files(const std::string& dir, bool temporaries) {
  std::vector<FileInfo> out;
  for (const char* sub : kSubdirs) {
    std::string folder = dir + "/" + sub;
    DIR* d = ::opendir(folder.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool tmp = name.rfind(".", 0) == 0 && name.find(".tmp-") != std::string::npos;
      if (!is_entry_name(name) && !(temporaries && tmp)) continue;
      struct stat st {};
      std::string path = folder + "/" + name;
      if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
      out.push_back({path, static_cast<int64_t>(st.st_size), st.st_mtim});
    }
    ::closedir(d);
  }
  return out;
}

int64_t total_bytes(const std::vector<FileInfo>& files) {
  int64_t n = 0;
  for (auto& f : files) n += f.bytes;
  return n;
}

// The folder's secret, made on first use; "" with `why` set when unusable.
std::string load_secret(const std::string& dir, uid_t owner, bool writable, std::string* why) {
  std::string path = dir + "/secret";
  // NOTE: our own secret must be private; a root-owned shared cache's may be
  // world-readable, since nobody else can write entries there anyway.
  mode_t forbidden = owner == geteuid() ? (S_IRWXG | S_IRWXO) : (S_IWGRP | S_IWOTH);
  auto secret = secure_fs::read_file(path, 4096, owner, forbidden);
  if (!secret && writable && ::access(path.c_str(), F_OK) != 0) {
    std::string fresh = secure_fs::random_bytes(kSecretBytes);
    if (!fresh.empty()) secure_fs::publish_new_file(path, fresh);  // loses a race harmlessly
    secret = secure_fs::read_file(path, 4096, owner, forbidden);
  }
  if (secret && secret->size() == kSecretBytes) return *secret;
  *why = path + (secret ? " has the wrong size"
                        : " is missing, not a regular file, not owned by the cache's owner, or "
                          "readable or writable by other users");
  return "";
}
}  // namespace

DiskCache DiskCache::configured() {
  std::optional<std::string> dir;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    dir = g_dir_override;
  }
  // NOTE: read on every compile, so a later torchlite.config.cache_dir applies.
  Settings s = process_settings();
  return open(dir ? *dir : s.cache_dir, std::max<int64_t>(s.cache_max_mb, 0) << 20);
}

DiskCache DiskCache::open(const std::string& dir, int64_t max_bytes) {
  DiskCache c;
  if (dir.empty()) return c;
  secure_fs::DirTrust t = secure_fs::make_private_dir(dir);
  std::string why = t.problem;
  if (why.empty() && t.owner != geteuid() && t.writable)
    why = dir + " is owned by root but writable by this user";
  for (const char* sub : kSubdirs) {
    if (!why.empty()) break;
    std::string path = dir + "/" + sub;
    if (t.writable) ::mkdir(path.c_str(), 0700);
    secure_fs::DirTrust st = secure_fs::check_dir(path);
    // NOTE: a missing subfolder of a read-only cache just has no entries.
    if (!st.problem.empty() && ::access(path.c_str(), F_OK) == 0) why = st.problem;
  }
  std::string secret;
  if (why.empty()) secret = load_secret(dir, t.owner, t.writable, &why);
  if (!why.empty()) {
    warn_user("not using the kernel cache " + dir + ": " + why +
              "; kernels are compiled without it (see docs/security.md)");
    return c;
  }
  c.dir_ = dir;
  c.secret_ = std::move(secret);
  c.owner_ = t.owner;
  c.writable_ = t.writable;
  c.max_bytes_ = max_bytes;
  return c;
}

std::string DiskCache::path(EntryKind kind, const std::string& key) const {
  if (!enabled()) return "";
  return dir_ + "/" + subdir(kind) + "/" + key + suffix(kind);
}

std::optional<std::string> DiskCache::load(EntryKind kind, const std::string& key) const {
  if (!enabled() || !valid_key(key)) return std::nullopt;
  std::string p = path(kind, key);
  auto data = secure_fs::read_file(p, kMaxEntryBytes + kHeader, owner_);
  if (!data || data->size() < kHeader || std::memcmp(data->data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  std::string_view body(data->data() + kHeader, data->size() - kHeader);
  Digest mac = entry_mac(secret_, kind, key, body);
  if (!digests_equal(mac.data(), reinterpret_cast<const unsigned char*>(data->data()) + 8, 32))
    return std::nullopt;
  // NOTE: the mtime is the LRU clock (atime is often off: noatime mounts).
  if (writable_) ::utimensat(AT_FDCWD, p.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  return std::string(body);
}

void DiskCache::store(EntryKind kind, const std::string& key, std::string_view data) const {
  if (!enabled() || !writable_ || !valid_key(key) || data.size() > kMaxEntryBytes) return;
  Digest mac = entry_mac(secret_, kind, key, data);
  std::string file(kMagic, sizeof kMagic);
  file.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  file.append(data);
  if (!secure_fs::write_file_atomic(path(kind, key), file)) return;
  if (max_bytes_ <= 0) return;
  std::unique_lock<std::mutex> lock(g_mu);
  auto it = g_usage.find(dir_);
  if (it == g_usage.end()) {
    lock.unlock();
    int64_t scanned = total_bytes(list_files(dir_, false));
    lock.lock();
    it = g_usage.emplace(dir_, scanned).first;
  } else {
    it->second += static_cast<int64_t>(file.size());
  }
  if (it->second <= max_bytes_) return;
  // NOTE: down to 90% of the cap, so the next few stores do not each scan the folder.
  lock.unlock();
  int64_t left = disk_cache_evict(dir_, max_bytes_ / 10 * 9);
  lock.lock();
  g_usage[dir_] = left;
}

void DiskCache::discard(EntryKind kind, const std::string& key) const {
  if (enabled() && writable_ && valid_key(key)) ::unlink(path(kind, key).c_str());
}

void set_cache_dir(std::optional<std::string> dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_dir_override = std::move(dir);
}

DiskCacheInfo disk_cache_info(const std::string& dir, int64_t max_bytes) {
  DiskCacheInfo info;
  info.dir = dir;
  info.max_bytes = max_bytes;
  info.problem = dir.empty() ? "the disk cache is off (cache_dir is empty)"
                             : secure_fs::check_dir(dir).problem;
  if (!info.problem.empty()) return info;
  for (const FileInfo& f : list_files(dir, false)) {
    if (f.path.find("/cpu/") != std::string::npos) info.cpu_entries++;
    if (f.path.find("/cuda/") != std::string::npos) info.cuda_entries++;
    info.bytes += f.bytes;
  }
  return info;
}

int64_t disk_cache_clear(const std::string& dir) {
  if (dir.empty() || !secure_fs::check_dir(dir).problem.empty()) return -1;
  int64_t n = 0;
  for (const FileInfo& f : list_files(dir, true)) n += ::unlink(f.path.c_str()) == 0;
  std::lock_guard<std::mutex> lock(g_mu);
  g_usage.erase(dir);
  return n;
}

int64_t disk_cache_evict(const std::string& dir, int64_t target_bytes) {
  std::vector<FileInfo> files = list_files(dir, false);
  std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec) < std::tie(b.mtime.tv_sec, b.mtime.tv_nsec);
  });
  int64_t total = total_bytes(files);
  for (const FileInfo& f : files) {
    if (total <= target_bytes) break;
    if (::unlink(f.path.c_str()) == 0) total -= f.bytes;
  }
  return total;
}

}  // namespace tl::runtime
