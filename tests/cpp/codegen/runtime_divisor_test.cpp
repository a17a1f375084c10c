// Integer division by a runtime divisor with its magic numbers (codegen/common/runtime_constants.h
// magic_u64; the CPU emitter's Emitter::magic_divide): exact for every dividend and divisor
// tried, and a kernel compiled once divides right by every divisor it is run with.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/common/runtime_constants.h"
#include "kernel_builder.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/disk_cache.h"
#endif

using namespace tl::test;

namespace {

uint64_t magic_quotient(uint64_t u, const tl::codegen::Magic64& m) {
  using U128 = unsigned __int128;
  const uint64_t hi = static_cast<uint64_t>((static_cast<U128>(u) * m.multiplier) >> 64);
  return (hi + u) >> m.shift;
}

std::vector<int64_t> divisors() {
  std::vector<int64_t> out = {2,   3,    5,    6,     7,     9,       10,        11,           12,
                              13,  24,   25,   48,    64,    96,      100,       127,          641,
                              768, 1000, 4097, 65535, 65537, 1000003, INT64_MAX, INT64_MAX - 1};
  for (int k = 1; k < 63; ++k) {
    const int64_t p = int64_t{1} << k;
    out.push_back(p);
    out.push_back(p + 1);
    if (p - 1 >= 2) out.push_back(p - 1);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) out.push_back(static_cast<int64_t>(rng() >> (1 + rng() % 62)) | 2);
  return out;
}

}  // namespace

TEST_CASE("magic numbers divide every non-negative 64-bit dividend exactly", "[codegen]") {
  std::mt19937_64 rng(11);
  for (int64_t d : divisors()) {
    if (d < 2) continue;
    const tl::codegen::Magic64 m = tl::codegen::magic_u64(d);
    const uint64_t ud = static_cast<uint64_t>(d);
    std::vector<uint64_t> xs = {0,
                                1,
                                ud - 1,
                                ud,
                                ud + 1,
                                2 * ud - 1,
                                2 * ud,
                                3 * ud + 2,
                                static_cast<uint64_t>(INT64_MAX),
                                static_cast<uint64_t>(INT64_MAX) - 1,
                                uint64_t{1} << 62,
                                (uint64_t{1} << 31) - 1,
                                uint64_t{1} << 31,
                                uint64_t{1} << 32};
    for (uint64_t k : {uint64_t{7}, uint64_t{1000}, uint64_t{1} << 20}) {
      if (ud <= static_cast<uint64_t>(INT64_MAX) / (k + 1)) {
        xs.push_back(ud * k - 1), xs.push_back(ud * k), xs.push_back(ud * k + ud - 1);
      }
    }
    for (int i = 0; i < 300; ++i) xs.push_back(rng() >> (1 + rng() % 63));
    for (uint64_t x : xs) {
      if (x > static_cast<uint64_t>(INT64_MAX)) continue;
      INFO("d = " << d << ", x = " << x);
      REQUIRE(magic_quotient(x, m) == x / ud);
    }
  }
}

TEST_CASE("magic numbers of 1, 2, 3, 7, powers of two and the largest divisor", "[codegen]") {
  using tl::codegen::magic_u64;
  CHECK(magic_u64(2).multiplier == 1);  // 2^k: a shift
  CHECK(magic_u64(2).shift == 1);
  CHECK(magic_u64(int64_t{1} << 40).shift == 40);
  CHECK(magic_u64(3).shift == 2);
  CHECK(magic_u64(7).shift == 3);
  CHECK(magic_u64(INT64_MAX).shift == 63);
  CHECK_THROWS(magic_u64(1));  // a divisor of 1 is a literal, never a runtime divisor
  CHECK_THROWS(magic_u64(0));
}

#ifdef TORCHLITE_HAVE_LLVM
namespace {

// out = (index * scale - shift) OP divisor, over a [n] index: signed dividends both sides of
// zero, the divisor a runtime constant (read from the dims array, divided by its magic numbers).
KernelBuilder divide_kernel(ExprOp op, int64_t n, int64_t scale, int64_t shift, int64_t divisor) {
  KernelBuilder b("divide", {n});
  b.k.runtime_sizes = true;
  b.k.shape = {n};
  int i = b.expr(ExprOp::Index, ST::I64, {});
  b.k.exprs[i].ivalue = 0;
  int x = b.expr(ExprOp::Sub, ST::I64,
                 {b.expr(ExprOp::Mul, ST::I64, {i, b.constant(double(scale), ST::I64)}),
                  b.constant(double(shift), ST::I64)});
  int d = b.expr(ExprOp::Constant, ST::I64, {});
  b.k.exprs[d].ivalue = divisor;
  b.output(b.expr(op, ST::I64, {x, d}), ST::I64, {1});
  return b;
}

int64_t reference(ExprOp op, int64_t x, int64_t d) {
  int64_t q = x / d, r = x % d;  // C: truncation
  switch (op) {
    case ExprOp::Div:
    case ExprOp::TruncDiv:
      return q;
    case ExprOp::Fmod:
      return r;
    case ExprOp::FloorDiv:
      return r != 0 && (x < 0) != (d < 0) ? q - 1 : q;
    default:  // Remainder
      return r != 0 && (r < 0) != (d < 0) ? r + d : r;
  }
}

}  // namespace

TEST_CASE("a kernel divides by runtime divisors exactly, one function for every divisor",
          "[codegen]") {
  namespace rc = tl::runtime::cpu;
  tl::runtime::set_cache_dir("");
  for (ExprOp op :
       {ExprOp::FloorDiv, ExprOp::Remainder, ExprOp::TruncDiv, ExprOp::Fmod, ExprOp::Div}) {
    rc::KernelFn fn = nullptr;
    for (int64_t d : {2, 3, 7, 8, 12, 64, 97, 1000, 1 << 20}) {
      KernelBuilder b = divide_kernel(op, 301, 37, 5000, d);
      rc::CompiledKernels c = rc::compile_kernels({&b.k});
      if (!fn) fn = c.fns[0];
      CHECK(c.fns[0] == fn);  // the divisor is no literal
      std::vector<int64_t> out(301);
      run_kernel(b.k, {out.data()});
      for (int64_t i = 0; i < 301; ++i) {
        INFO("op " << static_cast<int>(op) << ", d = " << d << ", x = " << i * 37 - 5000);
        REQUIRE(out[i] == reference(op, i * 37 - 5000, d));
      }
    }
  }
}
#endif
