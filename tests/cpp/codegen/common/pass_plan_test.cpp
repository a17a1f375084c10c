// Expr checks and reduction-pass planning shared by the CPU and CUDA emitters.
#include "codegen/common/pass_plan.h"

#include <catch2/catch.hpp>

#include "../kernel_builder.h"
#include "core/errors.h"

using namespace tl::test;
using tl::codegen::plan_passes;

TEST_CASE("softmax plans max, then sum, then the stores in a third pass", "[codegen]") {
  KernelBuilder b("softmax", {4, 8}, 1);
  int x = b.input(ST::F32, b.contiguous());
  int v = b.load(x, ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {v});
  int e = b.expr(ExprOp::Exp, ST::F32, {b.expr(ExprOp::Sub, ST::F32, {v, mx})});
  int sum = b.expr(ExprOp::ReduceSum, ST::F32, {e});
  b.output(b.expr(ExprOp::Div, ST::F32, {e, sum}), ST::F32, b.contiguous());
  b.output(sum, ST::F32, {1, 0});
  auto p = plan_passes(b.k, "kernel");
  CHECK(p.pass[mx] == 1);
  CHECK(p.pass[sum] == 2);
  CHECK(p.varies[e]);
  CHECK_FALSE(p.varies[sum]);
  CHECK(p.out_pass == std::vector<int>{3, 0});
  CHECK(p.n_passes == 3);
}

TEST_CASE("a forward operand is an internal error naming the back end and the expr", "[codegen]") {
  KernelBuilder b("bad", {4});
  int c = b.constant(1, ST::F32);
  int n = b.expr(ExprOp::Neg, ST::F32, {c});
  b.k.exprs[n].operands = {n};
  b.output(n, ST::F32, {1});
  CHECK_THROWS_WITH(plan_passes(b.k, "CUDA kernel"),
                    Catch::Contains("CUDA kernel bad: expr %1: operand is not an earlier expr"));
}

TEST_CASE("a reduction in a kernel without reduction axes is an internal error", "[codegen]") {
  KernelBuilder b("flat", {4});
  int x = b.input(ST::F32, {1});
  b.output(b.expr(ExprOp::ReduceSum, ST::F32, {b.load(x, ST::F32)}), ST::F32, {0});
  CHECK_THROWS_WITH(plan_passes(b.k, "kernel"), Catch::Contains("without reduction axes"));
}
