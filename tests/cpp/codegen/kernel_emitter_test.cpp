// Pointwise kernels: hand-built loop IR, JIT-compiled, run on raw buffers and
// compared with scalar C++.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_builder.h"

using namespace tl::test;

#ifdef TORCHLITE_HAVE_LLVM
namespace {
float bf16_round(float f) {  // reference round-to-nearest-even to bfloat16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("a six-op f32 pointwise chain matches scalar C++", "[codegen]") {
  KernelBuilder b("chain", {3, 1000});
  int x = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int y = b.load(b.input(ST::F32, b.contiguous()), ST::F32);
  int v = b.expr(ExprOp::Mul, ST::F32, {x, b.constant(2, ST::F32)});
  v = b.expr(ExprOp::Add, ST::F32, {v, y});
  v = b.expr(ExprOp::Relu, ST::F32, {v});
  v = b.expr(ExprOp::Sigmoid, ST::F32, {v});
  v = b.expr(ExprOp::Sub, ST::F32, {v, b.expr(ExprOp::Sin, ST::F32, {x})});
  v = b.expr(ExprOp::Sqrt, ST::F32, {b.expr(ExprOp::Abs, ST::F32, {v})});
  b.output(v, ST::F32, b.contiguous());
  std::vector<float> xs(3000), ys(3000), out(3000);
  for (int i = 0; i < 3000; ++i) xs[i] = (i % 97) * 0.05f - 2, ys[i] = (i % 13) * 0.3f - 1.5f;
  run_kernel(b.k, {xs.data(), ys.data(), out.data()});
  for (int i = 0; i < 3000; ++i) {
    float r = std::max(xs[i] * 2 + ys[i], 0.0f);
    r = std::sqrt(std::fabs(1 / (1 + std::exp(-r)) - std::sin(xs[i])));
    REQUIRE(out[i] == Approx(r).epsilon(1e-4).margin(1e-6));  // libmvec: a few ulp
  }
}

TEST_CASE("a broadcast row and a transposed input are read through their strides", "[codegen]") {
  // out[i, j] = xt[i, j] + row[j], with xt the transpose of a contiguous 7x5.
  KernelBuilder b("bcast", {5, 7});
  int xt = b.load(b.input(ST::F32, {1, 5}), ST::F32);
  int row = b.load(b.input(ST::F64, {0, 1}, 2), ST::F64);
  int sum = b.expr(ExprOp::Add, ST::F64, {b.expr(ExprOp::Cast, ST::F64, {xt}), row});
  b.output(sum, ST::F64, b.contiguous());
  std::vector<float> x(35);
  std::vector<double> r(9), out(35);
  for (int i = 0; i < 35; ++i) x[i] = i;
  for (int i = 0; i < 9; ++i) r[i] = 100.0 * i;
  run_kernel(b.k, {x.data(), r.data(), out.data()});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) REQUIRE(out[i * 7 + j] == x[j * 5 + i] + r[2 + j]);
}

TEST_CASE("f16 and bf16 load as f32 and store rounded to nearest even", "[codegen]") {
  KernelBuilder b("halfs", {64});
  int h = b.load(b.input(ST::F16, {1}), ST::F16);
  int bf = b.load(b.input(ST::BF16, {1}), ST::BF16);
  int v = b.expr(ExprOp::Add, ST::F32, {b.expr(ExprOp::Exp, ST::F32, {h}), bf});
  b.output(v, ST::BF16, {1});
  b.output(b.expr(ExprOp::Mul, ST::F16, {h, b.constant(3, ST::F16)}), ST::F16, {1});
  std::vector<_Float16> hs(64), h_out(64);
  std::vector<uint16_t> bfs(64), bf_out(64);
  for (int i = 0; i < 64; ++i) {
    hs[i] = static_cast<_Float16>(i * 0.1f - 3);
    float f = bf16_round(i * 1.37f);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bfs[i] = u >> 16;
  }
  run_kernel(b.k, {hs.data(), bfs.data(), bf_out.data(), h_out.data()});
  for (int i = 0; i < 64; ++i) {
    float bf_in;
    uint32_t u = uint32_t(bfs[i]) << 16;
    std::memcpy(&bf_in, &u, 4);
    float expect = bf16_round(std::exp(static_cast<float>(hs[i])) + bf_in);
    uint32_t got = uint32_t(bf_out[i]) << 16;
    float gotf;
    std::memcpy(&gotf, &got, 4);
    REQUIRE(gotf == Approx(expect).epsilon(1e-2));
    REQUIRE(static_cast<float>(h_out[i]) ==
            static_cast<float>(static_cast<_Float16>(static_cast<float>(hs[i]) * 3)));
  }
}

