// Axis merging shared by the CPU and CUDA emitters, on hand-built kernels.
#include "codegen/common/loop_space.h"

#include <catch2/catch.hpp>

#include "../kernel_builder.h"

using namespace tl::test;
using tl::codegen::coalesce;
using Strides = std::vector<std::vector<int64_t>>;

TEST_CASE("contiguous buffers merge into one flat axis, size-1 axes dropped", "[codegen]") {
  KernelBuilder b("flat", {2, 1, 3, 4});
  int x = b.input(ST::F32, b.contiguous());
  b.output(b.load(x, ST::F32), ST::F32, b.contiguous());
  auto s = coalesce(b.k, false);
  CHECK(s.outer == std::vector<int64_t>{24});
  CHECK(s.red.empty());
  CHECK(s.strides == Strides{{1}, {1}});
}

TEST_CASE("a transposed input keeps the axes it walks out of order", "[codegen]") {
  KernelBuilder b("transpose", {3, 4, 5});
  int x = b.input(ST::F32, {1, 3, 12}, 7);  // a contiguous [5, 4, 3] buffer read as [3, 4, 5]
  b.output(b.load(x, ST::F32), ST::F32, b.contiguous());
  auto s = coalesce(b.k, false);
  CHECK(s.outer == std::vector<int64_t>{3, 4, 5});
  CHECK(s.strides == Strides{{1, 3, 12}, {20, 5, 1}});
  CHECK(s.offsets == std::vector<int64_t>{7, 0});
}

TEST_CASE("a pointwise kernel walks its output in memory order", "[codegen]") {
  // [N, C, H, W] = [2, 3, 4, 5] written channels-last (strides C*H*W, 1, W*C, C).
  const std::vector<int64_t> nhwc{60, 1, 15, 3};
  KernelBuilder all("channels_last", {2, 3, 4, 5});
  int x = all.input(ST::F32, nhwc);
  all.output(all.load(x, ST::F32), ST::F32, nhwc);
  auto s = coalesce(all.k, false);
  CHECK(s.outer == std::vector<int64_t>{120});  // every buffer channels-last: one flat axis
  CHECK(s.strides == Strides{{1}, {1}});

  KernelBuilder mixed("to_channels_last", {2, 3, 4, 5});
  int y = mixed.input(ST::F32, mixed.contiguous());
  mixed.output(mixed.load(y, ST::F32), ST::F32, nhwc);
  auto t = coalesce(mixed.k, false);
  CHECK(t.outer == std::vector<int64_t>{2, 20, 3});  // N, H*W, C: the store is contiguous
  CHECK(t.strides == Strides{{60, 1, 20}, {60, 3, 1}});
}

TEST_CASE("outer and reduction axes merge separately; a scalar kernel gets one axis", "[codegen]") {
  KernelBuilder b("rows", {2, 3, 4, 5}, 2);
  int x = b.input(ST::F32, b.contiguous());
  int sum = b.expr(ExprOp::ReduceSum, ST::F32, {b.load(x, ST::F32)});
  b.output(sum, ST::F32, {3, 1, 0, 0});
  auto s = coalesce(b.k, false);
  CHECK(s.outer == std::vector<int64_t>{6});
  CHECK(s.red == std::vector<int64_t>{20});
  CHECK(s.strides == Strides{{20, 1}, {1, 0}});

  KernelBuilder one("scalar", {});
  one.output(one.constant(1, ST::F32), ST::F32, {});
  auto t = coalesce(one.k, false);
  CHECK(t.outer == std::vector<int64_t>{1});
  CHECK(t.strides == Strides{{0}});
}

TEST_CASE("index pseudo-buffers come only when asked for and follow the outputs", "[codegen]") {
  KernelBuilder b("iota", {3, 4});
  int i = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[i].ivalue = 1;
  b.output(i, ST::I64, b.contiguous());
  auto with = coalesce(b.k, true);
  REQUIRE(with.index_buffer.count(1) == 1);
  CHECK(with.index_buffer.at(1) == 1);
  CHECK(with.outer == std::vector<int64_t>{3, 4});  // the pseudo-buffer stops the merge
  CHECK(with.strides == Strides{{4, 1}, {0, 1}});
  auto without = coalesce(b.k, false);
  CHECK(without.index_buffer.empty());
  CHECK(without.outer == std::vector<int64_t>{12});
  CHECK(without.strides.size() == 1);
}

TEST_CASE("a kernel reading coordinates walks its output in memory order only with index buffers",
          "[codegen]") {
  // [N, C, H, W] = [2, 3, 4, 5] written channels-last; the body reads the H coordinate.
  const std::vector<int64_t> nhwc{60, 1, 15, 3};
  KernelBuilder b("coords", {2, 3, 4, 5});
  int x = b.input(ST::F32, nhwc);
  int h = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[h].ivalue = 2;
  b.output(b.expr(ExprOp::Add, ST::F32, {b.load(x, ST::F32), b.expr(ExprOp::Cast, ST::F32, {h})}),
           ST::F32, nhwc);
  auto with = coalesce(b.k, true);
  // N, H, W*C: the store is contiguous; H stays an axis of its own, its coordinate exact.
  CHECK(with.outer == std::vector<int64_t>{2, 4, 15});
  REQUIRE(with.index_buffer.count(2) == 1);
  CHECK(with.strides[with.index_buffer.at(2)] == std::vector<int64_t>{0, 1, 0});
  CHECK(with.strides[1] == std::vector<int64_t>{60, 15, 1});
  auto without = coalesce(b.k, false);  // coordinates from the row-major linear index
  CHECK(without.outer == std::vector<int64_t>{2, 3, 20});
}

