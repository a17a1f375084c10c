#include "runtime/buffer_pool.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/errors.h"
#include "core/flags.h"

namespace tl::runtime {
namespace {

// The DLPack ABI (the unversioned DLManagedTensor that every torch accepts).
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr int32_t kDLCPU = 1;
enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

DLDataType dl_type(ir::ScalarType t) {
  using ST = ir::ScalarType;
  uint8_t bits = static_cast<uint8_t>(8 * ir::scalar_type_size(t));
  switch (t) {
    case ST::F32:
    case ST::F64:
    case ST::F16:
      return {kDLFloat, bits, 1};
    case ST::BF16:
      return {kDLBfloat, bits, 1};
    case ST::U8:
      return {kDLUInt, bits, 1};
    case ST::Bool:
      return {kDLBool, bits, 1};
    default:
      return {kDLInt, bits, 1};
  }
}

// Blocks are whole 2 MB huge pages, so the kernel may back them with huge
// pages (one fault per 2 MB on first touch) and sizes round to few classes.
constexpr size_t kBlockBytes = size_t(2) << 20;

// The cpu_pool_mb setting, read when the pool is first used.
size_t cap_from_settings() {
  int64_t mb = process_settings().cpu_pool_mb;
  return mb <= 0 ? 0 : static_cast<size_t>(mb) << 20;
}

class Pool;
Pool& pool();

using Clock = std::chrono::steady_clock;

// Marks an idle block's pages reclaimable: the kernel drops them under memory
// pressure (the next write faults in zero pages), and leaves them in place
// otherwise (reuse costs nothing). Advice only: failure keeps them resident.
void advise_idle(void* p, size_t bytes) {
#ifdef MADV_FREE
  madvise(p, bytes, MADV_FREE);
#else
  (void)p, (void)bytes;
#endif
}

class Pool {
 public:
  // NOTE: a child forked while another thread held the lock (a DataLoader
  // worker) would wait on it forever; it starts with the lock free instead,
  // and without the trimmer thread (threads do not survive fork), which it
  // starts again when it first keeps a block.
  Pool() {
    pthread_atfork(nullptr, nullptr, [] {
      Pool& p = pool();
      new (&p.mu_) std::mutex();
      new (&p.wake_) std::condition_variable();
      p.trimmer_running_ = false;
    });
  }

  bool on() const { return cap_ > 0; }

  // A block of at least `bytes` (a multiple of kBlockBytes) and its size, or
  // {nullptr, 0} when memory ran out even after freeing the idle blocks.
  std::pair<void*, size_t> take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = idle_.lower_bound(bytes);
      if (it != idle_.end() && it->first <= bytes + bytes / 4) {  // little waste
        std::pair<void*, size_t> got{it->second.block, it->first};
        idle_.erase(it);
        stats_.idle_bytes -= got.second;
        stats_.live_bytes += got.second;
        ++stats_.reused;
        return got;
      }
    }
    void* p = std::aligned_alloc(kBlockBytes, bytes);
    if (!p && release_idle() > 0) p = std::aligned_alloc(kBlockBytes, bytes);
    if (!p) return {nullptr, 0};
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KB pages
#endif
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes += bytes;
    ++stats_.fresh;
    return {p, bytes};
  }

  void give_back(void* p, size_t bytes) {
    // NOTE: read before locking (it reads /proc files); a stale answer only
    // keeps or frees one block more.
    const size_t headroom = memory_headroom();
    bool pressure = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.live_bytes -= bytes;
      const size_t would_hold = stats_.idle_bytes + bytes;
      pressure = would_hold > headroom;
      if (would_hold <= cap_ && !pressure) {
        advise_idle(p, bytes);
        idle_.emplace(bytes, Idle{p, Clock::now()});
        stats_.idle_bytes += bytes;
        start_trimmer();
        wake_.notify_one();
        return;
      }
      ++stats_.refused;
    }
    std::free(p);
    if (pressure) release_idle();
  }

  // Frees idle blocks last used before `cutoff` (all of them for Clock::time_point::max()).
  size_t release_idle(Clock::time_point cutoff = Clock::time_point::max()) {
    std::vector<void*> dropped;
    size_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = idle_.begin(); it != idle_.end();) {
        if (it->second.since < cutoff) {
          dropped.push_back(it->second.block);
          freed += it->first;
          it = idle_.erase(it);
        } else {
          ++it;
        }
      }
      stats_.idle_bytes -= freed;
      stats_.trimmed += static_cast<int64_t>(dropped.size());
    }
    for (void* p : dropped) std::free(p);
    return freed;
  }

  PoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Idle {
    void* block;
    Clock::time_point since;  // when it came back
  };

  // Under mu_. NOTE: the thread is detached and never joined: the pool is
  // never destroyed, and the thread touches nothing else.
  void start_trimmer() {
    if (trimmer_running_ || trimmer_failed_) return;
    try {
      std::thread([this] { trim_forever(); }).detach();
      trimmer_running_ = true;
    } catch (const std::system_error&) {
      trimmer_failed_ = true;  // no thread: idle blocks still go on reset() and under pressure
    }
  }

  void trim_forever() {
    for (;;) {
      Clock::duration age;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return !idle_.empty(); });
        age = trim_age();
        Clock::time_point oldest = Clock::time_point::max();
        for (auto& [bytes, b] : idle_) oldest = std::min(oldest, b.since);
        wake_.wait_until(lock, oldest + age);
        age = trim_age();
      }
      release_idle(Clock::now() - age);
    }
  }

 public:
  void set_trim_seconds(double seconds) {
    trim_seconds_.store(seconds);
    wake_.notify_one();
  }

 private:
  Clock::duration trim_age() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(trim_seconds_.load()));
  }

  std::atomic<double> trim_seconds_{kIdleTrimSeconds};
  const size_t cap_ = cap_from_settings();
  std::mutex mu_;
  std::condition_variable wake_;  // a block became idle
  bool trimmer_running_ = false;
  bool trimmer_failed_ = false;
  std::multimap<size_t, Idle> idle_;  // size -> block
  PoolStats stats_;
};

