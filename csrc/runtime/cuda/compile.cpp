#include "runtime/cuda/compile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/flags.h"
#include "core/secure_fs.h"
#include "core/sha256.h"
#include "runtime/compile_pool.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/disk_cache.h"

namespace tl::runtime::cuda {

namespace {
// Bump when the runtime's contract with the generated code changes for the same source.
constexpr const char* kCacheFormat = "torchlite-cuda-1";
constexpr unsigned kDefaultSharedLimit = 48 * 1024;  // above it a kernel must opt in

// Where a kernel's code lives: the module's cache key and its entry names.
struct Owner {
  std::string key, name, vector_name, vector_fallback_name, group_name;
};

// A loaded CUmodule, shared by every LoadedKernel of its code. The last owner
// gone, it is queued for unloading (unload_dead_modules): a compiled graph may
// die on any thread, even inside a stream capture, where unloading (which waits
// for the device) must not happen.
struct Module {
  int device;
  void* handle;
  Module(int d, void* h) : device(d), handle(h) {}
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
};

std::mutex g_mu;                                                         // the module tables
std::map<std::pair<int, std::string>, std::weak_ptr<Module>> g_modules;  // (device, key)
std::map<std::pair<int, std::string>, Owner> g_by_canon;  // (device, canon) -> loaded code

// NOTE: a lock of its own: a Module may die while g_mu is held (a weak_ptr
// locked and dropped in a lookup).
std::mutex g_dead_mu;
std::vector<std::pair<int, void*>> g_dead;  // (device, CUmodule) to unload
std::atomic<int64_t> g_live_modules{0};

Module::~Module() {
  std::lock_guard<std::mutex> lock(g_dead_mu);
  g_dead.emplace_back(device, handle);
}

// The loaded module of (device, key), or null. Under g_mu.
std::shared_ptr<Module> live_module(int device, const std::string& key) {
  auto it = g_modules.find({device, key});
  if (it == g_modules.end()) return nullptr;
  std::shared_ptr<Module> m = it->second.lock();
  if (!m) g_modules.erase(it);
  return m;
}

std::string dump_dir() { return kernel_dump_dir(process_settings()); }

struct Job {
  const ir::Kernel* kernel = nullptr;  // null: `spec` was given
  codegen::cuda::CudaKernel spec;
  std::string key, image;
  // `canon` hashes the source with the kernel's own name blanked out: the same
  // kernel in every layer of a model differs only in its name, so it is
  // compiled once and its module shared (`owner`: the job that compiles it).
  std::string canon;
  Owner owner;
  bool loaded = false, disk_hit = false, shared = false;
};

std::string safe_name(const std::string& name) {
  return secure_fs::sanitize_name(name.empty() ? "kernel" : name);
}

void write_source(const std::string& dir, const Job& job) {
  const auto& s = job.spec;
  std::ostringstream out;
  out << "// torchlite CUDA kernel " << (job.kernel ? job.kernel->name : s.name)
      << "\n// launch: grid=" << s.grid << " block=" << s.block
      << " shared_bytes=" << s.shared_bytes << " entry=" << s.name
      << (s.dependent_launch ? " dependent_launch=1" : "");
  if (!s.dims.empty()) {
    out << " dims=";
    for (size_t i = 0; i < s.dims.size(); ++i) out << (i ? "," : "") << s.dims[i];
  }
  if (!s.vector_name.empty()) {
    out << " vector_entry=" << s.vector_name;
    if (!s.vector_fallback_name.empty())
      out << " (" << s.vector_fallback_name << " where it spills registers)";
    out << " (when params";
    for (int p : s.aligned_params) out << " " << p;
    out << " are 16-byte aligned)";
  }
  out << "\n" << s.source;
  write_dump(dir + "/" + safe_name(s.name) + "_" + job.key.substr(0, 8) + ".cu", out.str());
}

// `text` with every occurrence of `name` replaced by "@".
std::string without(const std::string& text, const std::string& name) {
  if (name.empty()) return text;
  std::string out;
  size_t from = 0;
  for (size_t at; (at = text.find(name, from)) != std::string::npos; from = at + name.size())
    out.append(text, from, at - from).append("@");
  return out.append(text, from, std::string::npos);
}

// Emits the CUDA C (for loop-IR kernels) and hashes it.
void emit(Job& job, const codegen::cuda::Target& t, const std::string& arch,
          const std::string& version, const std::string& dump) {
  if (job.kernel)
    job.spec = codegen::cuda::emit_cuda_kernel(*job.kernel, "tl_" + safe_name(job.kernel->name), t);
  const std::string salt = "\n" + version + "\n" + arch + "\n" + kCacheFormat;
  job.key = sha256_hex(job.spec.source + salt);
  // The entries' names relative to the kernel's own: one source may hold several entries.
  const auto& sp = job.spec;
  job.canon = sha256_hex(without(sp.source, sp.name) + "\n" + without(sp.vector_name, sp.name) +
                         "\n" + without(sp.vector_fallback_name, sp.name) + "\n" +
                         without(sp.group.name, sp.name) + salt);
  job.owner = {job.key, job.spec.name, job.spec.vector_name, job.spec.vector_fallback_name,
               job.spec.group.name};
  if (!dump.empty()) write_source(dump, job);
}

// Compiles (or reads from the disk cache) the module of a job that owns its code.
void build(Job& job, int device, const std::string& arch, const DiskCache& cache) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (live_module(device, job.key)) {
      job.loaded = true;
      return;
    }
  }
  if (auto img = cache.load(EntryKind::CudaImage, job.key)) {
    job.image = std::move(*img);
    job.disk_hit = true;
    return;
  }
  job.image = nvrtc_compile(job.spec.source, job.spec.name, arch);
  counters().nvrtc_compiles++;
  cache.store(EntryKind::CudaImage, job.key, job.image);
}

