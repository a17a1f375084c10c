#include "passes/dtype.h"

#include <catch2/catch.hpp>

#include "test_graphs.h"

using S = tl::ir::ScalarType;
using namespace tl::passes;
using K = PromoteOperand::Kind;
constexpr auto T = K::Tensor, Z = K::ZeroDim, W = K::Scalar;

TEST_CASE("torch dtypes map to scalar types and back", "[passes]") {
  CHECK(scalar_type_of(tl::testing::resolve("torch.float16").get()) == S::F16);
  CHECK(scalar_type_of(tl::testing::resolve("torch.bool").get()) == S::Bool);
  CHECK(scalar_type_of(tl::testing::resolve("torch.complex64").get()) == std::nullopt);
  CHECK(torch_dtype_of(S::BF16) == tl::testing::resolve("torch.bfloat16").get());
  CHECK(compute_type(S::BF16) == S::F32);
}

TEST_CASE("result_type follows torch's promotion of tensors, 0-dim tensors and scalars",
          "[passes]") {
  CHECK(result_type({{S::I32, T}, {S::F64, Z}}) == S::F64);
  CHECK(result_type({{S::U8, T}, {S::I8, T}}) == S::I16);
  CHECK(result_type({{S::F16, T}, {S::F64, W}}) == S::F16);
  CHECK(result_type({{S::I64, T}, {S::F64, W}}) == S::F32);
  CHECK(result_type({{S::Bool, T}, {S::I64, W}}) == S::I64);
  CHECK(result_type({{S::F16, T}, {S::BF16, T}}) == S::F32);
  CHECK(result_type({{S::I32, T}, {S::I64, Z}}) == S::I32);
}
