// Reductions: per-point accumulators (one slot per point of a tile of outer
// points) and the passes over the reduction axes.
#include <functional>

#include "codegen/cpu/emitter.h"

namespace tl::codegen::cpu {

using ir::ExprOp;
using ST = ir::ScalarType;

void Emitter::make_accumulators() {
  acc_.resize(k_.exprs.size());
  for (size_t i = 0; i < k_.exprs.size(); ++i) {
    const ir::Expr& e = k_.exprs[i];
    if (!is_reduce(e.op)) continue;
    ST t = is_arg_reduce(e.op) ? type(e.operands[0]) : e.type;
    acc_[i].val = b_.CreateAlloca(llvm::ArrayType::get(reg_type(b_.getContext(), t), tile_));
    if (is_arg_reduce(e.op))
      acc_[i].idx = b_.CreateAlloca(llvm::ArrayType::get(b_.getInt64Ty(), tile_));
  }
}

llvm::Value* Emitter::slot(llvm::AllocaInst* a) {
  return b_.CreateInBoundsGEP(a->getAllocatedType(), a, {b_.getInt64(0), t_});
}
llvm::Type* Emitter::elem(llvm::AllocaInst* a) {
  return a->getAllocatedType()->getArrayElementType();
}

void Emitter::init_acc(int i) {
  const ir::Expr& e = k_.exprs[i];
  ST t = is_arg_reduce(e.op) ? type(e.operands[0]) : e.type;
  b_.CreateStore(reduce_identity(b_, e.op, t), slot(acc_[i].val));
  if (acc_[i].idx) b_.CreateStore(b_.getInt64(0), slot(acc_[i].idx));
}

void Emitter::accumulate(int i) {
  const ir::Expr& e = k_.exprs[i];
  llvm::Value* cur = b_.CreateLoad(elem(acc_[i].val), slot(acc_[i].val));
  if (!is_arg_reduce(e.op)) {
    llvm::Value* v = operand(e.operands[0], e.type);
    b_.CreateStore(reduce_combine(b_, e.op, e.type, cur, v), slot(acc_[i].val));
    return;
  }
  llvm::Value* v = value(e.operands[0]);
  llvm::Value* better = arg_reduce_better(b_, e.op, type(e.operands[0]), cur, v);
  b_.CreateStore(b_.CreateSelect(better, v, cur), slot(acc_[i].val));
  llvm::Value* idx = b_.CreateLoad(b_.getInt64Ty(), slot(acc_[i].idx));
  b_.CreateStore(b_.CreateSelect(better, rlin_, idx), slot(acc_[i].idx));
}

llvm::Value* Emitter::reduced(int i) {
  const ir::Expr& e = k_.exprs[i];
  if (!done_[i]) fail(i, "reduction read before its pass");
  if (is_arg_reduce(e.op))
    return convert(b_, b_.CreateLoad(b_.getInt64Ty(), slot(acc_[i].idx)), ST::I64, e.type);
  return b_.CreateLoad(elem(acc_[i].val), slot(acc_[i].val));
}

// Reduces `n` (<= tile_) neighbouring outer points whose offsets start at
// `off0`. With tile_ > 1 the innermost loop runs over those points, so a
// reduction along a strided axis (a column sum) still vectorises.
void Emitter::reduce_tile(const Offsets& off0, llvm::Value* n, const Shift& at) {
  done_.assign(k_.exprs.size(), 0);
  auto for_points = [&](const Offsets& off, auto&& body) {
    emit_for(b_, b_.getInt64(0), n, [&](llvm::Value* t) {
      t_ = t;
      new_scope(at(off, t));
      body();
    });
  };
  auto each_reduce = [&](int p, auto&& fn) {
    for (size_t i = 0; i < k_.exprs.size(); ++i)
      if (is_reduce(k_.exprs[i].op) && plan_.pass[i] == p) fn(static_cast<int>(i));
  };
  for (int p = 1; p <= plan_.n_passes; ++p) {
    cur_pass_ = p;
    for_points(off0, [&] { each_reduce(p, [&](int i) { init_acc(i); }); });
    reduction_loops(pass_loops(p), 0, off0, b_.getInt64(0), [&](const Offsets& off) {
      for_points(off, [&] {
        each_reduce(p, [&](int i) { accumulate(i); });
        store_outputs(p);
      });
    });
    each_reduce(p, [&](int i) { done_[i] = 1; });
  }
  cur_pass_ = plan_.n_passes + 1;
  for_points(off0, [&] { store_outputs(0); });
}

void Emitter::plan_stash() {
  Stash s = codegen::plan_stash(k_, plan_);
  stash_ = std::move(s.output), stash_pass_ = std::move(s.pass);
}

// a / r with r a reduction result: a * (1 / r), the reciprocal hoisted out of
// the row loop (as eager's softmax scales by 1 / sum).
llvm::Value* Emitter::div_by_reduction(int i) {
  const ir::Expr& e = k_.exprs[i];
  if (e.op != ExprOp::Div || !is_float_type(e.type) || !plan_.varies[e.operands[0]]) return nullptr;
  if (!is_reduce(k_.exprs[e.operands[1]].op)) return nullptr;
  llvm::Value* r = operand(e.operands[1], e.type);
  llvm::Value* recip = b_.CreateFDiv(llvm::ConstantFP::get(r->getType(), 1.0), r);
  return b_.CreateFMul(operand(e.operands[0], e.type), recip);
}

std::vector<size_t> Emitter::pass_loops(int p) const {
  return codegen::pass_loops(k_, s_, pass_buffers(k_, s_, plan_, {stash_, stash_pass_}, p));
}

void Emitter::reduction_loops(const std::vector<size_t>& loops, size_t l, const Offsets& off,
                              llvm::Value* rlin, const std::function<void(const Offsets&)>& body) {
  if (l == loops.size()) {
    rlin_ = rlin;
    body(off);
    return;
  }
  size_t first = loops[l], end = l + 1 < loops.size() ? loops[l + 1] : s_.red.size();
  // The loop's innermost axis gives the step; its size is the product of the loop's axes
  // (the row-major linear index over them is unchanged, as argmax/argmin need).
  size_t axis = s_.outer.size() + end - 1;
  llvm::Value* size = red_size(first);
  for (size_t d = first + 1; d < end; ++d) size = b_.CreateNSWMul(size, red_size(d));
  emit_for(b_, b_.getInt64(0), size, [&](llvm::Value* c) {
    std::vector<llvm::Value*> inner(off.size());
    for (size_t bi = 0; bi < off.size(); ++bi)
      inner[bi] = b_.CreateNSWAdd(off[bi], b_.CreateNSWMul(c, stride(bi, axis)));
    llvm::Value* r = b_.CreateNSWAdd(b_.CreateNSWMul(rlin, size), c);
    reduction_loops(loops, l + 1, inner, r, body);
  });
}

int Emitter::choose_tile() const { return outer_tile(s_, size_t(n_in_)); }

}  // namespace tl::codegen::cpu
