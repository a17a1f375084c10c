#include "ir/loop_ir.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "core/errors.h"

namespace tl::ir {
namespace {

struct OpInfo {
  const char* name;
  int arity;  // -1: leaf
};

// NOTE: indexed by ExprOp; keep in declaration order.
constexpr OpInfo kOps[] = {
    {"load", -1},
    {"constant", -1},
    {"neg", 1},
    {"abs", 1},
    {"sign", 1},
    {"reciprocal", 1},
    {"sqrt", 1},
    {"rsqrt", 1},
    {"exp", 1},
    {"exp2", 1},
    {"expm1", 1},
    {"log", 1},
    {"log2", 1},
    {"log10", 1},
    {"log1p", 1},
    {"sin", 1},
    {"cos", 1},
    {"tan", 1},
    {"asin", 1},
    {"acos", 1},
    {"atan", 1},
    {"sinh", 1},
    {"cosh", 1},
    {"tanh", 1},
    {"sigmoid", 1},
    {"erf", 1},
    {"erfc", 1},
    {"erfinv", 1},
    {"floor", 1},
    {"ceil", 1},
    {"round", 1},
    {"trunc", 1},
    {"frac", 1},
    {"relu", 1},
    {"not", 1},
    {"bitnot", 1},
    {"isnan", 1},
    {"isinf", 1},
    {"isfinite", 1},
    {"cast", 1},
    {"add", 2},
    {"sub", 2},
    {"mul", 2},
    {"div", 2},
    {"floordiv", 2},
    {"truncdiv", 2},
    {"remainder", 2},
    {"fmod", 2},
    {"pow", 2},
    {"atan2", 2},
    {"maximum", 2},
    {"minimum", 2},
    {"eq", 2},
    {"ne", 2},
    {"lt", 2},
    {"le", 2},
    {"gt", 2},
    {"ge", 2},
    {"and", 2},
    {"or", 2},
    {"xor", 2},
    {"bitand", 2},
    {"bitor", 2},
    {"bitxor", 2},
    {"copysign", 2},
    {"check_index", 2},
    {"where", 3},
    {"reduce_sum", 1},
    {"reduce_prod", 1},
    {"reduce_max", 1},
    {"reduce_min", 1},
    {"reduce_argmax", 1},
    {"reduce_argmin", 1},
    {"index", -1},
    {"gather", 1},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(ExprOp::Gather) + 1);

bool is_between(ExprOp op, ExprOp lo, ExprOp hi) { return op >= lo && op <= hi; }

std::string fmt_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string fmt_ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string fmt_view(const BufferView& v) {
  std::string s = std::string(scalar_type_name(v.type)) + " strides=" + fmt_ints(v.strides);
  return v.offset ? s + " offset=" + std::to_string(v.offset) : s;
}

}  // namespace

const char* expr_op_name(ExprOp op) { return kOps[static_cast<int>(op)].name; }
int expr_op_arity(ExprOp op) { return kOps[static_cast<int>(op)].arity; }
bool is_reduction(ExprOp op) { return is_between(op, ExprOp::ReduceSum, ExprOp::ReduceArgMin); }
bool is_comparison(ExprOp op) { return is_between(op, ExprOp::Eq, ExprOp::Ge); }

const char* scalar_type_name(ScalarType t) {
  static const char* names[] = {"f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "b8"};
  return names[static_cast<int>(t)];
}

int scalar_type_size(ScalarType t) {
  static const int sizes[] = {4, 8, 2, 2, 1, 2, 4, 8, 1, 1};
  return sizes[static_cast<int>(t)];
}

bool is_floating(ScalarType t) { return static_cast<int>(t) <= static_cast<int>(ScalarType::BF16); }
bool is_half(ScalarType t) { return t == ScalarType::F16 || t == ScalarType::BF16; }

int64_t Kernel::outer_numel() const {
  int64_t n = 1;
  for (size_t i = 0; i + reduction_axes < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t Kernel::reduction_numel() const {
  int64_t n = 1;
  for (size_t i = shape.size() - reduction_axes; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<bool> inner_exprs(const Kernel& k) {
  std::vector<bool> inner(k.exprs.size(), false);
  size_t first_red = k.shape.size() - k.reduction_axes;
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (e.op == ExprOp::Index) {
      inner[i] = e.ivalue >= static_cast<int64_t>(first_red);
    } else if (e.op == ExprOp::Load || e.op == ExprOp::Gather) {
      const auto& st = k.inputs[e.buffer].strides;
      for (size_t a = first_red; a < st.size(); ++a) inner[i] = inner[i] || st[a] != 0;
      for (int o : e.operands) inner[i] = inner[i] || inner[o];
    } else if (!is_reduction(e.op)) {
      for (int o : e.operands) inner[i] = inner[i] || inner[o];
    }
  }
  return inner;
}

std::string Kernel::str() const {
  std::ostringstream os;
  os << "kernel " << name << fmt_ints(shape) << " reduce=" << reduction_axes
     << (runtime_sizes ? " sizes=runtime" : "");
  if (std::find(static_axes.begin(), static_axes.end(), 1) != static_axes.end()) {
    os << " static=";  // the axes whose sizes are model constants
    for (size_t d = 0; d < static_axes.size(); ++d) os << (d ? "," : "") << int(static_axes[d]);
  }
  os << ":\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    os << "  in" << i << " : " << fmt_view(inputs[i]) << "\n";
  for (size_t i = 0; i < exprs.size(); ++i) {
    const Expr& e = exprs[i];
    os << "  %" << i << " : " << scalar_type_name(e.type) << " = " << expr_op_name(e.op) << "(";
    if (e.op == ExprOp::Load) os << "in" << e.buffer;
    if (e.op == ExprOp::Gather) os << "in" << e.buffer << ", ";
    if (e.op == ExprOp::Index) os << "axis" << e.ivalue;
    if (e.op == ExprOp::Constant)
      os << (is_floating(e.type) ? fmt_double(e.value) : std::to_string(e.ivalue));
    for (size_t j = 0; j < e.operands.size(); ++j) os << (j ? ", %" : "%") << e.operands[j];
    os << ")\n";
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    os << "  out" << i << " : " << fmt_view(outputs[i].view) << " = %" << outputs[i].expr << "\n";
  return os.str();
}

namespace {

// The rule an expr breaks, or "" when it is well formed.
std::string expr_error(const Kernel& k, int i) {
  const Expr& e = k.exprs[i];
  int arity = expr_op_arity(e.op);
  if (static_cast<int>(e.operands.size()) != std::max(arity, 0)) return "wrong operand count";
  for (int o : e.operands)
    if (o < 0 || o >= i) return "operand %" + std::to_string(o) + " is not an earlier expr";
  auto ty = [&](int j) { return k.exprs[e.operands[j]].type; };
  if (e.op == ExprOp::Load || e.op == ExprOp::Gather) {
    if (e.buffer < 0 || e.buffer >= static_cast<int>(k.inputs.size())) return "no such input";
    if (e.op == ExprOp::Gather && ty(0) != ScalarType::I64) return "gather offset is not i64";
    return e.type == k.inputs[e.buffer].type ? "" : "load type differs from its input's";
  }
  if (e.op == ExprOp::Index) {
    if (e.ivalue < 0 || e.ivalue >= static_cast<int64_t>(k.shape.size())) return "no such axis";
    return e.type == ScalarType::I64 ? "" : "index is not i64";
  }
  if (e.op == ExprOp::Cast || e.op == ExprOp::Constant) return "";
  if (e.op == ExprOp::CheckIndex) {
    bool ok = e.type == ScalarType::I64 && ty(0) == ScalarType::I64 && ty(1) == ScalarType::I64;
    return ok ? "" : "check_index is not on i64";
  }
  if (is_half(e.type)) return "math on f16/bf16 (must be done in f32)";
  if (is_reduction(e.op)) {
    if (k.reduction_axes == 0) return "reduction in a kernel without reduction axes";
    bool arg = e.op == ExprOp::ReduceArgMax || e.op == ExprOp::ReduceArgMin;
    return (arg ? e.type == ScalarType::I64 : e.type == ty(0)) ? "" : "reduction result type";
  }
  if (e.op == ExprOp::Where) {
    if (ty(0) != ScalarType::Bool) return "where condition is not b8";
    return ty(1) == e.type && ty(2) == e.type ? "" : "where branches differ from the result type";
  }
  bool to_bool = is_comparison(e.op) || is_between(e.op, ExprOp::IsNan, ExprOp::IsFinite);
  if (to_bool && e.type != ScalarType::Bool) return "predicate result is not b8";
  if (is_between(e.op, ExprOp::Not, ExprOp::Not) || is_between(e.op, ExprOp::And, ExprOp::Xor))
    for (size_t j = 0; j < e.operands.size(); ++j)
      if (ty(j) != ScalarType::Bool) return "logical operand is not b8";
  if (is_between(e.op, ExprOp::BitNot, ExprOp::BitNot) ||
      is_between(e.op, ExprOp::BitAnd, ExprOp::BitXor))
    if (is_floating(e.type)) return "bitwise op on a floating type";
  if (is_between(e.op, ExprOp::Reciprocal, ExprOp::Frac) && !is_floating(e.type) &&
      !is_between(e.op, ExprOp::Floor, ExprOp::Trunc))
    return "floating-point math on an integer type";
  if (!to_bool && e.operands.size() == 1 && ty(0) != e.type) return "operand type differs";
  if (e.operands.size() == 2 && ty(0) != ty(1)) return "operand types differ";
  if (!to_bool && e.operands.size() == 2 && ty(0) != e.type) return "operand type differs";
  return "";
}

}  // namespace

void Kernel::verify() const {
  auto fail = [&](const std::string& where, const std::string& rule) {
    TL_CHECK(false) << "kernel " << name << ": " << where << ": " << rule << "\n" << str();
  };
  if (reduction_axes < 0 || reduction_axes > static_cast<int>(shape.size()))
    fail("shape", "reduction_axes out of range");
  for (int64_t s : shape)
    if (s < 1) fail("shape " + fmt_ints(shape), "sizes must be >= 1");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].strides.size() != shape.size()) fail("in" + std::to_string(i), "stride count");
  for (size_t i = 0; i < exprs.size(); ++i) {
    std::string err = expr_error(*this, static_cast<int>(i));
    if (err.empty()) continue;
    std::string where = "%";
    where.append(std::to_string(i)).append(" (").append(expr_op_name(exprs[i].op)).append(")");
    fail(where, err);
  }
  std::vector<bool> inner = inner_exprs(*this);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& o = outputs[i];
    std::string where = "out";
    where += std::to_string(i);
    if (o.expr < 0 || o.expr >= static_cast<int>(exprs.size())) fail(where, "no such expr");
    if (o.view.strides.size() != shape.size()) fail(where, "stride count");
    if (o.view.type != exprs[o.expr].type) fail(where, "store type differs from its expr's");
    if (!inner[o.expr]) continue;
    // NOTE: a value that is the same along the reduction axes may be stored at every point
    // (the emitters store it in a pass over them: softmax of a stride-0 row); a value that
    // varies along them has one place per point.
    for (size_t a = shape.size() - reduction_axes; a < shape.size(); ++a)
      if (o.view.strides[a] == 0 && shape[a] > 1)
        fail(where, "value varying along the reduction axes stored with a zero stride there");
  }
}

}  // namespace tl::ir
