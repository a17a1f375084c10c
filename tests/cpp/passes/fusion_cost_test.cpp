// The fusion cost model's decisions on reductions with per-element epilogues.
#include "passes/fusion_cost.h"

#include <catch2/catch.hpp>

using tl::passes::EpilogueCase;
using tl::passes::price_epilogue;

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
