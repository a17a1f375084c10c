// Loop-IR Kernel -> CUDA C: analysis, expressions and the pointwise entries
// (a grid-stride loop over the outer linear index, plus a 16-byte vectorised
// variant when some buffers are contiguous along the innermost axis, which takes
// 16-bit elements in pairs where adds and muls of two of them can: pair_text.cpp).
#include <algorithm>

#include "codegen/common/index_math.h"
#include "codegen/common/runtime_constants.h"
#include "codegen/cuda/emitter.h"
#include "core/errors.h"

namespace tl::codegen::cuda {

using ir::ExprOp;

namespace {
// The dims parameter as params() writes it; run() gives it its type.
constexpr const char* kDimsParam = ", const TL_DIMS tl_d";

bool is_index(ExprOp op) { return op == ExprOp::Index; }
bool is_gather(ExprOp op) { return op == ExprOp::Gather; }

// NOTE: a pointwise kernel that reads coordinates gets them from index
// pseudo-buffers, so it can walk its output in memory order: a channels-last
// max pool then reads neighbouring channels in neighbouring threads (resnet50
// b64 bf16 stem pool on an H100: 1.21 ms walking NCHW order). Reductions
// derive coordinates from their row-major linear indices.
bool coordinate_buffers(const ir::Kernel& k) {
  return k.reduction_axes == 0 && std::any_of(k.exprs.begin(), k.exprs.end(),
                                              [](const ir::Expr& e) { return is_index(e.op); });
}
}  // namespace

Writer::Writer(const ir::Kernel& k, const std::string& name, const Target& t)
    : k_(k),
      name_(name),
      target_(t),
      s_(coalesce(k, coordinate_buffers(k))),
      n_in_(static_cast<int>(k.inputs.size())) {}

void Writer::fail(size_t i, const std::string& why) const { expr_error(k_, "CUDA kernel", i, why); }

void Writer::analyse() {
  plan_ = plan_passes(k_, "CUDA kernel");
  half_outputs_ = !k_.outputs.empty();
  for (const ir::Kernel::Output& o : k_.outputs) half_outputs_ &= ir::is_half(o.view.type);
  // NOTE: a Gather by a constant (what `cat` with an empty operand, or a slice
  // the lowering reads through a gather, leaves) is a load at a fixed extra
  // offset: it only widens the index type when that offset does.
  loaded_.assign(k_.inputs.size(), 0);
  for (const ir::Expr& e : k_.exprs)
    if (e.op == ExprOp::Load) loaded_[e.buffer] = 1;
  // NOTE: lowering folds a row's length into the expressions of some reductions (a mean's or
  // a variance's divisor: layer_norm, rms_norm, mean), so their text is one length's text even
  // with runtime sizes. Their row then keeps its length, and its strides along it, as literals:
  // no other length could share the text anyway, and a constant row gives the static schedule
  // (the row-cache loop without a bound check per element, index math by constants). Measured
  // on an H100, GPT-2's add + layer_norm over 4096 rows of 768 bf16: 7.64 us at static sizes,
  // 16.4 us with runtime sizes, where the row-cache loops checked every element against the
  // length (one compare and branch an element, three passes).
  if (k_.runtime_sizes && k_.reduction_axes > 0) {
    const double len = static_cast<double>(k_.reduction_numel());
    for (const ir::Expr& e : k_.exprs)
      constant_row_ |=
          e.op == ExprOp::Constant &&
          (ir::is_floating(e.type) ? e.value == len : e.ivalue == k_.reduction_numel());
    // NOTE: a row over model constants only (a softmax or sum over a hidden width, amax over
    // heads x dims: ir::Kernel::static_axes) keeps its length as a literal too, but its strides
    // along the row only where axis_num finds them constant.
    static_row_ = constant_row_;
    if (!static_row_) {
      static_row_ = true;
      for (size_t a = s_.outer.size(); a < s_.outer.size() + s_.red.size(); ++a)
        static_row_ &= fixed_axis(a);
    }
  }
  // NOTE: with runtime sizes, integer constants of the index math are dims numbers
  // (codegen/common/runtime_constants.h): a decode loop's cache cat, position gather and
  // repeat_kv copy keep one text for every length (each text an NVRTC compile, ~50 ms).
  runtime_constant_ = runtime_constants(k_);
  runtime_constant_.resize(k_.exprs.size(), 0);
  for (const ir::Expr& e : k_.exprs) {
    if (!is_gather(e.op)) continue;
    const ir::Expr& by = k_.exprs[e.operands.at(0)];
    ++gathers_;
    if (by.op == ExprOp::Constant) {
      gather_low_ = std::min(gather_low_, by.ivalue);
      gather_high_ = std::max(gather_high_, by.ivalue);
    }
  }
}

// 32-bit indices unless a linear index or an element offset can reach 2^31.
void Writer::choose_index_type() {
  const int64_t limit = int64_t{1} << 31;
  int64_t total = 1;
  for (int64_t n : s_.outer) total *= n;
  for (int64_t n : s_.red) total *= n;
  // NOTE: a Gather by a computed offset adds it in 64 bits (value()), so it
  // does not widen the loop index: 64-bit division of the linear index into
  // coordinates made a channels-last max pool instruction-bound (~3x slower).
  bool wide = total >= limit;
  std::vector<int64_t> sizes = s_.outer;
  sizes.insert(sizes.end(), s_.red.begin(), s_.red.end());
  for (size_t b = 0; b < s_.strides.size(); ++b) {
    int64_t last = s_.offsets[b];
    for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * s_.strides[b][d];
    wide |= last + gather_high_ >= limit || s_.offsets[b] + gather_low_ < 0;
  }
  idx_ = wide ? "unsigned long long" : "unsigned";
}

std::string Writer::params() const {
  std::string p;
  const std::string ptr = k_.aliased_io ? "* " : "* __restrict__ ";
  for (int b = 0; b < n_in_; ++b)
    p += std::string(b ? ", " : "") + "const " + mem_type(k_.inputs[b].type) + ptr + "in" +
         std::to_string(b);
  for (size_t o = 0; o < k_.outputs.size(); ++o)
    p += std::string(p.empty() ? "" : ", ") + mem_type(k_.outputs[o].view.type) + ptr + "out" +
         std::to_string(o);
  // NOTE: the dims type's length is known once every entry is written: run() fills it in (or
  // drops the parameter when no number went to it).
  if (k_.runtime_sizes) p += kDimsParam;
  return p;
}

std::string Writer::num(const std::string& site, int64_t v) {
  if (!k_.runtime_sizes || v == 0 || v == 1 || v < 0) return std::to_string(v);
  return dim_slot(site, v);
}

int Writer::magic_mode(int i) const {
  const ir::Expr& e = k_.exprs[i];
  if ((e.type != ST::I32 && e.type != ST::I64) || e.operands.size() != 2) return -1;
  const int d = e.operands[1];
  // NOTE: 32-bit indices only: the dims are then 32-bit too, and so the multiplier.
  if (!runtime_constant_[d] || idx_ != "unsigned" || k_.exprs[d].ivalue >= (int64_t{1} << 31) ||
      type(d) != e.type)
    return -1;
  switch (e.op) {
    case ExprOp::Div:
    case ExprOp::TruncDiv:
      return 0;
    case ExprOp::FloorDiv:
      return 1;
    case ExprOp::Fmod:
      return 2;
    case ExprOp::Remainder:
      return 3;
    default:
      return -1;
  }
}

std::pair<int64_t, int> Writer::magic_division(int64_t d) {
  // Granlund-Montgomery for 32-bit unsigned x: l = ceil(log2 d),
  // M = floor(2^32 (2^l - d) / d) + 1 < 2^32, x / d = (umulhi(x, M) + x) >> l.
  TL_CHECK(d >= 2 && d < (int64_t{1} << 31)) << "magic division by " << d;
  int l = 0;
  while ((int64_t{1} << l) < d) ++l;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << l) - static_cast<uint64_t>(d))) /
                         static_cast<uint64_t>(d) +
                     1;
  return {static_cast<int64_t>(m), l};
}

