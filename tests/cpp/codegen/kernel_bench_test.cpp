// Hidden benchmarks (run with `torchlite_tests "[.bench]"`): O2 compile time of
// small kernels, and a 16M-element six-op f32 chain vs a plain C++ loop.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kernel_builder.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/cpu/parallel.h"
#include "runtime/disk_cache.h"

using namespace tl::test;
namespace rc = tl::runtime::cpu;

namespace {
double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// relu(x * a + y) * 0.5 - sigmoid(y) ... six ops over n elements.
KernelBuilder chain(int64_t n, double a) {
  KernelBuilder b("chain6", {n});
  int x = b.load(b.input(ST::F32, {1}), ST::F32);
  int y = b.load(b.input(ST::F32, {1}), ST::F32);
  int v = b.expr(ExprOp::Mul, ST::F32, {x, b.constant(a, ST::F32)});
  v = b.expr(ExprOp::Add, ST::F32, {v, y});
  v = b.expr(ExprOp::Relu, ST::F32, {v});
  v = b.expr(ExprOp::Mul, ST::F32, {v, b.constant(0.5, ST::F32)});
  v = b.expr(ExprOp::Sub, ST::F32, {v, b.expr(ExprOp::Sigmoid, ST::F32, {y})});
  b.output(v, ST::F32, {1});
  return b;
}

__attribute__((noinline)) void cpp_chain(const float* x, const float* y, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = std::max(x[i] * 1.5f + y[i], 0.0f) * 0.5f;
    out[i] = v - 1.0f / (1.0f + std::exp(-y[i]));
  }
}
}  // namespace

TEST_CASE("benchmark: compile time and a 16M-element pointwise chain", "[.bench]") {
  tl::runtime::set_cache_dir("");
  std::vector<KernelBuilder> ks;
  for (int i = 0; i < 9; ++i) ks.push_back(chain(1000, 1.0 + i * 0.001));
  double t0 = now_ms();
  rc::compile_kernels({&ks[0].k});
  double t1 = now_ms();
  std::vector<const tl::ir::Kernel*> batch;
  for (int i = 1; i < 9; ++i) batch.push_back(&ks[i].k);
  rc::compile_kernels(batch);
  double t2 = now_ms();
  std::printf(
      "compile: first kernel (JIT start) %.1f ms; "
      "8 more in one batch %.1f ms (%.1f ms each)\n",
      t1 - t0, t2 - t1, (t2 - t1) / 8);

  const int64_t n = 16 << 20;
  std::vector<float> x(n), y(n), out(n), ref(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i % 1000) * 0.002f - 1, y[i] = (i % 777) * 0.003f - 1;
  KernelBuilder big = chain(n, 1.5);
  auto compiled = rc::compile_kernels({&big.k});
  auto fn = compiled.fns[0];
  std::vector<void*> bufs{x.data(), y.data(), out.data()};
  auto time = [&](auto&& f) {
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      double s = now_ms();
      f();
      best = std::min(best, now_ms() - s);
    }
    return best;
  };
  double cpp = time([&] { cpp_chain(x.data(), y.data(), ref.data(), n); });
  double jit1 = time([&] { fn(0, n, reinterpret_cast<char* const*>(bufs.data())); });
  double jit2 =
      time([&] { rc::parallel_run(fn, n, 1, reinterpret_cast<char* const*>(bufs.data()), 2); });
  std::printf(
      "16M f32 six-op chain: C++ loop (g++ -O3) %.1f ms, "
      "JIT 1 thread %.1f ms, JIT 2 threads %.1f ms\n",
      cpp, jit1, jit2);
  for (int64_t i = 0; i < n; i += 4097) REQUIRE(out[i] == Approx(ref[i]).margin(1e-5));

  // 4096 x 4096 sums over each axis (the column sum runs on tiled outer points).
  for (int axis = 0; axis < 2; ++axis) {
    KernelBuilder r("sum_dim" + std::to_string(axis), {4096, 4096}, 1);
    std::vector<int64_t> strides{1, 4096};
    if (axis) strides = {4096, 1};
    int xv = r.load(r.input(ST::F32, strides), ST::F32);
    r.output(r.expr(ExprOp::ReduceSum, ST::F32, {xv}), ST::F32, {1, 0});
    auto compiled_r = rc::compile_kernels({&r.k});
    auto rf = compiled_r.fns[0];
    std::vector<void*> rb{x.data(), out.data()};
    double ms = time([&] { rf(0, 4096, reinterpret_cast<char* const*>(rb.data())); });
    std::printf("sum over dim %d of 4096x4096 f32, 1 thread: %.1f ms (%.1f GB/s)\n", axis, ms,
                4096.0 * 4096 * 4 / ms / 1e6);
  }
}
#endif
