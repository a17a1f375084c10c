#include "ir/sym_expr.h"

#include <algorithm>
#include <map>

#include "core/errors.h"

namespace tl::ir {
namespace {

SymExprPtr make(SymOp op, int64_t value, std::vector<SymExprPtr> args = {}) {
  auto e = std::make_shared<SymExpr>();
  e->op = op;
  e->value = value;
  e->args = std::move(args);
  return e;
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t pymod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }

// A term of a sum as coefficient * rest (rest null for a constant).
std::pair<int64_t, SymExprPtr> split_coefficient(const SymExprPtr& t) {
  if (auto c = t->constant()) return {*c, nullptr};
  if (t->op == SymOp::Mul)
    if (auto c = t->args.back()->constant()) {
      std::vector<SymExprPtr> rest(t->args.begin(), t->args.end() - 1);
      return {*c, rest.size() == 1 ? rest[0] : make(SymOp::Mul, 0, std::move(rest))};
    }
  return {1, t};
}

// Flattened operands of an associative op, constants folded into one.
std::vector<SymExprPtr> flatten(SymOp op, const SymExprPtr& a, const SymExprPtr& b,
                                int64_t& folded) {
  std::vector<SymExprPtr> out;
  for (const SymExprPtr& x : {a, b}) {
    const std::vector<SymExprPtr> one{x};
    for (const SymExprPtr& t : x->op == op ? x->args : one) {
      if (auto c = t->constant())
        folded = op == SymOp::Add ? folded + *c : folded * *c;
      else
        out.push_back(t);
    }
  }
  return out;
}

bool by_text(const SymExprPtr& a, const SymExprPtr& b) { return a->str() < b->str(); }

// True when every term of `e` is a multiple of `c` (c > 0).
bool divisible(const SymExprPtr& e, int64_t c) {
  if (e->op == SymOp::Add)
    return std::all_of(e->args.begin(), e->args.end(),
                       [&](const SymExprPtr& t) { return divisible(t, c); });
  return split_coefficient(e).first % c == 0;
}

// e / c for an `e` that divisible() accepted.
SymExprPtr divide_exact(const SymExprPtr& e, int64_t c) {
  if (e->op == SymOp::Add) {
    SymExprPtr out = sym_int(0);
    for (const SymExprPtr& t : e->args) out = sym_add(out, divide_exact(t, c));
    return out;
  }
  auto [k, rest] = split_coefficient(e);
  return rest ? sym_mul(rest, sym_int(k / c)) : sym_int(k / c);
}

}  // namespace

std::optional<int64_t> SymExpr::constant() const {
  return op == SymOp::Int ? std::optional<int64_t>(value) : std::nullopt;
}

int64_t SymExpr::eval(const std::vector<int64_t>& symbols) const {
  switch (op) {
    case SymOp::Int:
      return value;
    case SymOp::Sym:
      TL_CHECK(value >= 0 && static_cast<size_t>(value) < symbols.size())
          << "symbolic size s" << value << " has no value (" << symbols.size() << " given)";
      return symbols[value];
    case SymOp::Add:
    case SymOp::Mul: {
      int64_t acc = op == SymOp::Add ? 0 : 1;
      for (const auto& a : args)
        acc = op == SymOp::Add ? acc + a->eval(symbols) : acc * a->eval(symbols);
      return acc;
    }
    default:
      break;
  }
  int64_t a = args[0]->eval(symbols), b = args[1]->eval(symbols);
  if (op == SymOp::Min) return std::min(a, b);
  if (op == SymOp::Max) return std::max(a, b);
  TL_CHECK(b != 0) << "symbolic size " << str() << " divides by zero";
  return op == SymOp::FloorDiv ? floordiv(a, b) : pymod(a, b);
}

std::string SymExpr::str() const {
  auto wrapped = [](const SymExprPtr& e) {
    bool simple =
        e->op == SymOp::Int || e->op == SymOp::Sym || e->op == SymOp::Min || e->op == SymOp::Max;
    return simple ? e->str() : "(" + e->str() + ")";
  };
  switch (op) {
    case SymOp::Int:
      return std::to_string(value);
    case SymOp::Sym:
      return "s" + std::to_string(value);
    case SymOp::Add: {
      std::string s;
      for (const auto& a : args) s += (s.empty() ? "" : " + ") + a->str();
      return s;
    }
    case SymOp::Mul: {
      // NOTE: the coefficient first reads as people write it: 2*s0.
      std::string s = args.back()->constant() ? args.back()->str() : "";
      for (size_t i = 0; i + (args.back()->constant() ? 1 : 0) < args.size(); ++i)
        s += (s.empty() ? "" : "*") + wrapped(args[i]);
      return s;
    }
    case SymOp::FloorDiv:
      return wrapped(args[0]) + "//" + wrapped(args[1]);
    case SymOp::Mod:
      return wrapped(args[0]) + "%" + wrapped(args[1]);
    case SymOp::Min:
    case SymOp::Max:
      return std::string(op == SymOp::Min ? "min(" : "max(") + args[0]->str() + ", " +
             args[1]->str() + ")";
  }
  return "?";
}

bool SymExpr::same_as(const SymExpr& o) const {
  if (op != o.op || value != o.value || args.size() != o.args.size()) return false;
  for (size_t i = 0; i < args.size(); ++i)
    if (!args[i]->same_as(*o.args[i])) return false;
  return true;
}

SymExprPtr sym_int(int64_t v) { return make(SymOp::Int, v); }
SymExprPtr sym_symbol(int index) { return make(SymOp::Sym, index); }

SymExprPtr sym_add(const SymExprPtr& a, const SymExprPtr& b) {
  int64_t c = 0;
  std::vector<SymExprPtr> terms = flatten(SymOp::Add, a, b, c);
  // Like terms: k1*X + k2*X = (k1 + k2)*X, keyed by X's text.
  std::map<std::string, std::pair<int64_t, SymExprPtr>> like;
  for (const SymExprPtr& t : terms) {
    auto [k, rest] = split_coefficient(t);
    auto [it, fresh] = like.try_emplace(rest->str(), k, rest);
    if (!fresh) it->second.first += k;
  }
  std::vector<SymExprPtr> out;
  for (auto& [text, kr] : like)
    if (kr.first != 0)
      out.push_back(kr.first == 1 ? kr.second : sym_mul(kr.second, sym_int(kr.first)));
  std::sort(out.begin(), out.end(), by_text);
  if (c != 0 || out.empty()) out.push_back(sym_int(c));
  return out.size() == 1 ? out[0] : make(SymOp::Add, 0, std::move(out));
}

SymExprPtr sym_mul(const SymExprPtr& a, const SymExprPtr& b) {
  // A constant times a sum distributes: view(2*(s0 + 1)) and view(2*s0 + 2) agree.
  for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}})
    if (x->constant() && y->op == SymOp::Add) {
      SymExprPtr out = sym_int(0);
      for (const SymExprPtr& t : y->args) out = sym_add(out, sym_mul(t, x));
      return out;
    }
  int64_t c = 1;
  std::vector<SymExprPtr> factors = flatten(SymOp::Mul, a, b, c);
  if (c == 0 || factors.empty()) return sym_int(c);
  std::sort(factors.begin(), factors.end(), by_text);
  if (c != 1) factors.push_back(sym_int(c));
  return factors.size() == 1 ? factors[0] : make(SymOp::Mul, 0, std::move(factors));
}

