#pragma once
// AVX2 versions of the quantizer's element loops (sim/quant/quantize.cpp dispatches to them at
// run time when the CPU has AVX2). They are NOT new numerics: every function below is a lane-wise
// transcription of an FP8SIM_HD scalar function (fp8.hpp encode_fp8_rne, dmath.hpp pow_det and
// its parts, expand.hpp expand_value / compress_value, scale.hpp group_stat_add), performing the
// same correctly rounded fp32 operations in the same order, with the same integer bit
// manipulation. AVX2 without FMA is enabled (never "fma": a fused multiply-add would change
// bits), and -ffp-contract=off applies to the whole project. So each lane gives the same bits as
// the scalar function, and therefore as the CUDA kernels; tests/test_quant_simd.cpp checks it
// (pow_det on special and random inputs, the encoder on every fp32 bit pattern, and whole
// quantize/dequantize calls with the SIMD path on and off).
//
// Included by quantize.cpp (and its test). The plain groups' code loop and the coat groups' narrow
// 128-element codes also have AVX-512 forms (avx512_kernels.hpp), which plain_groups and
// coat_groups take when their caller says so (`wide`). The lane helpers and the encoder are in
// sim/formats/avx2_fp8.hpp, which the bulk cast shares. The pragma below gives every function
// defined in this header the avx2 target; the headers it depends on are included before it, so
// nothing they define is compiled for AVX2 (which would let the linker pick an AVX2 copy for a
// non-AVX2 caller).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "sim/common/hd.hpp"
#include "sim/formats/avx2_fp8.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/avx512_kernels.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/scale.hpp"
#include "sim/quant/spec.hpp"

#pragma GCC push_options
#pragma GCC target("avx2")

namespace fp8sim::avx2 {

// ---- dmath.hpp ---------------------------------------------------------------------------------

inline V rint_small(V x) { return add(add(x, cf(12582912.0f)), cf(-12582912.0f)); }

// scale_pow2(r, n) for integer lanes n.
inline V scale_pow2(V r, VI n) {
  n = _mm256_min_epi32(_mm256_max_epi32(n, ci(static_cast<uint32_t>(-252))), ci(254));
  const VI n1 = _mm256_srai_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(n, 31)), 1);  // n / 2, toward 0
  const VI n2 = _mm256_sub_epi32(n, n1);
  const V p1 = fb(_mm256_slli_epi32(_mm256_add_epi32(n1, ci(127)), 23));
  const V p2 = fb(_mm256_slli_epi32(_mm256_add_epi32(n2, ci(127)), 23));
  return mul(mul(r, p1), p2);
}

struct Log2Parts {
  V e;
  V l;
};

// dmath::log2_parts for positive finite lanes.
inline Log2Parts log2_parts(V x) {
  VI u = ib(x);
  const VI sub = lt(u, ci(0x00800000u));
  u = seli(sub, ib(mul(x, cf(8388608.0f))), u);
  const VI e = _mm256_srai_epi32(_mm256_sub_epi32(u, ci(0x3F3504F3u)), 23);
  const V m = fb(_mm256_sub_epi32(u, _mm256_slli_epi32(e, 23)));
  const V f = add(m, cf(-1.0f));
  const V s = div(f, add(cf(2.0f), f));
  const V z = mul(s, s);
  V R = cf(0.22222222f);
  R = add(mul(R, z), cf(0.28571429f));
  R = add(mul(R, z), cf(0.40000001f));
  R = add(mul(R, z), cf(0.66666669f));
  R = mul(R, z);
  const V hfsq = mul(mul(cf(0.5f), f), f);
  const V ln1p = add(f, neg(add(hfsq, neg(mul(s, add(hfsq, R))))));
  const V l = mul(ln1p, cf(1.44269502f));
  const VI ei = _mm256_sub_epi32(e, _mm256_and_si256(sub, ci(23)));
  return Log2Parts{_mm256_cvtepi32_ps(ei), l};
}

inline V exp2_reduced(V g) {
  V p = cf(1.5252734e-05f);
  p = add(mul(p, g), cf(1.5403530e-04f));
  p = add(mul(p, g), cf(1.3333558e-03f));
  p = add(mul(p, g), cf(9.6181291e-03f));
  p = add(mul(p, g), cf(5.5504109e-02f));
  p = add(mul(p, g), cf(2.4022651e-01f));
  p = add(mul(p, g), cf(6.9314718e-01f));
  return add(cf(1.0f), mul(p, g));
}

// lo <= x <= hi clamp written as the scalar code's nested ternary: x > hi ? hi : (x < lo ? lo : x).
inline V clamp_sym(V x, float lim) {
  const V hi = cf(lim), lo = cf(-lim);
  return sel(fcmp_gt(x, hi), hi, sel(fcmp_lt(x, lo), lo, x));
}

// dmath::pow_det, lane-wise.
inline V pow_det(V x, V y) {
  const VI sx = ib(x);
  const VI ux = _mm256_and_si256(sx, ci(0x7FFFFFFFu));
  const VI uy = ib(y);
  const VI ay = _mm256_and_si256(uy, ci(0x7FFFFFFFu));
  const VI yneg = _mm256_srai_epi32(uy, 31);
  const VI xneg = _mm256_srai_epi32(sx, 31);
  const V inf = fb(ci(0x7F800000u));
  const V nan = fb(ci(0x7FC00000u));
  const V zero = _mm256_setzero_ps();
  const V one = cf(1.0f);

  const VI ux_zero = eq(ux, _mm256_setzero_si256());
  const VI ux_inf = eq(ux, ci(0x7F800000u));
  const VI x_ok = _mm256_andnot_si256(_mm256_or_si256(ux_zero, xneg), lt(ux, ci(0x7F800000u)));
  const VI y_ok = lt(ay, ci(0x7F800000u));
  const V xc = sel(x_ok, x, one);
  const V yv = sel(y_ok, y, zero);
  const Log2Parts lp = log2_parts(xc);
  const V ylim = sel(fcmp_ne(lp.e, zero), cf(16384.0f), cf(1099511627776.0f));
  const V nylim = neg(ylim);
  const V yc = sel(fcmp_gt(yv, ylim), ylim, sel(fcmp_lt(yv, nylim), nylim, yv));
  const V y_hi = fb(_mm256_and_si256(ib(yc), ci(0xFFFFF000u)));
  const V y_lo = add(yc, neg(y_hi));
  const V a_hi = mul(y_hi, lp.e);
  const V a_lo = mul(y_lo, lp.e);
  const V n1 = rint_small(a_hi);
  V t = add(add(a_hi, neg(n1)), add(a_lo, mul(yc, lp.l)));
  t = clamp_sym(t, 2097152.0f);
  const V n2 = rint_small(t);
  const V g = add(t, neg(n2));
  V n = add(n1, n2);
  n = clamp_sym(n, 400.0f);
  V r = scale_pow2(exp2_reduced(g), _mm256_cvttps_epi32(n));

  // Special values, lowest priority first (as the scalar function).
  const VI xlt1 = fcmp_lt(x, one);
  r = sel(eq(ay, ci(0x7F800000u)), sel(_mm256_xor_si256(xlt1, yneg), zero, inf), r);
  r = sel(ux_inf, sel(yneg, zero, inf), r);
  r = sel(ux_zero, sel(yneg, inf, zero), r);
  r = sel(eq(uy, ci(0x3F800000u)), sel(ux_zero, zero, x), r);
  r = sel(_mm256_andnot_si256(ux_zero, xneg), nan, r);
  r = sel(_mm256_or_si256(is_nan(uy), is_nan(ux)), nan, r);
  r = sel(_mm256_or_si256(eq(ay, _mm256_setzero_si256()), eq(sx, ci(0x3F800000u))), one, r);
  return r;
}

