// The reduction layout cost model shared by the emitters, on hand-built kernels.
#include "codegen/common/reduce_schedule.h"

#include <catch2/catch.hpp>

#include "../kernel_builder.h"

using namespace tl::test;
using tl::codegen::choose_reduce_schedule;
using tl::codegen::coalesce;
using tl::codegen::ReduceSchedule;
using tl::codegen::ReduceTarget;
using tl::codegen::RowLayout;

namespace {
// sum over the trailing `nred` axes of `shape`, the input read through `strides`.
ReduceSchedule schedule(std::vector<int64_t> shape, int nred, std::vector<int64_t> strides,
                        ST t = ST::F32) {
  KernelBuilder b("sum", std::move(shape), nred);
  int x = b.load(b.input(t, std::move(strides)), t);
  std::vector<int64_t> out(b.k.shape.size(), 0);
  b.output(b.expr(ExprOp::ReduceSum, ST::F32, {x}), ST::F32, out);
  int bytes = tl::ir::scalar_type_size(t);
  return choose_reduce_schedule(coalesce(b.k, false), {bytes, 4}, 1, ReduceTarget{});
}
}  // namespace

TEST_CASE("contiguous rows are reduced along the row", "[codegen]") {
  auto r = schedule({4096, 1024}, 1, {1024, 1});
  CHECK(r.layout == RowLayout::Along);
  CHECK(r.cost_along < r.cost_across);
}

TEST_CASE("a channels-last spatial mean is reduced across channels, 16 bf16 rows a tile",
          "[codegen]") {
  // [N, C, H, W] = [64, 32, 112, 112] channels-last, mean over H and W: rows N x C.
  auto r = schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}, ST::BF16);
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.tile_rows == 16);  // 16 x 2 bytes: one 32-byte sector
  CHECK(r.slices == 64);     // a 1024-lane tile
  CHECK(r.cost_across * 4 < r.cost_along);
}

TEST_CASE("float32 tiles take 8 rows, float64 8 as well", "[codegen]") {
  CHECK(schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}).tile_rows == 8);
  CHECK(schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}, ST::F64).tile_rows == 8);
  CHECK(schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}, ST::U8).tile_rows == 32);
}

TEST_CASE("32 rows leave most lanes idle in either layout (the split pass cuts them first)",
          "[codegen]") {
  auto few = schedule({32, 64, 56, 56}, 3, {1, 100352, 1792, 32});
  auto many = schedule({64, 32, 56, 56}, 2, {100352, 1, 1792, 32});  // rows N x C
  CHECK(std::min(few.cost_along, few.cost_across) > 8 * many.cost_across);
}

TEST_CASE("a column sum over many columns takes a thread a column", "[codegen]") {
  auto r = schedule({100000, 64}, 1, {1, 100000});
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.slices <= 2);  // 100000 rows nearly fill the machine without splitting them
}

TEST_CASE("a tile over many rows grows to 256 lanes a block, a few rows stay one sector wide",
          "[codegen]") {
  // ConvNeXt's layer norm over a channels-first input: 32 x 56 x 56 rows of 40 channels.
  auto many = schedule({32, 56, 56, 40}, 1, {125440, 56, 1, 3136}, ST::BF16);
  CHECK(many.layout == RowLayout::Across);
  CHECK(many.tile_rows * many.slices == 256);
  CHECK(many.tile_rows % 16 == 0);
  // Rows for about 2 blocks an SM (2048 lanes an SM): no growth.
  auto few = schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}, ST::BF16);
  CHECK(few.tile_rows == 16);
}

TEST_CASE("short rows stay in one lane whatever their layout", "[codegen]") {
  CHECK(schedule({4096, 8}, 1, {8, 1}).layout == RowLayout::Across);
  CHECK(schedule({4096, 8}, 1, {8, 1}).slices == 1);
  CHECK(schedule({4096, 16}, 1, {1, 4096}).slices == 1);
}

TEST_CASE("a slice keeps 8 points of its row at least", "[codegen]") {
  auto r = schedule({64, 32, 100}, 1, {3200, 1, 32});  // 2048 strided rows of 100 points
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.slices * 8 <= 100);
  CHECK(r.slices * r.tile_rows <= 1024);
}

TEST_CASE("coalescing counts the sector bytes a lane group uses", "[codegen]") {
  using tl::codegen::coalescing;
  CHECK(coalescing(1, 4, 32) == 1.0);
  CHECK(coalescing(0, 4, 32) == 1.0);
  CHECK(coalescing(2, 4, 32) == 0.5);
  CHECK(coalescing(1000, 2, 32) == Approx(2.0 / 32));
}
