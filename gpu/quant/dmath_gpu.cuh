#pragma once
// pow_det (sim/quant/dmath.hpp) specialised for an exponent shared by many elements: DE raises
// every element of a group to the group's k (quantize) or 1/k (dequantize). pow_det_y performs
// exactly pow_det's operations in pow_det's order on every element, so its result is the same
// bits; what moves out of the per-element path is the work that depends on y alone (its
// clamping and hi/lo split for both clamp limits, and the special cases of y), done once per
// group by pow_y(). tests/test_quant_gpu.cpp compares the two on the device over random x,
// special x and special y; compare and the DE tests pin the end results against the CPU.
#include "sim/common/hd.hpp"
#include "sim/quant/dmath.hpp"

namespace fp8sim::gpu::detail {

struct PowY {
  float yc_small, yhi_small, ylo_small;  // y clamped to +-2^14 (used where log2's e != 0)
  float yc_big, yhi_big, ylo_big;        // y clamped to +-2^40 (e == 0)
  bool yneg, y_inf, y_one, y_zero, y_nan;
};

__device__ __forceinline__ PowY pow_y(float y) {
  PowY p;
  const uint32_t uy = f32_bits(y), ay = uy & 0x7FFFFFFFu;
  p.yneg = (uy >> 31) != 0;
  p.y_inf = ay == 0x7F800000u;
  p.y_one = uy == 0x3F800000u;
  p.y_zero = ay == 0u;
  p.y_nan = is_nan_bits(uy);
  const float yv = ay < 0x7F800000u ? y : 0.0f;
  const float ls = 16384.0f, lb = 1099511627776.0f;
  p.yc_small = yv > ls ? ls : (yv < -ls ? -ls : yv);
  p.yc_big = yv > lb ? lb : (yv < -lb ? -lb : yv);
  p.yhi_small = f32_from_bits(f32_bits(p.yc_small) & 0xFFFFF000u);
  p.ylo_small = add_rn(p.yc_small, -p.yhi_small);
  p.yhi_big = f32_from_bits(f32_bits(p.yc_big) & 0xFFFFF000u);
  p.ylo_big = add_rn(p.yc_big, -p.yhi_big);
  return p;
}

// dmath::log2_parts with its one division, s = f / (2 + f), written as the instruction sequence
// the CUDA compiler emits for div_rn's fast path (MUFU.RCP, one Newton step, q0 = a*r, one
// remainder correction) without the range check and slow-path branch around it: here the
// divisor lies in [1.70, 2.42] and |f| in {0} U [2^-24, 0.42], where that check always passes.
// Same bits as log2_parts for every positive finite x (tests: all 2^31 positive patterns); the
// branch-free form lets the compiler interleave several elements' pow chains.
__device__ __forceinline__ float div_rn_mid(float a, float b) {
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(b));
  const float e = __fmaf_rn(r0, -b, 1.0f);
  const float r = __fmaf_rn(r0, e, r0);
  const float q0 = __fmaf_rn(a, r, 0.0f);
  const float rem = __fmaf_rn(q0, -b, a);
  return __fmaf_rn(r, rem, q0);
}

__device__ __forceinline__ dmath::Log2Parts log2_parts_fast(float x) {
  uint32_t u = f32_bits(x);
  const bool sub = u < 0x00800000u;
  u = sub ? f32_bits(mul_rn(x, 8388608.0f)) : u;
  const int32_t e = static_cast<int32_t>(u - 0x3F3504F3u) >> 23;
  const float m = f32_from_bits(u - (static_cast<uint32_t>(e) << 23));
  const float f = add_rn(m, -1.0f);
  const float s = div_rn_mid(f, add_rn(2.0f, f));
  const float z = mul_rn(s, s);
  float R = 0.22222222f;
  R = add_rn(mul_rn(R, z), 0.28571429f);
  R = add_rn(mul_rn(R, z), 0.40000001f);
  R = add_rn(mul_rn(R, z), 0.66666669f);
  R = mul_rn(R, z);
  const float hfsq = mul_rn(mul_rn(0.5f, f), f);
  const float ln1p = add_rn(f, -add_rn(hfsq, -mul_rn(s, add_rn(hfsq, R))));
  const float l = mul_rn(ln1p, 1.44269502f);
  return dmath::Log2Parts{static_cast<float>(e - (sub ? 23 : 0)), l};
}