// ---- expand.hpp --------------------------------------------------------------------------------

// expand_value: sign(x) * pow(|x| / c, k) / s.
inline V expand_value(V x, V c, V k, V s) {
  const V mag = pow_det(div(vabs(x), c), k);
  const V signed_mag = fb(_mm256_xor_si256(ib(mag), _mm256_and_si256(ib(x), ci(0x80000000u))));
  return div(signed_mag, s);
}

// compress_value: sign(q*s) * pow(|q*s|, kinv) * c, kinv = 1/k computed by the caller (fp32 div).
inline V compress_value(V q, V s, V kinv, V c) {
  const V qs = mul(q, s);
  const V mag = pow_det(vabs(qs), kinv);
  return mul(fb(_mm256_xor_si256(ib(mag), _mm256_and_si256(ib(qs), ci(0x80000000u)))), c);
}

inline int64_t hsum(VI v) {
  alignas(32) int32_t t[8];
  _mm256_store_si256(reinterpret_cast<VI*>(t), v);
  int64_t s = 0;
  for (int32_t x : t) s += x;
  return s;
}
inline uint32_t hmax_u(VI v) {
  alignas(32) uint32_t t[8];
  _mm256_store_si256(reinterpret_cast<VI*>(t), v);
  uint32_t m = 0;
  for (uint32_t x : t) m = x > m ? x : m;
  return m;
}
inline uint32_t hmin_u(VI v) {
  alignas(32) uint32_t t[8];
  _mm256_store_si256(reinterpret_cast<VI*>(t), v);
  uint32_t m = 0xFFFFFFFFu;
  for (uint32_t x : t) m = x < m ? x : m;
  return m;
}

// group_stat_add over the first n8 = n - n % 8 elements of a segment (the caller folds the tail
// in with the scalar function): amax / min-nonzero as fp32 bits, non-finite count, any +-Inf.
struct SegStats {
  uint32_t amax = 0u;
  uint32_t amin = 0x7F800000u;
  int64_t nonfinite = 0;
  bool inf = false;
};
template <class VL>
inline SegStats segment_stats(const VL& ld, int64_t base, int64_t n8) {
  VI m = _mm256_setzero_si256(), mn = ci(0x7F800000u), nf = _mm256_setzero_si256(), anyinf = _mm256_setzero_si256();
  const VI finlim = ci(0x7F800000u);
  for (int64_t i = 0; i < n8; i += 8) {
    const VI a = _mm256_and_si256(ib(ld.load8(base + i)), ci(0x7FFFFFFFu));
    const VI fin = lt(a, finlim);
    m = _mm256_max_epi32(m, _mm256_and_si256(a, fin));
    const VI nzfin = _mm256_andnot_si256(eq(a, _mm256_setzero_si256()), fin);
    mn = _mm256_min_epi32(mn, seli(nzfin, a, finlim));
    nf = _mm256_sub_epi32(nf, vnot(fin));
    anyinf = _mm256_or_si256(anyinf, eq(a, finlim));
  }
  SegStats s;
  s.amax = hmax_u(m);
  s.amin = hmin_u(mn);
  s.nonfinite = hsum(nf);
  s.inf = !_mm256_testz_si256(anyinf, anyinf);
  return s;
}

// The statistics a fast-path group needs over its first n8 elements, in fewer lane operations
// than segment_stats: max |x| bits with the non-finite included (>= 0x7F800000 flags one: the
// group then goes to the general path, which takes segment_stats), and the least nonzero |x| bits
// (0x7F800000 when there is none, as segment_stats). The least nonzero is an unsigned minimum of
// |x| - 1, where +-0 wraps to the largest value.
template <class VL>
__attribute__((always_inline)) inline void segment_amax_amin(const VL& ld, int64_t base, int64_t n8, uint32_t& amax,
                                                             uint32_t& amin) {
  VI m = _mm256_setzero_si256(), mn = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < n8; i += 8) {
    const VI a = _mm256_and_si256(ib(ld.load8(base + i)), ci(0x7FFFFFFFu));
    m = _mm256_max_epi32(m, a);
    mn = _mm256_min_epu32(mn, _mm256_sub_epi32(a, ci(1u)));
  }
  amax = hmax_u(m);
  const uint32_t least = hmin_u(mn) + 1u;  // 0: no nonzero element
  amin = least == 0u || least > 0x7F800000u ? 0x7F800000u : least;
}

// The element transform of encode_segment: x / sq, expand_value(x, p), or two products
// (x * m1) * m2, which is x * s (m1 = s, m2 = 1: the product by 1 is exact) and div_full(x, b)
// (divfull.hpp: div_full_factors).
enum class Transform { Div, Expand, Mul2 };

// encode_range (quantize.cpp) for the first n8 elements, round to nearest, with the transform X;
// counts saturated (|v| > bound) and underflowed finite elements.
template <class T, class VL, Transform X>
inline void encode_segment(const VL& ld, int64_t base, int64_t n8, float sq, const ExpandParams& p, float m1, float m2,
                           bool sat, float bound, uint8_t* out, int64_t& nsat, int64_t& nunder) {
  const V vs = cf(sq), vbound = cf(bound), vm1 = cf(m1), vm2 = cf(m2);
  const V pc = cf(p.c), pk = cf(p.k), ps = cf(p.s);
  VI sc = _mm256_setzero_si256(), uc = _mm256_setzero_si256();
  const VI finlim = ci(0x7F800000u);
  for (int64_t i = 0; i < n8; i += 8) {
    const V x = ld.load8(base + i);
    V v;
    if constexpr (X == Transform::Expand) v = expand_value(x, pc, pk, ps);
    else if constexpr (X == Transform::Mul2) v = mul(mul(x, vm1), vm2);
    else v = div(x, vs);
    const VI code = encode_rne<T>(v, sat);
    store8(out + base + i, code);
    const VI ax = _mm256_and_si256(ib(x), ci(0x7FFFFFFFu));
    const VI fin = lt(ax, finlim);
    sc = _mm256_sub_epi32(sc, _mm256_and_si256(fin, fcmp_gt(vabs(v), vbound)));
    const VI zero_code = eq(_mm256_and_si256(code, ci(0x7Fu)), _mm256_setzero_si256());
    const VI nz = vnot(eq(ax, _mm256_setzero_si256()));
    uc = _mm256_sub_epi32(uc, _mm256_and_si256(_mm256_and_si256(fin, nz), zero_code));
  }
  nsat += hsum(sc);
  nunder += hsum(uc);
}

// ---- plain 1xG fast path -------------------------------------------------------------------------
// For a group whose elements are all finite and whose largest quotient amax / s cannot exceed the
// saturation bound (division is monotone, so then no |x / s| does), encode_fp8_rne's NaN and
// overflow selections and the saturation count are dead: the fast encoder leaves them out. Its
// remaining steps are the scalar encoder's, except that the subnormal code is converted with
// cvtps2dq instead of the +2^23 trick: both round to nearest even, and the value (|v| * 2^S < 8,
// an exact power-of-two scaling) is exactly representable either way.

// max |x| bits over the first n8 elements, non-finite included (>= 0x7F800000 flags one).
template <class VL>
__attribute__((always_inline)) inline uint32_t scan_amax_bits(const VL& ld, int64_t base, int64_t n8) {
  VI m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n8; i += 16) {
    m0 = _mm256_max_epi32(m0, _mm256_and_si256(ib(ld.load8(base + i)), ci(0x7FFFFFFFu)));
    m1 = _mm256_max_epi32(m1, _mm256_and_si256(ib(ld.load8(base + i + 8)), ci(0x7FFFFFFFu)));
  }
  if (i < n8) m0 = _mm256_max_epi32(m0, _mm256_and_si256(ib(ld.load8(base + i)), ci(0x7FFFFFFFu)));
  const VI m = _mm256_max_epi32(m0, m1);
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(h));
}

