#pragma once
// The guarded DE encoder shared by the DE quantize kernels (gpu/quant/quantize.cu) and the fused
// AdamW step (gpu/optim/adamw.cu). Device code only (lg2.approx / ex2.approx and the hardware
// converter cvt2_hw of quantize_kernels.cuh, which callers must have verified: hw_cvt_verified).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/quant/quantize_kernels.cuh"
#include "sim/quant/dmath.hpp"
#include "sim/quant/expand.hpp"

namespace fp8sim::gpu::detail {

// A guarded fast approximation of the DE encoder input (COAT's expansion), exact in the codes.
// The reference stores code(v) with v = RN(sign * pow_det(a, k) / s), a = RN(|x| / c).
// Fast: A = ex2.approx(t) approximates V = (|x|/c)^k / s, t ~ log2 V = k*log2|x| + C with the
// group's C = -k*log2(c) - log2(s). Every log2 is split into the exact exponent plus lg2.approx
// of the mantissa in [1, 2), so nothing large cancels: C = I + F with I = -(k*e_c) - e_s +
// rint(cf) exact and F = cf - rint(cf) exact, cf = RN(-k*lg2(m_c) - lg2(m_s)) (|cf| <= 17);
// per element t = RN(RN(k*e_x + I) + RN(k*lg2(m_x) + F)), the first sum exact (k is a multiple
// of 1/16 <= 16, |k*e_x + I| < 2^13). Error bounds, in units u = 2^-23, all operands normal
// (guards below):
//   reference: |v / V - 1| <= (k/2 + (2 + k) + 1/2) u   (a's rounding amplified by k,
//              pow_det's (2 + |y|) ulp bound of its header, the division's rounding);
//   fast:      |t - log2 V| <= 4k (lg2 of m_x, 2^-21 absolute) + 4k (m_c) + 4 (m_s) + 8 (cf's
//              rounding) + 8 + 8 (the two roundings of t: |s2| <= 16.5, and every lane that
//              passes the guards has -21 < t < 16) = (8k + 28) u, so
//              |A / V - 1| <= ln2 (8k + 28) u + 4 u (ex2.approx, 2^-21 relative) + rounding;
// together, with the roundings of lo / hi, E(k) <= (7.1k + 27) u. With
// G = (7.5k + 28) 2^-20 >= 8 E(k): lo = RN(A(1-G)) <= |v| <= hi = RN(A(1+G)), and the encoder is
// monotone, so code(lo) == code(hi) implies code(|v|) == code(lo) (the sign bit is x's, as in
// encode_fp8_rne). The lg2.approx / ex2.approx bounds used (2^-21) are twice the documented ones
// (2^-22); the tests measure both over every float of the ranges used: lg2 on [1, 2), ex2 on
// t in [-21, 16] (lo >= 2^-20 and hi < 2^16 keep every guarded lane inside it).
// Guards (else the reference path): group: k a multiple of 1/16 in [1/16, 16], c normal, s in
// [2^-100, 2^100]; element: x normal with a = |x|/c normal (e_x in [e_c - 124, e_c + 125]),
// lo >= 2^-20 (so pow_det's result P = v*s > 2^-121 is normal), hi < lim (guarded_lim: the
// format's max where storage does not saturate, the caller's saturation bound, and 2^16, so that
// t < 16), and code(lo) == code(hi).
struct GuardedEnc {
  float k, I, F, lo_f, hi_f, lim;
  int ex_lo, ex_span;
  bool ok;
};

// lg2.approx of the mantissa of u's float, taken to [1, 2).
__device__ __forceinline__ float lg2_mant(uint32_t u) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(f32_from_bits((u & 0x007FFFFFu) | 0x3F800000u)));
  return r;
}

