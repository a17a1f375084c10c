// Which i64 exprs the CUDA emitter may compute in 32 bits, on hand-built kernels.
#include "codegen/common/index_math.h"

#include <catch2/catch.hpp>

#include "../kernel_builder.h"

using namespace tl::test;
using tl::codegen::narrow_index_math;

namespace {
int index(KernelBuilder& b, int axis) {
  int e = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[e].ivalue = axis;
  return e;
}
}  // namespace

TEST_CASE("window arithmetic on coordinates is narrowed to i32", "[codegen]") {
  KernelBuilder b("pool", {64, 64, 56, 56});
  int x = b.input(ST::F32, {200704, 1, 3584, 64});
  int h = index(b, 2);
  int at =
      b.expr(ExprOp::Add, ST::I64,
             {b.expr(ExprOp::Mul, ST::I64, {h, b.constant(2, ST::I64)}), b.constant(-1, ST::I64)});
  int lo = b.expr(ExprOp::Maximum, ST::I64, {at, b.constant(0, ST::I64)});
  int clamped = b.expr(ExprOp::Minimum, ST::I64, {lo, b.constant(111, ST::I64)});
  int off = b.expr(ExprOp::Mul, ST::I64, {clamped, b.constant(7168, ST::I64)});
  int row = b.expr(ExprOp::FloorDiv, ST::I64, {off, b.constant(3, ST::I64)});
  int g = b.expr(ExprOp::Gather, ST::F32, {off});
  b.k.exprs[g].buffer = x;
  b.output(b.expr(ExprOp::Add, ST::F32, {g, b.expr(ExprOp::Cast, ST::F32, {row})}), ST::F32,
           b.contiguous());
  auto n = narrow_index_math(b.k);
  for (int e : {h, at, lo, clamped, off, row}) CHECK(n.exprs[e].type == ST::I32);
  CHECK(n.exprs[g].type == ST::F32);
  CHECK(b.k.exprs[off].type == ST::I64);  // the input kernel is left as it was
}

TEST_CASE("values past int32 or read from memory stay i64", "[codegen]") {
  KernelBuilder b("wide", {1 << 20, 4096});
  int ids = b.input(ST::I64, b.contiguous());
  int i = index(b, 0);
  int big = b.expr(ExprOp::Mul, ST::I64, {i, b.constant(4096, ST::I64)});  // up to 2^32
  int loaded = b.load(ids, ST::I64);
  // A clamp of a loaded value fits in int32, but its operand does not: never narrowed.
  int clamped = b.expr(ExprOp::Minimum, ST::I64, {loaded, b.constant(10, ST::I64)});
  int rem = b.expr(ExprOp::Remainder, ST::I64, {loaded, b.constant(7, ST::I64)});
  int sum = b.expr(ExprOp::Add, ST::I64, {big, b.expr(ExprOp::Add, ST::I64, {clamped, rem})});
  b.output(sum, ST::I64, b.contiguous());
  auto n = narrow_index_math(b.k);
  CHECK(n.exprs[i].type == ST::I32);
  for (int e : {big, loaded, clamped, rem, sum}) CHECK(n.exprs[e].type == ST::I64);
}