// Elements equal to +-0 among the first n8.
template <class VL>
inline int64_t count_zeros(const VL& ld, int64_t base, int64_t n8) {
  int64_t z = 0;
  for (int64_t i = 0; i < n8; i += 8) {
    const VI a = _mm256_and_si256(ib(ld.load8(base + i)), ci(0x7FFFFFFFu));
    z += __builtin_popcount(static_cast<uint32_t>(_mm256_movemask_ps(fb(eq(a, _mm256_setzero_si256())))));
  }
  return z;
}

// Underflowed elements of the group [base, base + n) given how many of its codes are +-0: those
// codes minus the inputs that were +-0 already (the inputs are scanned only when some code is 0).
// n8 = n - n % 8 elements go through vl, the rest through the scalar loader sl.
template <class VL, class SL>
inline int64_t underflowed(const VL& vl, const SL& sl, int64_t base, int64_t n8, int64_t n, int64_t zero_codes) {
  if (zero_codes == 0) return 0;
  int64_t zeros = count_zeros(vl, base, n8);
  for (int64_t i = base + n8; i < base + n; ++i) zeros += (f32_bits(sl(i)) & 0x7FFFFFFFu) == 0u ? 1 : 0;
  return zero_codes - zeros;
}

// encode_fp8_rne's magnitude code (the code without its sign bit) for lanes a = |v| bits of a
// finite v with |v| at most the saturation bound, so a code of at most kMaxCode. The normal
// code's exponent-bias subtraction, (127 - bias) << MBITS after the shift, is folded into the
// rounding constant: for a normal lane (a >= kMinNormalBits) the sum stays above the subtrahend,
// so nothing borrows; subnormal lanes take the other blend input.
template <class T>
inline VI magnitude_codes(VI a) {
  constexpr int D = T::kDropBits;
  constexpr uint32_t kBiasShifted = static_cast<uint32_t>(127 - T::kBias) << (T::kMantissaBits + D);
  static_assert(T::kMinNormalBits > kBiasShifted, "the folded subtraction must not borrow");
  const VI normal = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, ci((1u << (D - 1)) - 1u - kBiasShifted)),
                                                       _mm256_and_si256(_mm256_srli_epi32(a, D), ci(1u))),
                                      D);
  const VI sub = _mm256_cvtps_epi32(mul(fb(a), cf(pow2f(T::kSubShift))));
  return _mm256_blendv_epi8(normal, sub, lt(a, ci(T::kMinNormalBits)));
}

template <class T>
inline VI encode_rne_finite(V v) {
  const VI u = ib(v);
  const VI sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), ci(0x80u));
  return _mm256_or_si256(magnitude_codes<T>(_mm256_and_si256(u, ci(0x7FFFFFFFu))), sign);
}

// encode_rne_finite on 32 elements (4 vectors), stored in element order through store32; returns
// how many codes are +-0. The signs join in the packed bytes: the signed packs of v's bits
// saturate a finite negative lane to 0x80 and a positive one to at most 0x7F, so their bytes & 0x80
// are the sign bits, in the order the unsigned packs leave the magnitude codes (0..126, exact
// through them); one permutation then restores element order for both.
template <class T>
inline int64_t encode_store_finite32(uint8_t* out, V v0, V v1, V v2, V v3) {
  const VI u0 = ib(v0), u1 = ib(v1), u2 = ib(v2), u3 = ib(v3);
  const VI abs_mask = ci(0x7FFFFFFFu);
  const VI mag = _mm256_packus_epi16(_mm256_packus_epi32(magnitude_codes<T>(_mm256_and_si256(u0, abs_mask)),
                                                         magnitude_codes<T>(_mm256_and_si256(u1, abs_mask))),
                                     _mm256_packus_epi32(magnitude_codes<T>(_mm256_and_si256(u2, abs_mask)),
                                                         magnitude_codes<T>(_mm256_and_si256(u3, abs_mask))));
  const VI sign = _mm256_and_si256(_mm256_packs_epi16(_mm256_packs_epi32(u0, u1), _mm256_packs_epi32(u2, u3)),
                                   _mm256_set1_epi8(static_cast<char>(0x80)));
  store32(out, packed_element_order(_mm256_or_si256(mag, sign)));
  return __builtin_popcount(
      static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(mag, _mm256_setzero_si256()))));
}

// Stores 4 vectors of codes (32 elements) in element order; returns how many are +-0. kStream:
// through store32 (codes that are not read back soon), else an ordinary store.
template <bool kStream = true>
inline int64_t store_codes32(uint8_t* out, VI c0, VI c1, VI c2, VI c3) {
  const VI b = pack_codes32(c0, c1, c2, c3);
  if constexpr (kStream) store32(out, b);
  else _mm256_storeu_si256(reinterpret_cast<VI*>(out), b);
  const uint32_t zm = static_cast<uint32_t>(
      _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x7F)), _mm256_setzero_si256())));
  return __builtin_popcount(zm);
}

// Stores 8 codes; returns how many are +-0.
inline int64_t store_codes8(uint8_t* out, VI c) {
  store8(out, c);
  return __builtin_popcount(
      static_cast<uint32_t>(_mm256_movemask_ps(fb(eq(_mm256_and_si256(c, ci(0x7Fu)), _mm256_setzero_si256())))));
}

// Codes of x / sq for the first n8 elements (a multiple of 8); returns how many codes are +-0.
template <class T, class VL>
__attribute__((always_inline)) inline int64_t encode_plain_fast(const VL& ld, int64_t base, int64_t n8, float sq,
                                                                uint8_t* out) {
  const V vs = cf(sq);
  int64_t zero_codes = 0;
  int64_t i = 0;
  for (; i + 32 <= n8; i += 32)
    zero_codes += encode_store_finite32<T>(out + base + i, div(ld.load8(base + i), vs), div(ld.load8(base + i + 8), vs),
                                           div(ld.load8(base + i + 16), vs), div(ld.load8(base + i + 24), vs));
  for (; i < n8; i += 8) zero_codes += store_codes8(out + base + i, encode_rne_finite<T>(div(ld.load8(base + i), vs)));
  return zero_codes;
}

// add_eps_fp64: float(double(v) + eps), both conversions and the add rounding to nearest.
inline V add_eps_fp64(V v, double eps) {
  const __m256d e = _mm256_set1_pd(eps);
  const __m128 lo = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), e));
  const __m128 hi = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), e));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

