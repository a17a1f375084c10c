// The ORC JIT wrapper: errors name the kernel, the on-disk object cache serves
// a second compile and survives a truncated or unlinkable entry, and a
// kernel's code is freed with its last owner.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "../codegen/kernel_builder.h"
#include "core/counters.h"
#include "core/errors.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/cpu/parallel.h"
#include "runtime/disk_cache.h"

using namespace tl::test;
namespace fs = std::filesystem;
namespace rc = tl::runtime::cpu;

namespace {
// out = x * c + 1 with a constant unique to this process, so no earlier run's
// cache entry can answer.
KernelBuilder affine(double c) {
  KernelBuilder b("affine", {100});
  int x = b.load(b.input(ST::F32, {1}), ST::F32);
  int v = b.expr(ExprOp::Mul, ST::F32, {x, b.constant(c, ST::F32)});
  b.output(b.expr(ExprOp::Add, ST::F32, {v, b.constant(1, ST::F32)}), ST::F32, {1});
  return b;
}

void check_affine(rc::KernelFn fn, float c) {
  std::vector<float> x(100), out(100);
  for (int i = 0; i < 100; ++i) x[i] = i;
  std::vector<void*> bufs{x.data(), out.data()};
  rc::parallel_run(fn, 100, 1, reinterpret_cast<char* const*>(bufs.data()), 1);
  for (int i = 0; i < 100; ++i) REQUIRE(out[i] == x[i] * c + 1);
}

std::vector<fs::path> objects_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(dir / "cpu"))
    if (e.path().extension() == ".o") out.push_back(e.path());
  return out;
}
}  // namespace

TEST_CASE("an invalid kernel is a tl::Error naming the kernel, not an abort", "[runtime]") {
  KernelBuilder b("broken_kernel", {4});
  int x = b.load(b.input(ST::F32, {1}), ST::F32);
  b.k.exprs[x].buffer = 3;  // no such input
  b.output(x, ST::F32, {1});
  tl::runtime::set_cache_dir("");
  try {
    rc::compile_kernels({&b.k});
    FAIL("compile_kernels accepted an invalid kernel");
  } catch (const tl::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("broken_kernel") && Catch::Contains("missing input"));
  }
}

TEST_CASE("a second compile loads the object from disk; a truncated file is rebuilt", "[runtime]") {
  fs::path dir = fs::temp_directory_path() / ("tl_jit_cache_" + std::to_string(getpid()));
  fs::remove_all(dir);
  tl::runtime::set_cache_dir(dir.string());
  float c = 1.0f + static_cast<float>(getpid() % 1000) / 1024.0f;
  KernelBuilder b = affine(c);
  int64_t kernels0 = tl::counters().kernels, hits0 = tl::counters().cache_hits;

  check_affine(rc::compile_kernels({&b.k}).fns[0], c);
  auto files = objects_in(dir);
  REQUIRE(files.size() == 1);
  CHECK(tl::counters().cache_hits == hits0);
  auto full_size = fs::file_size(files[0]);

  rc::forget_linked_kernels();
  check_affine(rc::compile_kernels({&b.k}).fns[0], c);
  CHECK(tl::counters().cache_hits == hits0 + 1);

  fs::resize_file(files[0], full_size / 2);
  rc::forget_linked_kernels();
  check_affine(rc::compile_kernels({&b.k}).fns[0], c);
  CHECK(tl::counters().cache_hits == hits0 + 1);
  CHECK(fs::file_size(files[0]) == full_size);  // rewritten whole
  CHECK(tl::counters().kernels == kernels0 + 3);

  tl::runtime::set_cache_dir("");
  fs::remove_all(dir);
}
TEST_CASE("a cached object that does not link is discarded and compiled again", "[runtime]") {
  fs::path dir = fs::temp_directory_path() / ("tl_jit_relink_" + std::to_string(getpid()));
  fs::remove_all(dir);
  tl::runtime::set_cache_dir(dir.string());
  float c1 = 2.0f + static_cast<float>(getpid() % 1000) / 1024.0f, c2 = c1 + 1.0f;
  KernelBuilder a = affine(c1), b = affine(c2);
  rc::compile_kernels({&a.k});
  std::string key_a = objects_in(dir)[0].stem().string();
  rc::compile_kernels({&b.k});
  auto files = objects_in(dir);
  REQUIRE(files.size() == 2);
  std::string key_b = files[files[0].stem() == key_a ? 1 : 0].stem().string();
  // An authenticated entry under a's key holding b's object (which lacks a's symbol).
  auto cache = tl::runtime::DiskCache::open(dir.string(), 0);
  std::string object_b = *cache.load(tl::runtime::EntryKind::CpuObject, key_b);
  cache.store(tl::runtime::EntryKind::CpuObject, key_a, object_b);
  rc::forget_linked_kernels();
  int64_t hits0 = tl::counters().cache_hits;
  check_affine(rc::compile_kernels({&a.k}).fns[0], c1);
  CHECK(tl::counters().cache_hits == hits0);
  CHECK(*cache.load(tl::runtime::EntryKind::CpuObject, key_a) != object_b);
  tl::runtime::set_cache_dir("");
  fs::remove_all(dir);
}

TEST_CASE("a kernel's code is freed with its last owner", "[runtime]") {
  tl::runtime::set_cache_dir("");
  float c = 5.0f + static_cast<float>(getpid() % 1000) / 1024.0f;
  KernelBuilder b = affine(c);
  int64_t live0 = rc::live_kernels();
  {
    rc::CompiledKernels first = rc::compile_kernels({&b.k});
    CHECK(rc::live_kernels() == live0 + 1);
    rc::CompiledKernels second = rc::compile_kernels({&b.k});  // shares the code
    CHECK(rc::live_kernels() == live0 + 1);
    CHECK(first.fns[0] == second.fns[0]);
    first = {};
    check_affine(second.fns[0], c);
  }
  CHECK(rc::live_kernels() == live0);
  check_affine(rc::compile_kernels({&b.k}).fns[0], c);  // linked again after being freed
  CHECK(rc::live_kernels() == live0);
}

#else
TEST_CASE("jit tests are skipped without LLVM", "[runtime]") { WARN("built without LLVM"); }
#endif