// pow_det's core after log2_parts (the exact split of y*(e + l), the reduced exp2 and the
// power-of-two scaling), before its special-value selections; shared by the forms below.
__device__ __forceinline__ float pow_core_lp(dmath::Log2Parts lp, const PowY& Y) {
  using namespace dmath;
  const bool small = lp.e != 0.0f;
  const float yc = small ? Y.yc_small : Y.yc_big;
  const float y_hi = small ? Y.yhi_small : Y.yhi_big;
  const float y_lo = small ? Y.ylo_small : Y.ylo_big;
  const float a_hi = mul_rn(y_hi, lp.e);
  const float a_lo = mul_rn(y_lo, lp.e);
  const float n1 = rint_small(a_hi);
  float t = add_rn(add_rn(a_hi, -n1), add_rn(a_lo, mul_rn(yc, lp.l)));
  t = t > 2097152.0f ? 2097152.0f : (t < -2097152.0f ? -2097152.0f : t);
  const float n2 = rint_small(t);
  const float g = add_rn(t, -n2);
  float n = add_rn(n1, n2);
  n = n > 400.0f ? 400.0f : (n < -400.0f ? -400.0f : n);
  return scale_pow2(exp2_reduced(g), static_cast<int>(n));
}

// pow_det_y with log2_parts(x) supplied by the caller (lp must equal dmath::log2_parts(x) wherever
// x is positive and finite; elsewhere pow_det's special values override the core, so lp is then
// irrelevant). pow_det_y calls it with log2_parts_fast; the DE dequantizations (the fused AdamW's,
// robust DE's candidate) use the pow_det_y_lp_plain form below, with lp from a per-group table of
// the 8 FP8 mantissas (compress_table_finite, at the end of this file, with the proof).
__device__ __forceinline__ float pow_det_y_lp(float x, dmath::Log2Parts lp, const PowY& Y) {
  using namespace dmath;
  const uint32_t sx = f32_bits(x);
  const uint32_t ux = sx & 0x7FFFFFFFu;
  const float inf = f32_from_bits(0x7F800000u);
  const float nan = f32_from_bits(0x7FC00000u);
  float r = pow_core_lp(lp, Y);
  // pow_det's special values, same priorities (lowest first); the y-only tests are uniform.
  if (Y.y_inf) r = (x < 1.0f) != Y.yneg ? 0.0f : inf;
  r = sel(ux == 0x7F800000u, Y.yneg ? 0.0f : inf, r);
  r = sel(ux == 0u, Y.yneg ? inf : 0.0f, r);
  if (Y.y_one) r = sel(ux == 0u, 0.0f, x);
  r = sel((sx >> 31) != 0u && ux != 0u, nan, r);
  r = Y.y_nan ? nan : sel(is_nan_bits(ux), nan, r);
  r = Y.y_zero ? 1.0f : sel(sx == 0x3F800000u, 1.0f, r);
  return r;
}

// dmath::pow_det(x, y) with y's work from pow_y: the core runs on 1.0 where x is not positive
// finite (the special values override it there), as pow_det does.
__device__ __forceinline__ float pow_det_y(float x, const PowY& Y) {
  const uint32_t sx = f32_bits(x);
  const uint32_t ux = sx & 0x7FFFFFFFu;
  const bool x_ok = ux != 0u && ux < 0x7F800000u && (sx >> 31) == 0u;
  return pow_det_y_lp(x, log2_parts_fast(x_ok ? x : 1.0f), Y);
}

// pow_det_y_lp for x = +0 or positive, normal and finite, and a "plain" y (finite, > 0; y = 1
// allowed): pow_det's special-value selects that cannot fire there are left out (x = Inf / NaN /
// < 0, y = 0 / Inf / NaN); those that can (y = 1: x exactly; x = +0: 0; x = 1: 1; at most one
// applies) are kept.
__device__ __forceinline__ float pow_det_y_lp_plain(float x, dmath::Log2Parts lp, const PowY& Y) {
  float r = pow_core_lp(lp, Y);
  r = Y.y_one ? x : r;
  r = f32_bits(x) == 0u ? 0.0f : r;  // x = +0 (y > 0): 0, whatever lp held
  return f32_bits(x) == 0x3F800000u ? 1.0f : r;
}