SymExprPtr sym_floordiv(const SymExprPtr& a, const SymExprPtr& b) {
  auto ca = a->constant(), cb = b->constant();
  TL_CHECK(!cb || *cb != 0) << "symbolic size " << a->str() << "//0";
  if (ca && cb) return sym_int(floordiv(*ca, *cb));
  if (cb && *cb == 1) return a;
  if (cb && *cb > 0 && divisible(a, *cb)) return divide_exact(a, *cb);
  return make(SymOp::FloorDiv, 0, {a, b});
}

SymExprPtr sym_mod(const SymExprPtr& a, const SymExprPtr& b) {
  auto ca = a->constant(), cb = b->constant();
  TL_CHECK(!cb || *cb != 0) << "symbolic size " << a->str() << "%0";
  if (ca && cb) return sym_int(pymod(*ca, *cb));
  if (cb && *cb > 0 && divisible(a, *cb)) return sym_int(0);
  return make(SymOp::Mod, 0, {a, b});
}

SymExprPtr sym_min(const SymExprPtr& a, const SymExprPtr& b) {
  if (a->constant() && b->constant()) return sym_int(std::min(*a->constant(), *b->constant()));
  if (a->same_as(*b)) return a;
  return make(SymOp::Min, 0, by_text(b, a) ? std::vector{b, a} : std::vector{a, b});
}

SymExprPtr sym_max(const SymExprPtr& a, const SymExprPtr& b) {
  if (a->constant() && b->constant()) return sym_int(std::max(*a->constant(), *b->constant()));
  if (a->same_as(*b)) return a;
  return make(SymOp::Max, 0, by_text(b, a) ? std::vector{b, a} : std::vector{a, b});
}

bool SymRelation::holds(const std::vector<int64_t>& symbols) const {
  int64_t a = lhs->eval(symbols), b = rhs->eval(symbols);
  bool r = false;
  switch (op) {
    case 0:
      r = a < b;
      break;
    case 1:
      r = a <= b;
      break;
    case 2:
      r = a == b;
      break;
    case 3:
      r = a != b;
      break;
    case 4:
      r = a > b;
      break;
    default:
      r = a >= b;
      break;
  }
  return r == outcome;
}

std::string SymRelation::str() const {
  static const char* names[] = {"<", "<=", "==", "!=", ">", ">="};
  static const int negated[] = {5, 4, 3, 2, 1, 0};
  int shown = outcome ? op : negated[op];
  return lhs->str() + " " + names[shown < 0 || shown > 5 ? 2 : shown] + " " + rhs->str();
}

}  // namespace tl::ir
