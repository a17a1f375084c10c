#include "runtime/cpu/jit.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "codegen/cpu/emission_key.h"
#include "codegen/cpu/kernel_emitter.h"
#include "codegen/cpu/target.h"
#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/flags.h"
#include "core/secure_fs.h"
#include "core/sha256.h"
#include "runtime/compile_pool.h"
#include "runtime/cpu/math_support.h"
#include "runtime/disk_cache.h"

namespace tl::runtime::cpu {

namespace {
namespace orc = llvm::orc;
// Bump when the emitted code changes for the same IR text (2: 512-bit vectors and
// libmvec variants on AVX-512 hosts).
constexpr const char* kCacheFormat = "torchlite-cpu-2";

struct LinkedKernel;
std::mutex g_mu;  // the symbol table, and adding objects to the JIT
std::unordered_map<std::string, std::weak_ptr<LinkedKernel>> g_linked;  // symbol -> live code
std::atomic<int64_t> g_live{0};
// What a kernel emitted before became (codegen/cpu/emission_key.h): a kernel with the same
// emission key that holds its literals' values has the same text, so it takes the linked code
// and reads its dims from the same sites of its own loop space, without emitting.
struct Emitted {
  std::string key, symbol;
  std::vector<int64_t> sites;
  codegen::cpu::Literals literals;
};
// emission key -> the texts emitted for it, one per set of literals (g_mu)
std::unordered_map<std::string, std::vector<Emitted>> g_emitted;
std::atomic<int64_t> g_emits{0};

std::string dump_dir() { return kernel_dump_dir(process_settings()); }

// The one LLJIT of the process, started on first use; a failure to start is
// remembered and reported on every later compile. NOTE: never destroyed:
// kernels owned by Python objects may be released after static destructors ran.
orc::LLJIT& jit() {
  static orc::LLJIT* j = nullptr;
  static std::string failure;
  if (j) return *j;
  if (!failure.empty()) TL_THROW(Runtime) << failure;
  codegen::cpu::host_target_id();  // initialises LLVM's native target
  auto fail = [&](llvm::Error e) {
    failure = "cannot start the LLVM JIT: " + llvm::toString(std::move(e));
    TL_THROW(Runtime) << failure;
  };
  auto built = orc::LLJITBuilder().create();
  if (!built) fail(built.takeError());
  auto gen = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*built)->getDataLayout().getGlobalPrefix());
  if (!gen) fail(gen.takeError());
  (*built)->getMainJITDylib().addGenerator(std::move(*gen));
  orc::SymbolMap helpers;
  auto flags = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
  auto add = [&](const char* name, auto* fn) {
    helpers[(*built)->mangleAndIntern(name)] = {orc::ExecutorAddr::fromPtr(fn), flags};
  };
  add("tl_erfinv", &tl_erfinv);
  add("tl_erfinvf", &tl_erfinvf);
  add("tl_ipow", &tl_ipow);
  add("__truncdfhf2", &tl_truncdfhf2);
  add("__truncsfhf2", &tl_truncsfhf2);
  add("__extendhfsf2", &tl_extendhfsf2);
  if (auto e = (*built)->getMainJITDylib().define(orc::absoluteSymbols(std::move(helpers))))
    fail(std::move(e));
  j = built->release();
  return *j;
}

// One kernel's object in a JITDylib of its own; the destructor removes the
// JITDylib, which unmaps the code.
struct LinkedKernel {
  std::string symbol;
  KernelFn fn = nullptr;
  orc::JITDylib* dylib = nullptr;
  LinkedKernel() { ++g_live; }
  // NOTE: takes no torchlite lock (it may run under g_mu); the session locks itself.
  ~LinkedKernel() {
    if (dylib) llvm::consumeError(jit().getExecutionSession().removeJITDylib(*dylib));
    --g_live;
  }
};

