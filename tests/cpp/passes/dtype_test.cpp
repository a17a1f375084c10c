#include "passes/dtype.h"

#include <catch2/catch.hpp>

#include "test_graphs.h"

using tl::ir::ScalarType;
using namespace tl::passes;
using K = PromoteOperand::Kind;

TEST_CASE("torch dtypes map to scalar types and back", "[passes]") {
  CHECK(scalar_type_of(tl::testing::resolve("torch.float16").get()) == ScalarType::F16);
  CHECK(scalar_type_of(tl::testing::resolve("torch.bool").get()) == ScalarType::Bool);
  CHECK(scalar_type_of(tl::testing::resolve("torch.complex64").get()) == std::nullopt);
  CHECK(torch_dtype_of(ScalarType::BF16) == tl::testing::resolve("torch.bfloat16").get());
  CHECK(compute_type(ScalarType::BF16) == ScalarType::F32);
}

TEST_CASE("result_type follows torch's promotion of tensors, 0-dim tensors and scalars", "[passes]") {
  CHECK(result_type({{ScalarType::I32, K::Tensor}, {ScalarType::F64, K::ZeroDim}}) == ScalarType::F64);
  CHECK(result_type({{ScalarType::U8, K::Tensor}, {ScalarType::I8, K::Tensor}}) == ScalarType::I16);
  CHECK(result_type({{ScalarType::F16, K::Tensor}, {ScalarType::F64, K::Scalar}}) == ScalarType::F16);
  CHECK(result_type({{ScalarType::I64, K::Tensor}, {ScalarType::F64, K::Scalar}}) == ScalarType::F32);
  CHECK(result_type({{ScalarType::Bool, K::Tensor}, {ScalarType::I64, K::Scalar}}) == ScalarType::I64);
  CHECK(result_type({{ScalarType::F16, K::Tensor}, {ScalarType::BF16, K::Tensor}}) == ScalarType::F32);
  CHECK(result_type({{ScalarType::I32, K::Tensor}, {ScalarType::I64, K::ZeroDim}}) == ScalarType::I32);
}
