#pragma once
// Symbolic sizes (docs/internals/dynamic-shapes.md, layer 2): an immutable
// expression over size symbols s0, s1, ... built only through the functions
// below, which fold constants and keep sums and products in one canonical
// form (flattened, terms sorted, like terms combined), so `s0*2 + s0` and
// `3*s0` are the same expression and compare equal. Shared by capture,
// guards, lowering and code generation; nothing here knows about Python.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tl::ir {

enum class SymOp : uint8_t { Int, Sym, Add, Mul, FloorDiv, Mod, Min, Max };

struct SymExpr;
using SymExprPtr = std::shared_ptr<const SymExpr>;

struct SymExpr {
  SymOp op = SymOp::Int;
  int64_t value = 0;             // Int: the value; Sym: the symbol's index
  std::vector<SymExprPtr> args;  // Add/Mul: 2+ terms, constant last; others: 2

  // The value given every symbol's value (symbols[i] for s<i>); FloorDiv and
  // Mod round as Python does (towards -inf; the sign of the divisor). Throws
  // InternalError for an unknown symbol or a division by zero.
  int64_t eval(const std::vector<int64_t>& symbols) const;
  std::optional<int64_t> constant() const;  // the value of an Int, else nullopt
  std::string str() const;                  // "2*s0 + s1", "(s0 + 1)//2"
  bool same_as(const SymExpr& o) const;     // structural equality
};

// A relation the capture relied on between two expressions (`s0 > 16`, `s1 == 64`):
// a size-generic entry serves only the sizes where it still comes out as `outcome`.
struct SymRelation {
  SymExprPtr lhs, rhs;
  int op = 2;  // 0 <, 1 <=, 2 ==, 3 !=, 4 >, 5 >= (CPython's Py_LT..Py_GE)
  bool outcome = true;
  std::string where;  // "file.py:12" of the user's line
  bool holds(const std::vector<int64_t>& symbols) const;
  std::string str() const;  // "s0 > 16"
};

SymExprPtr sym_int(int64_t v);
SymExprPtr sym_symbol(int index);
SymExprPtr sym_add(const SymExprPtr& a, const SymExprPtr& b);
SymExprPtr sym_mul(const SymExprPtr& a, const SymExprPtr& b);
SymExprPtr sym_floordiv(const SymExprPtr& a, const SymExprPtr& b);
SymExprPtr sym_mod(const SymExprPtr& a, const SymExprPtr& b);
SymExprPtr sym_min(const SymExprPtr& a, const SymExprPtr& b);
SymExprPtr sym_max(const SymExprPtr& a, const SymExprPtr& b);

}  // namespace tl::ir
