// Reduction kernels: each outer point (a row) is reduced by one thread, one
// warp or one block, chosen by row length and memory layout; reductions run in
// passes over the row as the CPU emitter's (softmax: max, then the sum of
// exp(x - max), then the per-element outputs), each pass re-reading its inputs.
#include <algorithm>

#include "codegen/cuda/emitter.h"
#include "core/errors.h"

namespace tl::codegen::cuda {

using ir::ExprOp;

namespace {
int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}
// __shfl_xor_sync has overloads for 32/64-bit ints and floats only.
const char* shuffle_type(ST t) {
  switch (t) {
    case ST::F32: case ST::F16: case ST::BF16: return "float";
    case ST::F64: return "double";
    case ST::I64: return "long long";
    default: return "int";
  }
}
}  // namespace

// Thread per row when the rows are short or the reduction walks a strided axis
// while neighbouring rows are contiguous (a column sum: neighbouring threads
// then read neighbouring elements); warp per row for rows up to 1024 elements;
// block per row for longer rows, or when there are too few rows to fill the
// GPU with warps.
Writer::Rows Writer::choose_rows() const {
  int64_t rows = product(s_.outer), len = product(s_.red);
  size_t last = s_.outer.size() - 1, red_last = s_.outer.size() + s_.red.size() - 1;
  bool contiguous_red = false, contiguous_outer = false;
  for (int b = 0; b < n_in_; ++b) {
    contiguous_red |= s_.strides[b][red_last] == 1;
    contiguous_outer |= s_.strides[b][last] == 1 && s_.outer[last] > 1;
  }
  if ((!contiguous_red && contiguous_outer) || len <= 16) return Rows::Thread;
  if (len > 1024 || (rows < int64_t{target_.multiprocessors} * 4 && len > 256)) return Rows::Block;
  return Rows::Warp;
}

void Writer::reduction_kernel() {
  Rows rows = choose_rows();
  int64_t n_rows = product(s_.outer), len = product(s_.red);
  block_ = rows != Rows::Block ? 256 : len > 8192 ? 1024 : len > 2048 ? 512 : 256;
  std::string b = std::to_string(block_), nr = std::to_string(n_rows);
  open(signature(name_, block_));
  if (rows == Rows::Block) {
    for (size_t i = 0; i < k_.exprs.size(); ++i) {
      const ir::Expr& e = k_.exprs[i];
      if (!is_reduce(e.op)) continue;
      ST t = is_arg_reduce(e.op) ? type(e.operands[0]) : e.type;
      line("__shared__ " + std::string(reg_type(t)) + " sh" + std::to_string(i) + "[32];");
      if (is_arg_reduce(e.op)) line("__shared__ long long shi" + std::to_string(i) + "[32];");
    }
  }
  std::string tid = "(" + idx_ + ")blockIdx.x * " + b + " + threadIdx.x";
  std::string all = "(" + idx_ + ")gridDim.x * " + b;
  switch (rows) {
    case Rows::Thread:
      open("for (" + idx_ + " row = " + tid + "; row < " + nr + "; row += " + all + ")");
      out_.grid = grid_for(n_rows, block_);
      break;
    case Rows::Warp:
      line("const unsigned lane = threadIdx.x & 31;");
      open("for (" + idx_ + " row = (" + tid + ") >> 5; row < " + nr + "; row += (" + all +
           ") >> 5)");
      out_.grid = grid_for(n_rows * 32, block_);
      break;
    case Rows::Block:
      open("for (" + idx_ + " row = blockIdx.x; row < " + nr + "; row += gridDim.x)");
      out_.grid = std::clamp<int64_t>(
          n_rows, 1, std::max<int64_t>(1, int64_t{target_.multiprocessors} * (2048 / block_)));
      break;
  }
  (void)len;
  offsets("b", "row", s_.outer, 0, "");
  done_.assign(k_.exprs.size(), 0);
  acc_.assign(k_.exprs.size(), std::string());
  for (int p = 1; p <= n_passes_; ++p) reduce_pass(p, rows);
  // Values per row: written once, at the row's first reduction point.
  new_scope([](int buf) { return "in" + std::to_string(buf) + "[b" + std::to_string(buf) + "]"; },
            "row", "0", "b");
  bool any = false;
  for (int p : out_pass_) any |= p == 0;
  if (any) {
    if (rows != Rows::Thread) open(rows == Rows::Warp ? "if (lane == 0)" : "if (threadIdx.x == 0)");
    store_outputs(0, [&](size_t o, const std::string& v) {
      line("out" + std::to_string(o) + "[b" + std::to_string(n_in_ + o) + "] = " + v + ";");
    });
    if (rows != Rows::Thread) close();
  }
  close();
  close();
}