// Drops g_linked's (and g_emitted's) entries of freed kernels once they outnumber the live
// ones. Caller holds g_mu.
void sweep_linked() {
  if (static_cast<int64_t>(g_linked.size() + g_emitted.size()) <= 4 * g_live.load() + 128) return;
  std::erase_if(g_linked, [](const auto& kv) { return kv.second.expired(); });
  for (auto& [key, texts] : g_emitted)
    std::erase_if(texts, [](const Emitted& e) { return !g_linked.count(e.symbol); });
  std::erase_if(g_emitted, [](const auto& kv) { return kv.second.empty(); });
}

struct Job {
  const ir::Kernel* kernel = nullptr;
  std::string key, symbol, ll_path;
  std::string object;
  std::vector<int64_t> dims, sites;
  std::string emission_key;
  codegen::cpu::Literals literals;  // the kernel's own (literal_values)
  // The literals of the text a reused kernel takes (unset: its own).
  std::optional<codegen::cpu::Literals> emit_literals;
  codegen::LoopSpace space;
  bool reused = false;  // found by its emission key: not emitted
  bool disk_hit = false;
  std::shared_ptr<LinkedKernel> code;
  // The emitted module, from prepare() to build() (null once compiled).
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
};

// Writes a dump into `dir` ("" for none) and returns its path ("" when none).
std::string write_ir(const std::string& dir, const Job& job, const std::string& suffix,
                     const std::string& text) {
  if (dir.empty()) return "";
  std::string path =
      dir + "/" + secure_fs::sanitize_name(job.kernel->name) + "_" + job.key.substr(0, 8) + suffix;
  // NOTE: the same kernel dumped twice in one process has the same text; the first stays.
  write_dump(path, "; torchlite kernel " + job.kernel->name + "\n" + text);
  return path;
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

// Optimises and compiles the job's module (its function already renamed) to an object.
std::atomic<int64_t> g_llvm_compiles{0};

void compile_object(Job& job, llvm::Module& m, const std::string& dump) {
  g_llvm_compiles++;
  try {
    auto tm = codegen::cpu::host_target_machine();
    codegen::cpu::optimize_module(m, *tm);
    if (!dump.empty()) write_ir(dump, job, ".opt.ll", module_text(m));
    auto obj = codegen::cpu::emit_object(m, *tm);
    job.object.assign(obj.begin(), obj.end());
  } catch (const Error& e) {
    // NOTE: the evidence goes to a private per-process folder, never a shared fixed path.
    if (job.ll_path.empty()) job.ll_path = write_ir(failure_dump_dir(), job, ".ll", module_text(m));
    throw Error(e.kind(), "LLVM failed on kernel '" + job.kernel->name + "': " + e.what() +
                              (job.ll_path.empty() ? "" : " (IR: " + job.ll_path + ")"));
  }
}

std::unique_ptr<llvm::Module> emit_module(Job& job, llvm::LLVMContext& ctx) {
  job.dims.clear();
  job.sites.clear();
  g_emits++;
  auto m = codegen::cpu::emit_kernel(*job.kernel, "tl_kernel", ctx, &job.dims, &job.sites,
                                     job.emit_literals ? &*job.emit_literals : nullptr);
  if (!job.symbol.empty()) m->getFunction("tl_kernel")->setName(job.symbol);
  return m;
}

// Emits the job's module and names it by the hash of its text.
void prepare(Job& job) {
  job.context = std::make_unique<llvm::LLVMContext>();
  job.module = emit_module(job, *job.context);
  job.key = to_hex(Sha256()
                       .update(module_text(*job.module))
                       .update(std::string("\n") + LLVM_VERSION_STRING + "\n" +
                               codegen::cpu::host_target_id() + "\n" + kCacheFormat)
                       .final());
  job.symbol = "tl_k" + job.key.substr(0, 32);
}

// The object of a prepared job: already linked, from the disk cache, or compiled.
void build(Job& job, const DiskCache& cache, const std::string& dump) {
  std::unique_ptr<llvm::LLVMContext> ctx = std::move(job.context);  // declared first: outlives m
  std::unique_ptr<llvm::Module> m = std::move(job.module);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_linked.find(job.symbol); it != g_linked.end())
      if ((job.code = it->second.lock())) return;
  }
  m->getFunction("tl_kernel")->setName(job.symbol);
  if (!dump.empty()) job.ll_path = write_ir(dump, job, ".ll", module_text(*m));
  if (auto obj = cache.load(EntryKind::CpuObject, job.key)) {
    job.object = std::move(*obj);
    job.disk_hit = true;
    return;
  }
  compile_object(job, *m, dump);
  cache.store(EntryKind::CpuObject, job.key, job.object);
}

