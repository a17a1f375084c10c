#include "ir/loop_ir.h"

#include <catch2/catch.hpp>

#include "core/errors.h"

using namespace tl::ir;

namespace {

// out = load(in0) * 2 over [4, 8]
Kernel small_kernel() {
  Kernel k;
  k.name = "small";
  k.shape = {4, 8};
  k.inputs = {BufferView{ScalarType::F32, {8, 1}, 0}};
  Expr load{ExprOp::Load, ScalarType::F32};
  load.buffer = 0;
  Expr two{ExprOp::Constant, ScalarType::F32};
  two.value = 2;
  k.exprs = {load, two, Expr{ExprOp::Mul, ScalarType::F32, {0, 1}}};
  k.outputs = {{2, BufferView{ScalarType::F32, {8, 1}, 0}}};
  return k;
}

std::string verify_error(const Kernel& k) {
  try {
    k.verify();
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("kernel prints inputs, one expr a line and outputs", "[ir]") {
  Kernel k = small_kernel();
  CHECK(k.str() ==
        "kernel small[4,8] reduce=0:\n"
        "  in0 : f32 strides=[8,1]\n"
        "  %0 : f32 = load(in0)\n"
        "  %1 : f32 = constant(2)\n"
        "  %2 : f32 = mul(%0, %1)\n"
        "  out0 : f32 strides=[8,1] = %2\n");
  CHECK(k.outer_numel() == 32);
  CHECK(k.reduction_numel() == 1);
  CHECK_NOTHROW(k.verify());
}

TEST_CASE("verify names the expr whose operand types differ", "[ir]") {
  Kernel k = small_kernel();
  k.exprs[1].type = ScalarType::I64;
  std::string err = verify_error(k);
  CHECK(err.find("kernel small: %2 (mul): operand types differ") != std::string::npos);
  CHECK(err.find("%1 : i64 = constant(0)") != std::string::npos);  // the kernel is appended
}

TEST_CASE("verify rejects math on f16 and forward references", "[ir]") {
  Kernel k = small_kernel();
  for (auto& e : k.exprs) e.type = ScalarType::F16;
  k.inputs[0].type = ScalarType::F16;
  k.outputs[0].view.type = ScalarType::F16;
  CHECK(verify_error(k).find("%2 (mul): math on f16/bf16") != std::string::npos);
  k = small_kernel();
  k.exprs[2].operands = {0, 2};
  CHECK(verify_error(k).find("%2 (mul): operand %2 is not an earlier expr") != std::string::npos);
}

TEST_CASE("values varying along reduction axes need a stride there; row values may have one",
          "[ir]") {
  Kernel k = small_kernel();
  k.reduction_axes = 1;
  k.exprs.push_back(Expr{ExprOp::ReduceSum, ScalarType::F32, {2}});
  k.outputs = {{3, BufferView{ScalarType::F32, {1, 0}, 0}},
               {2, BufferView{ScalarType::F32, {8, 1}, 0}}};
  CHECK_NOTHROW(k.verify());
  CHECK(inner_exprs(k) == std::vector<bool>{true, false, true, false});
  CHECK(k.reduction_numel() == 8);
  // A row value stored at every point of the row (softmax of a row broadcast with stride 0).
  k.outputs[0].view.strides = {8, 1};
  CHECK_NOTHROW(k.verify());
  k.outputs[1].view.strides = {1, 0};
  CHECK(verify_error(k).find(
            "out1: value varying along the reduction axes stored with a zero stride there") !=
        std::string::npos);
}