// The module of a job's image; a cached image the driver rejects (stale, or
// from an older torchlite) is discarded and compiled again.
void* load_image(Job& job, const std::string& what, const std::string& arch,
                 const DiskCache& cache) {
  if (!job.disk_hit) return load_module(job.image, what);
  try {
    return load_module(job.image, what);
  } catch (const Error&) {
    cache.discard(EntryKind::CudaImage, job.key);
    job.disk_hit = false;
    job.image = nvrtc_compile(job.spec.source, job.spec.name, arch);
    counters().nvrtc_compiles++;
    cache.store(EntryKind::CudaImage, job.key, job.image);
    return load_module(job.image, what);
  }
}

LoadedKernel link(Job& job, int device, const std::string& arch, const DiskCache& cache) {
  std::shared_ptr<Module> loaded;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    loaded = live_module(device, job.owner.key);
  }
  const auto& s = job.spec;
  std::string what = "kernel " + (job.kernel ? job.kernel->name : s.name);
  if (!loaded) {
    // NOTE: `new`, not a temporary Module copied in: its destructor queues an unload.
    loaded = std::shared_ptr<Module>(new Module(device, load_image(job, what, arch, cache)));
    ++g_live_modules;
    std::lock_guard<std::mutex> lock(g_mu);
    g_modules[{device, job.owner.key}] = loaded;
    g_by_canon[{device, job.canon}] = job.owner;
  }
  void* module = loaded->handle;
  LoadedKernel k;
  k.module = loaded;
  k.name = job.kernel ? job.kernel->name : s.name;
  k.fn = module_function(module, job.owner.name);
  if (!s.vector_name.empty()) k.vector_fn = module_function(module, job.owner.vector_name);
  if (k.vector_fn && !job.owner.vector_fallback_name.empty() && local_bytes(k.vector_fn) > 0)
    k.vector_fn = module_function(module, job.owner.vector_fallback_name);
  if (!s.group.name.empty()) {
    k.group_fn = module_function(module, job.owner.group_name);
    k.group = s.group;
  }
  k.aligned_params = s.aligned_params;
  k.dependent_launch = s.dependent_launch;
  k.tune_key = job.canon;
  k.other_blocks = s.other_blocks;
  TL_CHECK(s.dim_bytes == 4 || s.dim_bytes == 8) << what << ": dims of " << s.dim_bytes << " bytes";
  for (int64_t v : s.dims) {
    // NOTE: little-endian, as the device reads the parameter (x86-64 and aarch64 hosts).
    uint64_t u = static_cast<uint64_t>(v);
    TL_CHECK(s.dim_bytes == 8 || u <= 0xffffffffu) << what << ": size " << v << " in 32 bits";
    for (int b = 0; b < s.dim_bytes; ++b)
      k.dims.push_back(static_cast<unsigned char>(u >> (8 * b)));
  }
  TL_CHECK(s.grid >= 0 && s.grid <= 0x7fffffff && s.block > 0 && s.shared_bytes >= 0)
      << what << ": bad launch shape grid=" << s.grid << " block=" << s.block;
  k.grid = static_cast<unsigned>(s.grid);
  k.block = static_cast<unsigned>(s.block);
  k.shared_bytes = static_cast<unsigned>(s.shared_bytes);
  if (k.shared_bytes > kDefaultSharedLimit) {
    set_max_dynamic_shared(k.fn, s.shared_bytes, what);
    if (k.vector_fn) set_max_dynamic_shared(k.vector_fn, s.shared_bytes, what);
  }
  return k;
}

