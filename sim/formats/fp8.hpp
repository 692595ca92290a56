#pragma once
// Scalar conversions between fp32 and the small formats, shared by the CPU reference and the
// CUDA kernels (FP8SIM_HD). Integer bit manipulation plus correctly rounded fp32 add/mul only.
//
// Conventions (OCP 8-bit Floating Point Specification v1.0; docs/numerics.md; cuda_fp8.h's host path is the oracle in
// tests):
// * fp32 -> fp8 rounds to nearest, ties to even, then applies the overflow rule:
//   Saturation::Finite clamps to +-max (and +-Inf to +-max), Saturation::None gives NaN (E4M3,
//   0x7F|sign) or Inf (E5M2, 0x7C|sign).
// * NaN input gives the positive canonical NaN 0x7F in both formats, sign dropped: what
//   cuda_fp8.h and the hardware cvt instruction do. ml_dtypes keeps the sign (0xFF for -NaN);
//   tests pin that difference.
// * Stochastic rounding: let F be the fraction of |x|/ulp below the truncated value, as a
//   32-bit fixed-point number (exact whenever the fraction has <= 32 bits, which holds for every
//   fp32 input in the normal range of the target and for all but the tiniest subnormals). The
//   magnitude rounds away from zero iff rnd < F, so P(up) = F / 2^32. The virtual value above
//   max (480 for E4M3, 65536 for E5M2) is treated as an overflow.
#include "sim/common/hd.hpp"

namespace fp8sim {

// A sign-magnitude float of BITS bits (8, 6 or 4) whose code is the low BITS bits of a byte.
// The 4- and 6-bit formats (OCP MX v1.0: E2M1, E2M3, E3M2) have no Inf or NaN: overflow, Inf and
// NaN all give the largest finite magnitude (NaN as +max), what cuda_fp4.h / cuda_fp6.h do, so
// their NOSAT_CODE and NAN_CODE are MAX_CODE.
template <int MBITS, int BIAS, uint8_t MAX_CODE, uint8_t NOSAT_CODE, int SUB_SHIFT, int BITS = 8,
          uint8_t NAN_CODE = 0x7F>
struct Fp8Traits {
  static constexpr int kBits = BITS;
  static constexpr int kMantissaBits = MBITS;
  static constexpr int kBias = BIAS;
  static constexpr uint8_t kMaxCode = MAX_CODE;         // largest finite magnitude code
  static constexpr uint8_t kOverflowCode = NOSAT_CODE;  // NaN (E4M3) or Inf (E5M2)
  static constexpr uint8_t kNanCode = NAN_CODE;
  static constexpr bool kHasSpecials = BITS == 8;  // Inf / NaN codes exist
  static constexpr int kSignShift = 32 - BITS;     // fp32 sign bit -> the code's sign bit
  static constexpr uint32_t kSignBit = 1u << (BITS - 1);
  static constexpr int kDropBits = 23 - MBITS;  // fp32 mantissa bits dropped in the normal range
  static constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - BIAS) << 23;
  static constexpr int kSubShift = SUB_SHIFT;  // min subnormal = 2^-SUB_SHIFT
};
using E4M3Traits = Fp8Traits<3, 7, 0x7E, 0x7F, 9>;
using E5M2Traits = Fp8Traits<2, 15, 0x7B, 0x7C, 16>;
using E2M1Traits = Fp8Traits<1, 1, 0x7, 0x7, 1, 4, 0x7>;     // max 6, min subnormal 0.5
using E2M3Traits = Fp8Traits<3, 1, 0x1F, 0x1F, 3, 6, 0x1F>;  // max 7.5, min subnormal 2^-3
using E3M2Traits = Fp8Traits<2, 3, 0x1F, 0x1F, 4, 6, 0x1F>;  // max 28, min subnormal 2^-4

