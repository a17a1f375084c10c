// Types, conversions, constants and the per-kernel prelude of the CUDA C text.
#include "codegen/cuda/scalar_text.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/errors.h"

namespace tl::codegen::cuda {

const char* reg_type(ST t) {
  switch (t) {
    case ST::F32:
    case ST::F16:
    case ST::BF16:
      return "float";
    case ST::F64:
      return "double";
    case ST::I8:
      return "signed char";
    case ST::I16:
      return "short";
    case ST::I32:
      return "int";
    case ST::I64:
      return "long long";
    case ST::U8:
      return "unsigned char";
    case ST::Bool:
      return "bool";
  }
  return "?";
}

const char* mem_type(ST t) {
  if (t == ST::F16 || t == ST::BF16) return "unsigned short";
  return t == ST::Bool ? "unsigned char" : reg_type(t);
}

// NOTE: f16 conversions use PTX cvt (exact IEEE rounding, one instruction);
// bf16 rounds to nearest even with NaN stored as c10::BFloat16 stores it in
// CUDA code: cvt (0x7FFF) from sm_80 on, 0x7FC0 before.
// Double -> half goes through float, as c10::Half(double) does.
const std::string& prelude() {
  static const std::string text = R"(// torchlite generated kernel
#define TL_D __device__ __forceinline__
// A bad index stops the kernel through what CUDA's assert() calls (NVRTC
// declares it): the context reports a device-side assert, as it does for
// torch's own indexing kernels.
TL_D long long tl_check_index(long long i, long long n) {
  if ((unsigned long long)i >= (unsigned long long)n)
    __assertfail("index out of range: 0 <= index < size", "torchlite kernel", 0,
                 "tl_check_index", 1);
  return i;
}
// Programmatic dependent launch (sm_90+): the runtime may start this grid
// while the stream's previous kernel is still finishing, so every kernel first
// waits for that grid to complete and its writes to be visible, then lets the
// next launch begin. The next grid's blocks then fill the SMs this grid's last
// blocks leave idle and wait there, instead of starting after a launch gap
// (softmax+LN back to back on an H200: 40.0 -> 37.6 us a call). Both are no-ops
// in a grid launched without the attribute.
TL_D void tl_after_prior_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
TL_D float tl_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
TL_D unsigned short tl_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
TL_D float tl_bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
TL_D unsigned short tl_cvt_bf(float f) {  // any quiet NaN for a NaN
#if __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned u = __float_as_uint(f);
  if (f != f) return 0x7FC0;
  return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
#endif
}
TL_D unsigned short tl_f2bf(float f) {
#if __CUDA_ARCH__ >= 800
  return tl_cvt_bf(f);  // NaN as 0x7FFF, as c10::BFloat16 on these (__float2bfloat16)
#else
  return f != f ? (unsigned short)0x7FC0 : tl_cvt_bf(f);
#endif
}
// Two neighbouring 16-bit floats (bfloat16 when BF, else float16) in one
// 32-bit word, lo at the lower address: one cvt for both on sm_80+.
template <bool BF> TL_D unsigned tl_f2x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  unsigned u;
  if (BF) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  if (!BF) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
#else
  unsigned l = BF ? tl_f2bf(lo) : tl_f2h(lo), h = BF ? tl_f2bf(hi) : tl_f2h(hi);
  return l | (h << 16);
#endif
}
TL_D unsigned tl_f2bf2(float lo, float hi) { return tl_f2x2<true>(lo, hi); }
TL_D unsigned tl_f2h2(float lo, float hi) { return tl_f2x2<false>(lo, hi); }
TL_D float tl_rh(float f) { return tl_h2f(tl_f2h(f)); }
TL_D float tl_rbf(float f) {
#if __CUDA_ARCH__ >= 800
  // f rounded into the upper half, +0 into the lower: the 32 bits are the
  // rounded float. One instruction where convert + widen took three.
  unsigned u;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(f), "f"(0.f));
  return __uint_as_float(u);
#else
  return tl_bf2f(tl_cvt_bf(f));
#endif
}
// NaN-propagating max (MAX) or min without a branch: one max.NaN/min.NaN on
// sm_80+ (nested selects compiled to a branch per element, ~7 instructions).
template <bool MAX> TL_D float tl_extreme(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r;
  if (MAX) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  if (!MAX) asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? a + b : MAX ? fmaxf(a, b) : fminf(a, b);
#endif
}
TL_D float tl_max(float a, float b) { return tl_extreme<true>(a, b); }
TL_D float tl_min(float a, float b) { return tl_extreme<false>(a, b); }
// exp for values that end in a 16-bit float: 2^(x log2 e) through the
// special-function unit (~2 ulp of float32 where expf is correctly rounded to
// 1 ulp, at a quarter of the instructions).
TL_D float tl_hexp(float x) {  // results under 2^-126 flush to 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
TL_D double tl_max(double a, double b) { return a != a ? a : (b != b ? b : fmax(a, b)); }
TL_D double tl_min(double a, double b) { return a != a ? a : (b != b ? b : fmin(a, b)); }
// c10's div_floor_floating
template <class T> TL_D T tl_floordiv(T a, T b) {
  if (b == T(0)) return a / b;
  T mod = fmod(a, b), div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  if (div == T(0)) return copysign(T(0), a / b);
  T fl = floor(div);
  return div - fl > T(0.5) ? fl + T(1) : fl;
}
template <class T> TL_D T tl_remainder(T a, T b) {
  T m = fmod(a, b);
  return (m != T(0) && ((b < T(0)) != (m < T(0)))) ? m + b : m;
}
// Integer division that never traps (x / 0 is 0); mode 0 trunc, 1 floor, 2 fmod, 3 remainder.
template <class T> TL_D T tl_idiv(T x, T y, int mode) {
  const bool s = (T)(-1) < (T)0;
  bool zero = y == (T)0, m1 = s && y == (T)(-1);
  T d = (zero || m1) ? (T)1 : y;
  if (mode >= 2) {
    T r = (zero || m1) ? (T)0 : (T)(x % d);
    if (mode == 2 || !s) return r;
    return (r != (T)0 && ((r < (T)0) != (y < (T)0))) ? (T)(r + y) : r;
  }
  T q = m1 ? (T)(0ull - (unsigned long long)x) : (T)(x / d);
  if (mode == 1 && s && !m1) {
    T r = (T)(x % d);
    if (r != (T)0 && ((x < (T)0) != (y < (T)0))) q = (T)(q - (T)1);
  }
  return zero ? (T)0 : q;
}
// tl_idiv by a runtime divisor 2 <= y < 2^31 given with its magic multiplier and shift
// (Writer::magic_division): a multiply-high, an add and a shift where 0 <= x < 2^31 (index math),
// tl_idiv elsewhere.
template <class T> TL_D T tl_idiv_magic(T x, T y, unsigned m, unsigned l, int mode) {
  if (x < (T)0 || (unsigned long long)x >= (1ull << 31)) return tl_idiv<T>(x, y, mode);
  const unsigned u = (unsigned)x, q = (__umulhi(u, m) + u) >> l;
  return mode >= 2 ? (T)(u - q * (unsigned)y) : (T)q;
}
TL_D long long tl_ipow(long long base, long long e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
  unsigned long long r = 1, b = (unsigned long long)base;
  for (unsigned long long k = (unsigned long long)e; k; k >>= 1, b *= b)
    if (k & 1) r *= b;
  return (long long)r;
}
template <class T, int V> struct alignas(sizeof(T) * V) tl_pack { T e[V]; };
// The loop space's numbers of a kernel with runtime sizes, passed by value (CudaKernel::dims).
template <class T, int N> struct tl_dims { T v[N]; };
// Two neighbouring 16-bit elements in one word (lo at the lower address), and
// back to float32.
TL_D unsigned tl_join(unsigned short lo, unsigned short hi) { return (unsigned)lo | ((unsigned)hi << 16); }
TL_D float tl_bflo(unsigned w) { return __uint_as_float(w << 16); }
TL_D float tl_bfhi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
TL_D float tl_hlo(unsigned w) { return tl_h2f((unsigned short)w); }
TL_D float tl_hhi(unsigned w) { return tl_h2f((unsigned short)(w >> 16)); }
// add (OP 0), sub (1) or mul (2) of two words of 16-bit values, each result
// rounded once: the bits of float32 math rounded to the type, since the exact
// product of two 16-bit values fits a float32, and a sum that float32 must
// round is too far from a 16-bit tie for the second rounding to matter.
template <int OP> TL_D unsigned tl_bf2op(unsigned a, unsigned b) {
#if __CUDA_ARCH__ >= 900
  unsigned d;
  if (OP == 0) asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  if (OP == 1) asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  if (OP == 2) asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  float l = tl_bflo(a), r = tl_bflo(b), L = tl_bfhi(a), R = tl_bfhi(b);
  return OP == 0 ? tl_f2bf2(l + r, L + R) : OP == 1 ? tl_f2bf2(l - r, L - R) : tl_f2bf2(l * r, L * R);
#endif
}
template <int OP> TL_D unsigned tl_h2op(unsigned a, unsigned b) {
  unsigned d;
  if (OP == 0) asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  if (OP == 1) asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  if (OP == 2) asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
)";
  return text;
}