std::vector<LoadedKernel> run_jobs(std::vector<Job>& jobs, int device, int block = 0) {
  std::string why;
  if (!driver_available(&why)) TL_THROW(Unsupported) << why;
  unload_dead_modules();
  codegen::cuda::Target t = target_for(device);
  if (block > 0) t.pointwise_block = t.reduce_block = block;
  std::string arch = "sm_" + std::to_string(t.sm_major) + std::to_string(t.sm_minor);
  NvrtcVersion v = nvrtc_version();  // throws the "NVRTC was not found" message
  std::string version = "nvrtc " + std::to_string(v.major) + "." + std::to_string(v.minor);
  // NOTE: on this thread: opening the cache and the dump folder may warn.
  DiskCache cache = DiskCache::configured();
  std::string dump = dump_dir();
  compile_in_parallel(jobs.size(), [&](size_t i) { emit(jobs[i], t, arch, version, dump); });
  // One build per distinct kernel body: later copies use the owner's module.
  std::map<std::string, size_t> first;
  std::vector<Job*> owners;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_by_canon.find({device, job.canon});
      if (it != g_by_canon.end() && live_module(device, it->second.key)) {
        job.owner = it->second;
        job.loaded = job.shared = true;
        continue;
      }
      if (it != g_by_canon.end()) g_by_canon.erase(it);  // its module was unloaded
    }
    auto [it, fresh] = first.emplace(job.canon, i);
    if (fresh)
      owners.push_back(&job);
    else
      job.owner = jobs[it->second].owner, job.shared = true;
  }
  compile_in_parallel(owners.size(), [&](size_t i) { build(*owners[i], device, arch, cache); });
  ContextScope ctx(device);
  std::vector<LoadedKernel> out;
  for (auto& job : jobs) {
    out.push_back(link(job, device, arch, cache));
    if (block == 0 && (job.disk_hit || job.shared)) counters().cache_hits++;
  }
  if (block == 0) counters().kernels += static_cast<int64_t>(jobs.size());
  return out;
}
}  // namespace

codegen::cuda::Target target_for(int device) {
  DeviceInfo d = device_info(device);
  codegen::cuda::Target t;
  t.sm_major = d.sm_major;
  t.sm_minor = d.sm_minor;
  t.multiprocessors = d.multiprocessors;
  return t;
}

std::vector<LoadedKernel> compile_kernels(const std::vector<const ir::Kernel*>& kernels,
                                          int device) {
  std::vector<Job> jobs(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) jobs[i].kernel = kernels[i];
  return run_jobs(jobs, device);
}

std::vector<LoadedKernel> compile_block_variants(const std::vector<const ir::Kernel*>& kernels,
                                                 int device, int block) {
  std::vector<Job> jobs(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) jobs[i].kernel = kernels[i];
  return run_jobs(jobs, device, std::max(1, block));
}

std::vector<LoadedKernel> load_kernels(const std::vector<codegen::cuda::CudaKernel>& specs,
                                       int device) {
  std::vector<Job> jobs(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) jobs[i].spec = specs[i];
  return run_jobs(jobs, device);
}

void unload_dead_modules() {
  std::vector<std::pair<int, void*>> dead;
  {
    std::lock_guard<std::mutex> lock(g_dead_mu);
    dead.swap(g_dead);
  }
  for (size_t i = 0; i < dead.size(); ++i) {
    try {
      ContextScope ctx(dead[i].first);
      unload_module(dead[i].second);
      --g_live_modules;
    } catch (const Error&) {
      // NOTE: the wait failed (a stream capture in progress forbids it, or the device
      // faulted): the rest stays queued for the next compile or reset, never unloaded
      // while its kernels may run.
      std::lock_guard<std::mutex> lock(g_dead_mu);
      g_dead.insert(g_dead.end(), dead.begin() + static_cast<std::ptrdiff_t>(i), dead.end());
      return;
    }
  }
}

int64_t live_modules() { return g_live_modules.load(); }

}  // namespace tl::runtime::cuda
