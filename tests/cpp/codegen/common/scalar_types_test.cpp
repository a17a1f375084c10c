// Comparison promotion shared by the CPU and CUDA emitters (torch's rules).
#include "codegen/common/scalar_types.h"

#include <catch2/catch.hpp>

using tl::codegen::promote_types;
using ST = tl::ir::ScalarType;

TEST_CASE("comparison operands promote as torch does", "[codegen]") {
  CHECK(promote_types(ST::U8, ST::I8) == ST::I16);
  CHECK(promote_types(ST::I8, ST::U8) == ST::I16);
  CHECK(promote_types(ST::F16, ST::BF16) == ST::F32);
  CHECK(promote_types(ST::F16, ST::F64) == ST::F64);
  CHECK(promote_types(ST::I64, ST::F16) == ST::F16);
  CHECK(promote_types(ST::Bool, ST::I32) == ST::I32);
  CHECK(promote_types(ST::U8, ST::I32) == ST::I32);
  CHECK(promote_types(ST::I16, ST::I64) == ST::I64);
  CHECK(tl::codegen::is_unsigned_type(ST::Bool));
  CHECK_FALSE(tl::codegen::is_unsigned_type(ST::I8));
}
