#include "codegen/cpu/loop_space.h"

namespace tl::codegen::cpu {

void emit_loop(Builder& b, llvm::Value* lo, llvm::Value* hi, const char* stem, const char* var,
               const std::function<llvm::Value*(llvm::Value*)>& body) {
  llvm::LLVMContext& c = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* cond = llvm::BasicBlock::Create(c, llvm::Twine(stem) + ".cond", f);
  auto* loop = llvm::BasicBlock::Create(c, llvm::Twine(stem) + ".body", f);
  auto* exit = llvm::BasicBlock::Create(c, llvm::Twine(stem) + ".end", f);
  b.CreateBr(cond);
  b.SetInsertPoint(cond);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, var);
  i->addIncoming(lo, pre);
  b.CreateCondBr(b.CreateICmpSLT(i, hi), loop, exit);
  b.SetInsertPoint(loop);
  llvm::Value* next = body(i);
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateBr(cond);
  b.SetInsertPoint(exit);
}

void emit_for(Builder& b, llvm::Value* lo, llvm::Value* hi,
              const std::function<void(llvm::Value*)>& body, int64_t step) {
  emit_loop(b, lo, hi, "for", "i", [&](llvm::Value* i) {
    body(i);
    return b.CreateNSWAdd(i, b.getInt64(step));
  });
}

}  // namespace tl::codegen::cpu
