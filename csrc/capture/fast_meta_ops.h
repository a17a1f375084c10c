#pragma once
// Which calls fast_meta answers: torch functions (by identity) and Tensor
// methods (by name), each mapped to the rule that infers its result.
#include <string>

#include "capture/dtype_promotion.h"
#include "core/py_ref.h"

namespace tl::capture {

enum class OpFamily {
  Unary,
  Binary,
  Where,
  MaskedFill,
  Clamp,
  Reduce,
  Softmax,
  LayerNorm,
  BatchNorm,
  GroupNorm,
  Cat,
  Stack,
  Tri,
  Linear,
  Addmm,
  Attention,
  Gather
};

struct OpRule {
  OpFamily family = OpFamily::Unary;
  Promotion promotion = Promotion::Default;
  bool float_only = false;    // every tensor input floating point (activations, pow)
  bool tensors_only = false;  // no Python numbers (maximum, minimum)
  bool no_bool = false;       // raises on bool (sub, neg, floor_divide, remainder)
  char variant = 0;           // Reduce: 's' sum 'm' mean 'x' amax 'n' amin; Clamp: 'b' 'l' 'h';
                              // Tri: 'l' 'u'; Binary: 'a' takes alpha=;
                              // BatchNorm: 'f' F.batch_norm's argument order
  const char* name = "";
};

// The rule for `fn` called as a function, or for Tensor.<method>; null when none.
// Borrows `fn`.
const OpRule* rule_for_function(PyObject* fn);
const OpRule* rule_for_method(const std::string& method);
// True for the functions of module operator (operator.add(2, x) takes a number first).
bool is_python_operator(PyObject* fn);

}  // namespace tl::capture
