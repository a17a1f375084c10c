// The fusion cost model's decisions on reductions with per-element epilogues and on pointwise
// producers joining reduction kernels.
#include "passes/fusion_cost.h"

#include <catch2/catch.hpp>

using tl::passes::EpilogueCase;
using tl::passes::kHeavyOpBytes;
using tl::passes::kOpBytes;
using tl::passes::price_epilogue;
using tl::passes::price_prologue;
using tl::passes::PrologueCase;

TEST_CASE("a layer norm's epilogue stays fused: its rows are read once", "[passes]") {
  EpilogueCase c{8192, 4096, 2, 2, 2};
  auto ch = price_epilogue(c);
  CHECK(ch.row_on_chip);
  CHECK(ch.fuse);
  CHECK(ch.fused.bytes < ch.reduction.bytes + ch.epilogue.bytes);
}

TEST_CASE("batch-norm statistics over 64x112x112 points keep the SiLU epilogue apart", "[passes]") {
  // Channels: 32 rows of 802816 bf16 points, var_mean (two passes) then normalise + SiLU.
  EpilogueCase c{32, 64 * 112 * 112, 2, 2, 2};
  auto ch = price_epilogue(c);
  CHECK_FALSE(ch.row_on_chip);
  CHECK_FALSE(ch.fuse);
  // Fusing saves no bytes (every pass re-reads the row) and runs the epilogue on 32 rows' lanes.
  CHECK(ch.fused.bytes >= ch.reduction.bytes + ch.epilogue.bytes - 32 * 8);
  CHECK(ch.fused.lanes < ch.epilogue.lanes);
}

TEST_CASE("small graphs keep fusing: a launch costs more than their bytes", "[passes]") {
  EpilogueCase c{8, 144, 4, 4, 2};
  CHECK(price_epilogue(c).fuse);
}

TEST_CASE("a long softmax-like row with few rows is split from its epilogue", "[passes]") {
  EpilogueCase c{4, 1 << 20, 4, 4, 2};
  CHECK_FALSE(price_epilogue(c).fuse);
}

TEST_CASE("long rows with many rows and one pass still fuse when lanes fill the machine",
          "[passes]") {
  EpilogueCase c{4096, 65536, 2, 2, 1};  // 128 KiB rows: on chip
  CHECK(price_epilogue(c).fuse);
}

namespace {
// SiLU (sigmoid + mul) over f32 points, read by a spatial mean of the same points.
PrologueCase silu_into_mean(double points) {
  PrologueCase c;
  c.points = c.numel = points;
  c.op_bytes = kHeavyOpBytes + kOpBytes;
  c.other_ops = 2 * kOpBytes;  // the sum and the division by the count
  c.in_bytes = c.in_elem_bytes = c.out_bytes = c.out_read_bytes = 4;
  return c;
}
}  // namespace

TEST_CASE("a SiLU before a spatial mean stays fused: apart it is written and read back",
          "[passes]") {
  auto ch = price_prologue(silu_into_mean(8.0 * 32 * 56 * 56));
  CHECK(ch.fuse);
  CHECK(ch.unfused - ch.fused > 8.0 * 32 * 56 * 56 * 4);
}

TEST_CASE("small kernels keep fusing: a launch costs more than their work", "[passes]") {
  CHECK(price_prologue(silu_into_mean(2 * 8 * 8)).fuse);
}

TEST_CASE(
    "a broadcast producer recomputed per row is computed once when it tips the kernel "
    "into compute",
    "[passes]") {
  // (x * f(w)).sum(-1): x 8192x4096 bf16, w 4096 values, f with an erf and five simple ops,
  // recomputed for each of the 8192 rows on top of ops already in the kernel.
  PrologueCase c;
  c.points = 8192.0 * 4096;
  c.numel = 4096;
  c.op_bytes = kHeavyOpBytes + 5 * kOpBytes;
  c.other_bytes = 2;  // x
  c.other_ops = 2 * kOpBytes;
  c.in_bytes = 4096 * 2 / c.points;  // w: read once, then from cache
  c.in_elem_bytes = 2;
  c.out_bytes = 2;
  c.out_read_bytes = 4096 * 2 / c.points;
  auto ch = price_prologue(c);
  CHECK_FALSE(ch.fuse);
  SECTION("a cheap broadcast producer (w * 2) is recomputed: it hides under the loads") {
    c.op_bytes = kOpBytes;
    CHECK(price_prologue(c).fuse);
  }
}

TEST_CASE("a broadcast producer that re-reads large inputs per row is stored once", "[passes]") {
  // y = a * b over 2048x1024 f32 (8 MB each, re-read from memory), read by each of 64 rows.
  PrologueCase c;
  c.numel = 2048.0 * 1024;
  c.points = 64 * c.numel;
  c.op_bytes = kOpBytes;
  c.other_bytes = 4;
  c.in_bytes = 8;  // a and b at every point
  c.in_elem_bytes = 8;
  c.out_bytes = 4;
  c.out_read_bytes = 4;  // y, also past the cache
  auto ch = price_prologue(c);
  CHECK_FALSE(ch.fuse);
  CHECK(ch.fused - ch.unfused > 3 * c.points);
}
