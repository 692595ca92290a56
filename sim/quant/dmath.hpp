#pragma once
// Deterministic elementary functions for numerics shared bit-for-bit by the CPU reference and
// the CUDA kernels: floor, round-to-nearest-even, log2, exp2, pow. Built only from correctly
// rounded fp32 + - * / (contraction off, no FMA) and integer bit manipulation, so every compiler
// and both sides produce the same bits. libm is never called here: its results differ between
// glibc, CUDA's device library and versions of either.
//
// Accuracy (ulp of the exact result, measured against double-precision libm in
// tests/test_quant_expand.cpp, which asserts the bounds in brackets):
// * floor_det, rint_small: exact.
// * log2_det(x): max 1.73 ulp over 20M random positive floats incl. subnormals [2 ulp]; exact
//   at powers of two (integers) and 0 at x = 1.
// * exp2_det(p): max 1.08 ulp where the result is normal [2 ulp].
// * pow_det(x, y), x >= 0, normal result: max 1.4 ulp for |y| <= 1, 2.0 for |y| <= 2, 4.2 for
//   |y| <= 4, 11 for |y| <= 16 [2 + |y| ulp]. The |y| term is log2(mantissa)'s fp32 error
//   amplified by y; DE's exponents are k in [1/16, ~10] and 1/k, typically 1..3.
//   pow_det(x, 1) == x and pow_det(x, 0) == 1 exactly. CUDA's powf is documented within 4 ulp and
//   glibc's within 1: where COAT's kernel and fp8sim differ it is in the last bits of x' and s,
//   which changes an FP8 code only when x'/s lies within that error of a rounding midpoint
//   (tests/test_quant_expand.cpp bounds where and how often).
// Special values follow C99 pow for x >= 0: pow(x, +-0) = 1 (even NaN x), pow(1, y) = 1 (even
// NaN y), pow(+0, y<0) = +Inf, pow(+0, y>0) = +0, pow(+Inf, y<0) = +0, pow(+Inf, y>0) = +Inf,
// pow(x, +Inf) = +0 (x<1) or +Inf (x>1), pow(x, -Inf) = +Inf (x<1) or +0 (x>1), NaN otherwise
// NaN. Negative x (never passed by the DE formulas, which take magnitudes) gives NaN, and -0 is
// treated as +0.
#include "sim/common/hd.hpp"

// FP8SIM_HD, forced inline on the host too: the element loops that call these must see the
// whole computation to vectorize it (GCC otherwise keeps pow_det as a call in the clones).
#if defined(__CUDACC__)
#define FP8SIM_HD_INLINE FP8SIM_HD
#else
#define FP8SIM_HD_INLINE inline __attribute__((always_inline))
#endif

namespace fp8sim::dmath {

// c ? a : b through bit masks. GCC 12 cannot vectorize a select whose condition is loop-invariant
// (e.g. a test on pow's exponent y inside a loop over x); the masked form vectorizes.
FP8SIM_HD_INLINE float sel(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return f32_from_bits((f32_bits(a) & m) | (f32_bits(b) & ~m));
}

FP8SIM_HD_INLINE float abs_bits(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }
FP8SIM_HD_INLINE bool sign_bit(float x) { return (f32_bits(x) >> 31) != 0; }
FP8SIM_HD_INLINE float neg_if(float x, bool neg) { return f32_from_bits(f32_bits(x) ^ (neg ? 0x80000000u : 0u)); }

// 2^n for any integer n: exact (or the correctly rounded subnormal / 0 / Inf), via at most two
// exact power-of-two multiplications of 1.
FP8SIM_HD_INLINE float scale_pow2(float r, int n) {
  n = n < -252 ? -252 : (n > 254 ? 254 : n);
  const int n1 = n / 2;  // |n1|, |n - n1| <= 127
  const int n2 = n - n1;
  const float p1 = f32_from_bits(static_cast<uint32_t>(n1 + 127) << 23);
  const float p2 = f32_from_bits(static_cast<uint32_t>(n2 + 127) << 23);
  return mul_rn(mul_rn(r, p1), p2);
}

// floor(x), exact, sign of zero kept (floor(-0) = -0).
FP8SIM_HD float floor_det(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x4B000000u) return x;                         // |x| >= 2^23: already an integer; also Inf and NaN
  float t = static_cast<float>(static_cast<int32_t>(x));  // truncation toward zero, exact
  t = t > x ? add_rn(t, -1.0f) : t;
  return a == 0 ? x : t;
}

