#pragma once
// Loop-IR Kernel -> one LLVM function
//   void fn(int64_t begin, int64_t end, char* const* bufs)
// bufs holds the data pointers of kernel.inputs then kernel.outputs; the
// function is a serial loop over the outer (pointwise) linear index range
// [begin, end) in row-major order, so the runtime can split any range across
// threads. Reductions run an inner loop per outer point (several passes when
// a reduced value feeds another reduction or a per-element output, as in
// softmax); f16/bf16 accumulate in f32.
#include <llvm/IR/Module.h>

#include <memory>
#include <string>
#include <vector>

#include "codegen/cpu/emission_key.h"
#include "ir/loop_ir.h"

namespace tl::codegen::cpu {

// With k.runtime_sizes, bufs[inputs + outputs] is one more entry: a
// `const int64_t*` dims array the function reads its loop sizes, strides and
// offsets from (0 and 1 stay constants in the code);
// `dims` (may be null) receives this kernel's values for it, `sites` (may be
// null) where in the loop space each comes from (emission_key.h); `literals` (may be null:
// literal_values(k, its loop space)) the sites written as literals, each with k's own value.
// Throws tl::Error (Internal) naming the kernel for IR it cannot lower.
std::unique_ptr<llvm::Module> emit_kernel(const ir::Kernel& k, const std::string& fn_name,
                                          llvm::LLVMContext& ctx,
                                          std::vector<int64_t>* dims = nullptr,
                                          std::vector<int64_t>* sites = nullptr,
                                          const Literals* literals = nullptr);

}  // namespace tl::codegen::cpu