void Writer::reduce_pass(int p, Rows rows) {
  std::vector<int> mine;
  for (size_t i = 0; i < k_.exprs.size(); ++i)
    if (is_reduce(k_.exprs[i].op) && pass_[i] == p) mine.push_back(static_cast<int>(i));
  for (int i : mine) {
    const ir::Expr& e = k_.exprs[i];
    bool arg = is_arg_reduce(e.op);
    ST t = arg ? type(e.operands[0]) : e.type;
    acc_[i] = fresh("a");
    line(std::string(reg_type(t)) + " " + acc_[i] + " = " + reduce_identity(e.op, t) + ";");
    if (arg) line("long long " + acc_[i] + "i = 0;");
  }
  std::string len = std::to_string(product(s_.red));
  switch (rows) {
    case Rows::Thread: open("for (" + idx_ + " r = 0; r < " + len + "; ++r)"); break;
    case Rows::Warp: open("for (" + idx_ + " r = lane; r < " + len + "; r += 32)"); break;
    case Rows::Block:
      open("for (" + idx_ + " r = threadIdx.x; r < " + len + "; r += " + std::to_string(block_) +
           ")");
      break;
  }
  offsets("o", "r", s_.red, s_.outer.size(), "b");
  new_scope([](int buf) { return "in" + std::to_string(buf) + "[o" + std::to_string(buf) + "]"; },
            "row", "r");
  for (int i : mine) {
    const ir::Expr& e = k_.exprs[i];
    const std::string& a = acc_[i];
    if (!is_arg_reduce(e.op)) {
      line(a + " = " + reduce_combine(e.op, e.type, a, operand(e.operands[0], e.type)) + ";");
      continue;
    }
    std::string v = value(e.operands[0]);
    line("if (" + arg_better(e.op, type(e.operands[0]), v, "(long long)r", a, a + "i") + ") { " +
         a + " = " + v + "; " + a + "i = (long long)r; }");
  }
  store_outputs(p, [&](size_t o, const std::string& v) {
    line("out" + std::to_string(o) + "[o" + std::to_string(n_in_ + o) + "] = " + v + ";");
  });
  close();
  for (int i : mine) {
    combine(i, rows);
    done_[i] = 1;
  }
}

// Folds the per-thread accumulators of reduction `i` so that every thread of
// the row's warp or block holds the row's result.
void Writer::combine(int i, Rows rows) {
  if (rows == Rows::Thread) return;
  const ir::Expr& e = k_.exprs[i];
  bool arg = is_arg_reduce(e.op);
  ST t = arg ? type(e.operands[0]) : e.type;
  std::string T = reg_type(t), a = acc_[i], ai = a + "i";
  // Folds the value `ov` (and index `oi`) into the accumulator.
  auto fold = [&](const std::string& ov, const std::string& oi) {
    if (!arg) {
      line(a + " = " + reduce_combine(e.op, t, a, ov) + ";");
      return;
    }
    line("if (" + arg_better(e.op, t, ov, oi, a, ai) + ") { " + a + " = " + ov + "; " + ai +
         " = " + oi + "; }");
  };
  open("for (int s = 16; s > 0; s >>= 1)");
  line("const " + T + " ov = (" + T + ")__shfl_xor_sync(0xffffffffu, (" + shuffle_type(t) + ")" +
       a + ", s);");
  if (arg) line("const long long oi = __shfl_xor_sync(0xffffffffu, " + ai + ", s);");
  fold("ov", "oi");
  close();
  if (rows != Rows::Block) return;
  std::string sh = "sh" + std::to_string(i), shi = "shi" + std::to_string(i);
  open("if ((threadIdx.x & 31) == 0)");
  line(sh + "[threadIdx.x >> 5] = " + a + ";");
  if (arg) line(shi + "[threadIdx.x >> 5] = " + ai + ";");
  close();
  line("__syncthreads();");
  line(a + " = " + sh + "[0];");
  if (arg) line(ai + " = " + shi + "[0];");
  open("for (int w = 1; w < " + std::to_string(block_ / 32) + "; ++w)");
  line("const " + T + " ov = " + sh + "[w];");
  if (arg) line("const long long oi = " + shi + "[w];");
  fold("ov", "oi");
  close();
  line("__syncthreads();  // the next row reuses " + sh);
}

}  // namespace tl::codegen::cuda