// Round to nearest integer, ties to even, for |x| < 2^22 (the fp32 add at 1.5*2^23 rounds away
// the fraction with the hardware's RNE; the subtraction is exact).
FP8SIM_HD_INLINE float rint_small(float x) { return add_rn(add_rn(x, 12582912.0f), -12582912.0f); }

// log2(x) = e + l for positive finite x: e an integer (returned as float) and
// l = log2(m), m = x / 2^e in [sqrt(1/2), sqrt(2)), so |l| <= 1/2.
struct Log2Parts {
  float e;
  float l;
};

FP8SIM_HD_INLINE Log2Parts log2_parts(float x) {
  uint32_t u = f32_bits(x);
  const bool sub = u < 0x00800000u;  // subnormal: scale by 2^23 exactly first
  u = sub ? f32_bits(mul_rn(x, 8388608.0f)) : u;
  // Subtracting the bits of sqrt(1/2) moves the exponent boundary to sqrt(2), so the arithmetic
  // shift gives the e for which m lands in [sqrt(1/2), sqrt(2)).
  const int32_t e = static_cast<int32_t>(u - 0x3F3504F3u) >> 23;
  const float m = f32_from_bits(u - (static_cast<uint32_t>(e) << 23));
  const float f = add_rn(m, -1.0f);  // exact (Sterbenz)
  // ln(1+f) = 2 atanh(s) with s = f/(2+f), |s| <= 0.1716: the odd series
  //   2s + 2s^3/3 + ... = f - (hfsq - s*(hfsq + R)),  R = z*(2/3 + z*(2/5 + z*(2/7 + z*2/9))),
  // z = s^2 <= 0.0295; the first omitted term is below 2^-30 of the result. Keeping f apart from
  // the small correction keeps the result accurate to about 1 ulp.
  const float s = div_rn(f, add_rn(2.0f, f));
  const float z = mul_rn(s, s);
  float R = 0.22222222f;                  // 2/9
  R = add_rn(mul_rn(R, z), 0.28571429f);  // 2/7
  R = add_rn(mul_rn(R, z), 0.40000001f);  // 2/5
  R = add_rn(mul_rn(R, z), 0.66666669f);  // 2/3
  R = mul_rn(R, z);
  const float hfsq = mul_rn(mul_rn(0.5f, f), f);
  const float ln1p = add_rn(f, -add_rn(hfsq, -mul_rn(s, add_rn(hfsq, R))));
  const float l = mul_rn(ln1p, 1.44269502f);  // 1/ln 2
  return Log2Parts{static_cast<float>(e - (sub ? 23 : 0)), l};
}

FP8SIM_HD float log2_det(float x) {
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return x;
  if (u >> 31) return (u & 0x7FFFFFFFu) == 0 ? f32_from_bits(0xFF800000u) : f32_from_bits(0x7FC00000u);
  if (u == 0) return f32_from_bits(0xFF800000u);  // -Inf
  if (u == 0x7F800000u) return x;                 // +Inf
  const Log2Parts p = log2_parts(x);
  return add_rn(p.e, p.l);
}

// 2^g for |g| <= 1/2: Taylor series of e^(g ln2) to degree 7 (the omitted term is < 2^-27
// relative), Horner with coefficients ln2^n/n!.
FP8SIM_HD_INLINE float exp2_reduced(float g) {
  float p = 1.5252734e-05f;                  // ln2^7/7!
  p = add_rn(mul_rn(p, g), 1.5403530e-04f);  // ln2^6/6!
  p = add_rn(mul_rn(p, g), 1.3333558e-03f);  // ln2^5/5!
  p = add_rn(mul_rn(p, g), 9.6181291e-03f);  // ln2^4/4!
  p = add_rn(mul_rn(p, g), 5.5504109e-02f);  // ln2^3/3!
  p = add_rn(mul_rn(p, g), 2.4022651e-01f);  // ln2^2/2!
  p = add_rn(mul_rn(p, g), 6.9314718e-01f);  // ln2
  return add_rn(1.0f, mul_rn(p, g));
}