// [N, C, H, W] = [2, 3, 4, 5] channels-last (strides C*H*W, 1, W*C, C), reduced over C, H, W.
TEST_CASE("a reduction over a channels-last tensor's C, H, W runs one contiguous axis on the CPU",
          "[codegen]") {
  const std::vector<int64_t> nhwc{60, 1, 15, 3};
  KernelBuilder b("group_norm_sum", {2, 3, 4, 5}, 3);
  int x = b.input(ST::F32, nhwc);
  int w = b.input(ST::F32, {0, 1, 0, 0});  // a per-channel weight: its order does not win
  int v = b.expr(ExprOp::Mul, ST::F32, {b.load(x, ST::F32), b.load(w, ST::F32)});
  b.output(b.expr(ExprOp::ReduceSum, ST::F32, {v}), ST::F32, {1, 0, 0, 0});
  auto row_major = coalesce(b.k, true);  // C, then H*W strided by C
  CHECK(row_major.red == std::vector<int64_t>{3, 20});
  CHECK(row_major.strides[0] == std::vector<int64_t>{60, 1, 3});
  auto cpu = coalesce(b.k, true, /*order_reduction=*/true);
  CHECK(cpu.outer == std::vector<int64_t>{2});
  CHECK(cpu.red == std::vector<int64_t>{20, 3});  // H*W, then C innermost
  CHECK(cpu.strides[0] == std::vector<int64_t>{60, 3, 1});
  CHECK(cpu.strides[1] == std::vector<int64_t>{0, 0, 1});
}

TEST_CASE("argmax keeps row-major reduction order (its first-index rule)", "[codegen]") {
  const std::vector<int64_t> nhwc{60, 1, 15, 3};
  KernelBuilder b("argmax", {2, 3, 4, 5}, 3);
  int x = b.input(ST::F32, nhwc);
  b.output(b.expr(ExprOp::ReduceArgMax, ST::I64, {b.load(x, ST::F32)}), ST::I64, {1, 0, 0, 0});
  auto cpu = coalesce(b.k, true, true);
  CHECK(cpu.red == std::vector<int64_t>{3, 20});
  CHECK(cpu.strides[0] == std::vector<int64_t>{60, 1, 3});
}

TEST_CASE("reduction_order prices bytes: a strided innermost axis costs a cache line a point",
          "[codegen]") {
  using tl::codegen::reduction_order;
  // Two buffers disagree: the f32 one moves more bytes than the bf16 one, and wins.
  std::vector<int64_t> sizes{8, 8};
  CHECK(reduction_order(sizes, {{1, 8}, {8, 1}}, {4, 2}) == std::vector<size_t>{1, 0});
  // A broadcast operand (8 points) does not outweigh the 64-point input.
  CHECK(reduction_order(sizes, {{1, 8}, {0, 1}}, {4, 4}) == std::vector<size_t>{1, 0});
  // Equal costs keep row-major; so does a row-major-contiguous input.
  CHECK(reduction_order(sizes, {{8, 1}, {1, 8}}, {4, 4}) == std::vector<size_t>{0, 1});
  CHECK(reduction_order(sizes, {{8, 1}}, {4}) == std::vector<size_t>{0, 1});
}

TEST_CASE("a column sum tiles its columns though it reads a per-row statistic", "[codegen]") {
  using tl::codegen::LoopSpace;
  using tl::codegen::outer_tile;
  // RMSNorm's weight gradient: sum over 512 rows of g * x * rsqrt, per column of 1024. Inputs g
  // and x walk the columns contiguously; the rsqrt is one value a row (stride 0 along the
  // columns, 1 along the reduction); the output comes last.
  LoopSpace s;
  s.outer = {1024};
  s.red = {512};
  s.strides = {{1, 1024}, {1, 1024}, {0, 1}, {1, 0}};
  CHECK(outer_tile(s, 3) == 1024);
  CHECK(outer_tile(s, 2) == 1024);
  // An input that varies along the columns and is contiguous along the rows decides for rows.
  s.strides = {{1, 1024}, {512, 1}, {1, 0}};
  CHECK(outer_tile(s, 2) == 1);
  // Only the statistic: nothing walks the columns contiguously.
  s.strides = {{0, 1}, {1, 0}};
  CHECK(outer_tile(s, 1) == 1);
  // A row reduction (softmax, the norm's input gradient) and a pointwise kernel take no tile.
  s.strides = {{1024, 1}, {1, 0}};
  CHECK(outer_tile(s, 1) == 1);
  s.red.clear();
  s.strides = {{1}, {1}};
  CHECK(outer_tile(s, 1) == 1);
}
