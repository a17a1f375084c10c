#pragma once
// Scalar helpers that generated kernels call where neither libm nor an LLVM
// intrinsic exists; the JIT defines these symbols at their process addresses.
#include <cstdint>

extern "C" {
double tl_erfinv(double y);
float tl_erfinvf(float y);
// Integer power with torch's rules for negative exponents; wraps on overflow.
int64_t tl_ipow(int64_t base, int64_t exp);
}

// f16 conversions LLVM lowers to compiler-rt calls when the CPU has no
// instruction for them (f64 -> f16 always). Defined here so the JIT never
// depends on which libgcc the process loaded. f64 -> f16 goes through f32,
// as torch's own conversion does (c10::Half is built from a float).
extern "C" {
_Float16 tl_truncdfhf2(double x);
_Float16 tl_truncsfhf2(float x);
float tl_extendhfsf2(_Float16 x);
}