std::string Writer::dim_slot(const std::string& site, int64_t v) {
  auto [it, fresh] = slots_.try_emplace(site, out_.dims.size());
  if (fresh) out_.dims.push_back(v);
  TL_CHECK(out_.dims[it->second] == v)
      << "kernel " << k_.name << ": size site " << site << " holds two numbers";
  return "tl_d.v[" + std::to_string(it->second) + "]";
}

bool Writer::fixed_axis(size_t axis) const { return axis < s_.fixed.size() && s_.fixed[axis]; }

std::string Writer::axis_num(const std::string& site, size_t axis, int64_t v) {
  if (constant_row_ && axis >= s_.outer.size()) return std::to_string(v);
  // NOTE: a model constant's size is a literal (ir::Kernel::static_axes): divisions by it are
  // the compiler's, and a row of that length gets the static schedule. A stride is one when it
  // is the product of the sizes of every axis after it and those are all model constants (a
  // contiguous walk over constant inner axes: the same number at every size the text serves).
  if (site[0] == 'a') return fixed_axis(axis) ? std::to_string(v) : num(site, v);
  const size_t n = s_.outer.size() + s_.red.size();
  int64_t inner = 1;
  bool fixed = axis + 1 < n;
  for (size_t d = axis + 1; d < n && fixed; ++d) {
    fixed = fixed_axis(d);
    inner *= d < s_.outer.size() ? s_.outer[d] : s_.red[d - s_.outer.size()];
  }
  return fixed && inner == v ? std::to_string(v) : num(site, v);
}

std::string Writer::signature(const std::string& name, int block) const {
  std::string bounds = std::to_string(block);
  if (min_blocks_ > 0) bounds += ", " + std::to_string(min_blocks_);
  return "extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + name + "(" + params() +
         ")";
}

void Writer::open_kernel(const std::string& name, int block) {
  open(signature(name, block));
  if (target_.sm_major >= 9) line("tl_after_prior_grid();");
}

void Writer::offsets(const std::string& prefix, const std::string& lin,
                     const std::vector<int64_t>& sizes, size_t first_axis,
                     const std::string& base_prefix) {
  std::vector<std::string> coord(sizes.size());
  std::string rest = lin;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (d == 0) {
      coord[0] = rest;
      break;
    }
    std::string c = fresh("c"), q = fresh("q");
    const std::string site = std::string("a") + std::to_string(first_axis + d);
    std::string n = axis_num(site, first_axis + d, sizes[d]);
    if (n.rfind("tl_d.", 0) == 0 && idx_ == "unsigned") {
      // NOTE: a runtime divisor as its magic multiplier and shift (dims slots of their own,
      // computed here per size): `/` by a number the compiler cannot see is a ~20-instruction
      // sequence, this is a multiply-high, an add and a shift, as NVRTC emits for a literal.
      // Exact for 32-bit indices (every linear index is below 2^31: the sum cannot wrap).
      auto [magic, shift] = magic_division(sizes[d]);
      line("const " + idx_ + " " + q + " = (__umulhi(" + rest + ", " + dim_slot("m" + site, magic) +
           ") + " + rest + ") >> " + dim_slot("l" + site, shift) + ";");
      line("const " + idx_ + " " + c + " = " + rest + " - " + q + " * " + n + ";");
    } else {
      line("const " + idx_ + " " + c + " = " + rest + " % " + n + ";");
      line("const " + idx_ + " " + q + " = " + rest + " / " + n + ";");
    }
    coord[d] = c;
    rest = q;
  }
  for (size_t b = 0; b < s_.strides.size(); ++b) {
    std::string bs = std::to_string(b);
    std::string v = base_prefix.empty() ? num("f" + bs, s_.offsets[b]) : base_prefix + bs;
    for (size_t d = 0; d < sizes.size(); ++d) {
      size_t axis = first_axis + d;
      int64_t st = s_.strides[b][axis];
      if (st != 0)
        v += " + " + coord[d] +
             (st == 1 ? "" : " * " + axis_num("s" + bs + "_" + std::to_string(axis), axis, st));
    }
    line("const " + idx_ + " " + prefix + bs + " = " + v + ";");
  }
}

