#pragma once
// AVX-512 version of the plain 1xG quantizer's code loop (avx2_kernels.hpp: encode_plain_fast),
// taken at run time when the CPU has AVX-512 F, BW, VL and DQ. Not new numerics: the lanes do
// encode_rne_finite's operations (the IEEE division, the integer rounding, the subnormal product
// and conversion) in the same order, so the codes are the AVX2 loop's and the scalar encoder's;
// tests/test_quant_simd.cpp checks every in-range fp32 pattern and whole quantize calls.
//
// Why a second width: on Zen 4 one 512-bit division (16 lanes) issues about as often as one
// 256-bit division (8 lanes), and the division's pipe is what the AVX2 loop waits for; the other
// operations run double-pumped at the same cost per element either way.
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

// The plain intrinsics of these instructions start from an "undefined" vector, which GCC 12 warns
// about (-Wmaybe-uninitialized inside its own header) once they are inlined; their zero-masking
// forms with every lane selected are the same instructions without that.
constexpr __mmask16 kAll = 0xFFFF;
inline __m512i srli(__m512i a, unsigned n) { return _mm512_maskz_srli_epi32(kAll, a, n); }
inline __m512i slli(__m512i a, unsigned n) { return _mm512_maskz_slli_epi32(kAll, a, n); }
inline __m512i cvtps_epi32(__m512 a) { return _mm512_maskz_cvtps_epi32(kAll, a); }
inline __m128i cvtepi32_epi8(__m512i a) { return _mm512_maskz_cvtepi32_epi8(kAll, a); }

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {  // bf16: the high half of an fp32
  return _mm512_castsi512_ps(
      slli(_mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// The codes of x / sq for 16 lanes, each x / sq finite with |x / sq| at most the saturation bound
// (avx2::encode_rne_finite's conditions), as bytes; zeros gets the lanes whose code is +-0.
template <class T>
inline __m128i encode16(__m512 x, __m512 vs, __mmask16& zeros) {
  constexpr int D = T::kDropBits;
  constexpr uint32_t kBiasShifted = static_cast<uint32_t>(127 - T::kBias) << (T::kMantissaBits + D);
  const __m512i u = _mm512_castps_si512(_mm512_div_ps(x, vs));
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
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), encode16<T>(load16(x + i), vs, z));
    zero_codes += __builtin_popcount(static_cast<unsigned>(z));
  }
  return zero_codes;
}

}  // namespace fp8sim::avx512

#pragma GCC pop_options
