#pragma once
// torch's elementwise type promotion (torch._prims_common.elementwise_dtypes)
// over the dtypes fast_meta.cpp answers for: bool, integers, floats. Complex
// and the rarer dtypes are Other, and a caller falls back to the real meta op.
#include <vector>

namespace tl::capture {

enum class DType {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Other
};

// How an op maps the promoted dtype to its result (ELEMENTWISE_TYPE_PROMOTION_KIND).
enum class Promotion { Default, NoOpmath, IntToFloat, AlwaysBool, BoolToLong };

bool is_float(DType d);
bool is_integral(DType d, bool include_bool);

// One input of an op: a tensor (with its number of dimensions) or a Python number.
struct PromotionArg {
  enum Kind { Tensor, Bool, Int, Float } kind;
  DType dtype = DType::Other;  // tensors only
  bool zero_dim = false;       // tensors only
};

// The result dtype, or Other when the inputs hold a dtype not modelled here.
DType promote(const std::vector<PromotionArg>& args, Promotion kind, DType default_float);

}  // namespace tl::capture
