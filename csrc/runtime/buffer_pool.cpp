#include "runtime/buffer_pool.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
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

class Pool {
 public:
  // NOTE: a child forked while another thread held the lock (a DataLoader
  // worker) would wait on it forever; it starts with the lock free instead.
  Pool() {
    pthread_atfork(nullptr, nullptr, [] { new (&pool().mu_) std::mutex(); });
  }

  bool on() const { return cap_ > 0; }

  // A block of at least `bytes` (a multiple of kBlockBytes) and its size, or
  // {nullptr, 0} when memory ran out.
  std::pair<void*, size_t> take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = idle_.lower_bound(bytes);
      if (it != idle_.end() && it->first <= bytes + bytes / 4) {  // little waste
        std::pair<void*, size_t> got{it->second, it->first};
        idle_.erase(it);
        stats_.idle_bytes -= got.second;
        stats_.live_bytes += got.second;
        ++stats_.reused;
        return got;
      }
    }
    void* p = std::aligned_alloc(kBlockBytes, bytes);
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.live_bytes -= bytes;
      if (stats_.idle_bytes + bytes <= cap_) {
        idle_.emplace(bytes, p);
        stats_.idle_bytes += bytes;
        return;
      }
    }
    std::free(p);
  }

  void release_idle() {
    std::multimap<size_t, void*> idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle.swap(idle_);
      stats_.idle_bytes = 0;
    }
    for (auto& [bytes, p] : idle) std::free(p);
  }

  PoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  const size_t cap_ = cap_from_settings();
  std::mutex mu_;
  std::multimap<size_t, void*> idle_;  // size -> block
  PoolStats stats_;
};

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

void release_idle_blocks() { pool().release_idle(); }

}  // namespace tl::runtime