FP8SIM_HD float exp2_det(float x) {
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return x;
  const float xc = x > 400.0f ? 400.0f : (x < -400.0f ? -400.0f : x);  // saturates Inf too
  const float n = rint_small(xc);
  return scale_pow2(exp2_reduced(add_rn(xc, -n)), static_cast<int>(n));
}

// x^y for x >= 0 (see the header comment for accuracy and special values). Branch-free: the
// core runs on every input (on a harmless stand-in where x or y is special) and the special
// results are selected afterwards, lowest priority first, so loops over it vectorize.
FP8SIM_HD_INLINE float pow_det(float x, float y) {
  const uint32_t sx = f32_bits(x);
  const uint32_t ux = sx & 0x7FFFFFFFu;  // -0 is treated as +0
  const uint32_t uy = f32_bits(y);
  const uint32_t ay = uy & 0x7FFFFFFFu;
  const bool yneg = (uy >> 31) != 0;
  const float inf = f32_from_bits(0x7F800000u);
  const float nan = f32_from_bits(0x7FC00000u);

  // Core: x positive finite, y finite. Elsewhere it computes 1^0 and is overridden below.
  const bool x_ok = ux != 0u && ux < 0x7F800000u && (sx >> 31) == 0u;
  const bool y_ok = ay < 0x7F800000u;
  const float xc = x_ok ? x : 1.0f;
  const float yv = y_ok ? y : 0.0f;
  const Log2Parts lp = log2_parts(xc);
  // y*(e + l): e != 0 means |log2 x| >= 1/2, so |y| > 2^14 gives |P| > 2^13 (the result is 0 or
  // Inf either way); clamping keeps y*e below 2^22. With e == 0, |l| >= 2^-23.4 unless x == 1,
  // so |y| = 2^40 already saturates.
  const float ylim = lp.e != 0.0f ? 16384.0f : 1099511627776.0f;
  const float yc = yv > ylim ? ylim : (yv < -ylim ? -ylim : yv);
  // y*e exactly as a_hi + a_lo: y_hi keeps 12 significant bits and |e| <= 149 has 8, so both
  // products fit in 24 bits.
  const float y_hi = f32_from_bits(f32_bits(yc) & 0xFFFFF000u);
  const float y_lo = add_rn(yc, -y_hi);
  const float a_hi = mul_rn(y_hi, lp.e);
  const float a_lo = mul_rn(y_lo, lp.e);
  const float n1 = rint_small(a_hi);
  float t = add_rn(add_rn(a_hi, -n1), add_rn(a_lo, mul_rn(yc, lp.l)));  // a_hi - n1 is exact
  t = t > 2097152.0f ? 2097152.0f : (t < -2097152.0f ? -2097152.0f : t);
  const float n2 = rint_small(t);
  const float g = add_rn(t, -n2);  // exact
  float n = add_rn(n1, n2);        // integers below 2^23: exact
  n = n > 400.0f ? 400.0f : (n < -400.0f ? -400.0f : n);
  float r = scale_pow2(exp2_reduced(g), static_cast<int>(n));

  // Special values, lowest priority first.
  r = sel(ay == 0x7F800000u, sel((x < 1.0f) != yneg, 0.0f, inf), r);  // y = +-Inf
  r = sel(ux == 0x7F800000u, yneg ? 0.0f : inf, r);                   // x = +Inf
  r = sel(ux == 0u, yneg ? inf : 0.0f, r);                            // x = +-0
  r = sel(uy == 0x3F800000u, sel(ux == 0u, 0.0f, x), r);              // y = 1: x exactly
  r = sel((sx >> 31) != 0u && ux != 0u, nan, r);                      // x < 0
  r = sel(is_nan_bits(uy) || is_nan_bits(ux), nan, r);
  r = sel(ay == 0u || sx == 0x3F800000u, 1.0f, r);  // y = +-0 or x = 1
  return r;
}

}  // namespace fp8sim::dmath