// scale.hpp's plain_scales(amax_with_eps(amax, c), c) for 8 lanes of finite amax bits, where it
// is a few lane operations: fp32 and bf16 scales with the IEEE or reciprocal quotient (the
// default g128 specs, COAT's activations, DeepSeek's). Returns false, writing nothing, for the
// other modes (the caller takes the scalar function per group).
inline bool plain_scales8(VI amax, const ScaleConsts& c, float* s_quant, float* s_stored) {
  if (!plain_scales_common_ok(c) || (c.mode != ScaleMode::Fp32 && c.mode != ScaleMode::Bf16)) return false;
  // amax_with_eps: amax < floor ? floor : amax, then + eps in fp32 or through fp64.
  V a = fb(amax);
  a = sel(fcmp_lt(a, cf(c.amax_floor)), cf(c.amax_floor), a);
  if (c.eps != 0.0) a = c.eps_add == EpsAdd::Fp64 ? add_eps_fp64(a, c.eps) : add(a, cf(static_cast<float>(c.eps)));
  const V t = c.scale_div == ScaleDiv::Rcp ? mul(a, cf(div_rn(1.0f, c.fmax))) : div(a, cf(c.fmax));
  const V zero = _mm256_setzero_ps(), one = cf(1.0f);
  const VI a_zero = ib(_mm256_cmp_ps(a, zero, _CMP_EQ_OQ));  // an all-zero group: s = 1
  const V sq = sel(a_zero, one, sel(ib(_mm256_cmp_ps(t, zero, _CMP_EQ_OQ)), fb(ci(1u)), t));
  V stored = sq;
  if (c.mode == ScaleMode::Bf16) {  // bf16_rne(sq) (sq is positive and finite), at least 2^-133
    const VI u = ib(sq);
    const VI r = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(u, ci(0x7FFFu)), _mm256_and_si256(_mm256_srli_epi32(u, 16), ci(1u))),
        ci(0xFFFF0000u));
    stored = sel(a_zero, one, fb(seli(eq(r, _mm256_setzero_si256()), ci(0x00010000u), r)));
  }
  _mm256_storeu_ps(s_quant, sq);
  _mm256_storeu_ps(s_stored, stored);
  return true;
}

// f(i) out of line: the general path of the group loops is rare, and inlined it takes registers
// and code space from their hot loops.
template <class F>
__attribute__((noinline, cold)) void call_cold(F& f, int64_t i) {
  f(i);
}

inline constexpr int kPlainBatch = 8;

// The one-row groups [g0, g1) of a plain (fp32 / pow2 / E8M0 / bf16 scale, round-to-nearest)
// spec: scale from amax (scale.hpp's plain_scales), then the fast encoder, one group in L1 at a
// time. A group with a non-finite element or a quotient that could pass the saturation bound is
// handed to general(grp) instead (the full statistics + encoder path). SL is the scalar loader
// of the same data (tails of fewer than 8 elements).
//
// Groups go in batches of kPlainBatch: their amax scans, then their scales, then their codes. A
// group's scan -> horizontal max -> scale -> bound check is a chain of dependent latencies (two
// divisions among them) that its codes wait for; a batch puts the chains of 8 groups side by
// side, and the batch's 4 KB of fp32 input is still in L1 when the codes are written.
//
// kFull: every group is group_cols long, a multiple of 32 (no short edge group, no tail of fewer
// than 8 elements), so a group's span is grp * group_cols and its loops have no remainders.
// wide: the codes through avx512::encode_plain (the caller checked the CPU).
template <bool kFull, class T, class VL, class SL, class General>
void plain_groups_impl(const VL& vl_in, const SL& sl, const GroupGeometry& g, int64_t g0, int64_t g1,
                       const ScaleConsts& sc, float bound, bool sat, bool wide, uint8_t* out, float* scales,
                       int64_t& nunder_out, uint32_t& tmax_out, General& general) {
  // Local copies: the code stores could alias anything reached through a reference.
  const VL vl = vl_in;
  const int64_t cols = g.cols, gcols = g.group_cols, grid_cols = g.grid_cols;
  int64_t nunder = 0;
  uint32_t tmax = 0;
  for (int64_t b0 = g0; b0 < g1; b0 += kPlainBatch) {
    const int nb = g1 - b0 < kPlainBatch ? static_cast<int>(g1 - b0) : kPlainBatch;
    int64_t base[kPlainBatch], n[kPlainBatch];
    alignas(32) uint32_t amax[kPlainBatch] = {};
    alignas(32) float sq[kPlainBatch] = {}, ss[kPlainBatch] = {};
    if constexpr (kFull) {
      for (int j = 0; j < nb; ++j) {
        base[j] = (b0 + j) * gcols;
        n[j] = gcols;
        amax[j] = scan_amax_bits(vl, base[j], gcols);
      }
    } else {
      // row_group_span's spans, stepping through the grid (one division per batch, not per group).
      int64_t row = b0 / grid_cols, gc = b0 % grid_cols;
      for (int j = 0; j < nb; ++j) {
        const int64_t c0 = gc * gcols;
        n[j] = c0 + gcols < cols ? gcols : cols - c0;
        base[j] = row * cols + c0;
        if (++gc == grid_cols) {
          gc = 0;
          ++row;
        }
        const int64_t n8 = n[j] - n[j] % 8;
        uint32_t a = scan_amax_bits(vl, base[j], n8);
        for (int64_t i = base[j] + n8; i < base[j] + n[j]; ++i) {
          const uint32_t e = f32_bits(sl(i)) & 0x7FFFFFFFu;
          a = e > a ? e : a;
        }
        amax[j] = a;
      }
    }
    // Fast where amax is finite and RN(amax / sq) <= bound; lanes past nb (amax 0, sq 1) are not
    // looked at.
    const VI va = _mm256_load_si256(reinterpret_cast<const VI*>(amax));
    if (!plain_scales8(_mm256_and_si256(va, lt(va, ci(0x7F800000u))), sc, sq, ss))
      for (int j = 0; j < nb; ++j)
        if (amax[j] < 0x7F800000u) plain_scales(amax_with_eps(f32_from_bits(amax[j]), sc), sc, sq[j], ss[j]);
    const V quotient = div(fb(va), _mm256_load_ps(sq));
    const unsigned fast = static_cast<unsigned>(_mm256_movemask_ps(
        fb(_mm256_and_si256(lt(va, ci(0x7F800000u)), ib(_mm256_cmp_ps(quotient, cf(bound), _CMP_LE_OQ))))));
    for (int j = 0; j < nb; ++j) {
      const int64_t grp = b0 + j;
      if (!((fast >> j) & 1u)) {
        call_cold(general, grp);
        continue;
      }
      scales[grp] = ss[j];
      tmax = amax[j] > tmax ? amax[j] : tmax;
      const int64_t n8 = kFull ? n[j] : n[j] - n[j] % 8;
      int64_t zero_codes = wide && n8 % 16 == 0 ? avx512::encode_plain<T>(vl.p, base[j], n8, sq[j], out)
                                                : encode_plain_fast<T>(vl, base[j], n8, sq[j], out);
      if constexpr (!kFull)
        for (int64_t i = base[j] + n8; i < base[j] + n[j]; ++i) {
          const uint8_t c = encode_fp8_rne<T>(div_rn(sl(i), sq[j]), sat);
          out[i] = c;
          zero_codes += (c & 0x7Fu) == 0u ? 1 : 0;
        }
      nunder += underflowed(vl, sl, base[j], n8, n[j], zero_codes);
    }
  }
  nunder_out += nunder;
  tmax_out = tmax > tmax_out ? tmax : tmax_out;
  _mm_sfence();
}

template <class T, class VL, class SL, class General>
void plain_groups(const VL& vl, const SL& sl, const GroupGeometry& g, int64_t g0, int64_t g1, const ScaleConsts& sc,
                  float bound, bool sat, bool wide, uint8_t* out, float* scales, int64_t& nunder, uint32_t& tmax,
                  General&& general) {
  if (g.cols % g.group_cols == 0 && g.group_cols % 32 == 0)
    plain_groups_impl<true, T>(vl, sl, g, g0, g1, sc, bound, sat, wide, out, scales, nunder, tmax, general);
  else plain_groups_impl<false, T>(vl, sl, g, g0, g1, sc, bound, sat, wide, out, scales, nunder, tmax, general);
}

