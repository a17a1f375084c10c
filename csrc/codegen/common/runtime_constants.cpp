#include "codegen/common/runtime_constants.h"

namespace tl::codegen {

using ir::ExprOp;

std::vector<char> runtime_constants(const ir::Kernel& k) {
  std::vector<char> out;
  if (!k.runtime_sizes) return out;
  out.assign(k.exprs.size(), 0);
  std::vector<char> literal(k.exprs.size(), 0);
  auto model_constant = [&](size_t i) {
    return i < k.static_constants.size() && k.static_constants[i];
  };
  for (const ir::Expr& e : k.exprs) {
    const bool divides = (e.op == ExprOp::Div && !ir::is_floating(e.type)) ||
                         e.op == ExprOp::FloorDiv || e.op == ExprOp::TruncDiv ||
                         e.op == ExprOp::Remainder || e.op == ExprOp::Fmod;
    if (e.op == ExprOp::Pow) literal[e.operands.at(1)] = 1;
    if (divides && model_constant(static_cast<size_t>(e.operands.at(1))))
      literal[e.operands.at(1)] = 1;
  }
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const ir::Expr& e = k.exprs[i];
    out[i] = e.op == ExprOp::Constant && !literal[i] &&
             (e.type == ir::ScalarType::I32 || e.type == ir::ScalarType::I64) && e.ivalue >= 2;
  }
  return out;
}

}  // namespace tl::codegen
