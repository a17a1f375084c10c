#include "capture/dtype_promotion.h"

namespace tl::capture {
namespace {

// bool < int < float: the "type" category of _prims_common.
int category(DType d) {
  if (d == DType::Bool) return 0;
  return is_float(d) ? 2 : 1;
}

// get_higher_dtype for the modelled dtypes: uint8 and int8 meet at int16,
// float16 and bfloat16 at float32.
DType higher(DType a, DType b) {
  if (a == DType::Other) return b;
  if (a == b) return a;
  auto pair = [&](DType x, DType y) { return (a == x && b == y) || (a == y && b == x); };
  if (pair(DType::UInt8, DType::Int8)) return DType::Int16;
  if (pair(DType::Float16, DType::BFloat16)) return DType::Float32;
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

}  // namespace

bool is_float(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 || d == DType::Float32 || d == DType::Float64;
}

bool is_integral(DType d, bool include_bool) {
  return (include_bool && d == DType::Bool) || d == DType::UInt8 || d == DType::Int8 ||
         d == DType::Int16 || d == DType::Int32 || d == DType::Int64;
}

DType promote(const std::vector<PromotionArg>& args, Promotion kind, DType default_float) {
  int highest = 0;
  for (const PromotionArg& a : args) {
    if (a.kind == PromotionArg::Tensor) {
      if (a.dtype == DType::Other) return DType::Other;
      highest = std::max(highest, category(a.dtype));
    } else {
      highest = std::max(highest, a.kind == PromotionArg::Bool  ? 0
                                  : a.kind == PromotionArg::Int ? 1
                                                                : 2);
    }
  }
  DType result = DType::Other;
  if (highest == 0) {
    result = DType::Bool;
  } else {
    // Tensors of the winning category: those with dimensions first, then 0-dim ones.
    DType dims = DType::Other, zero = DType::Other;
    for (const PromotionArg& a : args) {
      if (a.kind != PromotionArg::Tensor || category(a.dtype) != highest) continue;
      (a.zero_dim ? zero : dims) = higher(a.zero_dim ? zero : dims, a.dtype);
    }
    result = dims != DType::Other ? dims : zero;
    if (result == DType::Other) result = highest == 2 ? default_float : DType::Int64;
  }
  switch (kind) {
    case Promotion::Default:
    case Promotion::NoOpmath:
      return result;
    case Promotion::IntToFloat:
      return is_float(result) ? result : default_float;
    case Promotion::AlwaysBool:
      return DType::Bool;
    case Promotion::BoolToLong:
      return result == DType::Bool ? DType::Int64 : result;
  }
  return DType::Other;
}

}  // namespace tl::capture