// 2^k as fp32 for -126 <= k <= 127, exactly.
FP8SIM_HD float pow2f(int k) { return f32_from_bits(static_cast<uint32_t>(k + 127) << 23); }

// Round-to-nearest-even integer of a non-negative fp32 value below 2^22, with an fp32 add:
// adding 2^23 leaves no fraction bits, and the add rounds to nearest even.
FP8SIM_HD uint32_t rne_small_int(float v) { return f32_bits(add_rn(v, 8388608.0f)) - 0x4B000000u; }

template <class T>
FP8SIM_HD uint8_t encode_fp8_rne(float x, bool saturate) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> T::kSignShift) & T::kSignBit;
  const uint32_t a = u & 0x7FFFFFFFu;
  constexpr int D = T::kDropBits;
  // Normal range: round the magnitude's bits at position D (carry may bump the exponent),
  // then re-bias the exponent.
  const uint32_t rounded = (a + ((1u << (D - 1)) - 1u) + ((a >> D) & 1u)) >> D;
  const uint32_t normal = rounded - (static_cast<uint32_t>(127 - T::kBias) << T::kMantissaBits);
  // Subnormal range: the code is the integer number of min-subnormal units, rounded.
  const uint32_t sub = rne_small_int(mul_rn(f32_from_bits(a), pow2f(T::kSubShift)));
  // Selects written with bitwise logic (no short-circuit) so that loops over this function
  // if-convert and vectorize.
  const bool subnormal = a < T::kMinNormalBits;
  const bool overflow = !subnormal & (normal > T::kMaxCode);
  const uint32_t overflow_code = saturate ? T::kMaxCode : T::kOverflowCode;
  uint32_t code = subnormal ? sub : normal;
  code = overflow ? overflow_code : code;
  code |= sign;
  code = a > 0x7F800000u ? static_cast<uint32_t>(T::kNanCode) : code;
  return static_cast<uint8_t>(code);
}

template <class T>
FP8SIM_HD uint8_t encode_fp8_sr(float x, bool saturate, uint32_t rnd) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> T::kSignShift) & T::kSignBit;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return T::kNanCode;
  constexpr int D = T::kDropBits;
  uint32_t code;
  if (a >= T::kMinNormalBits) {
    const uint32_t frac = (a & ((1u << D) - 1u)) << (32 - D);
    const uint32_t mag = (a >> D) + (rnd < frac ? 1u : 0u);
    code = mag - (static_cast<uint32_t>(127 - T::kBias) << T::kMantissaBits);
    if (a == 0x7F800000u || code > T::kMaxCode) code = saturate ? T::kMaxCode : T::kOverflowCode;
  } else {
    // t = |x| / min_subnormal exactly (a power-of-two scaling of a value far from the limits).
    const uint32_t tb = f32_bits(mul_rn(f32_from_bits(a), pow2f(T::kSubShift)));
    const uint32_t be = tb >> 23;
    const uint64_t sig = (tb & 0x7FFFFFu) | (be ? 0x800000u : 0u);
    const int sh = 150 - static_cast<int>(be ? be : 1u);  // t = sig * 2^-sh, sh >= 21 here
    const uint32_t q = sh < 32 ? static_cast<uint32_t>(sig >> sh) : 0u;
    const uint64_t low = sh < 32 ? (sig & ((uint64_t{1} << sh) - 1u)) : sig;
    const uint64_t frac = sh <= 32 ? (low << (32 - sh)) : (sh - 32 < 64 ? (low >> (sh - 32)) : 0u);
    code = q + (static_cast<uint64_t>(rnd) < frac ? 1u : 0u);
  }
  return static_cast<uint8_t>(code | sign);
}