std::string Writer::value(int i) {
  if (!cache_[i].empty()) return cache_[i];
  if (pair_mode_ && pair_op(i)) return pair_element(i);
  const ir::Expr& e = k_.exprs[i];
  const auto& ops = e.operands;
  std::string v;
  if (e.op == ExprOp::Load) {
    ST t = k_.inputs[e.buffer].type;
    v = convert(from_memory(ref_(e.buffer), t), t, e.type);
  } else if (is_gather(e.op) && i < static_cast<int>(gather_pack_.size()) &&
             !gather_pack_[i].empty()) {
    ST t = k_.inputs[e.buffer].type;
    v = convert(from_memory(gather_pack_[i] + ".e[j]", t), t, e.type);
  } else if (is_gather(e.op)) {
    ST t = k_.inputs[e.buffer].type;
    std::string b = std::to_string(e.buffer);
    std::string base = gather_base_ ? gather_base_(e.buffer) : off_ + b;
    const ir::Expr& by = k_.exprs[ops[0]];
    std::string at = by.op == ExprOp::Constant
                         ? base + " + (" + idx_ + ")" + operand(ops[0], ST::I64)
                         : "(long long)" + base + " + " + operand(ops[0], ST::I64);
    v = convert(from_memory("in" + b + "[" + at + "]", t), t, e.type);
  } else if (is_index(e.op)) {
    v = index_value(e.ivalue);
  } else if (e.op == ExprOp::Constant && runtime_constant_[i] &&
             (idx_ != "unsigned" || e.ivalue < (int64_t{1} << 31))) {
    v = "((" + std::string(reg_type(e.type)) + ")" + dim_slot("c" + std::to_string(i), e.ivalue) +
        ")";
  } else if (e.op == ExprOp::Constant) {
    v = constant(e);
  } else if (e.op == ExprOp::Cast) {
    v = operand(ops[0], e.type);
  } else if (e.op == ExprOp::Div && is_float_type(e.type) && plan_.varies[ops[0]] &&
             is_reduce(k_.exprs[ops[1]].op)) {
    // As eager's softmax and the CPU emitter: scale by the reciprocal of a row value.
    v = "(" + operand(ops[0], e.type) + " * (1 / " + operand(ops[1], e.type) + "))";
  } else if (e.op == ExprOp::Where && branch_wheres_ && !pair_mode_) {
    // NOTE: an index check stops the kernel as torch's own kernel would, also for an element
    // whose value the Where discards: such a Where computes both operands.
    auto reads = [](ExprOp op) { return op == ExprOp::Load || is_gather(op); };
    auto checks = [](ExprOp op) { return op == ExprOp::CheckIndex; };
    std::vector<char> seen(k_.exprs.size(), 0), checked(k_.exprs.size(), 0);
    if ((uncomputed_below(ops[1], reads, seen) || uncomputed_below(ops[2], reads, seen)) &&
        !uncomputed_below(ops[1], checks, checked) && !uncomputed_below(ops[2], checks, checked))
      return branching_where(i);
    v = "(" + operand(ops[0], ST::Bool) + " ? " + operand(ops[1], e.type) + " : " +
        operand(ops[2], e.type) + ")";
  } else if (e.op == ExprOp::Where) {
    v = "(" + operand(ops[0], ST::Bool) + " ? " + operand(ops[1], e.type) + " : " +
        operand(ops[2], e.type) + ")";
  } else if (is_reduce(e.op)) {
    if (!done_.size() || !done_[i]) fail(i, "reduction read before its pass");
    v = is_arg_reduce(e.op) ? convert(acc_[i] + "i", ST::I64, e.type) : acc_[i];
  } else if (by_operand_type(e.op)) {
    ST t = is_unary(e.op) ? type(ops[0]) : promote_types(type(ops[0]), type(ops[1]));
    v = is_unary(e.op) ? unary(e.op, t, operand(ops[0], t))
                       : binary(e.op, t, operand(ops[0], t), operand(ops[1], t));
    v = convert(v, ST::Bool, e.type);
  } else if (half_outputs_ && e.type == ST::F32 &&
             (e.op == ExprOp::Exp || e.op == ExprOp::Sigmoid)) {
    // Every output rounds to 8 or 11 significant bits: exp's last float32 bits
    // cannot reach them (eager's half-precision kernels compute these in float32 too).
    std::string x = operand(ops[0], e.type);
    v = e.op == ExprOp::Exp ? "tl_hexp(" + x + ")" : "(1 / (1 + tl_hexp(-" + x + ")))";
  } else if (is_unary(e.op)) {
    v = unary(e.op, e.type, operand(ops[0], e.type));
  } else if (int mode = magic_mode(i); mode >= 0) {
    // NOTE: a runtime divisor (runtime_constants.h) with its magic multiplier and shift in
    // dims slots of their own, as offsets() divides by runtime sizes: tl_idiv by a number the
    // compiler cannot see is a ~25-instruction signed division.
    const std::string site = "c" + std::to_string(ops[1]);
    auto [magic, shift] = magic_division(k_.exprs[ops[1]].ivalue);
    v = "tl_idiv_magic<" + std::string(reg_type(e.type)) + ">(" + operand(ops[0], e.type) + ", " +
        operand(ops[1], e.type) + ", " + dim_slot("m" + site, magic) + ", " +
        dim_slot("l" + site, shift) + ", " + std::to_string(mode) + ")";
  } else {
    v = binary(e.op, e.type, operand(ops[0], e.type), operand(ops[1], e.type));
  }
  std::string name = fresh("v");
  line("const " + std::string(reg_type(e.type)) + " " + name + " = " + v + ";");
  return cache_[i] = name;
}

bool Writer::uncomputed_below(int i, bool (*hit)(ExprOp), std::vector<char>& seen) const {
  if (!cache_[i].empty() || seen[i]) return false;
  seen[i] = 1;
  const ir::Expr& e = k_.exprs[i];
  if (hit(e.op)) return true;
  if (is_reduce(e.op)) return false;
  for (int o : e.operands)
    if (uncomputed_below(o, hit, seen)) return true;
  return false;
}

// NOTE: a ternary computes both operands: cat and stack are chains of Wheres over their parts
// (lower_data.cpp), so every output element read every part and recomputed every part's fused
// producers (a 3-way stack of rotary gradients, 8x32x512x128 bf16 on an H100: 0.31 ms, about
// 7x its bytes' time). Branching reads and computes one part; neighbouring elements of a warp
// mostly take the same branch (parts are contiguous runs along the cat axis). Values computed
// inside a branch are forgotten after it (its scope ends there).
std::string Writer::branching_where(int i) {
  const ir::Expr& e = k_.exprs[i];
  std::string cond = operand(e.operands[0], ST::Bool), name = fresh("v");
  line(std::string(reg_type(e.type)) + " " + name + ";");
  const std::vector<std::string> before = cache_;
  open("if (" + cond + ")");
  line(name + " = " + operand(e.operands[1], e.type) + ";");
  close();
  cache_ = before;
  open("else");
  line(name + " = " + operand(e.operands[2], e.type) + ";");
  close();
  cache_ = before;
  return cache_[i] = name;
}

// The point's coordinate along original kernel axis `axis`: its coordinate
// buffer's offset in pointwise kernels, else from the linear index over the
// outer or the reduction axes (coalescing keeps them in row-major order).
std::string Writer::index_value(int64_t axis) const {
  if (!s_.index_buffer.empty())
    return "(long long)(" + ref_(static_cast<int>(s_.index_buffer.at(axis))) + ")";
  size_t n_outer = k_.shape.size() - k_.reduction_axes, a = static_cast<size_t>(axis);
  bool outer = a < n_outer;
  size_t end = outer ? n_outer : k_.shape.size();
  int64_t inner = 1;
  for (size_t d = a + 1; d < end; ++d) inner *= k_.shape[d];
  std::string v = "(" + (outer ? lin_outer_ : lin_red_) + ")";
  if (inner != 1) v = "(" + v + " / " + std::to_string(inner) + ")";
  return "(long long)(" + v + " % " + std::to_string(k_.shape[a]) + ")";
}

void Writer::store_outputs(int pass, const StoreFn& store, const WordFn& word) {
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    if (plan_.out_pass[o] != pass) continue;
    const auto& out = k_.outputs[o];
    ST t = out.view.type;
    if (word && word_output(o)) {
      word(o, pair_word(out.expr, t));
      continue;
    }
    if (!ir::is_half(t)) {
      store(o, to_memory(operand(out.expr, t), t), std::string());
      continue;
    }
    // A float32 value cast to the output's type is rounded once, on its way to
    // memory (rounding it twice to one type gives the same bits).
    const ir::Expr& e = k_.exprs[out.expr];
    std::string f = e.op == ExprOp::Cast && e.type == t && type(e.operands[0]) == ST::F32
                        ? value(e.operands[0])
                        : operand(out.expr, ST::F32);
    store(o, to_memory(f, t), f);
  }
}

std::string Writer::pair_to_memory(ST t, const std::string& lo, const std::string& hi) {
  return (t == ST::BF16 ? "tl_f2bf2(" : "tl_f2h2(") + lo + ", " + hi + ")";
}

std::string Writer::word_pack(int n) { return "tl_pack<unsigned, " + std::to_string(n / 2) + ">"; }

void Writer::pack_pairs(ST t, const std::string& floats, int n, const std::string& pack) {
  line(word_pack(n) + " " + pack + ";");
  for (int k = 0; k < n / 2; ++k)
    line(pack + ".e[" + std::to_string(k) + "] = " +
         pair_to_memory(t, floats + "[" + std::to_string(2 * k) + "]",
                        floats + "[" + std::to_string(2 * k + 1) + "]") +
         ";");
}

