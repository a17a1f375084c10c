#pragma once
// Builds loop-IR kernels by hand for the CPU back-end tests, and runs them
// through the JIT on raw C++ buffers.
#include <string>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::test {

using ir::ExprOp;
using ST = ir::ScalarType;

struct KernelBuilder {
  ir::Kernel k;

  KernelBuilder(std::string name, std::vector<int64_t> shape, int reduction_axes = 0) {
    k.name = std::move(name);
    k.shape = std::move(shape);
    k.reduction_axes = reduction_axes;
  }
  // Row-major strides of `shape` with zeros where `keep` is false.
  std::vector<int64_t> contiguous(std::vector<bool> keep = {}) const {
    std::vector<int64_t> st(k.shape.size());
    int64_t s = 1;
    for (size_t d = k.shape.size(); d-- > 0;) {
      bool kept = keep.empty() || keep[d];
      st[d] = kept ? s : 0;
      if (kept) s *= k.shape[d];
    }
    return st;
  }
  int input(ST t, std::vector<int64_t> strides, int64_t offset = 0) {
    k.inputs.push_back({t, std::move(strides), offset});
    return static_cast<int>(k.inputs.size()) - 1;
  }
  int expr(ExprOp op, ST t, std::vector<int> operands) {
    ir::Expr e;
    e.op = op;
    e.type = t;
    e.operands = std::move(operands);
    k.exprs.push_back(e);
    return static_cast<int>(k.exprs.size()) - 1;
  }
  int load(int buffer, ST t) {
    int e = expr(ExprOp::Load, t, {});
    k.exprs[e].buffer = buffer;
    return e;
  }
  int constant(double v, ST t) {
    int e = expr(ExprOp::Constant, t, {});
    k.exprs[e].value = v;
    k.exprs[e].ivalue = static_cast<int64_t>(v);
    return e;
  }
  void output(int e, ST t, std::vector<int64_t> strides, int64_t offset = 0) {
    k.outputs.push_back({e, {t, std::move(strides), offset}});
  }
};

int64_t outer_numel(const ir::Kernel& k);
int64_t reduction_numel(const ir::Kernel& k);
// JIT-compiles `k` (disk cache off) and runs it over all outer points.
void run_kernel(const ir::Kernel& k, std::vector<void*> bufs);

}  // namespace tl::test