// The group's C = -k*log2(c) - log2(s) as I + F: I exact (a multiple of 1/16 below 2^13), |F| <= 1/2.
// Valid (within the bound in the comment above) when k is a multiple of 1/16 in (0, 16] and c, s
// are normal, which guarded_prep requires.
__device__ __forceinline__ void guarded_log_consts(const ExpandParams& e, float& I, float& F) {
  const uint32_t uc = f32_bits(e.c), us = f32_bits(e.s);
  const float ec = static_cast<float>(static_cast<int>((uc >> 23) & 0xFFu) - 127);
  const float es = static_cast<float>(static_cast<int>((us >> 23) & 0xFFu) - 127);
  const float ci = __fadd_rn(-__fmul_rn(e.k, ec), -es);           // exact
  const float cf = __fmaf_rn(-e.k, lg2_mant(uc), -lg2_mant(us));  // |cf| <= 17, one rounding
  const float r = rintf(cf);
  I = __fadd_rn(ci, r);   // exact
  F = __fadd_rn(cf, -r);  // exact
}

// The largest encoder input (exclusive) the guarded path may handle: saturating storage takes
// any finite value (the hardware converter's SATFINITE equals encode_fp8_rne there); otherwise
// values are kept below the format's max (above it the reference may overflow). `bound` further
// caps it (a caller that counts saturated values passes its saturation bound, else +Inf).
__device__ __forceinline__ float guarded_lim(int format, bool saturate, float bound) {
  float lim = saturate ? 65536.0f : (format == 0 ? 448.0f : 57344.0f);  // 2^16: see the header comment
  return lim < bound ? lim : bound;
}

// The per-group state of the guarded encoder (group parameters e, constants from
// guarded_log_consts, limit from guarded_lim).
__device__ __forceinline__ GuardedEnc guarded_prep(const ExpandParams& e, float I, float F, float lim) {
  GuardedEnc f;
  const float k = e.k, s = e.s;
  const uint32_t uc = f32_bits(e.c);
  const int ec = static_cast<int>((uc >> 23) & 0xFFu) - 127;
  const int lo = ec - 124 < -126 ? -126 : ec - 124;
  const int hi = ec + 125 > 127 ? 127 : ec + 125;
  f.ok = k >= 0.0625f && k <= 16.0f && mul_rn(k, 16.0f) == dmath::floor_det(mul_rn(k, 16.0f)) && uc >= 0x00800000u &&
         uc < 0x7F800000u && s >= 0x1p-100f && s <= 0x1p100f && hi >= lo;
  f.k = k;
  f.I = I;
  f.F = F;
  f.ex_lo = lo;
  f.ex_span = hi - lo;
  const float G = mul_rn(add_rn(mul_rn(7.5f, k), 28.0f), 0x1p-20f);
  f.lo_f = add_rn(1.0f, -G);
  f.hi_f = add_rn(1.0f, G);
  f.lim = lim;
  return f;
}

// The code of x (sign included) in bits 0-7; bit 8 set when x must take the reference path.
template <int FMT>
__device__ __forceinline__ uint32_t encode_guarded(float x, const GuardedEnc& f) {
  const uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  const int ex = static_cast<int>(a >> 23) - 127;
  const float lx = lg2_mant(a);
  float A;
  const float s1 = __fmaf_rn(f.k, static_cast<float>(ex), f.I);  // exact
  const float s2 = __fmaf_rn(f.k, lx, f.F);
  const float t = __fadd_rn(s1, s2);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(A) : "f"(t));
  const float lo = __fmul_rn(A, f.lo_f), hi = __fmul_rn(A, f.hi_f);
  const uint32_t pair = FMT == 0 ? cvt2_hw<E4M3Traits>(lo, hi) : cvt2_hw<E5M2Traits>(lo, hi);
  const bool ok = f.ok && static_cast<uint32_t>(ex - f.ex_lo) <= static_cast<uint32_t>(f.ex_span) && lo >= 0x1p-20f &&
                  hi < f.lim && (pair & 0xFFu) == (pair >> 8);
  return (pair & 0xFFu) | ((u >> 24) & 0x80u) | (ok ? 0u : 0x100u);
}
__device__ __forceinline__ uint32_t encode_guarded(float x, const GuardedEnc& f, int fmt) {
  return fmt == 0 ? encode_guarded<0>(x, f) : encode_guarded<1>(x, f);
}

}  // namespace fp8sim::gpu::detail