int64_t Writer::grid_for(int64_t threads, int block) const {
  // NOTE: every thread's first step covers the whole range (grid-stride loops
  // only serve grids past the cap): on an H100 a pointwise kernel sized to one
  // wave of blocks reached 86% of copy bandwidth, one sized to the range 100%.
  // The cap keeps a 32-bit index's `i + unroll * step` from overflowing.
  int64_t cap = ((int64_t{1} << 31) - 1) / (int64_t{block} * 8);
  return std::clamp<int64_t>((threads + block - 1) / block, 1, cap);
}

// NOTE: each thread handles several points (or packs) per step of its
// grid-stride loop, all loads before any store: a thread then has several
// loads in flight, which element-wise kernels need to approach copy bandwidth
// (most of all over 1- and 2-byte types). A step past the end re-reads the
// last point and stores nothing. A scalar entry beside a vectorised one only
// serves misaligned inputs, and stays small (NVRTC time grows with size).
constexpr int kScalarUnroll = 4, kVectorUnroll = 2;
// NOTE: a step's packs are all loaded before any is used, so packed inputs
// times unroll bounds the registers: a channels-last bn+bn+add+relu kernel (10
// packed inputs, 64x256x56x56 bf16 on an H100) unrolled twice used 98
// registers a thread (25% occupancy) and ran 117 us, once 108 us.
constexpr int kMaxPacksInFlight = 8;

void Writer::pointwise_scalar(int unroll) {
  std::string b = std::to_string(block_), n = num("n", k_.outer_numel());
  if (block_id_ == "blockIdx.x") open_kernel(name_, block_);
  line("const " + idx_ + " step = (" + idx_ + ")" + blocks_ + " * " + b + ";");
  open("for (" + idx_ + " i = (" + idx_ + ")" + block_id_ + " * " + b + " + threadIdx.x; i < " + n +
       "; i += " + std::to_string(unroll) + " * step)");
  std::vector<std::pair<std::string, std::string>> stores;  // (guard, statement)
  branch_wheres_ = true;
  for (int u = 0; u < unroll; ++u) {
    std::string su = std::to_string(u), at = u ? "i + " + su + " * step" : "i";
    std::string iu = "i" + su, prefix = "o" + su + "_";
    line("const " + idx_ + " " + iu + " = " +
         (u ? "(" + at + " < " + n + " ? " + at + " : " + n + " - 1)" : "i") + ";");
    offsets(prefix, iu, s_.outer, 0, "");
    new_scope([&](int buf) { return at_offset(prefix, buf); }, iu, "0", prefix);
    store_outputs(0, [&](size_t o, const std::string& v, const std::string&) {
      stores.push_back({u ? at + " < " + n : "", "out" + std::to_string(o) + "[" + prefix +
                                                     std::to_string(n_in_ + o) + "] = " + v + ";"});
    });
  }
  branch_wheres_ = false;
  for (auto& [guard, statement] : stores)
    line(guard.empty() ? statement : "if (" + guard + ") " + statement);
  close();
  close();
}

// NOTE: the table is the entry's by-value parameter (at most 4 KB), so a launch queued or
// recorded keeps its own copy and needs no device memory; a larger group is several launches.
constexpr int kGroupParamBytes = 4096;
constexpr int kGroupMaxMembers = 64;

void Writer::pointwise_group(int unroll) {
  const size_t at = static_cast<size_t>(os_.tellp());
  const std::string ptr = k_.aliased_io ? "* " : "* __restrict__ ";
  const std::string gname = name_ + "_g", tname = "tl_group_" + name_;
  const std::string bs = std::to_string(block_);
  open("extern \"C\" __global__ void __launch_bounds__(" + bs + ") " + gname + "(const " + tname +
       " g)");
  if (target_.sm_major >= 9) line("tl_after_prior_grid();");
  // The member whose blocks hold this one: the last m with first[m] <= blockIdx.x.
  line("unsigned tl_lo = 0, tl_hi = TL_GROUP_MEMBERS - 1;");
  open("while (tl_lo < tl_hi)");
  line("const unsigned tl_mid = (tl_lo + tl_hi + 1) / 2;");
  line("if (g.first[tl_mid] <= blockIdx.x) tl_lo = tl_mid; else tl_hi = tl_mid - 1;");
  close();
  line("const unsigned tl_bid = blockIdx.x - g.first[tl_lo];");
  line("const unsigned tl_nb = g.first[tl_lo + 1] - g.first[tl_lo];");
  for (int b = 0; b < n_in_; ++b) {
    const std::string t = mem_type(k_.inputs[b].type), i = std::to_string(b);
    line("const " + t + ptr + "in" + i + " = reinterpret_cast<const " + t + "*>(g.p[tl_lo][" + i +
         "]);");
  }
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    const std::string t = mem_type(k_.outputs[o].view.type);
    line(t + ptr + "out" + std::to_string(o) + " = reinterpret_cast<" + t + "*>(g.p[tl_lo][" +
         std::to_string(n_in_ + o) + "]);");
  }
  line("TL_GROUP_DIMS");
  block_id_ = "tl_bid";
  blocks_ = "tl_nb";
  pointwise_scalar(unroll);  // writes the loop and closes the entry
  block_id_ = "blockIdx.x";
  blocks_ = "gridDim.x";
  // The table's layout, now that every entry has named its dims.
  const int nb = static_cast<int>(n_memory());
  const int nd = static_cast<int>(out_.dims.size());
  const int db = idx_ == "unsigned" ? 4 : 8;
  const int per = nb * 8 + nd * db + 4;
  const int members = std::min(kGroupMaxMembers, (kGroupParamBytes - 4 - 8) / per);
  CudaKernel::Group& g = out_.group;
  g.name = gname;
  g.members = members;
  g.buffers = nb;
  g.dims_at = members * nb * 8;
  g.first_at = g.dims_at + members * nd * db;
  g.bytes = (g.first_at + 4 * (members + 1) + 7) / 8 * 8;
  g.points_per_block = int64_t{block_} * unroll;
  g.max_blocks = ((int64_t{1} << 31) - 1) / (int64_t{block_} * 8);
  std::string text = os_.str();
  std::string body = text.substr(at);
  const std::string dims_type = "tl_dims<" + idx_ + ", " + std::to_string(nd) + ">";
  auto replace = [&](const std::string& what, const std::string& with) {
    for (size_t p; (p = body.find(what)) != std::string::npos;) body.replace(p, what.size(), with);
  };
  replace("TL_GROUP_MEMBERS", std::to_string(members));
  replace("TL_GROUP_DIMS", nd ? "const " + dims_type + " tl_d = g.d[tl_lo];" : "");
  std::string table = "struct " + tname + " {\n  char* p[" + std::to_string(members) + "][" +
                      std::to_string(nb) + "];\n";
  if (nd) table += "  " + dims_type + " d[" + std::to_string(members) + "];\n";
  table += "  unsigned first[" + std::to_string(members + 1) + "];\n};\n";
  os_.str("");
  os_ << text.substr(0, at) << table << body;
}

std::string Writer::at_offset(const std::string& prefix, int buf) const {
  std::string at = prefix + std::to_string(buf);
  return is_coordinate(buf) ? at : "in" + std::to_string(buf) + "[" + at + "]";
}

