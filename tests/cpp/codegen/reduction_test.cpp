// Reduction kernels: sums, max, argmax, a column reduction, and a softmax
// whose reduced values feed a second reduction and a per-element output.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_builder.h"

using namespace tl::test;

#ifdef TORCHLITE_HAVE_LLVM
TEST_CASE("row sum and max over the last axis match scalar C++", "[codegen]") {
  KernelBuilder b("rowred", {37, 129}, 1);
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  b.output(b.expr(ExprOp::ReduceSum, ST::F32, {x}), ST::F32, {1, 0});
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  b.output(b.expr(ExprOp::Mul, ST::F32, {mx, b.constant(2, ST::F32)}), ST::F32, {1, 0});
  std::vector<float> xs(37 * 129), sum(37), max2(37);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(i * 0.37f) * 10;
  run_kernel(b.k, {xs.data(), sum.data(), max2.data()});
  for (int r = 0; r < 37; ++r) {
    double s = 0;
    float m = -INFINITY;
    for (int c = 0; c < 129; ++c) s += xs[r * 129 + c], m = std::max(m, xs[r * 129 + c]);
    REQUIRE(sum[r] == Approx(s).margin(1e-3));
    REQUIRE(max2[r] == 2 * m);
  }
}

TEST_CASE("a column sum of bf16 accumulates in f32", "[codegen]") {
  // x: [300, 3] contiguous bf16 of value 1 + 1/128; sum over dim 0.
  KernelBuilder b("colsum", {3, 300}, 1);
  int x = b.load(b.input(ST::BF16, {1, 3}), ST::BF16);
  b.output(b.expr(ExprOp::ReduceSum, ST::BF16, {x}), ST::F32, {1, 0});
  std::vector<uint16_t> xs(900, 0x3F81);  // 1.0078125
  std::vector<float> out(3);
  run_kernel(b.k, {xs.data(), out.data()});
  for (float v : out) REQUIRE(v == Approx(300 * 1.0078125).epsilon(1e-6));
}

TEST_CASE("argmax and argmin take the first extreme and the first NaN", "[codegen]") {
  KernelBuilder b("argx", {3, 5}, 1);
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  b.output(b.expr(ExprOp::ReduceArgMax, ST::I64, {x}), ST::I64, {1, 0});
  b.output(b.expr(ExprOp::ReduceArgMin, ST::I64, {x}), ST::I64, {1, 0});
  float nan = std::numeric_limits<float>::quiet_NaN();
  float inf = INFINITY;
  std::vector<float> xs{1, 5, 5, -2, -2, 0, nan, 3, nan, 9, -inf, -inf, -inf, -inf, -inf};
  std::vector<int64_t> amax(3), amin(3);
  run_kernel(b.k, {xs.data(), amax.data(), amin.data()});
  CHECK(amax == std::vector<int64_t>{1, 1, 0});
  CHECK(amin == std::vector<int64_t>{3, 1, 0});
}

TEST_CASE("an integer sum reduces over two axes into int64", "[codegen]") {
  KernelBuilder b("isum", {2, 3, 4}, 2);
  int x = b.load(b.input(ST::I32, b.contiguous()), ST::I32);
  int wide = b.expr(ExprOp::Cast, ST::I64, {x});
  b.output(b.expr(ExprOp::ReduceSum, ST::I64, {wide}), ST::I64, {1, 0, 0});
  std::vector<int32_t> xs(24);
  for (int i = 0; i < 24; ++i) xs[i] = i * 1000000;
  std::vector<int64_t> out(2);
  run_kernel(b.k, {xs.data(), out.data()});
  CHECK(out == std::vector<int64_t>{66000000, 210000000});
}

TEST_CASE("softmax runs as one kernel with two reduction passes and an output pass", "[codegen]") {
  KernelBuilder b("softmax", {64, 1000}, 1);
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int s = b.expr(ExprOp::ReduceSum, ST::F32, {e});
  b.output(b.expr(ExprOp::Div, ST::F32, {e, s}), ST::F32, b.contiguous());
  std::vector<float> xs(64000), out(64000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(i * 0.01f) * 20;
  run_kernel(b.k, {xs.data(), out.data()});
  for (int r = 0; r < 64; ++r) {
    float m = -INFINITY;
    double z = 0;
    for (int c = 0; c < 1000; ++c) m = std::max(m, xs[r * 1000 + c]);
    for (int c = 0; c < 1000; ++c) z += std::exp(xs[r * 1000 + c] - m);
    for (int c = 0; c < 1000; c += 37)
      REQUIRE(out[r * 1000 + c] == Approx(std::exp(xs[r * 1000 + c] - m) / z).epsilon(1e-4));
  }
}

TEST_CASE("softmax and argmax over dim 0 (tiled outer points) match scalar C++", "[codegen]") {
  // x: [50, 37] contiguous; iterate [37 columns] x [50 rows reduced].
  KernelBuilder b("colsoftmax", {37, 50}, 1);
  int x = b.load(b.input(ST::F32, {1, 37}), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int s = b.expr(ExprOp::ReduceSum, ST::F32, {e});
  b.output(b.expr(ExprOp::Div, ST::F32, {e, s}), ST::F32, {1, 37});
  b.output(b.expr(ExprOp::ReduceArgMax, ST::I64, {x}), ST::I64, {1, 0});
  std::vector<float> xs(50 * 37), out(50 * 37);
  std::vector<int64_t> am(37);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(i * 0.77f) * 5;
  run_kernel(b.k, {xs.data(), out.data(), am.data()});
  for (int c = 0; c < 37; ++c) {
    int best = 0;
    double z = 0;
    for (int r = 0; r < 50; ++r) best = xs[r * 37 + c] > xs[best * 37 + c] ? r : best;
    for (int r = 0; r < 50; ++r) z += std::exp(xs[r * 37 + c] - xs[best * 37 + c]);
    REQUIRE(am[c] == best);
    for (int r = 0; r < 50; ++r)
      REQUIRE(out[r * 37 + c] ==
              Approx(std::exp(xs[r * 37 + c] - xs[best * 37 + c]) / z).epsilon(1e-4));
  }
}
TEST_CASE("softmax stored as f32 and bf16 reads its exp back once (stash) and matches",
          "[codegen]") {
  KernelBuilder b("softmax2", {5, 300}, 1);
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {x, mx})});
  int q = b.expr(ExprOp::Div, ST::F32, {e, b.expr(ExprOp::ReduceSum, ST::F32, {e})});
  b.output(q, ST::BF16, b.contiguous());  // no stash: its type differs from exp's
  b.output(q, ST::F32, b.contiguous());   // exp is stashed here in pass 2
  std::vector<float> xs(1500), out(1500);
  std::vector<uint16_t> half(1500);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(i * 0.05f) * 8;
  run_kernel(b.k, {xs.data(), half.data(), out.data()});
  for (int r = 0; r < 5; ++r) {
    float m = -INFINITY;
    double z = 0;
    for (int c = 0; c < 300; ++c) m = std::max(m, xs[r * 300 + c]);
    for (int c = 0; c < 300; ++c) z += std::exp(xs[r * 300 + c] - m);
    for (int c = 0; c < 300; ++c) {
      double want = std::exp(xs[r * 300 + c] - m) / z;
      REQUIRE(out[r * 300 + c] == Approx(want).epsilon(1e-5));
      uint32_t bits = uint32_t(half[r * 300 + c]) << 16;
      float h;
      std::memcpy(&h, &bits, 4);
      REQUIRE(h == Approx(want).epsilon(1e-2));
    }
  }
}
#endif