// Links the job's object into a fresh JITDylib and resolves its function;
// LLVM's message when it does not link (the JITDylib is then removed).
// Caller holds g_mu.
std::optional<std::string> try_link(Job& job) {
  orc::LLJIT& j = jit();
  static int64_t n_dylibs = 0;
  // NOTE: not make_shared: g_linked's weak_ptr would keep the whole block allocated.
  std::shared_ptr<LinkedKernel> code(new LinkedKernel);
  code->symbol = job.symbol;
  auto jd = j.createJITDylib("tl_k" + std::to_string(n_dylibs++));
  if (!jd) return llvm::toString(jd.takeError());
  code->dylib = &*jd;
  code->dylib->addToLinkOrder(j.getMainJITDylib());  // helpers and process symbols
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(job.object, job.symbol);
  if (auto e = j.addObjectFile(*code->dylib, std::move(buf))) return llvm::toString(std::move(e));
  auto addr = j.lookup(*code->dylib, job.symbol);
  if (!addr) return llvm::toString(addr.takeError());
  code->fn = addr->toPtr<KernelFn>();
  job.code = std::move(code);
  return std::nullopt;
}

// Resolves the job's function: an identical kernel already linked, else its
// object linked now. A disk-cache object that does not link (stale, or from
// an older torchlite) is discarded and the kernel compiled again. Caller holds g_mu.
void link(Job& job, const DiskCache& cache) {
  if (job.code) return;
  if (auto it = g_linked.find(job.symbol); it != g_linked.end())
    if ((job.code = it->second.lock())) return;  // an identical kernel earlier in the batch
  std::optional<std::string> error = try_link(job);
  if (error && job.disk_hit) {
    cache.discard(EntryKind::CpuObject, job.key);
    job.disk_hit = false;
    llvm::LLVMContext ctx;
    auto m = emit_module(job, ctx);
    compile_object(job, *m, "");
    cache.store(EntryKind::CpuObject, job.key, job.object);
    error = try_link(job);
  }
  if (error)
    TL_THROW(Runtime) << "LLVM failed to link kernel '" << job.kernel->name << "': " << *error
                      << (job.ll_path.empty() ? "" : " (IR: " + job.ll_path + ")");
  g_linked[job.symbol] = job.code;
}
}  // namespace

int64_t live_kernels() { return g_live.load(); }

int64_t llvm_compiles() { return g_llvm_compiles.load(); }

int64_t kernel_emits() { return g_emits.load(); }

void forget_linked_kernels() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_linked.clear();
  g_emitted.clear();
}

namespace {
// Gives each job whose emission key names a kernel still linked that kernel's code and its
// own dims. Caller holds g_mu.
void reuse_emitted(std::vector<Job>& jobs) {
  for (auto& job : jobs) {
    auto it = g_emitted.find(job.emission_key);
    if (it == g_emitted.end()) continue;
    for (const Emitted& e : it->second) {
      if (!codegen::cpu::holds_literals(*job.kernel, job.space, e.literals)) continue;
      auto linked = g_linked.find(e.symbol);
      if (linked == g_linked.end() || !(job.code = linked->second.lock())) continue;
      job.key = e.key;
      job.symbol = e.symbol;
      job.sites = e.sites;
      job.dims.clear();
      for (int64_t site : job.sites)
        job.dims.push_back(codegen::cpu::site_value(*job.kernel, job.space, site));
      job.emit_literals = e.literals;
      job.reused = true;
      break;
    }
  }
}

// TORCHLITE_VERIFY: a reused kernel's text and dims are those emitting it (with the literals of
// the text it reuses) gives.
void verify_reused(const Job& job) {
  Job fresh;
  fresh.kernel = job.kernel;
  fresh.emit_literals = job.emit_literals;
  prepare(fresh);
  TL_CHECK(fresh.key == job.key && fresh.dims == job.dims)
      << "kernel " << job.kernel->name
      << ": the code reused by its emission key differs from its own (codegen/cpu/"
         "emission_key.h misses something the emitter decides from)";
}
}  // namespace

