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

TEST_CASE("a channels-last spatial mean is reduced across channels in 32 slices", "[codegen]") {
  // [N, C, H, W] = [64, 32, 112, 112] channels-last, mean over H and W: rows N x C.
  auto r = schedule({64, 32, 112, 112}, 2, {401408, 1, 3584, 32}, ST::BF16);
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.slices == 32);
  CHECK(r.cost_across * 4 < r.cost_along);
}

TEST_CASE("batch-norm statistics of 32 channels stay along rows: one tile cannot fill the GPU",
          "[codegen]") {
  // Rows are the 32 channels: across them, one block of 32 x 32 lanes would do all the work.
  auto r = schedule({32, 64, 56, 56}, 3, {1, 100352, 1792, 32});
  CHECK(r.layout == RowLayout::Along);
  CHECK(r.cost_along < r.cost_across);
}

TEST_CASE("a column sum over many columns takes a thread a column", "[codegen]") {
  auto r = schedule({100000, 64}, 1, {1, 100000});
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.slices == 1);  // 100000 rows fill the machine without splitting them
}

TEST_CASE("short rows stay in one lane whatever their layout", "[codegen]") {
  CHECK(schedule({4096, 8}, 1, {8, 1}).layout == RowLayout::Across);
  CHECK(schedule({4096, 8}, 1, {8, 1}).slices == 1);
  CHECK(schedule({4096, 16}, 1, {1, 4096}).slices == 1);
}

TEST_CASE("slices never exceed the row's points", "[codegen]") {
  auto r = schedule({2, 3, 20}, 1, {60, 1, 3});  // rows of 20 points, strided
  CHECK(r.layout == RowLayout::Across);
  CHECK(r.slices <= 16);
}

TEST_CASE("coalescing counts the sector bytes a lane group uses", "[codegen]") {
  using tl::codegen::coalescing;
  CHECK(coalescing(1, 4, 32) == 1.0);
  CHECK(coalescing(0, 4, 32) == 1.0);
  CHECK(coalescing(2, 4, 32) == 0.5);
  CHECK(coalescing(1000, 2, 32) == Approx(2.0 / 32));
}
