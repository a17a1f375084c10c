#include "codegen/common/index_math.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace tl::codegen {

namespace {

using ir::ExprOp;
using ir::ScalarType;

// The values an i64 expr can take; __int128 so products of i64 bounds are exact.
struct Range {
  __int128 lo, hi;
};

std::optional<Range> of_all(std::initializer_list<__int128> v) {
  return Range{std::min(v), std::max(v)};
}

// Floor division and Python's remainder by a positive constant.
__int128 floor_div(__int128 a, __int128 c) { return a >= 0 ? a / c : -((-a + c - 1) / c); }

std::optional<Range> range_of(const ir::Kernel& k, const ir::Expr& e,
                              const std::vector<std::optional<Range>>& r) {
  auto operand = [&](size_t i) { return r[e.operands.at(i)]; };
  switch (e.op) {
    case ExprOp::Index:
      if (e.ivalue < 0 || static_cast<size_t>(e.ivalue) >= k.shape.size()) return std::nullopt;
      return Range{0, std::max<__int128>(0, k.shape[e.ivalue] - 1)};
    case ExprOp::Constant:
      return Range{e.ivalue, e.ivalue};
    case ExprOp::Neg:
      if (auto a = operand(0)) return Range{-a->hi, -a->lo};
      return std::nullopt;
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Maximum:
    case ExprOp::Minimum: {
      auto a = operand(0), b = operand(1);
      if (!a || !b) return std::nullopt;
      if (e.op == ExprOp::Add) return Range{a->lo + b->lo, a->hi + b->hi};
      if (e.op == ExprOp::Sub) return Range{a->lo - b->hi, a->hi - b->lo};
      if (e.op == ExprOp::Maximum) return Range{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
      if (e.op == ExprOp::Minimum) return Range{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
      return of_all({a->lo * b->lo, a->lo * b->hi, a->hi * b->lo, a->hi * b->hi});
    }
    case ExprOp::FloorDiv:
    case ExprOp::Remainder: {
      auto a = operand(0), b = operand(1);
      if (!a || !b || b->lo != b->hi || b->lo <= 0) return std::nullopt;
      if (e.op == ExprOp::FloorDiv) return Range{floor_div(a->lo, b->lo), floor_div(a->hi, b->lo)};
      return Range{0, b->lo - 1};
    }
    case ExprOp::Where: {
      auto a = operand(1), b = operand(2);
      if (!a || !b) return std::nullopt;
      return Range{std::min(a->lo, b->lo), std::max(a->hi, b->hi)};
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

ir::Kernel narrow_index_math(const ir::Kernel& k) {
  ir::Kernel out = k;
  std::vector<std::optional<Range>> ranges(k.exprs.size());
  constexpr __int128 lo = std::numeric_limits<int32_t>::min();
  constexpr __int128 hi = std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const ir::Expr& e = k.exprs[i];
    if (e.type != ScalarType::I64) continue;
    // NOTE: an expr is narrowed only with all its operands (range_of needs
    // theirs), so no i64 value is ever truncated on its way in.
    std::optional<Range> r = range_of(k, e, ranges);
    if (!r || r->lo < lo || r->hi > hi) continue;
    ranges[i] = r;
    out.exprs[i].type = ScalarType::I32;
  }
  return out;
}

}  // namespace tl::codegen