void Writer::point_at(const std::string& lin) {
  offsets("o", lin, s_.outer, 0, "");
  new_scope([&](int buf) { return at_offset("o", buf); }, lin);
  store_outputs(0, [&](size_t o, const std::string& v, const std::string&) {
    line("out" + std::to_string(o) + "[o" + std::to_string(n_in_ + o) + "] = " + v + ";");
  });
}

ST Writer::buffer_type(size_t buf) const {
  bool in = static_cast<int>(buf) < n_in_;
  return in ? k_.inputs[buf].type : k_.outputs[buf - n_in_].view.type;
}

int Writer::pack_width(size_t axis) const {
  int widest = 0;
  for (size_t b = 0; b < n_memory(); ++b)
    if (s_.strides[b][axis] == 1) widest = std::max(widest, elem_bytes(buffer_type(b)));
  if (widest == 0) return 0;
  int v = 16 / widest;
  for (size_t b = 0; b < n_memory(); ++b) {
    if (s_.strides[b][axis] != 1) continue;
    if (s_.offsets[b] % v != 0) return 0;
    for (size_t d = 0; d < axis; ++d)
      if (s_.strides[b][d] % v != 0) return 0;
  }
  return v;
}

// Elements per thread of the vectorised entry: 16 bytes of the widest buffer
// that is contiguous along the innermost loop axis. Those buffers are read
// and written in 16-byte packs, so their offsets (and, over several axes,
// their outer strides) must keep the packs aligned and the innermost size must
// be whole packs; the others must be broadcast along it (per-channel
// parameters in a channels-last kernel) and are read once per element.
bool Writer::vector_width(int* width) const {
  if (k_.reduction_axes != 0) return false;
  size_t inner = s_.outer.size() - 1;
  // NOTE: a cat's parts are Gathers at clamped, shifted coordinates
  // (build_kernel.cpp): their offsets run contiguously inside a part, so they
  // move in packs. Other gathers (pool windows) keep the scalar entry.
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (is_gather(k_.exprs[i].op) && !packable_gather(static_cast<int>(i))) return false;
  // NOTE: the vector entry reads every gathered pack before its element loop and evaluates a
  // cat's parts there as selects, so a thread holds every part's packs and computes every part
  // for each element; the scalar entry's branching Where computes only the part an element
  // takes. A channel cat of batch-norm+ReLU branches (inception_v3's Mixed blocks: 4 parts of 5
  // gathered buffers, the activation and 4 per-channel parameters) took 177 registers a thread
  // in the vector entry (1 block of 256 an SM; ptxas -v, sm_90; 2 parts 95, 3 parts 136; the
  // scalar entry 32-40) and ran 179 us a call on an H100, twice torch.compile's fused kernel
  // (89 us; 32x288x35x35 bf16). Hence the scalar entry for more gathered buffers than packs a
  // step may have in flight when some are per-part parameters (broadcast over every axis but
  // the gathered one: parts that compute). Not for a pool window (one buffer at 9 offsets: 87-97
  // registers) nor a cat of plain parts (densenet's 9-32 part cats hold 109-255 registers; not
  // measured against the scalar entry).
  std::vector<int> gathered;
  bool parameters = false;
  for (const ir::Expr& e : k_.exprs) {
    if (!is_gather(e.op) || std::find(gathered.begin(), gathered.end(), e.buffer) != gathered.end())
      continue;
    gathered.push_back(e.buffer);
    const auto& st = s_.strides[e.buffer];
    parameters |= std::all_of(st.begin(), st.end(), [](int64_t x) { return x == 0; });
  }
  if (parameters && static_cast<int>(gathered.size()) > kMaxPacksInFlight) return false;
  // NOTE: an operand walking the inner axis with another stride (a transpose)
  // keeps the scalar entry: read by element from packs' rows it made
  // mixer_s16_224 and beit_base_patch16_224 slower than eager on an H100.
  for (size_t b = 0; b < n_memory(); ++b)
    if (s_.strides[b][inner] > 1 || s_.strides[b][inner] < 0) return false;
  int v = pack_width(inner);
  if (v == 0) return false;
  // One axis: a scalar tail finishes the last numel % v elements.
  if (inner > 0 && s_.outer[inner] % v != 0) return false;
  if (k_.outer_numel() < 2 * v) return false;
  *width = v;
  return true;
}

Writer::Steps Writer::inner_steps(int i) const {
  const ir::Expr& e = k_.exprs[i];
  const auto& ops = e.operands;
  size_t inner = s_.outer.size() - 1;
  auto both = [&](Steps a, Steps b) { return a == Steps::Zero && b == Steps::Zero; };
  switch (e.op) {
    case ExprOp::Constant:
      return Steps::Zero;
    case ExprOp::Index: {
      auto it = s_.index_buffer.find(e.ivalue);
      if (it == s_.index_buffer.end()) return Steps::Other;
      int64_t st = s_.strides[it->second][inner];
      return st == 0 ? Steps::Zero : st == 1 ? Steps::Unit : Steps::Other;
    }
    case ExprOp::Cast:
      return ir::is_floating(e.type) || ir::is_floating(type(ops[0])) ? Steps::Other
                                                                      : inner_steps(ops[0]);
    case ExprOp::Add: {
      Steps a = inner_steps(ops[0]), b = inner_steps(ops[1]);
      return a == Steps::Zero ? b : b == Steps::Zero ? a : Steps::Other;
    }
    case ExprOp::Sub: {
      Steps a = inner_steps(ops[0]), b = inner_steps(ops[1]);
      return b == Steps::Zero ? a : Steps::Other;
    }
    case ExprOp::Mul: {
      Steps a = inner_steps(ops[0]), b = inner_steps(ops[1]);
      if (both(a, b)) return Steps::Zero;
      auto one = [&](int o) {
        return k_.exprs[o].op == ExprOp::Constant && k_.exprs[o].ivalue == 1;
      };
      return one(ops[1]) ? a : one(ops[0]) ? b : Steps::Other;
    }
    case ExprOp::Maximum:
    case ExprOp::Minimum: {  // a clamp: a unit run that stops
      Steps a = inner_steps(ops[0]), b = inner_steps(ops[1]);
      if (both(a, b)) return Steps::Zero;
      Steps other = a == Steps::Zero ? b : b == Steps::Zero ? a : Steps::Other;
      return other == Steps::Unit || other == Steps::ZeroOrUnit ? Steps::ZeroOrUnit : Steps::Other;
    }
    default:
      return Steps::Other;
  }
}

bool Writer::packable_gather(int i) const {
  const ir::Expr& e = k_.exprs[i];
  if (ir::is_floating(type(e.operands[0]))) return false;
  int64_t st = s_.strides[e.buffer][s_.outer.size() - 1];
  Steps by = inner_steps(e.operands[0]);
  return (st == 0 && by != Steps::Other) || (st == 1 && by == Steps::Zero);
}

