// Symbolic size expressions: canonical forms, simplification and Python's
// rounding in evaluation.
#include "ir/sym_expr.h"

#include <catch2/catch.hpp>

#include "core/errors.h"

using namespace tl::ir;

namespace {
SymExprPtr s(int i) { return sym_symbol(i); }
SymExprPtr n(int64_t v) { return sym_int(v); }
}  // namespace

TEST_CASE("sums and products fold constants and combine like terms", "[ir][sym]") {
  CHECK(sym_add(n(2), n(3))->constant() == 5);
  CHECK(sym_mul(s(0), n(1))->same_as(*s(0)));
  CHECK(sym_mul(s(0), n(0))->constant() == 0);
  SymExprPtr three_s0 = sym_add(sym_mul(s(0), n(2)), s(0));
  CHECK(three_s0->same_as(*sym_mul(n(3), s(0))));
  CHECK(three_s0->str() == "3*s0");
  CHECK(sym_add(s(1), s(0))->same_as(*sym_add(s(0), s(1))));
  CHECK(sym_add(sym_add(s(0), n(1)), sym_mul(s(0), n(-1)))->constant() == 1);
  CHECK(sym_mul(n(2), sym_add(s(0), n(1)))->str() == "2*s0 + 2");
  CHECK(sym_mul(s(1), s(0))->str() == "s0*s1");
}

TEST_CASE("floordiv and mod simplify exact multiples", "[ir][sym]") {
  SymExprPtr e = sym_add(sym_mul(s(0), n(64)), sym_mul(s(1), n(128)));
  CHECK(sym_floordiv(e, n(64))->same_as(*sym_add(s(0), sym_mul(s(1), n(2)))));
  CHECK(sym_mod(e, n(64))->constant() == 0);
  CHECK(sym_floordiv(s(0), n(1))->same_as(*s(0)));
  CHECK(sym_floordiv(s(0), n(2))->str() == "s0//2");
  CHECK(sym_mod(sym_add(s(0), n(1)), n(8))->str() == "(s0 + 1)%8");
  CHECK(sym_floordiv(n(-7), n(2))->constant() == -4);  // Python rounds towards -inf
  CHECK(sym_mod(n(-7), n(3))->constant() == 2);
  CHECK_THROWS_AS(sym_floordiv(s(0), n(0)), tl::Error);
}

TEST_CASE("min and max fold constants and equal operands", "[ir][sym]") {
  CHECK(sym_min(n(3), n(9))->constant() == 3);
  CHECK(sym_max(s(0), s(0))->same_as(*s(0)));
  CHECK(sym_min(s(1), s(0))->same_as(*sym_min(s(0), s(1))));
  CHECK(sym_max(s(0), n(4))->str() == "max(4, s0)");
}

TEST_CASE("evaluation substitutes symbol values", "[ir][sym]") {
  // (s0*s1 + 3) // 4 - s1 % 3, as view() arguments combine sizes
  SymExprPtr e = sym_add(sym_floordiv(sym_add(sym_mul(s(0), s(1)), n(3)), n(4)),
                         sym_mul(sym_mod(s(1), n(3)), n(-1)));
  for (int64_t a : {2, 5, 17})
    for (int64_t b : {3, 8, 31}) CHECK(e->eval({a, b}) == (a * b + 3) / 4 - b % 3);
  CHECK(sym_min(s(0), sym_mul(s(1), n(2)))->eval({7, 3}) == 6);
  CHECK_THROWS_AS(s(2)->eval({1, 2}), tl::Error);
  CHECK_THROWS_AS(sym_floordiv(s(0), s(1))->eval({4, 0}), tl::Error);
}
