#include "codegen/cpu/kernel_emitter.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <climits>
#include <set>

#include "codegen/common/runtime_constants.h"
#include "codegen/cpu/emitter.h"
#include "core/dump_dir.h"
#include "core/errors.h"

namespace tl::codegen::cpu {

namespace {
using ir::ExprOp;
using ST = ir::ScalarType;
}  // namespace

void Emitter::run() {
  analyse();
  tile_ = choose_tile();
  auto* entry = llvm::BasicBlock::Create(b_.getContext(), "entry", f_);
  b_.SetInsertPoint(entry);
  llvm::Value* bufs = f_->getArg(2);
  size_t n_bufs = k_.inputs.size() + k_.outputs.size();
  for (size_t i = 0; i < n_bufs; ++i)
    ptrs_.push_back(b_.CreateLoad(b_.getPtrTy(), b_.CreateConstGEP1_64(b_.getPtrTy(), bufs, i)));
  // NOTE: the dims array travels as one more entry of `bufs`, so the kernel
  // ABI (runtime/cpu/jit.h) is the same with and without runtime sizes.
  if (k_.runtime_sizes)
    dims_ = b_.CreateLoad(b_.getPtrTy(), b_.CreateConstGEP1_64(b_.getPtrTy(), bufs, n_bufs));
  make_accumulators();
  // The entry block ends in a branch to the body; num() loads the dims there.
  entry_ = entry;
  auto* body = llvm::BasicBlock::Create(b_.getContext(), "body", f_);
  b_.CreateBr(body);
  b_.SetInsertPoint(body);
  rows(f_->getArg(0), f_->getArg(1));
  b_.CreateRetVoid();
}

llvm::Value* Emitter::num(int64_t site, int64_t v) {
  if (!k_.runtime_sizes || v == 0 || v == 1 || is_literal(site)) return b_.getInt64(v);
  return param(site, v);
}

llvm::Value* Emitter::param(int64_t site, int64_t v) {
  auto [it, fresh] = params_.try_emplace(site, nullptr);
  if (!fresh) return it->second;
  int64_t slot = static_cast<int64_t>(params_.size()) - 1;
  if (dims_out_) dims_out_->push_back(v);
  if (sites_out_) sites_out_->push_back(site);
  Builder at_entry(entry_->getTerminator());
  it->second = at_entry.CreateLoad(at_entry.getInt64Ty(),
                                   at_entry.CreateConstGEP1_64(at_entry.getInt64Ty(), dims_, slot),
                                   "dim" + std::to_string(slot));
  return it->second;
}

bool Emitter::is_literal(int64_t site) const {
  auto it = std::lower_bound(literals_.begin(), literals_.end(), std::make_pair(site, INT64_MIN));
  return it != literals_.end() && it->first == site;
}

void Emitter::fail(size_t i, const std::string& why) { expr_error(k_, "kernel", i, why); }

void Emitter::analyse() {
  plan_ = plan_passes(k_, "kernel");
  runtime_constants_ = runtime_constants(k_);
  runtime_constants_.resize(k_.exprs.size(), 0);
  plan_stash();
}

llvm::Value* Emitter::value(int i) {
  if (cache_[i]) return cache_[i];
  const ir::Expr& e = k_.exprs[i];
  const auto& ops = e.operands;
  llvm::Value* v = nullptr;
  if (int o = stash_[i]; o >= 0 && cur_pass_ > stash_pass_[i]) {
    v = load_elem(b_, ptrs_[n_in_ + o], off_[n_in_ + o], e.type);
  } else if (llvm::Value* q = div_by_reduction(i)) {
    v = q;
  } else if (e.op == ExprOp::Load) {
    ST t = k_.inputs[e.buffer].type;
    v = convert(b_, load_elem(b_, ptrs_[e.buffer], off_[e.buffer], t), t, e.type);
  } else if (e.op == ExprOp::Gather) {
    ST t = k_.inputs[e.buffer].type;
    llvm::Value* off = b_.CreateNSWAdd(off_[e.buffer], operand(ops[0], ST::I64));
    v = convert(b_, load_elem(b_, ptrs_[e.buffer], off, t), t, e.type);
  } else if (e.op == ExprOp::Index) {
    v = off_[s_.index_buffer.at(e.ivalue)];  // its pseudo-buffer's offset is the coordinate
  } else if (llvm::Value* q = magic_divide(i)) {
    v = q;
  } else if (e.op == ExprOp::Constant && runtime_constants_[i]) {
    v = b_.CreateTrunc(num(constant_site(static_cast<size_t>(i)), e.ivalue),
                       e.type == ST::I32 ? b_.getInt32Ty() : b_.getInt64Ty());
  } else if (e.op == ExprOp::Constant) {
    v = make_constant(b_, e);
  } else if (e.op == ExprOp::Cast) {
    v = operand(ops[0], e.type);
  } else if (e.op == ExprOp::Where) {
    v = b_.CreateSelect(operand(ops[0], ST::Bool), operand(ops[1], e.type),
                        operand(ops[2], e.type));
  } else if (is_reduce(e.op)) {
    v = reduced(i);
  } else if (by_operand_type(e.op)) {
    ST t = is_unary(e.op) ? type(ops[0]) : promote_types(type(ops[0]), type(ops[1]));
    v = is_unary(e.op) ? emit_unary(b_, e.op, t, operand(ops[0], t))
                       : emit_binary(b_, e.op, t, operand(ops[0], t), operand(ops[1], t));
    v = convert(b_, v, ST::Bool, e.type);
  } else if (is_unary(e.op)) {
    v = emit_unary(b_, e.op, e.type, operand(ops[0], e.type));
  } else {
    v = emit_binary(b_, e.op, e.type, operand(ops[0], e.type), operand(ops[1], e.type));
  }
  return cache_[i] = v;
}

// NOTE: a division by a number the compiler cannot see is a hardware divide (~25-40 cycles,
// not vectorised): index math by runtime sizes (a reshape of a transposed or expanded view,
// Llama's repeat_kv) ran ~3x slower than with literal divisors. The magic numbers make it a
// multiply-high, an add and a shift, as LLVM emits for a literal. Signed operands: for x < 0,
// floor(x / d) = ~(~x / d) with ~x >= 0 (branch-free, so the row loop still vectorises);
// truncation and C's remainder are corrected from the floor's remainder.
llvm::Value* Emitter::magic_divide(int i) {
  const ir::Expr& e = k_.exprs[i];
  const bool divides = e.op == ExprOp::Div || e.op == ExprOp::TruncDiv ||
                       e.op == ExprOp::FloorDiv || e.op == ExprOp::Remainder ||
                       e.op == ExprOp::Fmod;
  // NOTE: 64-bit only (index math): an I32 constant's dims number is truncated where it is read.
  if (!divides || e.type != ST::I64 || e.operands.size() != 2 || plain_runtime_division())
    return nullptr;
  const int d = e.operands[1];
  if (!runtime_constants_[d] || k_.exprs[d].op != ExprOp::Constant || type(d) != ST::I64)
    return nullptr;
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Type* i128 = b_.getInt128Ty();
  const int64_t divisor = k_.exprs[d].ivalue;
  const Magic64 magic = magic_u64(divisor);
  llvm::Value* x = operand(e.operands[0], e.type);
  llvm::Value* y = operand(d, e.type);
  llvm::Value* m =
      param(magic_site(static_cast<size_t>(d)), static_cast<int64_t>(magic.multiplier));
  llvm::Value* l = param(shift_site(static_cast<size_t>(d)), magic.shift);
  llvm::Value* sign = b_.CreateAShr(x, 63);  // 0 or -1
  llvm::Value* u = b_.CreateXor(x, sign);    // 0 <= u < 2^63
  llvm::Value* hi = b_.CreateTrunc(
      b_.CreateLShr(b_.CreateMul(b_.CreateZExt(u, i128), b_.CreateZExt(m, i128)), 64), i64);
  llvm::Value* q = b_.CreateXor(b_.CreateLShr(b_.CreateAdd(hi, u), l), sign);  // floor(x / y)
  llvm::Value* r = b_.CreateSub(x, b_.CreateMul(q, y));                        // 0 <= r < y
  llvm::Value* out = nullptr;
  if (e.op == ExprOp::FloorDiv) {
    out = q;
  } else if (e.op == ExprOp::Remainder) {
    out = r;
  } else {
    // Truncation: x < 0 with a remainder rounds up by one (C's remainder is then r - y).
    llvm::Value* up =
        b_.CreateAnd(b_.CreateICmpSLT(x, b_.getInt64(0)), b_.CreateICmpNE(r, b_.getInt64(0)));
    out = e.op == ExprOp::Fmod ? b_.CreateSub(r, b_.CreateSelect(up, y, b_.getInt64(0)))
                               : b_.CreateAdd(q, b_.CreateZExt(up, i64));
  }
  return out;
}

void Emitter::store_outputs(int pass) {
  // NOTE: a stashed value is read (and cached for this point) before any output of this pass
  // overwrites it with its scaled value.
  for (size_t i = 0; i < stash_.size(); ++i)
    if (pass != 0 && stash_[i] >= 0 && cur_pass_ > stash_pass_[i]) value(static_cast<int>(i));
  for (size_t i = 0; i < stash_.size(); ++i)
    if (stash_[i] >= 0 && stash_pass_[i] == pass) {
      int o = stash_[i];
      store_elem(b_, value(i), ptrs_[n_in_ + o], off_[n_in_ + o], k_.outputs[o].view.type);
    }
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    if (plan_.out_pass[o] != pass) continue;
    const auto& out = k_.outputs[o];
    llvm::Value* v = operand(out.expr, out.view.type);
    store_elem(b_, v, ptrs_[n_in_ + o], off_[n_in_ + o], out.view.type);
  }
}