// dmath::log2_det with log2_parts_fast (the same bits for every positive finite x, see above).
__device__ __forceinline__ float log2_det_fast(float x) {
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return x;
  if (u >> 31) return (u & 0x7FFFFFFFu) == 0 ? f32_from_bits(0xFF800000u) : f32_from_bits(0x7FC00000u);
  if (u == 0) return f32_from_bits(0xFF800000u);
  if (u == 0x7F800000u) return x;
  const dmath::Log2Parts p = log2_parts_fast(x);
  return add_rn(p.e, p.l);
}

// ---- FP8 dequantization through a per-group table of the 8 mantissas ---------------------------
// compress_value(q, {k, c, s}) = sign(q*s) * pow_det(|RN(q*s)|, 1/k) * c for every FP8 code q of a
// group with log2_parts(|q*s|) looked up instead of computed. A finite nonzero E4M3 or E5M2 code
// decodes to q = 2^e_q * mq (mq = 1 + j/8, j = 0..7, also for E4M3's subnormal codes; E5M2 uses
// the even j). If s is in [2^-100, 2^100], every |q*s| lies in [2^-116, 2^116] (|q| in
// [2^-16, 57344]), so RN(q*s) and RN(mq*s) are normal and RN(q*s) = 2^e_q * RN(mq*s): their bit
// patterns differ by e_q << 23 exactly. log2_parts takes its e from (bits - 0x3F3504F3) >> 23 (so
// e shifts by e_q) and its l from the bits minus e << 23 (unchanged):
// log2_parts(|q*s|) = {e_q + e_j, l_j} with {e_j, l_j} = log2_parts(RN(mq_j * s)). The rest of
// pow_det runs unchanged (pow_det_y_lp_plain). A zero code gives +-0 * c, as compress_value
// (pow_det(+0, y > 0) = +0); non-finite codes need pow_det's special values (pow_det_y).

// Entry j (0..7) of a group's mantissa table: log2_parts(RN((1 + j/8) * s)), e as int bits.
__device__ __forceinline__ float2 mant_entry(int j, float s) {
  const dmath::Log2Parts lp = log2_parts_fast(mul_rn(add_rn(1.0f, mul_rn(0.125f, static_cast<float>(j))), s));
  return make_float2(__int_as_float(static_cast<int>(lp.e)), lp.l);
}
// Whether a group may use the table: s in range (see above) and y = 1/k plain (finite, > 0), so
// pow_det's special values only concern zero / non-finite codes.
__device__ __forceinline__ bool dec_table_ok(float s, const PowY& Y) {
  return s >= 0x1p-100f && s <= 0x1p100f && !Y.y_inf && !Y.y_zero && !Y.y_nan && !Y.yneg;
}
// The table index of a decoded FP8 value: the top 3 bits of its fp32 mantissa.
__device__ __forceinline__ uint32_t mant_index(float q) { return (f32_bits(q) >> 20) & 7u; }

// compress_value of a finite decoded code q (zero included) in a group where dec_table_ok(s, Y)
// holds, Y = pow_y(1 / k), entry_of_q = mant_entry(mant_index(q), s).
__device__ __forceinline__ float compress_table_finite(float q, float2 entry_of_q, float s, float c, const PowY& Y) {
  const uint32_t uq = f32_bits(q) & 0x7FFFFFFFu;
  const float qs = mul_rn(q, s);
  const dmath::Log2Parts lp{static_cast<float>(static_cast<int>(uq >> 23) - 127 + __float_as_int(entry_of_q.x)),
                            entry_of_q.y};
  const float mag = pow_det_y_lp_plain(dmath::abs_bits(qs), lp, Y);
  return mul_rn(dmath::neg_if(mag, dmath::sign_bit(qs)), c);
}

}  // namespace fp8sim::gpu::detail
