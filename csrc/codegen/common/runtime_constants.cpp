#include "codegen/common/runtime_constants.h"

#include "core/errors.h"

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

Magic64 magic_u64(int64_t d) {
  TL_CHECK(d >= 2) << "magic division by " << d;
  Magic64 m;
  while ((uint64_t{1} << m.shift) < static_cast<uint64_t>(d)) ++m.shift;
  using U128 = unsigned __int128;
  const U128 excess = (uint64_t{1} << m.shift) - static_cast<uint64_t>(d);  // < d
  m.multiplier = static_cast<uint64_t>((excess << 64) / static_cast<U128>(d)) + 1;
  return m;
}

}  // namespace tl::codegen