std::string convert(const std::string& v, ST from, ST to) {
  if (from == to) return v;
  bool ff = is_float_type(from), ft = is_float_type(to);
  if (to == ST::Bool) return "(" + v + " != 0)";
  if (ff && ft) {
    if (to == ST::F16) return "tl_rh((float)" + v + ")";
    if (to == ST::BF16) return "tl_rbf((float)" + v + ")";
    return std::string("(") + reg_type(to) + ")" + v;
  }
  // float -> int goes through i64 so u8 wraps like torch's CPU casts.
  if (ff) return std::string("(") + reg_type(to) + ")(long long)" + v;
  std::string r = std::string("(") + reg_type(to) + ")" + v;
  if (to == ST::F16) return "tl_rh(" + r + ")";
  if (to == ST::BF16) return "tl_rbf(" + r + ")";
  return r;
}

std::string from_memory(const std::string& ref, ST t) {
  switch (t) {
    case ST::F16:
      return "tl_h2f(" + ref + ")";
    case ST::BF16:
      return "tl_bf2f(" + ref + ")";
    case ST::Bool:
      return "(" + ref + " != 0)";
    default:
      return ref;
  }
}

std::string to_memory(const std::string& v, ST t) {
  switch (t) {
    case ST::F16:
      return "tl_f2h(" + v + ")";
    case ST::BF16:
      return "tl_f2bf(" + v + ")";
    case ST::Bool:
      return "(unsigned char)(" + v + ")";
    default:
      return v;
  }
}