std::optional<int64_t> Writer::unit_start(int i, int width) const {
  const ir::Expr& e = k_.exprs[i];
  // Coordinates and sums of them are i64, or i32 after narrow_index_math; a narrower type wraps.
  if ((e.type != ST::I64 && e.type != ST::I32) || k_.runtime_sizes) return std::nullopt;
  const size_t inner = s_.outer.size() - 1;
  auto constant = [&](int o) -> std::optional<int64_t> {
    const ir::Expr& c = k_.exprs[o];
    if (c.op != ExprOp::Constant || ir::is_floating(c.type)) return std::nullopt;
    return c.ivalue;
  };
  switch (e.op) {
    case ExprOp::Index: {
      // NOTE: a pack starts at a linear index that is a multiple of `width` and, over several
      // axes, the innermost size is whole packs (vector_width): the coordinate along it is a
      // multiple of `width` there, and the coordinate buffer's value is too when its offset
      // and its strides along the other axes are.
      auto it = s_.index_buffer.find(e.ivalue);
      if (it == s_.index_buffer.end() || s_.strides[it->second][inner] != 1) return std::nullopt;
      if (s_.offsets[it->second] % width != 0) return std::nullopt;
      for (size_t d = 0; d < inner; ++d)
        if (s_.strides[it->second][d] % width != 0) return std::nullopt;
      return 0;
    }
    case ExprOp::Cast:
      return unit_start(e.operands[0], width);
    case ExprOp::Add: {
      if (auto c = constant(e.operands[1]))
        if (auto r = unit_start(e.operands[0], width)) return (*r + *c) % width;
      if (auto c = constant(e.operands[0]))
        if (auto r = unit_start(e.operands[1], width)) return (*r + *c) % width;
      return std::nullopt;
    }
    case ExprOp::Sub:
      if (auto c = constant(e.operands[1]))
        if (auto r = unit_start(e.operands[0], width)) return (*r - *c) % width;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool Writer::boundary_test(int i) const {
  const ir::Expr& e = k_.exprs[i];
  if (e.op != ExprOp::Lt && e.op != ExprOp::Le && e.op != ExprOp::Gt && e.op != ExprOp::Ge)
    return false;
  const int width = pack_width(s_.outer.size() - 1);
  if (width <= 1) return false;
  auto bound = [&](int o) -> std::optional<int64_t> {
    const ir::Expr& c = k_.exprs[o];
    if (c.op != ExprOp::Constant || ir::is_floating(c.type)) return std::nullopt;
    return c.ivalue;
  };
  const int a = e.operands[0], b = e.operands[1];
  std::optional<int64_t> r, t;
  bool strict_left;  // the test is x < t (Lt, Ge) rather than x <= t (Le, Gt), x on the left
  if ((t = bound(b)) && (r = unit_start(a, width))) {
    strict_left = e.op == ExprOp::Lt || e.op == ExprOp::Ge;
  } else if ((t = bound(a)) && (r = unit_start(b, width))) {
    strict_left = e.op == ExprOp::Gt || e.op == ExprOp::Le;  // t > x is x < t
  } else {
    return false;
  }
  const int64_t edge = strict_left ? *t : *t + 1;
  return ((edge - *r) % width + width) % width == 0;
}

bool Writer::pack_uniform(int i) const {
  const ir::Expr& e = k_.exprs[i];
  if (e.op == ExprOp::Constant) return true;
  if (e.op == ExprOp::Index) return inner_steps(i) == Steps::Zero;
  // NOTE: a cat along the innermost axis picks its part by comparing the coordinate along the
  // pack with the parts' bounds. A comparison x < t of a value x stepping by 1 with a constant
  // t is one value over a pack when t falls on a pack boundary (x < t == x0 < t for x0 <= x <
  // x0 + width when t - x0 is a multiple of width); <=, >, >= are such a test with t or t + 1.
  // Then a pack reads only the part it takes (inception_v3's four-branch channel cats loaded
  // from every part for every pack: a 16-byte pack of its own part and one element of each
  // other part at its clamped coordinate, with their address arithmetic).
  if (boundary_test(i)) return true;
  if (e.op == ExprOp::Load || is_gather(e.op) || is_reduce(e.op) || e.op == ExprOp::CheckIndex ||
      ir::is_floating(e.type))
    return false;
  for (int o : e.operands)
    if (!pack_uniform(o)) return false;
  return !e.operands.empty();
}

std::vector<std::string> Writer::pack_guards(int u) {
  const size_t n = k_.exprs.size();
  constexpr size_t kMaxGuard = 300;  // longer conditions: read always
  std::vector<std::string> need(n);
  std::vector<char> always(n, 0), reached(n, 0);
  for (const auto& o : k_.outputs) always[o.expr] = reached[o.expr] = 1;
  std::string su = std::to_string(u);
  // Conditions are computed at the pack's first element (its offsets): pack_uniform ones have
  // that value over the whole pack.
  new_scope([su](int buf) { return "o" + su + "_" + std::to_string(buf); }, "i" + su);
  auto give = [&](int from, int to, const std::string& cond) {
    if (always[to]) return;
    std::string mine = always[from] ? "" : need[from];
    std::string term = mine.empty() ? cond : cond.empty() ? mine : mine + " && " + cond;
    if (term.empty() || (reached[to] && need[to].size() + term.size() > kMaxGuard)) {
      always[to] = 1;
      need[to].clear();
    } else {
      need[to] = reached[to] ? "(" + need[to] + ") || (" + term + ")" : term;
    }
    reached[to] = 1;
  };
  for (size_t i = n; i-- > 0;) {
    if (!reached[i]) continue;
    const ir::Expr& e = k_.exprs[i];
    if (e.op == ExprOp::Where && pack_uniform(e.operands[0])) {
      std::string c = value(e.operands[0]);
      give(int(i), e.operands[0], "");
      give(int(i), e.operands[1], c);
      give(int(i), e.operands[2], "!" + c);
      continue;
    }
    for (int o : e.operands) give(int(i), o, "");
  }
  for (size_t i = 0; i < n; ++i)
    if (!reached[i] || always[i]) need[i].clear();
  return need;
}

bool Writer::multiple_of_width(int i, int width) const {
  const ir::Expr& e = k_.exprs[i];
  const auto& ops = e.operands;
  if (ir::is_floating(e.type)) return false;
  switch (e.op) {
    case ExprOp::Constant:
      return e.ivalue % width == 0;
    case ExprOp::Cast:  // NOTE: wrapping to a narrower integer keeps a power of two's multiples
      return !ir::is_floating(type(ops[0])) && multiple_of_width(ops[0], width);
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Maximum:
    case ExprOp::Minimum:
      return multiple_of_width(ops[0], width) && multiple_of_width(ops[1], width);
    case ExprOp::Mul:
      return multiple_of_width(ops[0], width) || multiple_of_width(ops[1], width);
    default:
      return false;
  }
}

void Writer::gather_pack(int u, int i, int width, const std::string& name,
                         const std::string& guard) {
  const ir::Expr& e = k_.exprs[i];
  size_t inner = s_.outer.size() - 1;
  std::string su = std::to_string(u), b = std::to_string(e.buffer), w = std::to_string(width);
  // Element `j` (a literal or the loop variable) of the pack: its coordinate
  // buffers' offsets, and the gather's element offset.
  auto element = [&, su](const std::string& j) -> ElemRef {
    return [this, su, j, inner](int buf) {
      int64_t s = s_.strides[buf][inner];
      std::string o = "o" + su + "_" + std::to_string(buf);
      return "(" + o + (s == 0 ? "" : " + " + j + " * " + std::to_string(s)) + ")";
    };
  };
  auto address = [&](const std::string& j) {
    new_scope(element(j), "i" + su + " + " + j);
    std::string base = element(j)(e.buffer);
    return "(long long)" + base + " + " + operand(e.operands[0], ST::I64);
  };
  std::string pack = std::string("tl_pack<") + mem_type(k_.inputs[e.buffer].type) + ", " + w + ">";
  line(pack + " " + name + (guard.empty() ? ";" : "{};"));
  open(guard.empty() ? "" : "if (" + guard + ")");
  std::string a0 = fresh("a"), a1 = fresh("a");
  line("const long long " + a0 + " = " + address("0") + ";");
  // NOTE: a buffer walking the packs' axis by 1 under an offset that does not step along it
  // (packable_gather) reads width contiguous elements from a pack-aligned start (pack_width)
  // plus that offset: one aligned load when the offset is a multiple of width. A pool window's
  // 9 such reads kept two fallback loops each, and its vector entry 97 registers (80 without).
  if (s_.strides[e.buffer][inner] == 1 && multiple_of_width(e.operands[0], width)) {
    line(name + " = *reinterpret_cast<const " + pack + "*>(in" + b + " + " + a0 + ");");
    close();
    return;
  }
  line("const long long " + a1 + " = " + address(std::to_string(width - 1)) + ";");
  // NOTE: offsets stepping by 0 or 1 (packable_gather) span width - 1 only when
  // every step is 1, and none only when all are one element.
  open("if (" + a1 + " - " + a0 + " == " + std::to_string(width - 1) + " && " + a0 + " % " + w +
       " == 0)");
  line(name + " = *reinterpret_cast<const " + pack + "*>(in" + b + " + " + a0 + ");");
  close();
  open("else if (" + a1 + " == " + a0 + ")");
  line("#pragma unroll");
  line("for (int j = 0; j < " + w + "; ++j) " + name + ".e[j] = in" + b + "[" + a0 + "];");
  close();
  open("else");
  line("#pragma unroll");
  open("for (int j = 0; j < " + w + "; ++j)");
  line(name + ".e[j] = in" + b + "[" + address("j") + "];");
  close();
  close();
  close();
}

int Writer::vector_unroll() const {
  size_t inner = s_.outer.size() - 1;
  int packed = 0;
  for (int b = 0; b < n_in_; ++b) packed += loaded_[b] && s_.strides[b][inner] == 1;
  packed += gathers_;
  return packed * kVectorUnroll > kMaxPacksInFlight ? 1 : kVectorUnroll;
}

void Writer::pointwise_vector(int width) {
  size_t inner = s_.outer.size() - 1;
  int64_t numel = k_.outer_numel();
  std::string b = std::to_string(block_), n = num("n", numel);
  std::string w = std::to_string(width), nv = num("nv", numel / width);
  std::string tid = "(" + idx_ + ")blockIdx.x * " + b + " + threadIdx.x";
  auto in_packs = [&](size_t buf) {
    bool gathered_only = static_cast<int>(buf) < n_in_ && !loaded_[buf];
    return !is_coordinate(buf) && !gathered_only && s_.strides[buf][inner] == 1;
  };
  auto pack_type = [&](size_t buf) {
    return std::string("tl_pack<") + mem_type(buffer_type(buf)) + ", " + w + ">";
  };
  auto name = [&](size_t buf) {
    bool in = static_cast<int>(buf) < n_in_;
    return in ? "in" + std::to_string(buf) : "out" + std::to_string(buf - n_in_);
  };
  // Element j (a text) of step u's pack, which starts at offset o<u>_<buf>.
  auto element = [&](int u, size_t buf, const std::string& j = "j") {
    std::string bs = std::to_string(buf), su = std::to_string(u);
    int64_t st = s_.strides[buf][inner];
    std::string by = st == 0 ? "" : " + " + j + (st == 1 ? "" : " * " + std::to_string(st));
    if (is_coordinate(buf)) return "(o" + su + "_" + bs + by + ")";
    if (st == 1) return "p" + su + "_" + bs + ".e[" + j + "]";
    return name(buf) + "[o" + su + "_" + bs + by + "]";
  };
  auto live = [&](int u) { return "q + " + std::to_string(u) + " * step < " + nv; };
  open_kernel(name_ + "_v", block_);
  line("const " + idx_ + " step = (" + idx_ + ")gridDim.x * " + b + ";");
  const int unroll = vector_unroll();
  open("for (" + idx_ + " q = " + tid + "; q < " + nv + "; q += " + std::to_string(unroll) +
       " * step)");
  for (int u = 0; u < unroll; ++u) {  // every step's loads first
    std::string su = std::to_string(u), at = "q + " + su + " * step";
    line("const " + idx_ + " i" + su + " = " +
         (u ? "(" + live(u) + " ? " + at + " : " + nv + " - 1)" : "q") + " * " + w + ";");
    offsets("o" + su + "_", "i" + su, s_.outer, 0, "");
    const std::vector<std::string> guard = pack_guards(u);
    for (int in = 0; in < n_in_; ++in) {
      if (!in_packs(in)) continue;
      // A pack some output takes; when only under a condition, read only then.
      std::string when;
      bool always = false, used = false;
      for (size_t x = 0; x < k_.exprs.size(); ++x) {
        const ir::Expr& e = k_.exprs[x];
        if (e.op != ExprOp::Load || e.buffer != in) continue;
        used = true;
        if (guard[x].empty()) always = true;
        when = when.empty() ? guard[x] : "(" + when + ") || (" + guard[x] + ")";
      }
      std::string p = "p" + su + "_" + std::to_string(in);
      std::string load = "*reinterpret_cast<const " + pack_type(in) + "*>(in" + std::to_string(in) +
                         " + o" + su + "_" + std::to_string(in) + ")";
      if (always || !used) {
        line("const " + pack_type(in) + " " + p + " = " + load + ";");
      } else {
        line(pack_type(in) + " " + p + "{};");
        line("if (" + when + ") " + p + " = " + load + ";");
      }
    }
    for (size_t g = 0; g < k_.exprs.size(); ++g)
      if (is_gather(k_.exprs[g].op))
        gather_pack(u, static_cast<int>(g), width, "g" + su + "_" + std::to_string(g), guard[g]);
  }
  gather_pack_.assign(k_.exprs.size(), std::string());
  // 16-bit float outputs: float32 values, converted in pairs after the loop (word outputs of
  // pair evaluation: their words, as computed).
  auto in_pairs = [&](size_t buf) { return in_packs(buf) && ir::is_half(buffer_type(buf)); };
  // NOTE: gathers read their packs at element j only (value()): they keep one element a step.
  pair_mode_ = width % 2 == 0 && gathers_ == 0 && any_pair_op();
  for (int u = 0; u < unroll; ++u) {
    std::string su = std::to_string(u);
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      std::string p = "p" + su + "_" + std::to_string(n_in_ + o);
      if (in_pairs(n_in_ + o) && word_output(o))
        line(word_pack(width) + " " + p + ";");
      else if (in_pairs(n_in_ + o))
        line("float f" + p.substr(1) + "[" + w + "];");
      else if (in_packs(n_in_ + o))
        line(pack_type(n_in_ + o) + " " + p + ";");
    }
    for (size_t g = 0; g < k_.exprs.size(); ++g)
      if (is_gather(k_.exprs[g].op)) gather_pack_[g] = "g" + su + "_" + std::to_string(g);
    auto store = [&](size_t o, const std::string& j, const std::string& v, const std::string& f32) {
      size_t buf = n_in_ + o;
      if (in_pairs(buf)) {
        line("f" + su + "_" + std::to_string(buf) + "[" + j + "] = " + f32 + ";");
        return;
      }
      std::string st = element(u, buf, j) + " = " + v + ";";
      line(u && !in_packs(buf) ? "if (" + live(u) + ") " + st : st);
    };
    if (pair_mode_) {
      pointwise_pairs(
          width,
          [&](const std::string& j) -> ElemRef {
            return [&, u, j](int buf) { return element(u, buf, j); };
          },
          "i" + su + " + j", store,
          [&](size_t o, const std::string& word) {
            line("p" + su + "_" + std::to_string(n_in_ + o) + ".e[j / 2] = " + word + ";");
          });
    } else {
      line("#pragma unroll");
      open("for (int j = 0; j < " + w + "; ++j)");
      new_scope([&](int buf) { return element(u, buf); }, "i" + su + " + j");
      store_outputs(0, [&](size_t o, const std::string& v, const std::string& f32) {
        store(o, "j", v, f32);
      });
      close();
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      size_t buf = n_in_ + o;
      if (!in_pairs(buf) || word_output(o)) continue;
      std::string name = su + "_" + std::to_string(buf);
      pack_pairs(buffer_type(buf), "f" + name, width, "p" + name);
    }
  }
  for (int u = 0; u < unroll; ++u)
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      size_t buf = n_in_ + o;
      if (!in_packs(buf)) continue;
      std::string su = std::to_string(u), bs = std::to_string(buf);
      std::string type = in_pairs(buf) ? word_pack(width) : pack_type(buf);
      std::string st = "*reinterpret_cast<" + type + "*>(out" + std::to_string(o) + " + o" + su +
                       "_" + bs + ") = p" + su + "_" + bs + ";";
      line(u ? "if (" + live(u) + ") " + st : st);
    }
  close();
  gather_pack_.clear();
  pair_mode_ = false;
  // The scalar tail (one axis only: see vector_width). NOTE: always there with runtime sizes
  // (it runs no step when numel is whole packs), so one text serves every numel, unless every
  // numel the text serves is whole packs: several axes (vector_width asks the inner one to be
  // whole packs), or one whose model-constant factors are (ir::Kernel::static_axes: a GELU
  // over [b * t, 3072]).
  bool whole_packs = inner > 0;
  if (!whole_packs && k_.runtime_sizes && !k_.static_axes.empty()) {
    int64_t fixed = 1;
    for (size_t d = 0; d + k_.reduction_axes < k_.shape.size(); ++d)
      if (d < k_.static_axes.size() && k_.static_axes[d]) fixed *= k_.shape[d];
    whole_packs = fixed % width == 0;
  }
  if (numel % width != 0 || (k_.runtime_sizes && !whole_packs)) {
    open("for (" + idx_ + " i = " + nv + " * " + w + " + " + tid + "; i < " + n + "; i += step)");
    point_at("i");
    close();
  }
  close();
  for (size_t buf = 0; buf < s_.strides.size(); ++buf) {
    bool gathered = false;
    for (const ir::Expr& e : k_.exprs) gathered |= is_gather(e.op) && e.buffer == int(buf);
    if (in_packs(buf) || gathered) out_.aligned_params.push_back(static_cast<int>(buf));
  }
}

