#include "codegen/cpu/loop_space.h"

#include "core/errors.h"

namespace tl::codegen::cpu {

namespace {
struct Axes {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // [buffer][axis]
};

// Drops size-1 axes, then merges axis i into i+1 when every buffer has
// stride[i] == stride[i+1] * size[i+1] (row-major linear order is preserved,
// which argmax/argmin indices rely on).
Axes merge(Axes a) {
  Axes out;
  out.strides.resize(a.strides.size());
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    if (a.sizes[d] == 1) continue;
    bool mergeable = !out.sizes.empty();
    for (size_t bi = 0; mergeable && bi < a.strides.size(); ++bi)
      mergeable = out.strides[bi].back() == a.strides[bi][d] * a.sizes[d];
    if (mergeable) {
      out.sizes.back() *= a.sizes[d];
      for (size_t bi = 0; bi < a.strides.size(); ++bi) out.strides[bi].back() = a.strides[bi][d];
      continue;
    }
    out.sizes.push_back(a.sizes[d]);
    for (size_t bi = 0; bi < a.strides.size(); ++bi) out.strides[bi].push_back(a.strides[bi][d]);
  }
  return out;
}
}  // namespace

LoopSpace coalesce(const ir::Kernel& k) {
  size_t n = k.shape.size();
  TL_CHECK(k.reduction_axes >= 0 && static_cast<size_t>(k.reduction_axes) <= n)
      << "kernel " << k.name << ": " << k.reduction_axes << " reduction axes of " << n;
  size_t n_outer = n - k.reduction_axes;
  std::vector<const ir::BufferView*> views;
  for (auto& v : k.inputs) views.push_back(&v);
  for (auto& o : k.outputs) views.push_back(&o.view);
  std::vector<ir::BufferView> index_views;
  std::map<int64_t, size_t> index_buffer;
  for (const ir::Expr& e : k.exprs)
    if (e.op == ir::ExprOp::Index && e.ivalue >= 0 && static_cast<size_t>(e.ivalue) < n &&
        !index_buffer.count(e.ivalue)) {
      index_buffer[e.ivalue] = views.size() + index_views.size();
      ir::BufferView v{ir::ScalarType::I64, std::vector<int64_t>(n, 0), 0};
      v.strides[e.ivalue] = 1;
      index_views.push_back(std::move(v));
    }
  for (auto& v : index_views) views.push_back(&v);
  Axes outer, red;
  outer.strides.resize(views.size());
  red.strides.resize(views.size());
  for (size_t d = 0; d < n; ++d) (d < n_outer ? outer : red).sizes.push_back(k.shape[d]);
  for (size_t bi = 0; bi < views.size(); ++bi) {
    TL_CHECK(views[bi]->strides.size() == n)
        << "kernel " << k.name << ": buffer " << bi << " has " << views[bi]->strides.size()
        << " strides for " << n << " axes";
    for (size_t d = 0; d < n; ++d)
      (d < n_outer ? outer : red).strides[bi].push_back(views[bi]->strides[d]);
  }
  outer = merge(std::move(outer));
  red = merge(std::move(red));
  auto ensure_axis = [&](Axes& a) {
    if (!a.sizes.empty()) return;
    a.sizes.push_back(1);
    for (auto& s : a.strides) s.push_back(0);
  };
  ensure_axis(outer);
  if (k.reduction_axes > 0) ensure_axis(red);
  LoopSpace s;
  s.outer = outer.sizes;
  s.red = red.sizes;
  s.index_buffer = std::move(index_buffer);
  for (size_t bi = 0; bi < views.size(); ++bi) {
    auto st = outer.strides[bi];
    st.insert(st.end(), red.strides[bi].begin(), red.strides[bi].end());
    s.strides.push_back(std::move(st));
    s.offsets.push_back(views[bi]->offset);
  }
  return s;
}

void emit_for(Builder& b, llvm::Value* lo, llvm::Value* hi,
              const std::function<void(llvm::Value*)>& body, int64_t step) {
  llvm::LLVMContext& c = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* cond = llvm::BasicBlock::Create(c, "for.cond", f);
  auto* loop = llvm::BasicBlock::Create(c, "for.body", f);
  auto* exit = llvm::BasicBlock::Create(c, "for.end", f);
  b.CreateBr(cond);
  b.SetInsertPoint(cond);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, "i");
  i->addIncoming(lo, pre);
  b.CreateCondBr(b.CreateICmpSLT(i, hi), loop, exit);
  b.SetInsertPoint(loop);
  body(i);
  llvm::Value* next = b.CreateNSWAdd(i, b.getInt64(step));
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateBr(cond);
  b.SetInsertPoint(exit);
}

}  // namespace tl::codegen::cpu
