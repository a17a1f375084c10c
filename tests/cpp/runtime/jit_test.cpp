// The ORC JIT wrapper: errors name the kernel, and the on-disk object cache
// serves a second compile and ignores a truncated file.
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
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".o") out.push_back(e.path());
  return out;
}
}  // namespace

TEST_CASE("an invalid kernel is a tl::Error naming the kernel, not an abort", "[runtime]") {
  KernelBuilder b("broken_kernel", {4});
  int x = b.load(b.input(ST::F32, {1}), ST::F32);
  b.k.exprs[x].buffer = 3;  // no such input
  b.output(x, ST::F32, {1});
  rc::set_cache_dir("");
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
  rc::set_cache_dir(dir.string());
  float c = 1.0f + static_cast<float>(getpid() % 1000) / 1024.0f;
  KernelBuilder b = affine(c);
  int64_t kernels0 = tl::counters().kernels, hits0 = tl::counters().cache_hits;

  check_affine(rc::compile_kernels({&b.k})[0], c);
  auto files = objects_in(dir);
  REQUIRE(files.size() == 1);
  CHECK(tl::counters().cache_hits == hits0);
  auto full_size = fs::file_size(files[0]);

  rc::forget_linked_kernels();
  check_affine(rc::compile_kernels({&b.k})[0], c);
  CHECK(tl::counters().cache_hits == hits0 + 1);

  fs::resize_file(files[0], full_size / 2);
  rc::forget_linked_kernels();
  check_affine(rc::compile_kernels({&b.k})[0], c);
  CHECK(tl::counters().cache_hits == hits0 + 1);
  CHECK(fs::file_size(files[0]) == full_size);  // rewritten whole
  CHECK(tl::counters().kernels == kernels0 + 3);

  rc::set_cache_dir("");
  fs::remove_all(dir);
}
#else
TEST_CASE("jit tests are skipped without LLVM", "[runtime]") { WARN("built without LLVM"); }
#endif
