#pragma once
// The one on-disk kernel cache of the process: CPU objects (<dir>/cpu/<key>.o),
// CUDA images (<dir>/cuda/<key>.cubin) and autotuning choices (<dir>/tune/<key>.tune). A kernel is
// machine code this process will run, so an entry is used only if this user's torchlite wrote it:
// the folder must pass secure_fs::check_dir (made 0700), each entry carries an HMAC-SHA-256 over
// its kind, key and content under a per-user secret (<dir>/secret, 0600), and files are read with
// bounded, non-blocking, type- and owner-checked reads. A bad entry is a miss, never an error.
// docs/security.md has the threat model.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tl::runtime {

enum class EntryKind { CpuObject, CudaImage, TuneChoice };

class DiskCache {
 public:
  // The configured cache: set_cache_dir's override, else the cache_dir and
  // cache_max_mb settings. An untrusted or unusable folder gives a disabled
  // cache and a warning (once per folder and reason). Call it on the
  // compiling thread, before handing the cache to workers.
  static DiskCache configured();
  // The cache at `dir` ("" is disabled); max_bytes 0: no cap.
  static DiskCache open(const std::string& dir, int64_t max_bytes);

  bool enabled() const { return !secret_.empty(); }
  // The entry's content, or nullopt (missing, foreign, corrupt, too large,
  // not a regular file). A hit marks the entry recently used.
  std::optional<std::string> load(EntryKind kind, const std::string& key) const;
  // Best effort: atomic (temporary + rename), then evicts past the size cap.
  void store(EntryKind kind, const std::string& key, std::string_view data) const;
  // Removes an entry that authenticated but turned out unusable (did not link).
  void discard(EntryKind kind, const std::string& key) const;
  std::string path(EntryKind kind, const std::string& key) const;

 private:
  std::string dir_, secret_;
  uid_t owner_ = 0;
  bool writable_ = false;
  int64_t max_bytes_ = 0;
};

// Overrides the cache_dir setting for this process (tests, tools); nullopt
// goes back to the setting, "" turns the cache off.
void set_cache_dir(std::optional<std::string> dir);

struct DiskCacheInfo {
  std::string dir;
  std::string problem;  // "" when the folder is usable
  int64_t cpu_entries = 0, cuda_entries = 0, bytes = 0, max_bytes = 0;
};
DiskCacheInfo disk_cache_info(const std::string& dir, int64_t max_bytes);
// Removes every entry and leftover temporary (keeps the secret); returns how
// many files. Refuses (returns -1) a folder check_dir does not trust.
int64_t disk_cache_clear(const std::string& dir);
// Removes least recently used entries until at most `target_bytes` remain;
// returns the bytes left.
int64_t disk_cache_evict(const std::string& dir, int64_t target_bytes);

}  // namespace tl::runtime
