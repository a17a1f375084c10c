// Index leaves and Gather loads (data movement): hand-built loop IR, JIT-compiled,
// compared with scalar C++.
#include <catch2/catch.hpp>

#include "core/errors.h"
#include "kernel_builder.h"

using namespace tl::test;

namespace {
int index_expr(KernelBuilder& b, int axis) {
  int e = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[e].ivalue = axis;
  return e;
}
int gather_expr(KernelBuilder& b, int buffer, ST t, int offset) {
  int e = b.expr(ExprOp::Gather, t, {offset});
  b.k.exprs[e].buffer = buffer;
  return e;
}
}  // namespace

TEST_CASE("index and gather print and verify", "[ir]") {
  KernelBuilder b("flip", {4});
  int in = b.input(ST::F32, {0});
  int i = index_expr(b, 0);
  int off = b.expr(ExprOp::Sub, ST::I64, {b.constant(3, ST::I64), i});
  b.output(gather_expr(b, in, ST::F32, off), ST::F32, {1});
  b.k.verify();
  CHECK(b.k.str() ==
        "kernel flip[4] reduce=0:\n"
        "  in0 : f32 strides=[0]\n"
        "  %0 : i64 = index(axis0)\n"
        "  %1 : i64 = constant(3)\n"
        "  %2 : i64 = sub(%1, %0)\n"
        "  %3 : f32 = gather(in0, %2)\n"
        "  out0 : f32 strides=[1] = %3\n");
  b.k.exprs[0].ivalue = 1;
  CHECK_THROWS_WITH(b.k.verify(), Catch::Contains("%0 (index): no such axis"));
  KernelBuilder f("bad", {4});
  int fin = f.input(ST::F32, {1});
  f.output(gather_expr(f, fin, ST::F32, f.constant(1, ST::I32)), ST::F32, {1});
  CHECK_THROWS_WITH(f.k.verify(), Catch::Contains("%1 (gather): gather offset is not i64"));
}

#ifdef TORCHLITE_HAVE_LLVM
TEST_CASE("a flip along the last axis of a 2-D array reads through index and gather", "[codegen]") {
  // out[i, j] = x[i, 6 - j]: the direct part of x's view walks rows, the gather the columns.
  KernelBuilder b("flip2d", {5, 7});
  int in = b.input(ST::F32, {7, 0});
  int off = b.expr(ExprOp::Sub, ST::I64, {b.constant(6, ST::I64), index_expr(b, 1)});
  b.output(gather_expr(b, in, ST::F32, off), ST::F32, b.contiguous());
  std::vector<float> x(35), out(35);
  for (int i = 0; i < 35; ++i) x[i] = static_cast<float>(i);
  run_kernel(b.k, {x.data(), out.data()});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) REQUIRE(out[i * 7 + j] == x[i * 7 + 6 - j]);
}

TEST_CASE("index along an axis that coalescing merges keeps its coordinate", "[codegen]") {
  // A contiguous [3, 4] copy would be one flat loop; the index of axis 0 must survive.
  KernelBuilder b("rows", {3, 4});
  int x = b.load(b.input(ST::I64, b.contiguous()), ST::I64);
  int v = b.expr(ExprOp::Add, ST::I64,
                 {x, b.expr(ExprOp::Mul, ST::I64, {index_expr(b, 0), b.constant(100, ST::I64)})});
  b.output(v, ST::I64, b.contiguous());
  std::vector<int64_t> xs(12), out(12);
  for (int i = 0; i < 12; ++i) xs[i] = i;
  run_kernel(b.k, {xs.data(), out.data()});
  for (int i = 0; i < 12; ++i) REQUIRE(out[i] == i + 100 * (i / 4));
}

TEST_CASE("a gather with loaded indices selects rows (embedding)", "[codegen]") {
  // out[p, d] = w[idx[p], d], w 4x3, idx of 5.
  KernelBuilder b("emb", {5, 3});
  int idx = b.load(b.input(ST::I64, {1, 0}), ST::I64);
  int w = b.input(ST::BF16, {0, 1});
  int off = b.expr(ExprOp::Mul, ST::I64, {idx, b.constant(3, ST::I64)});
  b.output(gather_expr(b, w, ST::BF16, off), ST::BF16, b.contiguous());
  std::vector<int64_t> ids{3, 0, 2, 2, 1};
  std::vector<uint16_t> ws(12), out(15);
  for (int i = 0; i < 12; ++i) ws[i] = static_cast<uint16_t>(0x3F80 + i);  // bf16 bit patterns
  run_kernel(b.k, {ids.data(), ws.data(), out.data()});
  for (int p = 0; p < 5; ++p)
    for (int d = 0; d < 3; ++d) REQUIRE(out[p * 3 + d] == ws[ids[p] * 3 + d]);
}

TEST_CASE("an index over a reduction axis feeds a sum", "[codegen]") {
  // out[i] = sum_j (x[i, j] * j)
  KernelBuilder b("wsum", {3, 6}, 1);
  int x = b.load(b.input(ST::I64, b.contiguous()), ST::I64);
  int r = b.expr(ExprOp::ReduceSum, ST::I64, {b.expr(ExprOp::Mul, ST::I64, {x, index_expr(b, 1)})});
  b.output(r, ST::I64, {1, 0});
  std::vector<int64_t> xs(18), out(3);
  for (int i = 0; i < 18; ++i) xs[i] = i % 5;
  run_kernel(b.k, {xs.data(), out.data()});
  for (int i = 0; i < 3; ++i) {
    int64_t ref = 0;
    for (int j = 0; j < 6; ++j) ref += xs[i * 6 + j] * j;
    REQUIRE(out[i] == ref);
  }
}
#endif
