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
