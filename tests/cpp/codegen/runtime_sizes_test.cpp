// Kernels with runtime sizes (ir::Kernel::runtime_sizes): the same LLVM text
// for every size of one structure, and correct results at each size.
#include <catch2/catch.hpp>
#include <cmath>
#include <tuple>

#include "kernel_builder.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/disk_cache.h"
#endif

using namespace tl::test;

#ifdef TORCHLITE_HAVE_LLVM
namespace {

// softmax over rows of a [rows, cols] tensor read with row stride `ld` (>= cols).
KernelBuilder softmax_rows(int64_t rows, int64_t cols, int64_t ld) {
  KernelBuilder b("softmax", {rows, cols}, 1);
  b.k.runtime_sizes = true;
  int x = b.load(b.input(ST::F32, {ld, 1}), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int s = b.expr(ExprOp::ReduceSum, ST::F32, {e});
  b.output(b.expr(ExprOp::Div, ST::F32, {e, s}), ST::F32, {cols, 1});
  b.output(b.expr(ExprOp::ReduceArgMax, ST::I64, {x}), ST::I64, {1, 0});
  return b;
}

}  // namespace

TEST_CASE("kernels with runtime sizes share one compiled function across sizes", "[codegen]") {
  namespace rc = tl::runtime::cpu;
  tl::runtime::set_cache_dir("");
  KernelBuilder a = softmax_rows(37, 129, 130), b = softmax_rows(5, 1000, 1003);
  int64_t before = rc::llvm_compiles();
  rc::CompiledKernels ca = rc::compile_kernels({&a.k}), cb = rc::compile_kernels({&b.k});
  CHECK(rc::llvm_compiles() - before <= 1);  // the first may be linked already
  CHECK(ca.fns[0] == cb.fns[0]);
  CHECK(ca.dims[0] != cb.dims[0]);
  CHECK(ca.dims[0].size() == cb.dims[0].size());
  // Static kernels keep the numbers in the code: two functions.
  a.k.runtime_sizes = b.k.runtime_sizes = false;
  rc::CompiledKernels sa = rc::compile_kernels({&a.k}), sb = rc::compile_kernels({&b.k});
  CHECK(sa.fns[0] != sb.fns[0]);
  CHECK(sa.dims[0].empty());
}

TEST_CASE("a softmax kernel with runtime sizes is right at sizes that change alignment",
          "[codegen]") {
  for (auto [rows, cols, ld] : {std::tuple<int64_t, int64_t, int64_t>{37, 129, 130},
                                {5, 1000, 1003},
                                {64, 3, 3},
                                {2, 17, 40}}) {
    KernelBuilder b = softmax_rows(rows, cols, ld);
    std::vector<float> xs(rows * ld), out(rows * cols);
    std::vector<int64_t> am(rows);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(i * 0.37f) * 7;
    run_kernel(b.k, {xs.data(), out.data(), am.data()});
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      for (int64_t c = 0; c < cols; ++c) best = xs[r * ld + c] > xs[r * ld + best] ? c : best;
      double z = 0;
      for (int64_t c = 0; c < cols; ++c) z += std::exp(xs[r * ld + c] - xs[r * ld + best]);
      REQUIRE(am[r] == best);
      for (int64_t c = 0; c < cols; ++c)
        REQUIRE(out[r * cols + c] ==
                Approx(std::exp(xs[r * ld + c] - xs[r * ld + best]) / z).epsilon(1e-4));
    }
  }
}
#endif
