#include "codegen/common/scalar_types.h"

namespace tl::codegen {

using ST = ir::ScalarType;

bool is_unsigned_type(ST t) { return t == ST::U8 || t == ST::Bool; }

ST promote_types(ST a, ST b) {
  if (a == b) return a;
  bool fa = is_float_type(a), fb = is_float_type(b);
  if (fa || fb) {
    if (a == ST::F64 || b == ST::F64) return ST::F64;
    if (fa && fb) return ST::F32;  // f16 with bf16 (or f32): computed in f32 anyway
    return fa ? a : b;
  }
  if (a == ST::Bool) return b;
  if (b == ST::Bool) return a;
  if ((a == ST::U8 && b == ST::I8) || (a == ST::I8 && b == ST::U8)) return ST::I16;
  if (a == ST::U8) return b;
  if (b == ST::U8) return a;
  return elem_bytes(a) >= elem_bytes(b) ? a : b;
}

}  // namespace tl::codegen