// Outer rows: split [begin, end) at the last outer axis so the innermost
// loop has constant strides for every buffer.
void Emitter::rows(llvm::Value* begin, llvm::Value* end) {
  emit_loop(b_, begin, end, "row", "row", [&](llvm::Value* idx) { return row(idx, end); });
}

llvm::Value* Emitter::row(llvm::Value* idx, llvm::Value* end) {
  size_t last = s_.outer.size() - 1;
  llvm::Value* c_last = b_.CreateURem(idx, outer_size(last));
  llvm::Value* rest = b_.CreateUDiv(idx, outer_size(last));
  std::vector<llvm::Value*> base;
  for (size_t bi = 0; bi < s_.offsets.size(); ++bi) base.push_back(offset(bi));
  for (size_t d = last; d-- > 0;) {
    llvm::Value* cd = b_.CreateURem(rest, outer_size(d));
    rest = b_.CreateUDiv(rest, outer_size(d));
    for (size_t bi = 0; bi < base.size(); ++bi)
      base[bi] = b_.CreateNSWAdd(base[bi], b_.CreateNSWMul(cd, stride(bi, d)));
  }
  llvm::Value* row_end = b_.CreateBinaryIntrinsic(
      llvm::Intrinsic::smin, outer_size(last), b_.CreateNSWAdd(c_last, b_.CreateNSWSub(end, idx)));
  Shift at = [&, last](const Offsets& off, llvm::Value* j) {
    std::vector<llvm::Value*> out(off.size());
    for (size_t bi = 0; bi < off.size(); ++bi)
      out[bi] = b_.CreateNSWAdd(off[bi], b_.CreateNSWMul(j, stride(bi, last)));
    return out;
  };
  if (s_.red.empty()) {
    std::vector<llvm::Value*> invariant = row_invariants(at(base, c_last));
    auto points = [&](llvm::Value* lo, llvm::Value* hi) {
      emit_for(b_, lo, hi, [&](llvm::Value* j) {
        new_scope(at(base, j));
        for (size_t i = 0; i < invariant.size(); ++i)
          if (invariant[i]) cache_[i] = invariant[i];
        store_outputs(0);
      });
    };
    // NOTE: a row whose length is a model constant (a bias + GELU over [b * t, 3072]: the bias
    // keeps the axes apart) runs, when whole, a loop with a constant trip count: LLVM's vector
    // loop then needs no remainder when the length is whole vectors, and no trip-count checks.
    const int64_t n_last = s_.outer[last];
    if (k_.runtime_sizes && n_last > 1 && is_literal(outer_site(last))) {
      llvm::Value* whole = b_.CreateAnd(b_.CreateICmpEQ(c_last, b_.getInt64(0)),
                                        b_.CreateICmpEQ(row_end, b_.getInt64(n_last)));
      auto* full = llvm::BasicBlock::Create(b_.getContext(), "row.whole", f_);
      auto* part = llvm::BasicBlock::Create(b_.getContext(), "row.part", f_);
      auto* done = llvm::BasicBlock::Create(b_.getContext(), "row.done", f_);
      b_.CreateCondBr(whole, full, part);
      b_.SetInsertPoint(full);
      points(b_.getInt64(0), b_.getInt64(n_last));
      b_.CreateBr(done);
      b_.SetInsertPoint(part);
      points(c_last, row_end);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    } else {
      points(c_last, row_end);
    }
  } else {
    emit_for(
        b_, c_last, row_end,
        [&](llvm::Value* j0) {
          if (tile_ == 1) return reduce_tile(at(base, j0), b_.getInt64(1), at);
          // Full tiles get a constant trip count (straight-line vector code).
          llvm::Value* n = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.getInt64(tile_),
                                                    b_.CreateNSWSub(row_end, j0));
          auto* full = llvm::BasicBlock::Create(b_.getContext(), "tile.full", f_);
          auto* part = llvm::BasicBlock::Create(b_.getContext(), "tile.part", f_);
          auto* done = llvm::BasicBlock::Create(b_.getContext(), "tile.end", f_);
          b_.CreateCondBr(b_.CreateICmpEQ(n, b_.getInt64(tile_)), full, part);
          using Case = std::pair<llvm::BasicBlock*, llvm::Value*>;
          for (auto [bb, count] : {Case{full, b_.getInt64(tile_)}, Case{part, n}}) {
            b_.SetInsertPoint(bb);
            reduce_tile(at(base, j0), count, at);
            b_.CreateBr(done);
          }
          b_.SetInsertPoint(done);
        },
        tile_);
  }
  return b_.CreateNSWAdd(idx, b_.CreateNSWSub(row_end, c_last));
}

