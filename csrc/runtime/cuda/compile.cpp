#include "runtime/cuda/compile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "codegen/cuda/emission_key.h"
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

// Where a kernel's code lives: the module's cache key, its entry names and the hash of its code
// (Job::code) that max-autotune's choices are stored under.
struct Owner {
  std::string key, name, vector_name, vector_fallback_name, group_name, canon;
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
// code_key(device, code) -> the loaded code of that text (Job::code). NOTE: keyed by the text
// itself, not a hash of it: a kernel whose code is loaded (every layer of a model, every new
// length of a size-generic graph) is found without hashing its ~17 KB (sha256: 4x the time
// emitting it took); only code that is built is hashed (the disk cache's key).
std::unordered_map<std::string, Owner> g_by_code;

std::string code_key(int device, const std::string& code) {
  return std::to_string(device) + "\n" + code;
}

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
  std::string key, image;  // key: set for the jobs that build their code (and for dumps)
  // The source with the kernel's own name blanked out, and its entries' names relative to it:
  // the same kernel in every layer of a model differs only in its name, so it is compiled once
  // and its module shared (`owner`: the job that compiles it).
  std::shared_ptr<const std::string> code;
  Owner owner;
  // Kernels: codegen/cuda/emission_key.h (empty when every kernel is emitted: dumps).
  std::string emission_key;
  // The loaded module of `code`, held from the lookup that found it to the link.
  std::shared_ptr<Module> hold;
  bool loaded = false, disk_hit = false, shared = false;
  // Not emitted: `spec` is the launch (no source) of a kernel emitted before with its emission
  // key, and `code` that kernel's code, loaded.
  bool reused = false;
};

// What a kernel emitted before became (codegen/cuda/emission_key.h): a kernel with the same
// emission key gets the same launch and, up to its name, the same text, so it links to the
// module of `code` without emitting while that module is loaded. Under g_mu.
struct Emitted {
  std::shared_ptr<const std::string> code;  // Job::code
  std::string name;                         // the entry name it was emitted under
  codegen::cuda::CudaKernel launch;         // source left out
};
std::unordered_map<std::string, Emitted> g_emitted;  // emission key -> what it became
std::atomic<int64_t> g_emits{0};

// The scalar entry's name of a loop-IR kernel.
std::string entry_name(const ir::Kernel& k);

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

std::string entry_name(const ir::Kernel& k) { return "tl_" + safe_name(k.name); }

// Hashes the job's source (its module's key) and code (Owner::canon); `salt` names the
// compiler and target.
void hash(Job& job, const std::string& salt) {
  job.key = job.owner.key = sha256_hex(job.spec.source + salt);
  job.owner.canon = sha256_hex(*job.code + salt);
}

// Emits the CUDA C (for loop-IR kernels); with a dump folder, hashes and writes it there.
void emit(Job& job, const codegen::cuda::Target& t, const std::string& salt,
          const std::string& dump) {
  if (job.kernel) {
    job.spec = codegen::cuda::emit_cuda_kernel(*job.kernel, entry_name(*job.kernel), t);
    g_emits++;
  }
  // The entries' names relative to the kernel's own: one source may hold several entries.
  const auto& sp = job.spec;
  job.code = std::make_shared<const std::string>(
      without(sp.source, sp.name) + "\n" + without(sp.vector_name, sp.name) + "\n" +
      without(sp.vector_fallback_name, sp.name) + "\n" + without(sp.group.name, sp.name));
  job.owner = {"", sp.name, sp.vector_name, sp.vector_fallback_name, sp.group.name, ""};
  if (!dump.empty()) {
    hash(job, salt);
    write_source(dump, job);
  }
}