// ---- coat DE fast path ---------------------------------------------------------------------------
// pow_det(x, y) for lanes x that are +0 or positive finite, and a y shared by all lanes that is
// finite with 0 < y <= 16384 and y != 1 (callers handle y == 1: pow_det(x, 1) == x). Under those conditions pow_det's
// special-value selections reduce to "x == 0 gives +0" (x == 1 needs none: the core computes exactly 1 there), and its
// clamps of y (to +-16384 or +-2^40) and of t (to +-2^21, while |t| <= 1/2 + |y| / 2) are inactive, so y's split y_hi +
// y_lo is the same for every lane and is hoisted. The clamp of n to +-400 stays (as min/max: n is never NaN). Every
// remaining operation is pow_det's.
struct PowConstY {
  V y, y_hi, y_lo;
  explicit PowConstY(float k) {
    const float hi = f32_from_bits(f32_bits(k) & 0xFFFFF000u);
    y = cf(k);
    y_hi = cf(hi);
    y_lo = cf(add_rn(k, -hi));
  }
  // The conditions above, checked on the scalar y.
  static bool usable(float k) { return is_finite_bits(f32_bits(k)) && k > 0.0f && k <= 16384.0f; }
};

// pow_det_pos_const_y_n: that pow_det on N vectors at once, statement by statement across the N
// (the same operations per lane for every N; only the instruction order differs). One pow is a
// long dependency chain (~150 cycles), so interleaving independent vectors keeps the core busy.
#define FP8SIM_EACH _Pragma("GCC unroll 16") for (int j = 0; j < N; ++j)
#define FP8SIM_EACH_8 _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j)
//
// kNarrow: the caller guarantees that every nonzero lane is a normal number and that its result's
// n1 + n2 (the power of two split off, about k * log2 x) lies within [-126, 126]. Then the
// subnormal normalization is dead, the clamp of n to +-400 is inactive, and scale_pow2(r, n) is
// the single product r * 2^n: scale_pow2 forms r * 2^(n/2) exactly (r is in [0.7, 1.5]) and
// rounds once in its second product, and r * 2^n rounds the same exact value once. Zero lanes
// compute garbage that the final selection replaces by +0.
template <int N, bool kNarrow = false>
__attribute__((always_inline)) inline void pow_det_pos_const_y_n(const V* x, V* out, const PowConstY& k) {
  VI u[N], sub[N], ei[N];
  V f[N], s[N], z[N], R[N], hfsq[N], e[N], l[N];
  FP8SIM_EACH u[j] = ib(x[j]);
  if constexpr (!kNarrow) {
    FP8SIM_EACH sub[j] = lt(u[j], ci(0x00800000u));
    FP8SIM_EACH u[j] = seli(sub[j], ib(mul(x[j], cf(8388608.0f))), u[j]);
  }
  FP8SIM_EACH ei[j] = _mm256_srai_epi32(_mm256_sub_epi32(u[j], ci(0x3F3504F3u)), 23);
  FP8SIM_EACH f[j] = add(fb(_mm256_sub_epi32(u[j], _mm256_slli_epi32(ei[j], 23))), cf(-1.0f));
  FP8SIM_EACH s[j] = div(f[j], add(cf(2.0f), f[j]));
  FP8SIM_EACH z[j] = mul(s[j], s[j]);
  FP8SIM_EACH R[j] = add(mul(cf(0.22222222f), z[j]), cf(0.28571429f));
  FP8SIM_EACH R[j] = add(mul(R[j], z[j]), cf(0.40000001f));
  FP8SIM_EACH R[j] = add(mul(R[j], z[j]), cf(0.66666669f));
  FP8SIM_EACH R[j] = mul(R[j], z[j]);
  FP8SIM_EACH hfsq[j] = mul(mul(cf(0.5f), f[j]), f[j]);
  FP8SIM_EACH l[j] = mul(add(f[j], neg(add(hfsq[j], neg(mul(s[j], add(hfsq[j], R[j])))))), cf(1.44269502f));
  if constexpr (kNarrow) {
    FP8SIM_EACH e[j] = _mm256_cvtepi32_ps(ei[j]);
  } else {
    FP8SIM_EACH e[j] = _mm256_cvtepi32_ps(_mm256_sub_epi32(ei[j], _mm256_and_si256(sub[j], ci(23))));
  }
  V a_hi[N], n1[N], t[N], n2[N], g[N], p[N];
  VI ni[N];
  FP8SIM_EACH a_hi[j] = mul(k.y_hi, e[j]);
  FP8SIM_EACH n1[j] = rint_small(a_hi[j]);
  FP8SIM_EACH t[j] = add(add(a_hi[j], neg(n1[j])), add(mul(k.y_lo, e[j]), mul(k.y, l[j])));
  FP8SIM_EACH n2[j] = rint_small(t[j]);
  FP8SIM_EACH g[j] = add(t[j], neg(n2[j]));
  if constexpr (kNarrow) {
    FP8SIM_EACH ni[j] = _mm256_cvttps_epi32(add(n1[j], n2[j]));
  } else {
    FP8SIM_EACH ni[j] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(add(n1[j], n2[j]), cf(-400.0f)), cf(400.0f)));
  }
  FP8SIM_EACH p[j] = add(mul(cf(1.5252734e-05f), g[j]), cf(1.5403530e-04f));
  FP8SIM_EACH p[j] = add(mul(p[j], g[j]), cf(1.3333558e-03f));
  FP8SIM_EACH p[j] = add(mul(p[j], g[j]), cf(9.6181291e-03f));
  FP8SIM_EACH p[j] = add(mul(p[j], g[j]), cf(5.5504109e-02f));
  FP8SIM_EACH p[j] = add(mul(p[j], g[j]), cf(2.4022651e-01f));
  FP8SIM_EACH p[j] = add(mul(p[j], g[j]), cf(6.9314718e-01f));
  FP8SIM_EACH p[j] = add(cf(1.0f), mul(p[j], g[j]));
  if constexpr (kNarrow) {
    FP8SIM_EACH out[j] = sel(eq(ib(x[j]), _mm256_setzero_si256()), _mm256_setzero_ps(),
                             mul(p[j], fb(_mm256_slli_epi32(_mm256_add_epi32(ni[j], ci(127)), 23))));
  } else {
    FP8SIM_EACH out[j] = sel(eq(ib(x[j]), _mm256_setzero_si256()), _mm256_setzero_ps(), scale_pow2(p[j], ni[j]));
  }
}

// pow_det(a, k) for N vectors of +0 / positive finite a with a usable k (k == 1: a itself).
template <int N, bool kNarrow = false>
__attribute__((always_inline)) inline void pow_const_n(const V* a, V* out, const PowConstY& k, bool unit) {
  if (unit) {
    FP8SIM_EACH out[j] = a[j];
  } else {
    pow_det_pos_const_y_n<N, kNarrow>(a, out, k);
  }
}

// decode8 is defined further down.
template <class T>
inline V decode8(const uint8_t* codes);

// expand_value + encode_fp8_rne on N vectors of finite x (DE group parameters c, s, exponent k with
// the fast path's conditions); adds the saturated lanes to satc.
template <class T, int N>
__attribute__((always_inline)) inline void expand_encode_n(const V* x, V c, V s, const PowConstY& k, bool k_unit,
                                                           bool sat, V vbound, VI& satc, VI* codes) {
  V a[N], mag[N];
  FP8SIM_EACH a[j] = div(vabs(x[j]), c);
  pow_const_n<N>(a, mag, k, k_unit);
  FP8SIM_EACH {
    const V v = div(fb(_mm256_xor_si256(ib(mag[j]), _mm256_and_si256(ib(x[j]), ci(0x80000000u)))), s);
    satc = _mm256_sub_epi32(satc, fcmp_gt(vabs(v), vbound));
    codes[j] = encode_rne<T>(v, sat);
  }
}

