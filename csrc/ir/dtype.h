#pragma once
// torch.dtype <-> loop IR ScalarType, and torch's type promotion for the few
// ops whose compute type is not their result type (comparisons).
#include <Python.h>

#include <optional>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::ir {

// nullopt for dtypes the loop IR has no type for (complex, float8, uint16...).
std::optional<ScalarType> scalar_type_of(PyObject* dtype);  // borrows dtype
PyObject* torch_dtype_of(ScalarType t);  // returns borrowed (kept for the process)
// Type values live in inside a kernel: f16/bf16 are computed in f32.
ScalarType compute_type(ScalarType t);

// An operand of a promoting op: a tensor with dims, a 0-dim tensor, or a
// Python number (wrapped scalar).
struct PromoteOperand {
  enum class Kind { Tensor, ZeroDim, Scalar };
  ScalarType type;
  Kind kind;
};
// torch.result_type over the operands (c10 ResultTypeState rules).
ScalarType result_type(const std::vector<PromoteOperand>& operands);

}  // namespace tl::ir