CompiledKernels compile_kernels(const std::vector<const ir::Kernel*>& kernels) {
  std::vector<Job> jobs(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) jobs[i].kernel = kernels[i];
  // NOTE: on this thread: opening the cache and the dump folder may warn.
  DiskCache cache = DiskCache::configured();
  std::string dump = dump_dir();
  for (auto& job : jobs) {
    job.space = codegen::cpu::cpu_loop_space(*job.kernel);
    job.emission_key = codegen::cpu::emission_key(*job.kernel, job.space);
    job.literals = codegen::cpu::literal_values(*job.kernel, job.space);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    reuse_emitted(jobs);
  }
  // Kernels to emit: one per emission key and literals not linked yet (a model repeats its
  // blocks); the others of the same key and literals copy its names and read their own dims
  // from its sites.
  auto full_key = [](const Job& job) {
    std::string key = job.emission_key + "F";
    for (const auto& [site, v] : job.literals)
      key += std::to_string(site) + ":" + std::to_string(v) + ",";
    return key;
  };
  std::vector<size_t> fresh, copies;
  std::unordered_map<std::string, size_t> first_of;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].reused) continue;
    (first_of.emplace(full_key(jobs[i]), i).second ? fresh : copies).push_back(i);
  }
  compile_in_parallel(fresh.size(), [&](size_t i) { prepare(jobs[fresh[i]]); });
  for (size_t i : copies) {
    Job& job = jobs[i];
    const Job& first = jobs[first_of.at(full_key(job))];
    job.key = first.key;
    job.symbol = first.symbol;
    job.sites = first.sites;
    for (int64_t site : job.sites)
      job.dims.push_back(codegen::cpu::site_value(*job.kernel, job.space, site));
    job.reused = true;  // linked below through `first`'s code
  }
  if (process_settings().verify)
    for (auto& job : jobs)
      if (job.reused) verify_reused(job);
  // NOTE: copies share their first's key, so the owners below are the fresh kernels.
  // NOTE: one build per distinct kernel: a model repeats its blocks, and resnet18's 18 kernels
  // are 13 distinct codes; the copies link to the first one's object below.
  std::vector<size_t> owners;
  std::unordered_map<std::string, size_t> owner_of;
  for (size_t i : fresh)
    if (owner_of.emplace(jobs[i].key, i).second) owners.push_back(i);
  compile_in_parallel(owners.size(), [&](size_t i) { build(jobs[owners[i]], cache, dump); });
  for (auto& job : jobs) job.module.reset(), job.context.reset();
  auto code = std::make_shared<std::vector<std::shared_ptr<LinkedKernel>>>();
  CompiledKernels out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    sweep_linked();
    for (auto& job : jobs) {
      link(job, cache);
      if (!job.reused) {
        std::vector<Emitted>& texts = g_emitted[job.emission_key];
        std::erase_if(texts, [&](const Emitted& e) { return e.literals == job.literals; });
        texts.push_back({job.key, job.symbol, job.sites, job.literals});
      }
      out.fns.push_back(job.code->fn);
      out.dims.push_back(job.dims);
      code->push_back(job.code);
      if (job.disk_hit) counters().cache_hits++;
    }
  }
  counters().kernels += static_cast<int64_t>(jobs.size());
  out.owner = std::move(code);
  return out;
}

}  // namespace tl::runtime::cpu