// expand_encode_n on N vectors (N a multiple of 4) with the codes stored at out in element order
// (store32); returns how many codes are +-0. Each 32 elements whose |v| are all within the
// saturation bound take encode_store_finite32, the others encode_rne (v is never NaN: x is finite,
// c and s are positive and finite, so |v| is finite or +Inf, and > bound catches the Inf).
template <class T, int N, bool kNarrow>
__attribute__((always_inline)) inline int64_t expand_encode_store_n(const V* x, V c, V s, const PowConstY& k,
                                                                    bool k_unit, bool sat, V vbound, VI& satc,
                                                                    uint8_t* out) {
  static_assert(N % 4 == 0, "stores go 32 codes at a time");
  V a[N], mag[N], v[N];
  VI over[N];
  FP8SIM_EACH a[j] = div(vabs(x[j]), c);
  pow_const_n<N, kNarrow>(a, mag, k, k_unit);
  FP8SIM_EACH {
    v[j] = div(fb(_mm256_xor_si256(ib(mag[j]), _mm256_and_si256(ib(x[j]), ci(0x80000000u)))), s);
    over[j] = fcmp_gt(vabs(v[j]), vbound);
    satc = _mm256_sub_epi32(satc, over[j]);
  }
  int64_t zero_codes = 0;
  for (int h = 0; h < N; h += 4) {
    const VI any = _mm256_or_si256(_mm256_or_si256(over[h], over[h + 1]), _mm256_or_si256(over[h + 2], over[h + 3]));
    if (_mm256_testz_si256(any, any))
      zero_codes += encode_store_finite32<T>(out + 8 * h, v[h], v[h + 1], v[h + 2], v[h + 3]);
    else
      zero_codes += store_codes32(out + 8 * h, encode_rne<T>(v[h], sat), encode_rne<T>(v[h + 1], sat),
                                  encode_rne<T>(v[h + 2], sat), encode_rne<T>(v[h + 3], sat));
  }
  return zero_codes;
}

// decode + compress_value on 8N codes (none NaN / Inf, every |q * s| finite; exponent 1/k usable).
template <class T, int N>
__attribute__((always_inline)) inline void decode_compress_n(const uint8_t* codes, V c, V s, const PowConstY& kinv,
                                                             bool kinv_unit, V* y) {
  V qs[N], a[N], mag[N];
  FP8SIM_EACH qs[j] = mul(decode8<T>(codes + 8 * j), s);
  FP8SIM_EACH a[j] = vabs(qs[j]);
  pow_const_n<N>(a, mag, kinv, kinv_unit);
  FP8SIM_EACH y[j] = mul(fb(_mm256_xor_si256(ib(mag[j]), _mm256_and_si256(ib(qs[j]), ci(0x80000000u)))), c);
}

// ---- coat DE parameters, 8 groups at once ----------------------------------------------------------

// dmath::log2_det, lane-wise (special values selected after the core ran on 1.0 there).
inline V log2_det(V x) {
  const VI u = ib(x);
  const VI mag = _mm256_and_si256(u, ci(0x7FFFFFFFu));
  const VI neg = _mm256_srai_epi32(u, 31);
  const VI zero = eq(mag, _mm256_setzero_si256());
  const VI inf = eq(u, ci(0x7F800000u));
  const VI nan = is_nan(u);
  const VI ok = vnot(_mm256_or_si256(_mm256_or_si256(neg, zero), _mm256_or_si256(inf, nan)));
  const Log2Parts p = log2_parts(sel(ok, x, cf(1.0f)));
  V r = add(p.e, p.l);
  r = sel(inf, x, r);
  r = sel(zero, fb(ci(0xFF800000u)), r);  // +-0 -> -Inf
  r = sel(_mm256_andnot_si256(zero, neg), fb(ci(0x7FC00000u)), r);
  r = sel(nan, x, r);
  return r;
}

// dmath::floor_det, lane-wise.
inline V floor_det(V x) {
  const VI a = _mm256_and_si256(ib(x), ci(0x7FFFFFFFu));
  V t = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(x));
  t = sel(fcmp_gt(t, x), add(t, cf(-1.0f)), t);
  t = sel(eq(a, _mm256_setzero_si256()), x, t);
  return sel(_mm256_cmpgt_epi32(a, ci(0x4AFFFFFFu)), x, t);  // |x| >= 2^23, Inf, NaN: x
}

// What quantize.cpp's coat_group_params needs from the spec.
struct CoatConsts {
  bool eps_fp64 = true;  // COAT's kernel: the epsilon added in fp64
  double eps = 1e-30;
  float fmax_store = 448.0f;
  float fmax_target = 448.0f;
};

// coat_group_params (coat_expand_params with the spec's epsilon), lane-wise.
inline void coat_params8(const CoatConsts& cc, V absmax, V absmin, V& k, V& c, V& s) {
  V maxv, minv;
  if (cc.eps_fp64) {
    maxv = add_eps_fp64(absmax, cc.eps);
    minv = add_eps_fp64(absmin, cc.eps);
  } else {  // eps added in fp32, then coat_expand_params with eps 0 (an exact no-op on these values)
    const V e32 = cf(static_cast<float>(cc.eps));
    maxv = add_eps_fp64(add(absmax, e32), 0.0);
    minv = add_eps_fp64(add(absmin, e32), 0.0);
  }
  const V ratio = div(maxv, minv);
  c = mul(_mm256_sqrt_ps(maxv), _mm256_sqrt_ps(minv));
  const V lb = cf(dmath::log2_det(expand_ratio_bound(cc.fmax_target)));
  const V q = div(lb, log2_det(ratio));
  k = div(floor_det(mul(q, cf(static_cast<float>(kExpandMin)))), cf(static_cast<float>(kExpandMin)));
  s = div(pow_det(div(maxv, c), k), cf(cc.fmax_store));
}

// True when pow_det_pos_const_y_n's kNarrow conditions hold for every nonzero |x| / c of a group
// whose nonzero |x| lie in [amin, amax], with exponent k: RN(amin / c) is normal (so is every
// larger quotient), and k |log2(|x| / c)| + 1 <= 126 (pow's n1 + n2 is k log2 within one). For a
// in [lo, hi], floor_log2(lo) <= log2 a < floor_log2(hi) + 1, so |log2 a| <= e + 1 with e below,
// and |n1 + n2| <= k (e + 1) + 1 <= 121.
inline bool coat_narrow(float amin, float amax, const ExpandParams& p) {
  if (!(amin > 0.0f)) return false;
  const float lo = div_rn(amin, p.c), hi = div_rn(amax, p.c);
  if (!(lo >= f32_from_bits(0x00800000u))) return false;
  const int flo = floor_log2_f32(lo), fhi = floor_log2_f32(hi);
  const int e = std::max(std::abs(flo), std::abs(fhi));
  return static_cast<double>(p.k) * (e + 1) <= 120.0;
}

