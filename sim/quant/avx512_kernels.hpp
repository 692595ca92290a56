#pragma once
// AVX-512 versions of two quantizer loops of avx2_kernels.hpp, taken at run time when the CPU has
// AVX-512 F, BW, VL and DQ: the plain 1xG code loop (encode_plain_fast) and the coat DE codes of a
// 128-element kNarrow group (expand_encode_store_n with pow_det_pos_const_y_n<N, true>). Not new
// numerics: the lanes do the AVX2 functions' operations (so the scalar functions') in the same
// order; tests/test_quant_simd.cpp checks every in-range fp32 pattern through the encoder, the pow
// against dmath::pow_det, and whole quantize calls.
//
// Why a second width: on Zen 4 one 512-bit division (16 lanes) issues about as often as one
// 256-bit division (8 lanes), and the division's pipe is what the AVX2 loops wait for (DE has
// three divisions per element); the other operations run double-pumped at the same cost per
// element either way, and 32 registers leave DE's interleaved chains fewer spills.
#include <immintrin.h>

#include <cstdint>

#include "sim/formats/fp8.hpp"

namespace fp8sim::avx512 {

// True when this CPU can run the functions below (checked once).
inline bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return ok;
}

}  // namespace fp8sim::avx512

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

namespace fp8sim::avx512 {

// The plain intrinsics of these instructions (and srai, cvtepi32_ps, cvttps_epi32) start from an "undefined" vector,
// which GCC 12 warns about (-Wmaybe-uninitialized inside its own header) once they are inlined; their zero-masking
// forms with every lane selected are the same instructions without that.
constexpr __mmask16 kAll = 0xFFFF;
inline __m512i srli(__m512i a, unsigned n) { return _mm512_maskz_srli_epi32(kAll, a, n); }
inline __m512i slli(__m512i a, unsigned n) { return _mm512_maskz_slli_epi32(kAll, a, n); }
inline __m512i srai(__m512i a, unsigned n) { return _mm512_maskz_srai_epi32(kAll, a, n); }
inline __m512 cvtepi32_ps(__m512i a) { return _mm512_maskz_cvtepi32_ps(kAll, a); }
inline __m512i cvtps_epi32(__m512 a) { return _mm512_maskz_cvtps_epi32(kAll, a); }
inline __m128i cvtepi32_epi8(__m512i a) { return _mm512_maskz_cvtepi32_epi8(kAll, a); }

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {  // bf16: the high half of an fp32
  return _mm512_castsi512_ps(
      slli(_mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// The codes of 16 lanes v, each finite with |v| at most the saturation bound
// (avx2::encode_rne_finite's conditions), as bytes; zeros gets the lanes whose code is +-0.
template <class T>
inline __m128i encode16(__m512 v, __mmask16& zeros) {
  constexpr int D = T::kDropBits;
  constexpr uint32_t kBiasShifted = static_cast<uint32_t>(127 - T::kBias) << (T::kMantissaBits + D);
  const __m512i u = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  // normal: (a + 2^(D-1) - 1 + lsb) >> D with the exponent-bias subtraction folded in (as avx2)
  const __m512i lsb = _mm512_and_si512(srli(a, D), _mm512_set1_epi32(1));
  const __m512i normal =
      srli(_mm512_add_epi32(
               _mm512_add_epi32(a, _mm512_set1_epi32(static_cast<int>((1u << (D - 1)) - 1u - kBiasShifted))), lsb),
           D);
  const __m512i sub = cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(pow2f(T::kSubShift))));
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(static_cast<int>(T::kMinNormalBits)));
  const __m128i mag = cvtepi32_epi8(_mm512_mask_mov_epi32(normal, subnormal, sub));
  zeros = _mm_cmpeq_epi8_mask(mag, _mm_setzero_si128());
  return _mm_mask_mov_epi8(mag, _mm512_movepi32_mask(u), _mm_or_si128(mag, _mm_set1_epi8(static_cast<char>(0x80))));
}

// avx2::encode_plain_fast for n16 elements (a multiple of 16) of x from base: the codes of
// x / sq into out + base; returns how many are +-0.
template <class T, class E>
__attribute__((noinline)) int64_t encode_plain(const E* x, int64_t base, int64_t n16, float sq, uint8_t* out) {
  const __m512 vs = _mm512_set1_ps(sq);
  int64_t zero_codes = 0;
  for (int64_t i = base; i < base + n16; i += 16) {
    __mmask16 z;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), encode16<T>(_mm512_div_ps(load16(x + i), vs), z));
    zero_codes += __builtin_popcount(static_cast<unsigned>(z));
  }
  return zero_codes;
}

// ---- coat DE, kNarrow groups ---------------------------------------------------------------------
// avx2::pow_det_pos_const_y_n<N, true> at 16 lanes: the same operations in the same order (see its
// conditions: every nonzero lane normal, |n1 + n2| <= 126; y = k with 0 < k <= 16384, k != 1).

inline __m512 rint_small(__m512 x) {
  return _mm512_add_ps(_mm512_add_ps(x, _mm512_set1_ps(12582912.0f)), _mm512_set1_ps(-12582912.0f));
}
inline __m512 neg(__m512 x) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}

