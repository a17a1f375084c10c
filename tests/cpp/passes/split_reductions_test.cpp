// How many parts a reduction with few results and long rows is split into.
#include "passes/split_reductions.h"

#include <catch2/catch.hpp>

using tl::passes::split_parts;

TEST_CASE("batch-norm statistics of 32 channels over 64x112x112 split the batch in 64",
          "[passes]") {
  CHECK(split_parts(32, 64 * 112 * 112, 64) == 64);
}

TEST_CASE("a column sum of a tall matrix splits its rows until 2048 partial rows", "[passes]") {
  CHECK(split_parts(64, 1 << 20, 1 << 20) == 32);
  CHECK(split_parts(1024, 65536, 65536) == 2);
}

TEST_CASE("many results or short rows are left whole", "[passes]") {
  CHECK(split_parts(4096, 1 << 20, 1 << 20) == 1);  // 4096 rows x 32 lanes fill the machine
  CHECK(split_parts(8, 4096, 4096) == 1);           // rows under kSplitMinRow
}

TEST_CASE("parts divide the split dimension and keep rows of a quarter of the minimum",
          "[passes]") {
  CHECK(split_parts(1, 1 << 18, 7) == 7);  // a prime dimension: all of it
  int64_t s = split_parts(2, 1 << 16, 1 << 16);
  CHECK((1 << 16) % s == 0);
  CHECK((1 << 16) / s >= tl::passes::kSplitMinRow / 4);
}
