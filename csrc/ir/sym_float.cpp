#include "ir/sym_float.h"

#include <cmath>
#include <sstream>

namespace tl::ir {

std::optional<double> SymFloat::eval(const std::vector<int64_t>& symbols) const {
  switch (op) {
    case FloatOp::Const:
      return value;
    case FloatOp::OfInt:
      return static_cast<double>(of_int->eval(symbols));
    case FloatOp::Sqrt: {
      std::optional<double> a = args[0]->eval(symbols);
      if (!a || *a < 0) return std::nullopt;  // NOTE: math.sqrt raises ValueError
      return std::sqrt(*a);
    }
    default:
      break;
  }
  std::optional<double> a = args[0]->eval(symbols), b = args[1]->eval(symbols);
  if (!a || !b) return std::nullopt;
  switch (op) {
    case FloatOp::Add:
      return *a + *b;
    case FloatOp::Sub:
      return *a - *b;
    case FloatOp::Mul:
      return *a * *b;
    case FloatOp::Div:
      if (*b == 0) return std::nullopt;  // NOTE: ZeroDivisionError
      return *a / *b;
    case FloatOp::Pow: {
      // NOTE: CPython's float pow raises for 0 ** negative, returns a complex number for a
      // negative base and a fractional exponent, and raises OverflowError for an infinite result.
      if (*a == 0 && *b < 0) return std::nullopt;
      if (*a < 0 && std::floor(*b) != *b) return std::nullopt;
      double r = std::pow(*a, *b);
      if (!std::isfinite(r)) return std::nullopt;
      return r;
    }
    default:
      return std::nullopt;
  }
}

std::string SymFloat::str() const {
  std::ostringstream s;
  switch (op) {
    case FloatOp::Const:
      s << value;
      break;
    case FloatOp::OfInt:
      s << "float(" << of_int->str() << ")";
      break;
    case FloatOp::Sqrt:
      s << "sqrt(" << args[0]->str() << ")";
      break;
    default: {
      const char* sign = op == FloatOp::Add   ? " + "
                         : op == FloatOp::Sub ? " - "
                         : op == FloatOp::Mul ? "*"
                         : op == FloatOp::Div ? "/"
                                              : "**";
      s << "(" << args[0]->str() << sign << args[1]->str() << ")";
    }
  }
  return s.str();
}

void SymFloat::int_parts(std::vector<std::pair<SymExprPtr, int64_t>>& out) const {
  if (op == FloatOp::OfInt) out.emplace_back(of_int, hint);
  for (const SymFloatPtr& a : args) a->int_parts(out);
}

SymFloatPtr sym_float_const(double v) {
  auto f = std::make_shared<SymFloat>();
  f->value = v;
  return f;
}

SymFloatPtr sym_float_of_int(SymExprPtr e, int64_t hint) {
  if (auto c = e->constant()) return sym_float_const(static_cast<double>(*c));
  auto f = std::make_shared<SymFloat>();
  f->op = FloatOp::OfInt;
  f->of_int = std::move(e);
  f->hint = hint;
  return f;
}

SymFloatPtr sym_float_binary(FloatOp op, SymFloatPtr a, SymFloatPtr b) {
  auto f = std::make_shared<SymFloat>();
  f->op = op;
  f->args = {std::move(a), std::move(b)};
  return f;
}

SymFloatPtr sym_float_sqrt(SymFloatPtr a) {
  auto f = std::make_shared<SymFloat>();
  f->op = FloatOp::Sqrt;
  f->args = {std::move(a)};
  return f;
}

}  // namespace tl::ir
