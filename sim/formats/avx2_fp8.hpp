#pragma once
// The AVX2 building blocks shared by the bulk cast (sim/formats/cast.cpp) and the quantizer's
// loops (sim/quant/avx2_kernels.hpp): lane helpers and encode_fp8_rne transcribed lane-wise. Not
// new numerics: every lane performs the scalar FP8SIM_HD function's operations in the same order
// (no FMA: -ffp-contract=off and the avx2 target without fma), so each lane gives the scalar bits;
// tests/test_quant_simd.cpp checks the encoder on every fp32 bit pattern.
//
// The pragma below gives every function defined in this header the avx2 target; the headers it
// depends on are included before it, so nothing they define is compiled for AVX2 (which would let
// the linker pick an AVX2 copy for a non-AVX2 caller). Callers check available() first.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#include "sim/formats/fp8.hpp"

namespace fp8sim::avx2 {

// True when this CPU can run the functions below (checked once).
inline bool available() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

// False when the environment variable `name` is set and not "0" (an opt-out switch).
inline bool env_allows(const char* name) {
  const char* e = std::getenv(name);
  return !(e != nullptr && e[0] != '\0' && e[0] != '0');
}

// The start-up value of every SIMD switch (casts, quantizer, tensor-core model): off when
// FP8SIM_NO_SIMD is set and not "0".
inline bool env_allows_simd() { return env_allows("FP8SIM_NO_SIMD"); }

}  // namespace fp8sim::avx2

#pragma GCC push_options
#pragma GCC target("avx2")

namespace fp8sim::avx2 {

using V = __m256;
using VI = __m256i;

inline V fb(VI x) { return _mm256_castsi256_ps(x); }
inline VI ib(V x) { return _mm256_castps_si256(x); }
inline VI ci(uint32_t c) { return _mm256_set1_epi32(static_cast<int>(c)); }
inline V cf(float c) { return _mm256_set1_ps(c); }
// Lane-wise select m ? a : b for a mask of all-ones / all-zeros lanes: the bitwise form of
// dmath::sel, so NaN payloads and signed zeros pass through unchanged.
inline V sel(VI m, V a, V b) { return fb(_mm256_or_si256(_mm256_and_si256(m, ib(a)), _mm256_andnot_si256(m, ib(b)))); }
inline VI seli(VI m, VI a, VI b) { return _mm256_or_si256(_mm256_and_si256(m, a), _mm256_andnot_si256(m, b)); }
inline VI eq(VI a, VI b) { return _mm256_cmpeq_epi32(a, b); }
// Signed compares; every caller passes values below 2^31 (magnitudes, small integers) so they
// order like the unsigned scalar compares they transcribe.
inline VI lt(VI a, VI b) { return _mm256_cmpgt_epi32(b, a); }
inline VI gt(VI a, VI b) { return _mm256_cmpgt_epi32(a, b); }
inline VI fcmp_lt(V a, V b) { return ib(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
inline VI fcmp_gt(V a, V b) { return ib(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
inline VI fcmp_ne(V a, V b) { return ib(_mm256_cmp_ps(a, b, _CMP_NEQ_OQ)); }
inline VI vnot(VI m) { return _mm256_xor_si256(m, _mm256_set1_epi32(-1)); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V div(V a, V b) { return _mm256_div_ps(a, b); }
inline V neg(V a) { return fb(_mm256_xor_si256(ib(a), ci(0x80000000u))); }
inline V vabs(V a) { return fb(_mm256_and_si256(ib(a), ci(0x7FFFFFFFu))); }
inline VI is_nan(VI u) { return gt(_mm256_and_si256(u, ci(0x7FFFFFFFu)), ci(0x7F800000u)); }

// ---- fp8.hpp -----------------------------------------------------------------------------------

// encode_fp8_rne<T>(v, sat), lane-wise; returns the codes as int32 lanes (0..255).
template <class T>
inline VI encode_rne(V v, bool saturate) {
  static_assert(T::kBits == 8, "the lane encoder writes 8-bit codes (E4M3, E5M2)");
  // The scalar function's overflow select, code = normal > max ? overflow_code : normal, is
  // min(normal, limit) here: the overflow code is the next code after the largest finite one in
  // both formats (E4M3 NaN 0x7F, E5M2 Inf 0x7C), and saturation makes it the largest itself.
  static_assert(T::kOverflowCode == T::kMaxCode + 1, "min() stands for the overflow select");
  const VI u = ib(v);
  const VI sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), ci(0x80u));
  const VI a = _mm256_and_si256(u, ci(0x7FFFFFFFu));
  constexpr int D = T::kDropBits;
  const VI rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, ci((1u << (D - 1)) - 1u)),
                                                        _mm256_and_si256(_mm256_srli_epi32(a, D), ci(1u))),
                                       D);
  // Positive for every normal a (at least 1 << MBITS), so the unsigned min is the scalar compare.
  const VI normal = _mm256_sub_epi32(rounded, ci(static_cast<uint32_t>(127 - T::kBias) << T::kMantissaBits));
  const VI limited = _mm256_min_epu32(normal, ci(saturate ? T::kMaxCode : T::kOverflowCode));
  const V scaled = add(mul(fb(a), cf(pow2f(T::kSubShift))), cf(8388608.0f));
  const VI sub = _mm256_sub_epi32(ib(scaled), ci(0x4B000000u));
  // blendv picks by each byte's top bit: the compare masks are all-ones or all-zeros lanes.
  VI code = _mm256_blendv_epi8(limited, sub, lt(a, ci(T::kMinNormalBits)));
  code = _mm256_or_si256(code, sign);
  return _mm256_blendv_epi8(code, ci(T::kNanCode), gt(a, ci(0x7F800000u)));
}

// The packs work within 128-bit halves: bytes packed from c0..c3 come out as the dwords c0lo c1lo
// c2lo c3lo c0hi c1hi c2hi c3hi (4 bytes each); this permutation restores element order.
inline VI packed_element_order(VI b) {
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
// The bytes held by 4 x 8 int32 lanes, in element order (c0's lanes first).
inline VI pack_codes32(VI c0, VI c1, VI c2, VI c3) {
  return packed_element_order(_mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3)));
}

// 32 code bytes: a streaming (non-temporal) store where the address allows it. Codes are written
// once, so they should not evict the input being converted from the caches, and a streaming store
// skips reading the destination line first. Callers end with _mm_sfence() (streaming stores are
// weakly ordered).
inline void store32(uint8_t* p, VI b) {
  if ((reinterpret_cast<uintptr_t>(p) & 31u) == 0u) _mm256_stream_si256(reinterpret_cast<VI*>(p), b);
  else _mm256_storeu_si256(reinterpret_cast<VI*>(p), b);
}

// Stores 8 int32 lanes holding bytes as 8 consecutive bytes.
inline void store8(uint8_t* out, VI codes) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

// ---- loaders -----------------------------------------------------------------------------------

struct VLoadF32 {
  const float* p;
  V load8(int64_t i) const { return _mm256_loadu_ps(p + i); }
};
struct VLoadBF16 {
  const uint16_t* p;
  V load8(int64_t i) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    return fb(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

}  // namespace fp8sim::avx2

#pragma GCC pop_options
