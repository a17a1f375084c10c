#include "runtime/cpu/jit.h"

#include <llvm/ADT/StringExtras.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SHA256.h>
#include <llvm/Support/raw_ostream.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "codegen/cpu/kernel_emitter.h"
#include "codegen/cpu/target.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/flags.h"
#include "runtime/cpu/math_support.h"
#include "runtime/cpu/object_cache.h"

namespace tl::runtime::cpu {

namespace {
namespace orc = llvm::orc;
// Bump when the emitted code changes for the same IR text (2: 512-bit vectors and
// libmvec variants on AVX-512 hosts).
constexpr const char* kCacheFormat = "torchlite-cpu-2";

std::mutex g_mu;  // settings, the symbol table, and adding objects to the JIT
std::optional<std::string> g_dump_dir, g_cache_dir;  // overrides of the settings
std::unordered_map<std::string, KernelFn> g_linked;  // symbol -> address

std::string dump_dir() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_dump_dir ? *g_dump_dir : kernel_dump_dir(process_settings());
}

// The one LLJIT of the process, started on first use; a failure to start is
// remembered and reported on every later compile.
orc::LLJIT& jit() {
  static std::unique_ptr<orc::LLJIT> j;
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
  j = std::move(*built);
  return *j;
}

struct Job {
  const ir::Kernel* kernel = nullptr;
  std::string key, symbol, ll_path;
  std::vector<char> object;
  bool disk_hit = false;
  KernelFn fn = nullptr;
  std::exception_ptr error;
};

std::string write_ir(const std::string& dir, const Job& job, const std::string& suffix,
                     const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string name = job.kernel->name.empty() ? "kernel" : job.kernel->name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  auto path = std::filesystem::path(dir) / (name + "_" + job.key.substr(0, 8) + suffix);
  std::ofstream(path) << "; torchlite kernel " << job.kernel->name << "\n" << text;
  return path.string();
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

void build(Job& job, const std::string& cache, const std::string& dump) {
  llvm::LLVMContext ctx;
  auto m = codegen::cpu::emit_kernel(*job.kernel, "tl_kernel", ctx);
  std::string text = module_text(*m);
  llvm::SHA256 sha;
  sha.update(text);
  sha.update(std::string("\n") + LLVM_VERSION_STRING + "\n" + codegen::cpu::host_target_id() +
             "\n" + kCacheFormat);
  job.key = llvm::toHex(sha.final(), true);
  job.symbol = "tl_k" + job.key.substr(0, 32);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_linked.find(job.symbol); it != g_linked.end()) {
      job.fn = it->second;
      return;
    }
  }
  m->getFunction("tl_kernel")->setName(job.symbol);
  if (!dump.empty()) job.ll_path = write_ir(dump, job, ".ll", module_text(*m));
  if (auto obj = cache_load(cache, job.key)) {
    job.object = std::move(*obj);
    job.disk_hit = true;
    return;
  }
  try {
    auto tm = codegen::cpu::host_target_machine();
    codegen::cpu::optimize_module(*m, *tm);
    if (!dump.empty()) write_ir(dump, job, ".opt.ll", module_text(*m));
    auto obj = codegen::cpu::emit_object(*m, *tm);
    job.object.assign(obj.begin(), obj.end());
  } catch (const Error& e) {
    if (job.ll_path.empty())
      job.ll_path = write_ir(std::filesystem::temp_directory_path() / "torchlite_kernels", job,
                             ".ll", module_text(*m));
    throw Error(e.kind(), "LLVM failed on kernel '" + job.kernel->name + "': " + e.what() +
                              " (IR: " + job.ll_path + ")");
  }
  cache_store(cache, job.key, {job.object.data(), job.object.size()});
}

// Adds the job's object to the batch's JITDylib (made on first need) and
// resolves its function. Caller holds g_mu.
void link(Job& job, orc::JITDylib*& batch) {
  if (job.fn) return;
  if (auto it = g_linked.find(job.symbol); it != g_linked.end()) {
    job.fn = it->second;  // an identical kernel earlier in the same batch
    return;
  }
  auto fail = [&](llvm::Error e) {
    TL_THROW(Runtime) << "LLVM failed to link kernel '" << job.kernel->name
                      << "': " << llvm::toString(std::move(e))
                      << (job.ll_path.empty() ? "" : " (IR: " + job.ll_path + ")");
  };
  orc::LLJIT& j = jit();
  if (!batch) {
    static int n_batches = 0;
    auto jd = j.createJITDylib("tl_batch_" + std::to_string(n_batches++));
    if (!jd) fail(jd.takeError());
    batch = &*jd;
    batch->addToLinkOrder(j.getMainJITDylib());  // helpers and process symbols
  }
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(job.object.data(), job.object.size()), job.symbol);
  if (auto e = j.addObjectFile(*batch, std::move(buf))) fail(std::move(e));
  auto addr = j.lookup(*batch, job.symbol);
  if (!addr) fail(addr.takeError());
  job.fn = addr->toPtr<KernelFn>();
  g_linked[job.symbol] = job.fn;
}
}  // namespace

void set_dump_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_dump_dir = dir;
}

void set_cache_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_cache_dir = dir;
}

std::string cache_dir() {
  std::lock_guard<std::mutex> lock(g_mu);
  // NOTE: read on every compile, so a later torchlite.config.cache_dir applies.
  return g_cache_dir ? *g_cache_dir : process_settings().cache_dir;
}

void forget_linked_kernels() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_linked.clear();
}

std::vector<KernelFn> compile_kernels(const std::vector<const ir::Kernel*>& kernels) {
  std::vector<Job> jobs(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) jobs[i].kernel = kernels[i];
  std::string cache = cache_dir(), dump = dump_dir();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      try {
        build(jobs[i], cache, dump);
      } catch (...) {
        jobs[i].error = std::current_exception();
      }
    }
  };
  size_t n_threads =
      std::min<size_t>(jobs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (auto& job : jobs)
    if (job.error) std::rethrow_exception(job.error);
  std::vector<KernelFn> fns;
  std::lock_guard<std::mutex> lock(g_mu);
  orc::JITDylib* batch = nullptr;
  for (auto& job : jobs) {
    link(job, batch);
    fns.push_back(job.fn);
    if (job.disk_hit) counters().cache_hits++;
  }
  counters().kernels += static_cast<int64_t>(jobs.size());
  return fns;
}

}  // namespace tl::runtime::cpu
