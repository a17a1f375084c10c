#pragma once
// Device-independent facts both emitters need about a kernel's exprs: which
// ops are unary, how many operands each reads, which compute in their
// operand's type, and in which pass over the reduction axes each expr and
// output is computed.
#include <cstddef>
#include <string>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::codegen {

inline bool is_unary(ir::ExprOp op) { return op >= ir::ExprOp::Neg && op <= ir::ExprOp::Cast; }
inline bool is_reduce(ir::ExprOp op) { return ir::is_reduction(op); }
inline bool is_arg_reduce(ir::ExprOp op) {
  return op == ir::ExprOp::ReduceArgMax || op == ir::ExprOp::ReduceArgMin;
}
// Ops whose operand type, not the result type, decides how they compute.
bool by_operand_type(ir::ExprOp op);
// Operands the op reads; 0 for the leaves (Load, Constant, Index).
size_t arity(ir::ExprOp op);

struct PassPlan {
  // pass[i]: for a reduction, the pass (1-based loop over the reduction axes)
  // that computes it; for anything else, the last pass whose result it needs.
  std::vector<int> pass;
  // Per output: the pass whose loop stores it; 0 when it is stored outside
  // the loops over the reduction axes.
  std::vector<int> out_pass;
  std::vector<char> varies;  // per expr: depends on the reduction axes
  int n_passes = 0;
};

// Throws tl::Error (Internal): "<emitter> <kernel>: expr %<i>: <why>", where
// `emitter` names the back end ("kernel", "CUDA kernel").
[[noreturn]] void expr_error(const ir::Kernel& k, const char* emitter, size_t i,
                             const std::string& why);

// Checks the exprs and outputs the emitters rely on (known ops, operand
// counts, operands before users, buffers and axes that exist), reporting the
// first broken one through expr_error.
PassPlan plan_passes(const ir::Kernel& k, const char* emitter);

}  // namespace tl::codegen
