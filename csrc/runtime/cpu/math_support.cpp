#include "runtime/cpu/math_support.h"

#include <cmath>
#include <initializer_list>
#include <limits>

extern "C" {

// Giles' approximation ("Approximating the erfinv function", 2010) refined by
// two Newton steps on erf, which brings it to double precision.
double tl_erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1 || y == -1) return std::copysign(std::numeric_limits<double>::infinity(), y);
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      x = c + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      x = c + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; ++i) {
    double d = 1.1283791670955126 * std::exp(-x * x);  // d/dx erf(x)
    if (d == 0) break;
    x -= (std::erf(x) - y) / d;
  }
  return x;
}

float tl_erfinvf(float y) { return static_cast<float>(tl_erfinv(y)); }

int64_t tl_ipow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exp); e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return static_cast<int64_t>(result);
}

}  // extern "C"

extern "C" _Float16 tl_truncdfhf2(double x) { return static_cast<_Float16>(static_cast<float>(x)); }
extern "C" _Float16 tl_truncsfhf2(float x) { return static_cast<_Float16>(x); }
extern "C" float tl_extendhfsf2(_Float16 x) { return static_cast<float>(x); }