// NOTE: an output may share memory with an input (buffer reuse), so LLVM
// cannot move loads of a broadcast operand (batch norm's per-channel
// statistics) or what is computed from them (rsqrt) above the row's stores;
// done here, once per row: 8x64x112x112 f32 bn+relu on 2 threads ran 1.69 ms
// computing them per element.
std::vector<llvm::Value*> Emitter::row_invariants(const Offsets& row_start) {
  size_t last = s_.outer.size() - 1;
  std::vector<char> fixed(k_.exprs.size(), 0);
  for (size_t i = 0; i < k_.exprs.size(); ++i) {
    const ir::Expr& e = k_.exprs[i];
    if (e.op == ExprOp::Load)
      fixed[i] = s_.strides[e.buffer][last] == 0;
    else if (e.op == ExprOp::Constant)
      fixed[i] = 1;
    else if (e.op != ExprOp::Gather && e.op != ExprOp::Index && !is_reduce(e.op))
      fixed[i] = std::all_of(e.operands.begin(), e.operands.end(), [&](int o) { return fixed[o]; });
  }
  new_scope(row_start);
  std::vector<llvm::Value*> out(k_.exprs.size(), nullptr);
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (fixed[i] && k_.exprs[i].op != ExprOp::Constant) out[i] = value(static_cast<int>(i));
  return out;
}