// Bits above the format's width are ignored.
template <class T>
FP8SIM_HD float decode_fp8(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & T::kSignBit) << T::kSignShift;
  const uint32_t mag = c & (T::kSignBit - 1u);
  const uint32_t e = mag >> T::kMantissaBits;
  const uint32_t m = mag & ((1u << T::kMantissaBits) - 1u);
  constexpr uint32_t kEmaxField = (1u << (T::kBits - 1 - T::kMantissaBits)) - 1u;
  if (!T::kHasSpecials) {
    // every code is finite
  } else if (T::kOverflowCode == 0x7F) {  // E4M3: only S.1111.111 is NaN
    if (mag == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
  } else if (e == kEmaxField) {  // E5M2: Inf and NaN
    return f32_from_bits(sign | (m == 0 ? 0x7F800000u : 0x7FC00000u));
  }
  if (e == 0) {
    const float v = mul_rn(static_cast<float>(m), pow2f(-T::kSubShift));
    return f32_from_bits(f32_bits(v) | sign);
  }
  return f32_from_bits(sign | ((e + 127u - T::kBias) << 23) | (m << (23 - T::kMantissaBits)));
}

// ---- 16-bit formats -----------------------------------------------------------------------------
FP8SIM_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

FP8SIM_HD uint16_t f32_to_bf16_rne(float x, bool saturate = false) {
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  if (saturate && (r & 0x7FFFu) == 0x7F80u) r = (r & 0x8000u) | 0x7F7Fu;
  return static_cast<uint16_t>(r);
}

FP8SIM_HD float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float v = mul_rn(static_cast<float>(m), pow2f(-24));
    return f32_from_bits(f32_bits(v) | sign);
  }
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

FP8SIM_HD uint16_t f32_to_fp16_rne(float x, bool saturate = false) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  uint32_t code;
  if (a < (113u << 23)) {  // below 2^-14: subnormal units of 2^-24
    code = rne_small_int(mul_rn(f32_from_bits(a), pow2f(24)));
  } else {
    code = ((a + 0xFFFu + ((a >> 13) & 1u)) >> 13) - (112u << 10);
    if (code > 0x7BFFu) code = saturate ? 0x7BFFu : 0x7C00u;
  }
  return static_cast<uint16_t>(code | sign);
}

// ---- E8M0 (MX scales): 2^(c - 127), 0xFF is NaN, no zero, no sign ---------------------------------
FP8SIM_HD float decode_e8m0(uint8_t c) {
  if (c == 0xFF) return f32_from_bits(0x7FC00000u);
  return f32_from_bits(c == 0 ? 0x00400000u : static_cast<uint32_t>(c) << 23);
}
// The code of 2^e, clamped to the representable exponents [-127, 127].
FP8SIM_HD uint8_t e8m0_from_exponent(int e) {
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}
// floor(log2(|x|)) for finite nonzero x (fp32 subnormals included); -127 for zero.
FP8SIM_HD int floor_log2_f32(float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  if (a == 0) return -127;
  const int be = static_cast<int>(a >> 23);
  if (be) return be - 127;
  int e = -127;
  for (uint32_t m = a; m > 1; m >>= 1) ++e;  // subnormal: position of the leading bit
  return e - 22;
}

// ---- runtime-dispatched scalar entry points -----------------------------------------------------
// fmt: 0 = E4M3, 1 = E5M2 (same order as Format).
FP8SIM_HD uint8_t encode_fp8(float x, int fmt, bool saturate) {
  return fmt == 0 ? encode_fp8_rne<E4M3Traits>(x, saturate) : encode_fp8_rne<E5M2Traits>(x, saturate);
}
FP8SIM_HD uint8_t encode_fp8_stochastic(float x, int fmt, bool saturate, uint32_t rnd) {
  return fmt == 0 ? encode_fp8_sr<E4M3Traits>(x, saturate, rnd) : encode_fp8_sr<E5M2Traits>(x, saturate, rnd);
}
FP8SIM_HD float decode_fp8(uint8_t c, int fmt) {
  return fmt == 0 ? decode_fp8<E4M3Traits>(c) : decode_fp8<E5M2Traits>(c);
}

}  // namespace fp8sim