// The codes of a fast-path coat group's first n8 elements (a multiple of 8) at out + base; adds its
// saturated lanes to satc, returns how many codes are +-0. Blocks of 16 vectors first: 16
// interleaved pow chains hide the chains' latency better than 8, and better than the spills of 16
// cost (docs/dev-notes/cpu-tuning.md has the measurements).
// wide: a group of 128 with k != 1 goes through avx512::coat_codes128 first.
template <class T, bool kNarrow, class VL>
__attribute__((always_inline)) inline int64_t coat_group_codes(const VL& vl, int64_t base, int64_t n8,
                                                               const ExpandParams& p, bool sat, float bound, bool wide,
                                                               VI& satc, uint8_t* out) {
  // pow_det(a, 1) is a exactly (its y == 1 selection), so k == 1 groups skip the core.
  const bool k_is_one = p.k == 1.0f;
  int64_t zero_codes = 0;
  if (kNarrow && wide && !k_is_one && n8 == 128 &&
      avx512::coat_codes128<T>(vl.p + base, p.c, p.s, p.k, bound, out + base, zero_codes))
    return zero_codes;
  const PowConstY k(p.k);
  const V vc = cf(p.c), vs = cf(p.s), vbound = cf(bound);
  int64_t i = 0;
  for (; i + 128 <= n8; i += 128) {
    V xs[16];
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; ++j) xs[j] = vl.load8(base + i + 8 * j);
    zero_codes += expand_encode_store_n<T, 16, kNarrow>(xs, vc, vs, k, k_is_one, sat, vbound, satc, out + base + i);
  }
  for (; i + 64 <= n8; i += 64) {
    V xs[8];
    FP8SIM_EACH_8 xs[j] = vl.load8(base + i + 8 * j);
    zero_codes += expand_encode_store_n<T, 8, kNarrow>(xs, vc, vs, k, k_is_one, sat, vbound, satc, out + base + i);
  }
  for (; i < n8; i += 8) {
    const V x = vl.load8(base + i);
    VI cv;
    expand_encode_n<T, 1>(&x, vc, vs, k, k_is_one, sat, vbound, satc, &cv);
    zero_codes += store_codes8(out + base + i, cv);
  }
  return zero_codes;
}

// The coat-mode groups [g0, g1) of one-row groups (round to nearest): statistics, parameters from
// params(absmax, absmin) (quantize.cpp: coat_expand_params with the spec's epsilon), then
// expand_value + encode_fp8_rne per element with pow_det_pos_const_y_n. A group with a non-finite
// element or whose k, c, s fall outside the fast path's conditions goes to general(grp).
template <class T, class VL, class SL, class General>
void coat_groups(const VL& vl, const SL& sl, const GroupGeometry& g, int64_t g0, int64_t g1, float bound, bool sat,
                 bool wide, uint8_t* out, float* scales, float* ks, float* cs, int64_t& nsat, int64_t& nunder,
                 uint32_t& tmax, const CoatConsts& cc, General&& general) {
  // Batches of 8 groups: their statistics, then their parameters in one vector evaluation, then
  // each group's codes.
  alignas(32) float bmax[8], bmin[8], bk[8], bc[8], bs[8];
  bool finite[8];
  uint32_t bmax_bits[8];
  for (int64_t gb = g0; gb < g1; gb += 8) {
    const int64_t nb = g1 - gb < 8 ? g1 - gb : 8;
    for (int64_t j = 0; j < 8; ++j) {
      bmax[j] = bmin[j] = 1.0f;  // unused lanes
      finite[j] = false;
    }
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t grp = gb + j;
      int64_t base, n;
      g.row_group_span(grp, base, n);
      const int64_t n8 = n - n % 8;
      uint32_t amax = 0u, amin = 0x7F800000u;
      segment_amax_amin(vl, base, n8, amax, amin);
      bool finite_j = amax < 0x7F800000u;
      GroupStatBits b{finite_j ? amax : 0u, amin};
      for (int64_t i = base + n8; i < base + n; ++i) {
        const float x = sl(i);
        group_stat_add(b, x);
        finite_j = finite_j && is_finite_bits(f32_bits(x));
      }
      finite[j] = finite_j;
      bmax[j] = group_absmax_value(b);
      bmin[j] = group_absmin_value(b);
      bmax_bits[j] = b.amax;
    }
    {
      V k, c, s;
      coat_params8(cc, _mm256_load_ps(bmax), _mm256_load_ps(bmin), k, c, s);
      _mm256_store_ps(bk, k);
      _mm256_store_ps(bc, c);
      _mm256_store_ps(bs, s);
    }
    for (int64_t jb = 0; jb < nb; ++jb) {
      const int64_t grp = gb + jb;
      int64_t base, n;
      g.row_group_span(grp, base, n);
      const int64_t n8 = n - n % 8;
      if (!finite[jb]) {
        general(grp);
        continue;
      }
      const ExpandParams p{bk[jb], bc[jb], bs[jb]};
      const bool ok = PowConstY::usable(p.k) && p.c > 0.0f && is_finite_bits(f32_bits(p.c)) && p.s > 0.0f &&
                      is_finite_bits(f32_bits(p.s));
      if (!ok) {
        general(grp);
        continue;
      }
      scales[grp] = p.s;
      ks[grp] = p.k;
      cs[grp] = p.c;
      tmax = bmax_bits[jb] > tmax ? bmax_bits[jb] : tmax;
      VI satc = _mm256_setzero_si256();
      int64_t zero_codes = coat_narrow(bmin[jb], bmax[jb], p)
                               ? coat_group_codes<T, true>(vl, base, n8, p, sat, bound, wide, satc, out)
                               : coat_group_codes<T, false>(vl, base, n8, p, sat, bound, wide, satc, out);
      nsat += hsum(satc);
      for (int64_t j = base + n8; j < base + n; ++j) {
        const float x = sl(j);
        const float v = expand_value(x, p);
        const uint8_t c = encode_fp8_rne<T>(v, sat);
        out[j] = c;
        nsat += dmath::abs_bits(v) > bound ? 1 : 0;
        zero_codes += (c & 0x7Fu) == 0u ? 1 : 0;
      }
      nunder += underflowed(vl, sl, base, n8, n, zero_codes);
    }
  }
  _mm_sfence();
}

// decode_fp8_vec<T> (quantize.cpp) on 8 codes.
template <class T>
inline V decode8(const uint8_t* codes) {
  const VI c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const VI sign = _mm256_slli_epi32(_mm256_and_si256(c, ci(0x80u)), 24);
  const VI mag = _mm256_and_si256(c, ci(0x7Fu));
  const VI e = _mm256_srli_epi32(mag, T::kMantissaBits);
  const VI m = _mm256_and_si256(mag, ci((1u << T::kMantissaBits) - 1u));
  const V normal =
      fb(_mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi32(_mm256_add_epi32(e, ci(127u - T::kBias)), 23)),
                         _mm256_slli_epi32(m, 23 - T::kMantissaBits)));
  const V sub = fb(_mm256_or_si256(ib(mul(_mm256_cvtepi32_ps(m), cf(pow2f(-T::kSubShift)))), sign));
  V r = sel(eq(e, _mm256_setzero_si256()), sub, normal);
  if constexpr (T::kOverflowCode == 0x7F) {
    r = sel(eq(mag, ci(0x7Fu)), fb(_mm256_or_si256(sign, ci(0x7FC00000u))), r);
  } else {
    const VI special = seli(eq(m, _mm256_setzero_si256()), ci(0x7F800000u), ci(0x7FC00000u));
    r = sel(eq(e, ci(31u)), fb(_mm256_or_si256(sign, special)), r);
  }
  return r;
}

// Whether any of the n codes decodes to NaN or Inf (E4M3: S.1111.111; E5M2: S.11111.xx).
template <class T>
inline bool has_special_codes(const uint8_t* c, int64_t n) {
  const uint8_t mask = T::kOverflowCode == 0x7F ? 0x7F : 0x7C;
  const __m256i vm = _mm256_set1_epi8(static_cast<char>(mask));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(b, vm), vm)) != 0) return true;
  }
  for (; i < n; ++i)
    if ((c[i] & mask) == mask) return true;
  return false;
}

