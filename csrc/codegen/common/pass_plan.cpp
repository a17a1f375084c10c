#include "codegen/common/pass_plan.h"

#include <algorithm>

#include "core/errors.h"

namespace tl::codegen {

using ir::ExprOp;

bool by_operand_type(ExprOp op) {
  return op == ExprOp::IsNan || op == ExprOp::IsInf || op == ExprOp::IsFinite ||
         op == ExprOp::Not || (op >= ExprOp::Eq && op <= ExprOp::Xor);
}

size_t arity(ExprOp op) {
  if (op == ExprOp::Load || op == ExprOp::Constant || op == ExprOp::Index) return 0;
  if (is_unary(op) || is_reduce(op) || op == ExprOp::Gather) return 1;
  return op == ExprOp::Where ? 3 : 2;
}

void expr_error(const ir::Kernel& k, const char* emitter, size_t i, const std::string& why) {
  {
    ErrorBuilder(ErrorKind::Internal, __FILE__, __LINE__, "kernel IR")
        << emitter << " " << k.name << ": expr %" << i << ": " << why;
  }
  __builtin_unreachable();  // the builder throws
}

PassPlan plan_passes(const ir::Kernel& k, const char* emitter) {
  auto fail = [&](size_t i, const std::string& why) { expr_error(k, emitter, i, why); };
  size_t n = k.exprs.size(), n_outer = k.shape.size() - k.reduction_axes;
  int n_in = static_cast<int>(k.inputs.size());
  PassPlan p;
  p.pass.assign(n, 0);
  p.varies.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const ir::Expr& e = k.exprs[i];
    // NOTE: an op added to the IR but not here would otherwise be emitted as a binary op.
    int n_ops = static_cast<int>(arity(e.op));
    if (ir::expr_op_arity(e.op) != (n_ops == 0 ? -1 : n_ops))
      fail(i, std::string("op ") + ir::expr_op_name(e.op) + " is not known to the emitter");
    if (e.operands.size() != arity(e.op)) fail(i, "wrong operand count");
    for (int o : e.operands) {
      if (o < 0 || static_cast<size_t>(o) >= i) fail(i, "operand is not an earlier expr");
      p.pass[i] = std::max(p.pass[i], p.pass[o]);
      p.varies[i] |= p.varies[o];
    }
    if (e.op == ExprOp::Load || e.op == ExprOp::Gather) {
      if (e.buffer < 0 || e.buffer >= n_in) fail(i, "load of a missing input");
      const auto& st = k.inputs[e.buffer].strides;
      for (size_t d = n_outer; d < st.size(); ++d) p.varies[i] |= st[d] != 0;
    } else if (e.op == ExprOp::Index) {
      if (e.ivalue < 0 || static_cast<size_t>(e.ivalue) >= k.shape.size())
        fail(i, "index of a missing axis");
      p.varies[i] = static_cast<size_t>(e.ivalue) >= n_outer;
    } else if (is_reduce(e.op)) {
      if (k.reduction_axes == 0) fail(i, "reduction in a kernel without reduction axes");
      p.pass[i] += 1;
      p.varies[i] = 0;
      p.n_passes = std::max(p.n_passes, p.pass[i]);
    }
  }
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    int e = k.outputs[o].expr;
    if (e < 0 || static_cast<size_t>(e) >= n) fail(o, "output of a missing expr");
    bool in_loop = false;
    if (k.reduction_axes > 0) {
      const auto& st = k.outputs[o].view.strides;
      in_loop = p.varies[e];
      for (size_t d = n_outer; d < st.size(); ++d) in_loop |= st[d] != 0;
    }
    p.out_pass.push_back(in_loop ? p.pass[e] + 1 : 0);
    p.n_passes = std::max(p.n_passes, p.out_pass.back());
  }
  return p;
}

}  // namespace tl::codegen