// Compiles (or reads from the disk cache) the module of a job that owns its code.
void build(Job& job, int device, const std::string& arch, const std::string& salt,
           const DiskCache& cache) {
  if (job.key.empty()) hash(job, salt);
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
  TL_CHECK(loaded || !job.reused) << what << ": the module it reuses was unloaded";
  if (!loaded) {
    // NOTE: `new`, not a temporary Module copied in: its destructor queues an unload.
    loaded = std::shared_ptr<Module>(new Module(device, load_image(job, what, arch, cache)));
    ++g_live_modules;
    std::lock_guard<std::mutex> lock(g_mu);
    g_modules[{device, job.owner.key}] = loaded;
    g_by_code[code_key(device, *job.code)] = job.owner;
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
  k.tune_key = job.owner.canon;
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

// Gives `job` the launch and code of the kernel emitted before under its emission key, when
// that code is still loaded on `device`.
bool reuse_emitted(Job& job, int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_emitted.find(job.emission_key);
  if (it == g_emitted.end()) return false;
  auto owner = g_by_code.find(code_key(device, *it->second.code));
  if (owner == g_by_code.end() || !(job.hold = live_module(device, owner->second.key)))
    return false;
  job.spec =
      codegen::cuda::renamed_launch(it->second.launch, it->second.name, entry_name(*job.kernel));
  job.code = it->second.code;
  job.reused = true;
  return true;
}

bool same_launch(const codegen::cuda::CudaKernel& a, const codegen::cuda::CudaKernel& b) {
  const auto &ga = a.group, &gb = b.group;
  return a.name == b.name && a.vector_name == b.vector_name &&
         a.vector_fallback_name == b.vector_fallback_name && a.aligned_params == b.aligned_params &&
         a.grid == b.grid && a.block == b.block && a.shared_bytes == b.shared_bytes &&
         a.other_blocks == b.other_blocks && a.dependent_launch == b.dependent_launch &&
         a.dims == b.dims && a.dim_bytes == b.dim_bytes && ga.name == gb.name &&
         ga.members == gb.members && ga.buffers == gb.buffers && ga.dims_at == gb.dims_at &&
         ga.first_at == gb.first_at && ga.bytes == gb.bytes &&
         ga.points_per_block == gb.points_per_block && ga.max_blocks == gb.max_blocks;
}

// TORCHLITE_VERIFY: a reused kernel's code and launch are those emitting it gives.
void verify_reused(const Job& job, const codegen::cuda::Target& t) {
  Job fresh;
  fresh.kernel = job.kernel;
  emit(fresh, t, "", "");
  TL_CHECK(*fresh.code == *job.code && same_launch(fresh.spec, job.spec))
      << "kernel " << job.kernel->name
      << ": the code reused by its emission key differs from its own (codegen/cuda/"
         "emission_key.h misses something the code generator decides from)";
}

// Remembers what the emitted kernels of `jobs` became (their code is loaded now); drops the
// entries of unloaded code once the tables outgrow the live modules.
void remember_emitted(const std::vector<Job>& jobs) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (static_cast<int64_t>(g_emitted.size() + g_by_code.size()) > 8 * g_live_modules.load() + 256) {
    std::erase_if(g_by_code, [](const auto& kv) {
      auto m = g_modules.find({std::stoi(kv.first), kv.second.key});
      return m == g_modules.end() || m->second.expired();
    });
    std::set<std::string_view> live;
    for (const auto& kv : g_by_code)
      live.insert(std::string_view(kv.first).substr(kv.first.find('\n') + 1));
    std::erase_if(g_emitted, [&](const auto& kv) { return !live.count(*kv.second.code); });
  }
  for (const Job& job : jobs) {
    if (job.reused || job.emission_key.empty()) continue;
    Emitted& e = g_emitted[job.emission_key];
    e.code = job.code;
    e.name = job.spec.name;
    e.launch = codegen::cuda::renamed_launch(job.spec, job.spec.name, job.spec.name);
  }
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
  const std::string salt = "\n" + version + "\n" + arch + "\n" + kCacheFormat;
  // Kernels to emit: one per emission key whose code is not loaded (a model repeats its
  // blocks, and a new size often lowers to kernels of sizes seen before); the others take the
  // launch of the kernel emitted under their key. NOTE: with a dump folder every kernel is
  // emitted, so each one's text is dumped.
  std::vector<size_t> fresh, copies;
  std::unordered_map<std::string, size_t> first_of;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    if (!job.kernel || !dump.empty()) {
      fresh.push_back(i);
      continue;
    }
    job.emission_key = codegen::cuda::emission_key(*job.kernel, t);
    if (reuse_emitted(job, device)) continue;
    (first_of.emplace(job.emission_key, i).second ? fresh : copies).push_back(i);
  }
  compile_in_parallel(fresh.size(), [&](size_t i) { emit(jobs[fresh[i]], t, salt, dump); });
  for (size_t i : copies) {
    Job& job = jobs[i];
    const Job& first = jobs[first_of.at(job.emission_key)];
    job.spec = codegen::cuda::renamed_launch(first.spec, first.spec.name, entry_name(*job.kernel));
    job.code = first.code;
    job.reused = true;  // links to `first`'s code below
  }
  if (process_settings().verify)
    for (const Job& job : jobs)
      if (job.reused) verify_reused(job, t);
  // One build per distinct code: the others use its owner's module (`sharers`, after the build
  // that names it).
  std::unordered_map<std::string_view, size_t> owner_of;
  std::vector<Job*> owners;
  std::vector<std::pair<size_t, size_t>> sharers;  // (job, its owner)
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_by_code.find(code_key(device, *job.code));
      if (it != g_by_code.end() && (job.hold = live_module(device, it->second.key))) {
        job.owner = it->second;
        job.loaded = job.shared = true;
        continue;
      }
      if (it != g_by_code.end()) g_by_code.erase(it);  // its module was unloaded
    }
    auto [it, owns] = owner_of.emplace(*job.code, i);
    if (owns)
      owners.push_back(&job);
    else
      sharers.emplace_back(i, it->second), job.shared = true;
    TL_CHECK(!owns || !job.reused) << "kernel " << job.kernel->name << " reuses code not emitted";
  }
  compile_in_parallel(owners.size(),
                      [&](size_t i) { build(*owners[i], device, arch, salt, cache); });
  for (auto [i, owner] : sharers) jobs[i].owner = jobs[owner].owner;
  ContextScope ctx(device);
  std::vector<LoadedKernel> out;
  for (auto& job : jobs) {
    out.push_back(link(job, device, arch, cache));
    if (block == 0 && (job.disk_hit || job.shared)) counters().cache_hits++;
  }
  remember_emitted(jobs);
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

int64_t kernel_emits() { return g_emits.load(); }

}  // namespace tl::runtime::cuda