// robust_errors<T, true> (quantize.cpp): robust DE's evaluation of one candidate p over a gathered
// group: codes of expand_value(x, p), and per element the squared error (fp64) of the value they
// decode to, 0 for a non-finite x. Full pow_det (every special value), so any p and any data.
// Returns the saturated count. The caller sums err in its fixed tree order.
// The squared errors of 8 elements (x, y) into err[0..8): fp64, 0 where x is not finite.
inline void store_sq_err8(V x, V y, double* err) {
  const VI fin = lt(_mm256_and_si256(ib(x), ci(0x7FFFFFFFu)), ci(0x7F800000u));
  const __m256d d_lo =
      _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
  const __m256d d_hi =
      _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
  const __m256d m_lo = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(fin)));
  const __m256d m_hi = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(fin, 1)));
  _mm256_storeu_pd(err, _mm256_and_pd(m_lo, _mm256_mul_pd(d_lo, d_lo)));
  _mm256_storeu_pd(err + 4, _mm256_and_pd(m_hi, _mm256_mul_pd(d_hi, d_hi)));
}

// robust_errors on a group whose elements are all finite, with k, 1/k usable by PowConstY, c and s
// positive finite and fmax * s finite: the interleaved pow for the expansion and the compression.
// Returns false when the conditions do not hold or a code decodes to NaN / Inf (sat = none
// overflow); the caller then runs the general loop, which rewrites everything.
template <class T>
bool robust_errors_fast(const float* xs, int64_t n, const ExpandParams& p, bool sat, float bound, uint8_t* codes,
                        double* err, int64_t& nsat) {
  const float kinv_s = div_rn(1.0f, p.k);
  if (!(PowConstY::usable(p.k) && PowConstY::usable(kinv_s) && p.c > 0.0f && is_finite_bits(f32_bits(p.c)) &&
        p.s > 0.0f && is_finite_bits(f32_bits(p.s)) &&
        is_finite_bits(f32_bits(mul_rn(decode_fp8<T>(T::kMaxCode), p.s)))))  // every |q * s| finite
    return false;
  const int64_t n64 = n - n % 64;
  for (int64_t i = 0; i < n; ++i)
    if (!is_finite_bits(f32_bits(xs[i]))) return false;
  const PowConstY ky(p.k), kinv(kinv_s);
  const bool k_unit = p.k == 1.0f, kinv_unit = kinv_s == 1.0f;
  const V pc = cf(p.c), ps = cf(p.s), vbound = cf(bound);
  VI satc = _mm256_setzero_si256();
  for (int64_t i = 0; i < n64; i += 64) {
    V x[8];
    VI cv[8];
    FP8SIM_EACH_8 x[j] = _mm256_loadu_ps(xs + i + 8 * j);
    expand_encode_n<T, 8>(x, pc, ps, ky, k_unit, sat, vbound, satc, cv);
    // (a scratch group read back below: no streaming stores)
    store_codes32<false>(codes + i, cv[0], cv[1], cv[2], cv[3]);
    store_codes32<false>(codes + i + 32, cv[4], cv[5], cv[6], cv[7]);
  }
  if (has_special_codes<T>(codes, n64)) return false;  // (sat = none overflow): the full path redoes it
  for (int64_t i = 0; i < n64; i += 64) {
    V y[8];
    decode_compress_n<T, 8>(codes + i, pc, ps, kinv, kinv_unit, y);
    FP8SIM_EACH_8 store_sq_err8(_mm256_loadu_ps(xs + i + 8 * j), y[j], err + i + 8 * j);
  }
  nsat = hsum(satc);
  for (int64_t j = n64; j < n; ++j) {
    const float x = xs[j];
    const float v = fp8sim::expand_value(x, p);
    codes[j] = encode_fp8_rne<T>(v, sat);
    nsat += dmath::abs_bits(v) > bound ? 1 : 0;
    err[j] = sq_err_term(x, fp8sim::compress_value(decode_fp8<T>(codes[j]), p));
  }
  return true;
}

template <class T>
int64_t robust_errors(const float* xs, int64_t n, const ExpandParams& p, bool sat, float bound, uint8_t* codes,
                      double* err) {
  int64_t fast_sat = 0;
  if (robust_errors_fast<T>(xs, n, p, sat, bound, codes, err, fast_sat)) return fast_sat;
  const int64_t n8 = n - n % 8;
  const V pc = cf(p.c), pk = cf(p.k), ps = cf(p.s), kinv = cf(div_rn(1.0f, p.k)), vbound = cf(bound);
  VI satc = _mm256_setzero_si256();
  for (int64_t i = 0; i < n8; i += 8) {
    const V x = _mm256_loadu_ps(xs + i);
    const V v = expand_value(x, pc, pk, ps);
    store8(codes + i, encode_rne<T>(v, sat));
    const VI fin = lt(_mm256_and_si256(ib(x), ci(0x7FFFFFFFu)), ci(0x7F800000u));
    satc = _mm256_sub_epi32(satc, _mm256_and_si256(fin, fcmp_gt(vabs(v), vbound)));
    store_sq_err8(x, compress_value(decode8<T>(codes + i), ps, kinv, pc), err + i);
  }
  int64_t nsat = hsum(satc);
  for (int64_t j = n8; j < n; ++j) {
    const float x = xs[j];
    const float v = fp8sim::expand_value(x, p);
    codes[j] = encode_fp8_rne<T>(v, sat);
    nsat += (is_finite_bits(f32_bits(x)) && dmath::abs_bits(v) > bound) ? 1 : 0;
    err[j] = sq_err_term(x, fp8sim::compress_value(decode_fp8<T>(codes[j]), p));
  }
  return nsat;
}

// decode_range (quantize.cpp) for the first n8 elements.
template <class T, bool EXPAND>
inline void decode_segment(const uint8_t* codes, int64_t base, int64_t n8, float s, const ExpandParams& p, float* out) {
  const V vs = cf(s), ps = cf(p.s), pc = cf(p.c);
  float kinv_s = 1.0f;  // (unused without expansion)
  if constexpr (EXPAND) kinv_s = div_rn(1.0f, p.k);
  const V kinv = cf(kinv_s);
  if constexpr (EXPAND) {
    // Fast path: compress_value with pow_det_pos_const_y_n, valid when the exponent 1/k meets its
    // conditions, |q * s| stays finite for the largest code (so every |q*s| is finite: the
    // products are monotone in |q|) and the segment holds no NaN / Inf code.
    const bool fast = PowConstY::usable(kinv_s) && is_finite_bits(f32_bits(mul_rn(decode_fp8<T>(T::kMaxCode), p.s))) &&
                      !has_special_codes<T>(codes + base, n8);
    if (fast) {
      const PowConstY ky(kinv_s);
      const bool unit = kinv_s == 1.0f;  // pow_det(a, 1) == a
      int64_t i = 0;
      for (; i + 64 <= n8; i += 64) {
        V y[8];
        decode_compress_n<T, 8>(codes + base + i, pc, ps, ky, unit, y);
        FP8SIM_EACH_8 _mm256_storeu_ps(out + base + i + 8 * j, y[j]);
      }
      for (; i < n8; i += 8) {
        V y;
        decode_compress_n<T, 1>(codes + base + i, pc, ps, ky, unit, &y);
        _mm256_storeu_ps(out + base + i, y);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n8; i += 8) {
    const V v = decode8<T>(codes + base + i);
    _mm256_storeu_ps(out + base + i, EXPAND ? compress_value(v, ps, kinv, pc) : mul(v, vs));
  }
}

}  // namespace fp8sim::avx2

#undef FP8SIM_EACH
#undef FP8SIM_EACH_8
#pragma GCC pop_options
