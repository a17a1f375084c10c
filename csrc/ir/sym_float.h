#pragma once
// Floats computed from symbolic sizes (docs/internals/dynamic-shapes.md): the attention scale
// `x.size(-1) ** -0.5`, `math.sqrt(d)`, `1 / math.sqrt(d)`, `t / 2`. A size-generic entry
// recomputes such a float at new sizes, exactly as CPython would (IEEE double arithmetic on the
// ints converted to float), instead of pinning the sizes it came from.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/sym_expr.h"

namespace tl::ir {

enum class FloatOp : uint8_t { Const, OfInt, Add, Sub, Mul, Div, Pow, Sqrt };

struct SymFloat;
using SymFloatPtr = std::shared_ptr<const SymFloat>;

struct SymFloat {
  FloatOp op = FloatOp::Const;
  double value = 0;               // Const
  SymExprPtr of_int;              // OfInt: the int expression
  int64_t hint = 0;               // OfInt: its value where the trace made it
  std::vector<SymFloatPtr> args;  // Add..Pow: 2; Sqrt: 1

  // The value given every symbol's value; nullopt where CPython raises instead (a division by
  // zero, the square root of a negative number, a power that is complex or overflows).
  std::optional<double> eval(const std::vector<int64_t>& symbols) const;
  std::string str() const;  // "s0**-0.5", "1/sqrt(s0)"
  // Each int expression inside with the value it had where the trace made it.
  void int_parts(std::vector<std::pair<SymExprPtr, int64_t>>& out) const;
};

SymFloatPtr sym_float_const(double v);
SymFloatPtr sym_float_of_int(SymExprPtr e, int64_t hint);
// op is one of Add, Sub, Mul, Div, Pow.
SymFloatPtr sym_float_binary(FloatOp op, SymFloatPtr a, SymFloatPtr b);
SymFloatPtr sym_float_sqrt(SymFloatPtr a);

}  // namespace tl::ir