namespace {
std::string float_literal(double v, bool f32) {
  if (std::isnan(v))
    return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) {
    std::string inf =
        f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
    return v < 0 ? "(-" + inf + ")" : inf;
  }
  char buf[64];
  // Hex float literals are exact.
  if (f32)
    std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
  else
    std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string int_literal(int64_t v, ST t) {
  std::string n = v == std::numeric_limits<int64_t>::min() ? "(-9223372036854775807LL - 1)"
                                                           : std::to_string(v) + "LL";
  return std::string("((") + reg_type(t) + ")" + n + ")";
}
}  // namespace

bool half_bits(double v, ST h, unsigned* bits) {
  if (!std::isfinite(v)) return false;
  float f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return false;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (h == ST::BF16) {
    *bits = u >> 16;
    return (u & 0xFFFFu) == 0;
  }
  // float16: 11 significant bits from 2^-14 up, multiples of 2^-24 below, at most 65504.
  double a = std::fabs(v);
  if (a > 65504.0) return false;
  unsigned sign = (u >> 31) << 15;
  if (a < std::ldexp(1.0, -14)) {
    double q = std::ldexp(a, 24);
    if (q != std::floor(q)) return false;
    *bits = sign | static_cast<unsigned>(q);
    return true;
  }
  int e;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  double q = std::ldexp(m, 11);
  if (q != std::floor(q)) return false;
  *bits = sign | (static_cast<unsigned>(e - 1 + 15) << 10) | (static_cast<unsigned>(q) & 0x3FFu);
  return true;
}

std::string constant(const ir::Expr& e) {
  if (is_float_type(e.type)) {
    std::string lit = float_literal(e.value, e.type != ST::F64);
    if (e.type == ST::F16) return "tl_rh(" + lit + ")";
    if (e.type == ST::BF16) return "tl_rbf(" + lit + ")";
    return lit;
  }
  // Integers come in `ivalue`; a constant lowered from a Python float to an
  // int type still arrives in `value`.
  int64_t v = e.ivalue != 0 || e.value == 0 ? e.ivalue : static_cast<int64_t>(e.value);
  if (e.type == ST::Bool) return v != 0 ? "true" : "false";
  return int_literal(v, e.type);
}

std::string lowest(ST t) {
  if (is_float_type(t)) return "(-" + float_literal(INFINITY, t != ST::F64) + ")";
  switch (t) {
    case ST::Bool:
      return "false";
    case ST::U8:
      return "((unsigned char)0)";
    case ST::I8:
      return int_literal(-128, t);
    case ST::I16:
      return int_literal(-32768, t);
    case ST::I32:
      return int_literal(std::numeric_limits<int32_t>::min(), t);
    default:
      return int_literal(std::numeric_limits<int64_t>::min(), t);
  }
}

std::string highest(ST t) {
  if (is_float_type(t)) return float_literal(INFINITY, t != ST::F64);
  switch (t) {
    case ST::Bool:
      return "true";
    case ST::U8:
      return "((unsigned char)255)";
    case ST::I8:
      return int_literal(127, t);
    case ST::I16:
      return int_literal(32767, t);
    case ST::I32:
      return int_literal(std::numeric_limits<int32_t>::max(), t);
    default:
      return int_literal(std::numeric_limits<int64_t>::max(), t);
  }
}

}  // namespace tl::codegen::cuda
