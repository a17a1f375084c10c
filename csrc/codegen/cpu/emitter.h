#pragma once
// The per-kernel LLVM IR emitter behind emit_kernel (kernel_emitter.cpp:
// analysis, expressions, outer rows; reduce_emitter.cpp: accumulators and
// reduction passes). Internal to codegen/cpu.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/common/pass_loops.h"
#include "codegen/common/pass_plan.h"
#include "codegen/cpu/emission_key.h"
#include "codegen/cpu/loop_space.h"

namespace tl::codegen::cpu {

class Emitter {
 public:
  using ST = ir::ScalarType;
  using Offsets = std::vector<llvm::Value*>;  // element offset per buffer
  // Offsets moved `j` steps along the last outer axis.
  using Shift = std::function<Offsets(const Offsets&, llvm::Value*)>;

  // `dims` (may be null) receives the numbers a kernel with runtime sizes
  // reads from its dims array, in the order of that array, and `sites` (may be
  // null) where each is used (emission_key.h).
  // `literals` (may be null: literal_values of the kernel): the sites written as literals.
  Emitter(const ir::Kernel& k, llvm::Function* f, std::vector<int64_t>* dims = nullptr,
          std::vector<int64_t>* sites = nullptr, const Literals* literals = nullptr)
      : k_(k),
        s_(cpu_loop_space(k)),
        b_(f->getContext()),
        f_(f),
        n_in_(k.inputs.size()),
        dims_out_(dims),
        sites_out_(sites),
        literals_(literals ? *literals : literal_values(k, s_)) {}
  void run();

 private:
  [[noreturn]] void fail(size_t i, const std::string& why);
  ST type(int i) const { return k_.exprs[i].type; }
  void analyse();
  llvm::Value* operand(int i, ST t) { return convert(b_, value(i), type(i), t); }
  llvm::Value* value(int i);
  void new_scope(const Offsets& off) {
    off_ = off;
    cache_.assign(k_.exprs.size(), nullptr);
  }
  void store_outputs(int pass);
  void plan_stash();
  llvm::Value* div_by_reduction(int i);
  // A size, stride or offset of the loop space: a constant, or (runtime sizes,
  // values other than 0 and 1) a number read from the dims array once, in the
  // entry block. `site` names where it is used, so each site has one slot.
  llvm::Value* num(int64_t site, int64_t v);
  // A number read from the dims array whatever its value (a magic multiplier or shift).
  llvm::Value* param(int64_t site, int64_t v);
  // Integer division or remainder of expr i by a runtime divisor (runtime_constants.h) with its
  // magic numbers, or null when expr i is no such division.
  llvm::Value* magic_divide(int i);
  bool is_literal(int64_t site) const;
  llvm::Value* outer_size(size_t d) { return num(outer_site(d), s_.outer[d]); }
  llvm::Value* red_size(size_t d) { return num(red_site(d), s_.red[d]); }
  llvm::Value* stride(size_t bi, size_t axis) {
    return num(stride_site(bi, axis), s_.strides[bi][axis]);
  }
  llvm::Value* offset(size_t bi) { return num(offset_site(bi), s_.offsets[bi]); }
  void rows(llvm::Value* begin, llvm::Value* end);
  // One row starting at outer linear index `idx`; returns the next row's index.
  llvm::Value* row(llvm::Value* idx, llvm::Value* end);
  // Pointwise kernels: the values of the exprs that do not change along the
  // last outer axis, computed at `row_start` (null for the others).
  std::vector<llvm::Value*> row_invariants(const Offsets& row_start);

  // reduce_emitter.cpp
  int choose_tile() const;
  void make_accumulators();
  // The accumulator slot of the current tile point t_, and its element type.
  llvm::Value* slot(llvm::AllocaInst* a);
  llvm::Type* elem(llvm::AllocaInst* a);
  void init_acc(int i);
  void accumulate(int i);
  llvm::Value* reduced(int i);
  void reduce_tile(const Offsets& off0, llvm::Value* n, const Shift& at);
  // Pass `p`'s loops over the reduction axes (codegen/common/pass_loops.h).
  std::vector<size_t> pass_loops(int p) const;
  void reduction_loops(const std::vector<size_t>& loops, size_t l, const Offsets& off,
                       llvm::Value* rlin, const std::function<void(const Offsets&)>& body);

  struct Acc {
    llvm::AllocaInst* val = nullptr;
    llvm::AllocaInst* idx = nullptr;  // argmax/argmin
  };
  const ir::Kernel& k_;
  LoopSpace s_;
  Builder b_;
  llvm::Function* f_;
  int n_in_;
  Offsets ptrs_, off_;
  std::vector<llvm::Value*> cache_;  // expr values of the current scope
  std::vector<char> done_;           // reductions whose pass has finished
  llvm::Value* rlin_ = nullptr;      // linear index over the reduction axes
  llvm::Value* t_ = nullptr;         // point within the current tile
  int tile_ = 1;
  PassPlan plan_;
  int cur_pass_ = 0;  // the pass being emitted (plan_.n_passes + 1 after the last)
  // stash_[i] = o: expr i (a reduction's operand in pass stash_pass_[i]) is also
  // stored to output o then, and later passes read it back instead of computing
  // it again (softmax's exp); -1 otherwise.
  std::vector<int> stash_, stash_pass_;
  std::vector<Acc> acc_;
  std::vector<int64_t>* dims_out_;
  std::vector<int64_t>* sites_out_;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::Value* dims_ = nullptr;             // the dims array (runtime sizes)
  std::map<int64_t, llvm::Value*> params_;  // site -> its loaded number
  Literals literals_;                       // sites written as literals, in site order
  std::vector<char> runtime_constants_;     // per expr: read from the dims (runtime_constants.h)
};

}  // namespace tl::codegen::cpu
