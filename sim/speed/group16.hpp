#pragma once
// Numerics shared by the speed replay's kernels (gpu/speed) and their CPU references
// (sim/speed/nonlinear_ref): COAT-style 1x16 group quantization with bf16 scales, and the
// per-tensor scale the cast kernels use. FP8SIM_HD: correctly rounded IEEE operations only.
//
// A 1x16 group of values x_i is stored as 16 FP8 codes q_i and one bf16 scale s with
// x_i ~= decode(q_i) * s. The encoder MULTIPLIES by inv = 1/s (one division per group):
//   s   = bf16 rounded UP from max(absmax, 2^-100) / fp8_max (so |x_i| * inv <= fp8_max),
//   q_i = fp8_rne_satfinite(x_i * inv).
// Group maxima written for Group Scaling's stage 2 ("gmax") are bf16 rounded up from the
// group's absmax, so the per-tensor max built from them is never below the true max.
// Per-tensor casts: inv = fp8_max / max(amax, 2^-100), q = fp8_rne_satfinite(x * inv).
#include <cstdint>

#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim::speed {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kTinyScaleBase = 7.8886090522101181e-31f;  // 2^-100: a zero group still has a finite inverse

// bf16 of a non-negative finite fp32, rounded toward +infinity.
FP8SIM_HD uint16_t bf16_round_up(float a) {
  uint32_t u = f32_bits(a);
  if (u & 0xFFFFu) u += 0x10000u;
  return static_cast<uint16_t>(u >> 16);
}

FP8SIM_HD uint16_t g16_scale(float group_absmax, float fp8_max) {
  const float m = group_absmax > kTinyScaleBase ? group_absmax : kTinyScaleBase;
  return bf16_round_up(div_rn(m, fp8_max));
}

FP8SIM_HD float g16_inverse(uint16_t scale_bf16) { return div_rn(1.0f, bf16_to_f32(scale_bf16)); }

FP8SIM_HD float tensor_inverse(float amax, float fp8_max) {
  return div_rn(fp8_max, amax > kTinyScaleBase ? amax : kTinyScaleBase);
}

// |x| as fp32 (clears the sign bit; NaN stays NaN).
FP8SIM_HD float abs_bits(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }

// max that ignores NaN operands in the second argument's favour of the first (a running max
// starting at 0 stays a number).
FP8SIM_HD float max_nonneg(float a, float b) { return b > a ? b : a; }

}  // namespace fp8sim::speed

namespace fp8sim::speed {

// CUDA's __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the eight bytes
// {x (bytes 0-3), y (bytes 4-7)}. The host branch lets tests check the selectors on a CPU.
FP8SIM_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 7u;
    r |= static_cast<uint32_t>((xy >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
#endif
}

// Transposes a 4x4 block of bytes: w[k] holds row k (its byte m = column m); o[m] receives
// column m (its byte k = row k).
FP8SIM_HD void transpose4x4_bytes(const uint32_t w[4], uint32_t o[4]) {
  const uint32_t a_lo = byte_perm(w[0], w[1], 0x5140u);  // w0.b0 w1.b0 w0.b1 w1.b1
  const uint32_t a_hi = byte_perm(w[0], w[1], 0x7362u);  // w0.b2 w1.b2 w0.b3 w1.b3
  const uint32_t b_lo = byte_perm(w[2], w[3], 0x5140u);
  const uint32_t b_hi = byte_perm(w[2], w[3], 0x7362u);
  o[0] = byte_perm(a_lo, b_lo, 0x5410u);
  o[1] = byte_perm(a_lo, b_lo, 0x7632u);
  o[2] = byte_perm(a_hi, b_hi, 0x5410u);
  o[3] = byte_perm(a_hi, b_hi, 0x7632u);
}

}  // namespace fp8sim::speed