CudaKernel Writer::run() {
  analyse();
  choose_index_type();
  os_ << prelude() << "\n";
  if (k_.reduction_axes == 0) {
    block_ = target_.pointwise_block;
    // Max-autotune's other builds: the same points a thread at other block sizes.
    for (int b : {128, 256, 512})
      if (b != block_) out_.other_blocks.push_back(b);
    int width = 1;
    bool vector = vector_width(&width);
    int widest = 1;
    for (const auto& in : k_.inputs) widest = std::max(widest, elem_bytes(in.type));
    for (const auto& o : k_.outputs) widest = std::max(widest, elem_bytes(o.view.type));
    // Twice the points where each is at most 2 bytes: the same bytes in flight.
    // NOTE: a point that gathers several elements (a pool window) already has
    // that many loads in flight: more points per thread only cost registers.
    int scalar_unroll = widest <= 2 ? 2 * kScalarUnroll : kScalarUnroll;
    if (gathers_ > 1) scalar_unroll = std::max(1, scalar_unroll / gathers_);
    pointwise_scalar(vector ? 1 : scalar_unroll);
    if (vector) {
      os_ << "\n";
      pointwise_vector(width);
      out_.vector_name = name_ + "_v";
    }
    if (k_.grouped && k_.runtime_sizes) {
      os_ << "\n";
      pointwise_group(scalar_unroll);
    }
    // One step of the grid-stride loop per thread: `unroll` points or packs each.
    int unroll = vector ? vector_unroll() : scalar_unroll;
    out_.grid = grid_for((k_.outer_numel() / width + unroll - 1) / unroll, block_);
  } else {
    reduction_kernel(name_);
    int width = 0;
    if (reduce_vector_width(&width)) {
      os_ << "\n";
      vec_ = width;
      // NOTE: block rows of 128 threads keep a 32-value row cache a thread. Capped at 64
      // registers (8 blocks an SM) the compiler hoists fewer loads, and more rows are in
      // flight: layer_norm(softmax(x) + x) over 8192x4096 bf16 on an H200 took 36.6-37.7
      // us a call against 37.5-38.4 at its own choice of 72 (back to back, overlapped
      // launches). A kernel the cap makes spill has the uncapped copy beside it, which the
      // runtime launches instead (vector_fallback_name).
      const bool capped = choose_rows() == Rows::Block && block_ == 128;
      min_blocks_ = capped ? 8 : 0;
      const int first_tmp = tmp_;
      reduction_kernel(name_ + "_v");
      min_blocks_ = 0;
      if (capped) {
        os_ << "\n";
        tmp_ = first_tmp;  // the same text (names are local to each entry)
        reduction_kernel(name_ + "_vr");
        out_.vector_fallback_name = name_ + "_vr";
      }
      for (size_t buf = 0; buf < s_.strides.size(); ++buf)
        if (packed(buf)) out_.aligned_params.push_back(static_cast<int>(buf));
      vec_ = 0;
      out_.vector_name = name_ + "_v";
    }
  }
  out_.name = name_;
  out_.block = block_;
  out_.source = os_.str();
  if (k_.runtime_sizes) {
    const std::string dims =
        out_.dims.empty() ? "" : "tl_dims<" + idx_ + ", " + std::to_string(out_.dims.size()) + ">";
    const std::string marker = kDimsParam;
    std::string with = out_.dims.empty() ? "" : ", const " + dims + " tl_d";
    for (size_t at; (at = out_.source.find(marker)) != std::string::npos;)
      out_.source.replace(at, marker.size(), with);
    out_.dim_bytes = idx_ == "unsigned" ? 4 : 8;
  }
  out_.dependent_launch = target_.sm_major >= 9;
  return out_;
}

CudaKernel emit_cuda_kernel(const ir::Kernel& k, const std::string& fn_name, const Target& target) {
  // NOTE: 64-bit integer multiplies and divisions cost several instructions
  // each on a GPU: a channels-last max pool's window arithmetic in i64 made it
  // instruction-bound.
  ir::Kernel narrowed = narrow_index_math(k);
  return Writer(narrowed, fn_name, target).run();
}

}  // namespace tl::codegen::cuda