template <int N>
__attribute__((always_inline)) inline void pow_narrow(const __m512* x, __m512* out, float k) {
  const float k_hi_s = f32_from_bits(f32_bits(k) & 0xFFFFF000u);
  const __m512 y = _mm512_set1_ps(k), y_hi = _mm512_set1_ps(k_hi_s), y_lo = _mm512_set1_ps(add_rn(k, -k_hi_s));
  _Pragma("GCC unroll 16") for (int j = 0; j < N; ++j) {
    const __m512i u = _mm512_castps_si512(x[j]);
    const __m512i ei = srai(_mm512_sub_epi32(u, _mm512_set1_epi32(0x3F3504F3)), 23);
    const __m512 f = _mm512_add_ps(_mm512_castsi512_ps(_mm512_sub_epi32(u, slli(ei, 23))), _mm512_set1_ps(-1.0f));
    const __m512 s = _mm512_div_ps(f, _mm512_add_ps(_mm512_set1_ps(2.0f), f));
    const __m512 z = _mm512_mul_ps(s, s);
    __m512 R = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(0.22222222f), z), _mm512_set1_ps(0.28571429f));
    R = _mm512_add_ps(_mm512_mul_ps(R, z), _mm512_set1_ps(0.40000001f));
    R = _mm512_add_ps(_mm512_mul_ps(R, z), _mm512_set1_ps(0.66666669f));
    R = _mm512_mul_ps(R, z);
    const __m512 hfsq = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), f), f);
    const __m512 l =
        _mm512_mul_ps(_mm512_add_ps(f, neg(_mm512_add_ps(hfsq, neg(_mm512_mul_ps(s, _mm512_add_ps(hfsq, R)))))),
                      _mm512_set1_ps(1.44269502f));
    const __m512 e = cvtepi32_ps(ei);
    const __m512 a_hi = _mm512_mul_ps(y_hi, e);
    const __m512 n1 = rint_small(a_hi);
    const __m512 t =
        _mm512_add_ps(_mm512_add_ps(a_hi, neg(n1)), _mm512_add_ps(_mm512_mul_ps(y_lo, e), _mm512_mul_ps(y, l)));
    const __m512 n2 = rint_small(t);
    const __m512 g = _mm512_add_ps(t, neg(n2));
    const __m512i ni = _mm512_maskz_cvttps_epi32(kAll, _mm512_add_ps(n1, n2));
    __m512 p = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(1.5252734e-05f), g), _mm512_set1_ps(1.5403530e-04f));
    p = _mm512_add_ps(_mm512_mul_ps(p, g), _mm512_set1_ps(1.3333558e-03f));
    p = _mm512_add_ps(_mm512_mul_ps(p, g), _mm512_set1_ps(9.6181291e-03f));
    p = _mm512_add_ps(_mm512_mul_ps(p, g), _mm512_set1_ps(5.5504109e-02f));
    p = _mm512_add_ps(_mm512_mul_ps(p, g), _mm512_set1_ps(2.4022651e-01f));
    p = _mm512_add_ps(_mm512_mul_ps(p, g), _mm512_set1_ps(6.9314718e-01f));
    p = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(p, g));
    const __m512 r = _mm512_mul_ps(p, _mm512_castsi512_ps(slli(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23)));
    // x == +0 gives +0 (the lanes' garbage replaced)
    out[j] = _mm512_maskz_mov_ps(_mm512_test_epi32_mask(u, u), r);
  }
}

// avx2::expand_encode_store_n<T, 8 * 2, true> for 128 elements (8 x 16 lanes) of x at out, with k
// != 1. Returns false, storing nothing, when some |v| passes the saturation bound (the caller then
// takes the AVX2 loop); else adds the codes' +-0 count to zero_codes.
template <class T, class E>
__attribute__((noinline)) bool coat_codes128(const E* x, float c, float s, float k, float bound, uint8_t* out,
                                             int64_t& zero_codes) {
  constexpr int N = 8;
  __m512 xv[N], a[N], mag[N], v[N];
  const __m512 vc = _mm512_set1_ps(c), vs = _mm512_set1_ps(s), vbound = _mm512_set1_ps(bound);
  const __m512i sign_bit = _mm512_set1_epi32(INT32_MIN), abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
    xv[j] = load16(x + 16 * j);
    a[j] = _mm512_div_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(xv[j]), abs_mask)), vc);
  }
  pow_narrow<N>(a, mag, k);
  __mmask16 over = 0;
  _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
    v[j] = _mm512_div_ps(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mag[j]),
                                                              _mm512_and_si512(_mm512_castps_si512(xv[j]), sign_bit))),
                         vs);
    over |= _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v[j]), abs_mask)), vbound,
                               _CMP_GT_OQ);
  }
  if (over) return false;
  _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
    __mmask16 z;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * j), encode16<T>(v[j], z));
    zero_codes += __builtin_popcount(static_cast<unsigned>(z));
  }
  return true;
}

}  // namespace fp8sim::avx512

#pragma GCC pop_options
