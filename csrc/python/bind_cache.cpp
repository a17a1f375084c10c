// The on-disk kernel cache for `python -m torchlite.cache` and tests, and the
// count of live JIT kernels (tests: code is freed with its last owner).
#include <pybind11/stl.h>

#include "bindings.h"
#include "core/flags.h"
#include "runtime/disk_cache.h"
#ifdef TORCHLITE_HAVE_LLVM
#include "codegen/cpu/emission_key.h"
#include "runtime/cpu/jit.h"
#endif

namespace py = pybind11;
using namespace pybind11::literals;

namespace tl::python {
namespace {
runtime::EntryKind entry_kind(const std::string& kind) {
  if (kind == "cpu") return runtime::EntryKind::CpuObject;
  if (kind == "cuda") return runtime::EntryKind::CudaImage;
  throw py::value_error("entry kind must be 'cpu' or 'cuda', not '" + kind + "'");
}

std::string configured_dir(const std::optional<std::string>& dir) {
  return dir ? *dir : process_settings().cache_dir;
}

// The CPU JIT's counts; zeros in a build without LLVM.
struct JitCounts {
  int64_t live_kernels = 0, llvm_compiles = 0, kernel_emits = 0;
};
JitCounts jit_counts() {
#ifdef TORCHLITE_HAVE_LLVM
  return {runtime::cpu::live_kernels(), runtime::cpu::llvm_compiles(),
          runtime::cpu::kernel_emits()};
#else
  return {};
#endif
}
}  // namespace

void bind_cache(py::module_& m) {
  m.def(
      "disk_cache_info",
      [](std::optional<std::string> dir) {
        runtime::DiskCacheInfo i =
            runtime::disk_cache_info(configured_dir(dir), process_settings().cache_max_mb << 20);
        return py::dict("dir"_a = i.dir, "problem"_a = i.problem, "cpu_entries"_a = i.cpu_entries,
                        "cuda_entries"_a = i.cuda_entries, "bytes"_a = i.bytes,
                        "max_bytes"_a = i.max_bytes);
      },
      py::arg("dir") = py::none(),
      "Entries and bytes of the disk cache at `dir` (default: the cache_dir setting); "
      "'problem' says why the folder is not used ('' when it is).");
  m.def(
      "disk_cache_clear",
      [](std::optional<std::string> dir) { return runtime::disk_cache_clear(configured_dir(dir)); },
      py::arg("dir") = py::none(),
      "Removes every entry (keeps the secret); the number of files removed, -1 for a folder "
      "that is not trusted.");
  m.def(
      "_disk_cache_store",
      [](const std::string& kind, const std::string& key, py::bytes data) {
        runtime::DiskCache::configured().store(entry_kind(kind), key, std::string(data));
      },
      py::arg("kind"), py::arg("key"), py::arg("data"),
      "Tests: stores an entry in the configured cache (best effort, as a compile does).");
  m.def(
      "_disk_cache_load",
      [](const std::string& kind, const std::string& key) -> py::object {
        auto data = runtime::DiskCache::configured().load(entry_kind(kind), key);
        return data ? py::object(py::bytes(*data)) : py::object(py::none());
      },
      py::arg("kind"), py::arg("key"), "Tests: an entry of the configured cache, or None.");
  m.def(
      "_disk_cache_path",
      [](const std::string& kind, const std::string& key) {
        return runtime::DiskCache::configured().path(entry_kind(kind), key);
      },
      py::arg("kind"), py::arg("key"), "Tests: where an entry lives ('' if the cache is off).");
  m.def(
      "live_cpu_kernels", [] { return jit_counts().live_kernels; },
      "CPU kernels whose JIT code is mapped now.");
  m.def(
      "llvm_compiles", [] { return jit_counts().llvm_compiles; },
      "CPU kernels LLVM compiled in this process (not reused, not from the disk cache).");
  m.def(
      "_set_cpu_plain_division",
      [](bool on) {
#ifdef TORCHLITE_HAVE_LLVM
        codegen::cpu::set_plain_runtime_division(on);
#else
        (void)on;
#endif
      },
      "Bench only: CPU kernels divide by runtime divisors plainly (not by magic numbers).");
  m.def(
      "llvm_emits", [] { return jit_counts().kernel_emits; },
      "CPU kernels whose LLVM module was emitted in this process (a kernel whose lowered form "
      "matches one still linked takes its code without emitting).");
}

}  // namespace tl::python
