#include "codegen/cpu/loop_space.h"

namespace tl::codegen::cpu {

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
