#include "codegen/common/pass_loops.h"

#include <functional>

namespace tl::codegen {

using ir::ExprOp;

// Softmax-shaped outputs, out = a / s (or a * s) with `a` a row value that pass
// q - 1 already computed for a reduction and `s` per row: pass q - 1 stores `a`
// into the output and pass q scales it in place, so exp runs once per element,
// as in eager, instead of twice.
Stash plan_stash(const ir::Kernel& k, const PassPlan& plan) {
  Stash st;
  st.output.assign(k.exprs.size(), -1);
  st.pass.assign(k.exprs.size(), 0);
  size_t n_outer = k.shape.size() - k.reduction_axes;
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const auto& out = k.outputs[o];
    const ir::Expr& e = k.exprs[out.expr];
    int q = plan.out_pass[o];
    // NOTE: from pass q on the output holds the scaled value, so `a` is only read back from
    // it when no later pass needs `a` (softmax, then its output scaled and fed to a second
    // softmax in the same kernel, read the scaled values as `a`).
    if (q < 2 || q != plan.n_passes || (e.op != ExprOp::Div && e.op != ExprOp::Mul)) continue;
    int a = e.operands[0], s = e.operands[1];
    const ir::Expr& ea = k.exprs[a];
    if (!plan.varies[a] || plan.varies[s] || ea.op == ExprOp::Load || ea.op == ExprOp::Cast)
      continue;
    if (out.view.type != ea.type || st.output[a] >= 0) continue;
    bool distinct = true;  // every point of the row has its own element
    for (size_t d = n_outer; d < out.view.strides.size(); ++d)
      distinct = distinct && (out.view.strides[d] != 0 || k.shape[d] == 1);
    bool reduced_then = false;
    for (size_t r = 0; r < k.exprs.size(); ++r)
      reduced_then |=
          is_reduce(k.exprs[r].op) && k.exprs[r].operands[0] == a && plan.pass[r] == q - 1;
    if (!distinct || !reduced_then) continue;
    st.output[a] = static_cast<int>(o);
    st.pass[a] = q - 1;
  }
  return st;
}

std::vector<char> pass_buffers(const ir::Kernel& k, const LoopSpace& space, const PassPlan& plan,
                               const Stash& stash, int p) {
  const size_t n_in = k.inputs.size();
  std::vector<char> used(space.strides.size(), 0), seen(k.exprs.size(), 0);
  std::function<void(int)> visit = [&](int i) {
    if (seen[i]) return;
    seen[i] = 1;
    const ir::Expr& e = k.exprs[i];
    if (is_reduce(e.op) && plan.pass[i] < p) return;  // its accumulator
    // NOTE: a stashed value may be read back from its output or computed again (the
    // emitter decides per pass): both count.
    if (stash.output[i] >= 0) used[n_in + static_cast<size_t>(stash.output[i])] = 1;
    if (e.op == ExprOp::Load || e.op == ExprOp::Gather) used[e.buffer] = 1;
    if (e.op == ExprOp::Index) used[space.index_buffer.at(e.ivalue)] = 1;
    for (int o : e.operands) visit(o);
  };
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (is_reduce(k.exprs[i].op) && plan.pass[i] == p) visit(k.exprs[i].operands[0]);
  for (size_t i = 0; i < stash.output.size(); ++i)
    if (stash.output[i] >= 0 && p >= stash.pass[i]) {
      used[n_in + static_cast<size_t>(stash.output[i])] = 1;
      visit(static_cast<int>(i));
    }
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (plan.out_pass[o] == p) {
      used[n_in + o] = 1;
      visit(k.outputs[o].expr);
    }
  return used;
}

std::vector<size_t> pass_loops(const ir::Kernel& k, const LoopSpace& space,
                               const std::vector<char>& used) {
  std::vector<size_t> loops;
  // NOTE: GroupNorm(1, C) over a channels-last input reduces (C, H, W), contiguous in memory,
  // but its last pass reads the per-channel weight and bias (strides 1 along C, 0 along H and
  // W), so the kernel's loop space keeps C apart and the statistics passes summed 64 channels
  // at a time into a scalar (a horizontal vector sum every 64 elements). The passes that only
  // read the input run the three axes as one loop instead. Runtime-size kernels keep one loop
  // per axis: their strides are not known here (the kernel key holds only their signs).
  size_t n_outer = space.outer.size();
  for (size_t d = 0; d < space.red.size(); ++d) {
    bool joins = d > 0 && !k.runtime_sizes;
    for (size_t bi = 0; joins && bi < used.size(); ++bi)
      joins = !used[bi] ||
              space.strides[bi][n_outer + d - 1] == space.strides[bi][n_outer + d] * space.red[d];
    if (!joins) loops.push_back(d);
  }
  return loops;
}

}  // namespace tl::codegen