// NOTE: a kernel that stores into an input it reads (ir::Kernel::aliased_io) gives LLVM two
// pointers to the same memory, so its loop vectoriser's runtime overlap check fails and the
// scalar loop runs. A pointwise kernel's inner loop reads and writes only its own element
// (store_in_place checks the input is read where the output is stored), so its iterations
// are independent: said with llvm.loop.parallel_accesses, the loop vectorises unchecked.
namespace {
void mark_parallel_inner_loops(llvm::Function& f) {
  llvm::LLVMContext& c = f.getContext();
  llvm::MDNode* group = llvm::MDNode::getDistinct(c, {});
  for (llvm::BasicBlock& bb : f)
    for (llvm::Instruction& inst : bb)
      if (llvm::isa<llvm::LoadInst>(inst) || llvm::isa<llvm::StoreInst>(inst))
        inst.setMetadata(llvm::LLVMContext::MD_access_group, group);
  llvm::MDNode* parallel =
      llvm::MDNode::get(c, {llvm::MDString::get(c, "llvm.loop.parallel_accesses"), group});
  std::set<const llvm::BasicBlock*> seen;  // NOTE: emit_loop makes a loop's blocks after its cond
  for (llvm::BasicBlock& bb : f) {
    seen.insert(&bb);
    auto* br = llvm::dyn_cast<llvm::BranchInst>(bb.getTerminator());
    // emit_for's back edge: the unconditional branch to its earlier `for.cond` block.
    if (!br || br->isConditional() || !seen.count(br->getSuccessor(0)) ||
        !br->getSuccessor(0)->getName().starts_with("for.cond"))
      continue;
    llvm::TempMDTuple self = llvm::MDNode::getTemporary(c, {});
    llvm::MDNode* id = llvm::MDNode::getDistinct(c, {self.get(), parallel});
    id->replaceOperandWith(0, id);
    br->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
}
}  // namespace

std::unique_ptr<llvm::Module> emit_kernel(const ir::Kernel& k, const std::string& fn_name,
                                          llvm::LLVMContext& ctx, std::vector<int64_t>* dims,
                                          std::vector<int64_t>* sites, const Literals* literals) {
  auto m = std::make_unique<llvm::Module>("torchlite", ctx);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {i64, i64, ptr}, false);
  auto* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, fn_name, *m);
  f->setDoesNotThrow();
  f->addParamAttr(2, llvm::Attribute::NoCapture);
  f->addParamAttr(2, llvm::Attribute::ReadOnly);
  Emitter(k, f, dims, sites, literals).run();
  if (k.aliased_io && k.reduction_axes == 0) mark_parallel_inner_loops(*f);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*f, &os)) {
    // The evidence goes to a file the message names (STYLE: compile errors carry it).
    // NOTE: a private per-process folder (core/dump_dir.h), never a shared fixed path.
    std::string dir = failure_dump_dir();
    std::string path = dir.empty() ? "" : dir + "/" + fn_name + "_invalid.ll";
    std::string text = "; torchlite kernel " + k.name + "\n";
    llvm::raw_string_ostream ll(text);
    m->print(ll, nullptr);
    ll.flush();
    if (!write_dump(path, text)) path = "not written";
    TL_CHECK(false) << "kernel " << k.name << ": invalid LLVM IR: " << os.str() << " (IR: " << path
                    << ")";
  }
  return m;
}

}  // namespace tl::codegen::cpu
