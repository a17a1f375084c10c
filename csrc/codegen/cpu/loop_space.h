#pragma once
// Loops over the coalesced iteration space (codegen/common/loop_space.h) in
// LLVM IR.
#include <cstdint>
#include <functional>

#include "codegen/common/loop_space.h"
#include "codegen/cpu/scalar_ops.h"

namespace tl::codegen::cpu {

// for (i = lo; i < hi; i = body(i)) with blocks `stem`.cond/.body/.end and the
// induction variable named `var`; leaves the builder in the exit block.
void emit_loop(Builder& b, llvm::Value* lo, llvm::Value* hi, const char* stem, const char* var,
               const std::function<llvm::Value*(llvm::Value*)>& body);
// for (i = lo; i < hi; i += step) body(i); leaves the builder in the exit block.
void emit_for(Builder& b, llvm::Value* lo, llvm::Value* hi,
              const std::function<void(llvm::Value*)>& body, int64_t step = 1);

}  // namespace tl::codegen::cpu