// A number from a /proc or /sys file of one line ("max" and errors: SIZE_MAX).
size_t read_size_file(const char* path) {
  FILE* f = std::fopen(path, "re");
  if (!f) return SIZE_MAX;
  unsigned long long v = 0;
  const bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  return ok ? static_cast<size_t>(v) : SIZE_MAX;
}

size_t meminfo_available() {
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return SIZE_MAX;
  char line[256];
  size_t out = SIZE_MAX;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
      out = static_cast<size_t>(kb) << 10;
      break;
    }
  }
  std::fclose(f);
  return out;
}

// The cgroup v2 folder of this process ("/sys/fs/cgroup" + the 0:: path).
std::string cgroup_dir() {
  std::string dir = "/sys/fs/cgroup";
  FILE* f = std::fopen("/proc/self/cgroup", "re");
  if (!f) return dir;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "0::", 3) != 0) continue;
    std::string rel(line + 3);
    while (!rel.empty() && (rel.back() == '\n' || rel.back() == '/')) rel.pop_back();
    dir += rel;
    break;
  }
  std::fclose(f);
  return dir;
}

// NOTE: never destroyed: tensors may give blocks back during interpreter
// shutdown, after static destructors would have run.
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

// What a pooled tensor's DLPack deleter frees.
struct Owned {
  DLManagedTensor managed{};
  void* block = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape, strides;
};

void give_back_owned(DLManagedTensor* m) {
  auto* o = static_cast<Owned*>(m->manager_ctx);
  pool().give_back(o->block, o->bytes);
  delete o;
}

// A capsule torch never consumed (it renames consumed ones) still owns its block.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m) m->deleter(m);
}

PyObject* from_dlpack_fn() {
  // NOTE: looked up once under the GIL and kept for the process.
  static PyObject* fn = [] {
    PyRef c = PyRef::steal(PyImport_ImportModule("torch._C"));
    PyObject* f = c ? PyObject_GetAttrString(c.get(), "_from_dlpack") : nullptr;
    if (!f) throw PythonError();
    return f;
  }();
  return fn;
}

}  // namespace

size_t strided_extent_bytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                            ir::ScalarType t) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<size_t>(last + 1) * ir::scalar_type_size(t);
}

PyRef pooled_empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                           ir::ScalarType t) {
  TL_CHECK(sizes.size() == strides.size()) << "pooled tensor: sizes and strides differ in rank";
  for (int64_t s : strides)
    if (s < 0) return {};
  size_t extent = strided_extent_bytes(sizes, strides, t);
  if (!pool().on() || extent == 0) return {};
  auto [block, bytes] = pool().take((extent + kBlockBytes - 1) / kBlockBytes * kBlockBytes);
  if (!block) return {};  // torch's allocator reports the out-of-memory
  auto* o = new Owned;
  o->block = block;
  o->bytes = bytes;
  o->shape = sizes;
  o->strides = strides;
  DLTensor& dl = o->managed.dl_tensor;
  dl.data = block;
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<int32_t>(sizes.size());
  dl.dtype = dl_type(t);
  dl.shape = o->shape.data();
  dl.strides = o->strides.data();
  dl.byte_offset = 0;
  o->managed.manager_ctx = o;
  o->managed.deleter = give_back_owned;
  PyRef capsule = PyRef::steal(PyCapsule_New(&o->managed, "dltensor", capsule_destructor));
  if (!capsule) {
    give_back_owned(&o->managed);
    throw PythonError();
  }
  PyRef tensor = PyRef::steal(PyObject_CallOneArg(from_dlpack_fn(), capsule.get()));
  if (!tensor) throw PythonError();
  return tensor;
}

PoolStats pool_stats() { return pool().stats(); }

size_t release_idle_blocks() { return pool().release_idle(); }

void set_idle_trim_seconds(double seconds) { pool().set_trim_seconds(seconds); }

size_t trim_idle_blocks(double seconds) {
  const auto age =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return pool().release_idle(Clock::now() - age);
}

size_t memory_headroom() {
  size_t room = meminfo_available();
  // NOTE: the folder is looked up once; a process does not change cgroup.
  static const std::string cg = cgroup_dir();
  const size_t max = read_size_file((cg + "/memory.max").c_str());
  const size_t cur = read_size_file((cg + "/memory.current").c_str());
  if (max != SIZE_MAX && cur != SIZE_MAX) room = std::min(room, max > cur ? max - cur : 0);
  struct rlimit lim {};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    const size_t vm = read_size_file("/proc/self/statm");  // first field: pages mapped
    if (vm != SIZE_MAX) {
      const size_t used = vm * static_cast<size_t>(sysconf(_SC_PAGESIZE));
      room = std::min(room, lim.rlim_cur > used ? static_cast<size_t>(lim.rlim_cur) - used : 0);
    }
  }
  return room;
}

}  // namespace tl::runtime
