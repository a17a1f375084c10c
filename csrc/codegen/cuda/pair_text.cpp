// Pair evaluation: the vectorised entry of a reduction or pointwise kernel over
// 16-bit floats computes two neighbouring elements per loop step, one scope each, and
// an add, sub or mul of two bf16 (f16) values that eager rounds to the same
// type runs as one bf16x2 (f16x2) instruction for both elements, reading its
// operands' bits straight from the 16-byte packs. Same bits as the float32
// math rounded per element (see tl_bf2op in the prelude), about half the
// instructions: softmax+LN over 8192x4096 bf16 went from 26.2 to 23.4
// instructions an element (42.7 -> 38.9 us on an H200). An output whose value is
// such an op is stored as its word.
#include <cstdio>
#include <utility>

#include "codegen/cuda/emitter.h"

namespace tl::codegen::cuda {

using ir::ExprOp;
using ir::is_half;

void Writer::swap_scope() {
  std::swap(ref_, other_.ref);
  std::swap(lin_outer_, other_.outer);
  std::swap(lin_red_, other_.red);
  std::swap(off_, other_.off);
  std::swap(cache_, other_.cache);
  elem_ ^= 1;
}

void Writer::in_each_element(int n, const std::function<void(int el)>& fn) {
  for (int el = 0; el < n; ++el) {
    if (el) swap_scope();
    fn(el);
    if (el) swap_scope();
  }
}

void Writer::new_pair_scope(const std::function<ElemRef(int elem)>& ref, std::string outer,
                            const std::string& red0, const std::string& red1) {
  new_scope(ref(1), outer, red1, "oo");
  swap_scope();  // element 1's scope waits in other_
  new_scope(ref(0), std::move(outer), red0, "o");
  elem_ = 0;
  pair_.assign(k_.exprs.size(), std::string());
}

std::string Writer::in_scope(int elem, const std::function<std::string()>& text) {
  if (elem == elem_) return text();
  swap_scope();
  std::string t = text();
  swap_scope();
  return t;
}

// Expr i's value is exactly a value of h: an expr of type h, such an expr
// widened to float32, or a float constant that h represents.
bool Writer::exact_in(int i, ST h) const {
  const ir::Expr& e = k_.exprs[i];
  unsigned bits;
  if (e.type == h) return true;
  if (e.op == ExprOp::Cast && e.type == ST::F32) return type(e.operands[0]) == h;
  return e.op == ExprOp::Constant && e.type == ST::F32 && half_bits(e.value, h, &bits);
}

bool Writer::pair_op(int i) const {
  const ir::Expr& e = k_.exprs[i];
  if (e.op != ExprOp::Cast || !is_half(e.type) || type(e.operands[0]) != ST::F32) return false;
  int y = e.operands[0];
  const ir::Expr& op = k_.exprs[y];
  if (op.op != ExprOp::Add && op.op != ExprOp::Sub && op.op != ExprOp::Mul) return false;
  // NOTE: in a reduction, a value the row's points share is computed once a row (no pair);
  // pointwise kernels have no such values (plan_.varies is all 0 there).
  const bool per_point = k_.reduction_axes == 0 || plan_.varies[y];
  return per_point && exact_in(op.operands[0], e.type) && exact_in(op.operands[1], e.type);
}

bool Writer::word_output(size_t o) const {
  const ir::Kernel::Output& out = k_.outputs[o];
  // The axis the entry's packs run along: the innermost outer axis (pointwise), or the
  // reduction axis (reductions, whose vector entry has one).
  const size_t axis = k_.reduction_axes == 0 ? s_.outer.size() - 1 : s_.outer.size();
  return pair_mode_ && s_.strides[n_in_ + o][axis] == 1 && type(out.expr) == out.view.type &&
         pair_op(out.expr);
}

bool Writer::any_pair_op() const {
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (pair_op(static_cast<int>(i))) return true;
  return false;
}

// The 32-bit word holding expr i's values of both elements as h, for an expr
// that exact_in(i, h).
std::string Writer::pair_word(int i, ST h) {
  if (!pair_[i].empty()) return pair_[i];
  const ir::Expr& e = k_.exprs[i];
  std::string w;
  unsigned bits = 0;
  if (e.op == ExprOp::Constant && half_bits(e.value, h, &bits)) {
    char lit[16];
    std::snprintf(lit, sizeof lit, "0x%08Xu", bits | (bits << 16));
    return pair_[i] = lit;
  }
  if (e.op == ExprOp::Cast && e.type == ST::F32 && type(e.operands[0]) == h)
    return pair_[i] = pair_word(e.operands[0], h);
  if (pair_op(i)) {
    const ir::Expr& y = k_.exprs[e.operands[0]];
    std::string a = pair_word(y.operands[0], h), b = pair_word(y.operands[1], h);
    const char* op = y.op == ExprOp::Add ? "0" : y.op == ExprOp::Sub ? "1" : "2";
    w = std::string(h == ST::BF16 ? "tl_bf2op<" : "tl_h2op<") + op + ">(" + a + ", " + b + ")";
  } else if (e.op == ExprOp::Load && k_.inputs[e.buffer].type == h) {
    // Both elements' bits as stored (from one register of the pack).
    auto ref = [&](int elem) { return in_scope(elem, [&] { return ref_(e.buffer); }); };
    std::string lo = ref(0), hi = ref(1);
    w = "tl_join(" + lo + ", " + hi + ")";
  } else {
    // Rounds (a Cast to h of a float32 value) or packs both elements in one instruction.
    int x = e.op == ExprOp::Cast && type(e.operands[0]) == ST::F32 ? e.operands[0] : i;
    auto f32 = [&](int elem) {
      return convert(in_scope(elem, [&] { return value(x); }), type(x), ST::F32);
    };
    std::string lo = f32(0), hi = f32(1);
    w = pair_to_memory(h, lo, hi);
  }
  std::string name = fresh("w");
  line("const unsigned " + name + " = " + w + ";");
  return pair_[i] = name;
}

// NOTE: GELU-tanh over bf16 (8x512x3072, GPT-2's MLP, on an H100) ran 18.8 us in GPT-2's profile
// against inductor's 16.4: eager rounds each op's result to bf16, one conversion an op an
// element. In pairs, an add or mul of two bf16 values (x + 0.044715 * x^3, 1 + tanh, 0.5 * x,
// the final product) is one bf16x2 instruction for two elements, rounding included, and an
// output that is one is stored as its word (no float round trip): 120 -> 48 conversions and
// 560 -> 472 instructions in the entry's SASS; 17.4 us against torch.compile's 19.2 (one H100,
// CUDA-graph replay, inputs from memory: bench/gpu.py --kernels).
void Writer::pointwise_pairs(int width, const std::function<ElemRef(const std::string& j)>& ref,
                             const std::string& outer, const PairStore& store, const WordFn& word) {
  line("#pragma unroll");
  open("for (int j = 0; j < " + std::to_string(width) + "; j += 2)");
  auto J = [](int el) { return std::string(el ? "(j + 1)" : "j"); };
  new_pair_scope([&](int el) { return ref(J(el)); }, outer, "0", "0");
  in_each_element(2, [&](int el) {
    store_outputs(
        0, [&](size_t o, const std::string& v, const std::string& f32) { store(o, J(el), v, f32); },
        el == 0 ? word : WordFn([](size_t, const std::string&) {}));
  });
  close();
}

// A pair op's value in the current scope; the other element's is cached too.
std::string Writer::pair_element(int i) {
  ST h = type(i);
  std::string w = pair_word(i, h);
  std::string lo = fresh("v"), hi = fresh("v");
  line("const float " + lo + " = " + (h == ST::BF16 ? "tl_bflo(" : "tl_hlo(") + w + ");");
  line("const float " + hi + " = " + (h == ST::BF16 ? "tl_bfhi(" : "tl_hhi(") + w + ");");
  cache_[i] = elem_ == 0 ? lo : hi;
  other_.cache[i] = elem_ == 0 ? hi : lo;
  return cache_[i];
}

}  // namespace tl::codegen::cuda
