// Fusion's axis maps (csrc/passes/fuse.h).
#include "passes/fuse.h"

#include <catch2/catch.hpp>
#include <map>

using tl::passes::AxisMap;
using tl::passes::AxisShift;

TEST_CASE("axis maps that differ only in a shift are different keys", "[passes]") {
  AxisMap plain{0, 1};
  AxisMap shifted{0, 1};
  shifted.shift = {AxisShift{}, AxisShift{-2, 3}};
  AxisMap other = shifted;
  other.shift[1].offset = -3;
  CHECK(plain != shifted);
  CHECK(shifted != other);
  CHECK(shifted.shifted());
  CHECK_FALSE(plain.shifted());
  CHECK(((plain < shifted) != (shifted < plain)));
  std::map<std::pair<int, AxisMap>, int> memo;  // as build_kernel.cpp memoises values
  memo[{0, plain}] = 1;
  memo[{0, shifted}] = 2;
  memo[{0, other}] = 3;
  CHECK(memo.size() == 3);
}

TEST_CASE("an all-zero shift equals no shift", "[passes]") {
  AxisMap a{0, -1};
  AxisMap b;
  b.add(0, AxisShift{});
  b.add(-1, AxisShift{-1, 4});  // dropped: the axis has no kernel index
  CHECK(a == b);
  CHECK_FALSE(b.shifted());
}