TEST_CASE("integer division and remainder follow Python signs and never trap", "[codegen]") {
  KernelBuilder b("ints", {6});
  int x = b.load(b.input(ST::I32, {1}), ST::I32);
  int y = b.load(b.input(ST::I32, {1}), ST::I32);
  b.output(b.expr(ExprOp::FloorDiv, ST::I32, {x, y}), ST::I32, {1});
  b.output(b.expr(ExprOp::Remainder, ST::I32, {x, y}), ST::I32, {1});
  int gt = b.expr(ExprOp::Gt, ST::Bool, {x, y});
  b.output(gt, ST::Bool, {1});
  b.output(b.expr(ExprOp::Where, ST::I64, {gt, x, b.constant(-9, ST::I64)}), ST::I64, {1});
  std::vector<int32_t> xs{7, -7, 7, -7, 5, std::numeric_limits<int32_t>::min()};
  std::vector<int32_t> ys{2, 2, -2, -2, 0, -1};
  std::vector<int32_t> q(6), r(6);
  std::vector<uint8_t> g(6);
  std::vector<int64_t> w(6);
  run_kernel(b.k, {xs.data(), ys.data(), q.data(), r.data(), g.data(), w.data()});
  CHECK(q == std::vector<int32_t>{3, -4, -4, 3, 0, std::numeric_limits<int32_t>::min()});
  CHECK(r == std::vector<int32_t>{1, 1, -1, -1, 0, 0});
  CHECK(g == std::vector<uint8_t>{1, 0, 1, 0, 1, 0});
  CHECK(w == std::vector<int64_t>{7, -9, 7, -9, 5, -9});
}

TEST_CASE("float ops keep torch's NaN, rounding and floor-division rules", "[codegen]") {
  KernelBuilder b("floats", {5});
  int x = b.load(b.input(ST::F32, {1}), ST::F32);
  int y = b.load(b.input(ST::F32, {1}), ST::F32);
  b.output(b.expr(ExprOp::Maximum, ST::F32, {x, y}), ST::F32, {1});
  b.output(b.expr(ExprOp::FloorDiv, ST::F32, {x, y}), ST::F32, {1});
  b.output(b.expr(ExprOp::Round, ST::F32, {x}), ST::F32, {1});
  b.output(b.expr(ExprOp::Relu, ST::F32, {x}), ST::F32, {1});
  b.output(b.expr(ExprOp::Erfinv, ST::F32, {b.expr(ExprOp::Erf, ST::F32, {y})}), ST::F32, {1});
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs{2.5f, -7.5f, nan, 0.5f, -1.0f}, ys{1.0f, 2.0f, 0.5f, -0.25f, 0.3f};
  std::vector<float> mx(5), fd(5), rd(5), rl(5), ei(5);
  run_kernel(b.k, {xs.data(), ys.data(), mx.data(), fd.data(), rd.data(), rl.data(), ei.data()});
  CHECK(mx[0] == 2.5f);
  CHECK(std::isnan(mx[2]));
  CHECK(fd[1] == -4.0f);
  CHECK(fd[3] == -2.0f);
  CHECK(rd[0] == 2.0f);  // half to even
  CHECK(rd[3] == 0.0f);
  CHECK(std::isnan(rl[2]));
  CHECK(rl[1] == 0.0f);
  for (int i = 0; i < 5; ++i) CHECK(ei[i] == Approx(ys[i]).epsilon(1e-5));
}
#else
TEST_CASE("codegen tests are skipped without LLVM", "[codegen]") { WARN("built without LLVM"); }
#endif
