#pragma once
// Plain (non-expanding) scale computation, FP8SIM_HD so the CPU reference (quantize.cpp) and
// the CUDA kernels (gpu/quant) compute every per-group scale with the same operations.
// nvcc-safe: no fmt, no exceptions; scale_consts() (host only) is defined in quantize.cpp.
//
// Per group, from amax = max |x| over the finite elements:
//   amax     = max(amax, amax_floor)             (DeepSeek-V3 / DeepGEMM: 1e-4; TE's amax_epsilon)
//   amax_eps = amax                                  eps == 0
//            = amax + float(eps)                     eps_add fp32 (COAT's Triton kernels)
//            = float(double(amax) + eps)             eps_add fp64 (COAT's CUDA kernels)
//   t = amax_eps / fmax, formed as scale_div says: IEEE division (ieee), amax_eps * RN(1/fmax)
//       (rcp: PyTorch's CUDA tensor / scalar, TE's MXFP8), or div.full.f32 (fdiv: Triton)
//   amax_eps == 0 (all-zero group)       -> s_quant = s_stored = 1 (E8M0: 2^-127, code 0)
//   Fp32:  s = t  (t == 0, i.e. amax below fmax * 2^-150: s = 2^-149)
//   Bf16:  s_quant = t as above, s_stored = bf16_rne(s_quant) (at least 2^-133, the smallest
//          bf16 subnormal): COAT's Triton kernels divide by the fp32 scale and store it as bf16
//   Pow2:  TransformerEngine's power-of-two current scaling: m = fmax / amax_eps in fp32
//          (FLT_MAX where that overflows), rounded down to a power of two by dropping its
//          mantissa; s = 1/m (exact), so s lies in [2^-127, 2^120]. Where t is a normal number
//          (amax_eps >= fmax * 2^-126) s is also the smallest power of two >= t (checked over
//          every positive fp32 amax for E4M3, E5M2, fp16 and bf16); below that t loses bits to
//          subnormal rounding and the two rules part (amax 2.6331075e-36 gives 2^-126 here, where
//          the smallest power of two >= t is 2^-127).
//   E8M0:  2^(code - 127) with the code from e8m0_code (mx rounding: rceil, floor, ceil, even)
//   None:  unscaled 16-bit storage (bf16 / fp16 pass-through): s = 1
//   apply=mul (TE current scaling): the multiplier m = fmax / amax_eps (FLT_MAX on overflow, 1
//          for a zero amax; pow2: rounded down) meets the elements and s_stored = RN(1/m)
// Quantize: q = encode(apply_scale(x)): x / s_quant (div), x * RN(1/s_quant) (rcp),
// div.full(x, s_quant) (fdiv), x * m (mul); dequantize: decode(q) * s_stored.
#include "sim/common/hd.hpp"
#include "sim/formats/divfull.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {

// 24 bytes, laid out without holes: the kernels take it by value inside their parameters, and a
// larger block of parameters costs the fast quantize kernels registers.
struct ScaleConsts {
  float fmax = 448.0f;  // largest finite value of the storage format (65504 for fp16, bf16's max)
  ScaleMode mode = ScaleMode::Fp32;
  EpsAdd eps_add = EpsAdd::Fp32;
  ScaleDiv scale_div = ScaleDiv::Ieee;
  Apply apply = Apply::Div;
  double eps = 0.0;
  float amax_floor = 0.0f;
  MxRound mx = MxRound::Rceil;
  uint8_t elem_mbits = 3;  // the storage format's stored mantissa bits (mx=even rounds at this width)
};
static_assert(sizeof(ScaleConsts) == 24, "ScaleConsts grew: see its comment");

// Host only (quantize.cpp): the constants of a validated spec.
ScaleConsts scale_consts(const QuantSpec& spec);

// 2^e exactly for -149 <= e <= 127 (subnormal powers included).
FP8SIM_HD float pow2_exact(int e) {
  return e >= -126 ? f32_from_bits(static_cast<uint32_t>(e + 127) << 23) : f32_from_bits(1u << (e + 149));
}

// The smallest e with 2^e >= t, for positive finite t (exact: compares bits).
FP8SIM_HD int ceil_log2_f32(float t) {
  const int e = floor_log2_f32(t);
  return f32_bits(pow2_exact(e)) == f32_bits(t) ? e : e + 1;
}

FP8SIM_HD float amax_with_eps(float amax, const ScaleConsts& c) {
  amax = amax < c.amax_floor ? c.amax_floor : amax;
  if (c.eps == 0.0) return amax;
  return c.eps_add == EpsAdd::Fp64 ? static_cast<float>(static_cast<double>(amax) + c.eps)
                                   : add_rn(amax, static_cast<float>(c.eps));
}

// amax_eps / fmax as the spec's scale_div forms it.
FP8SIM_HD float scale_quotient(float amax_eps, const ScaleConsts& c) {
  if (c.scale_div == ScaleDiv::Rcp) return mul_rn(amax_eps, div_rn(1.0f, c.fmax));
  if (c.scale_div == ScaleDiv::Fdiv) return div_full(amax_eps, c.fmax);
  return div_rn(amax_eps, c.fmax);
}

// The biased E8M0 exponent (0..254; 255 = NaN) of a group's scale, for amax_eps >= 0 finite.
//   rceil: t = amax_eps / fmax rounded UP to a power of two; t <= 2^-127 gives 2^-127 (code 0),
//          2^-127 < t < 2^-126 gives 2^-126 (TE's float_to_e8m0, torchao RCEIL).
//   floor: amax_eps's own exponent (-127 for zero and subnormals) minus elem_emax, at least -127.
//   ceil:  as floor, plus one when amax_eps is not a power of two (torchao CEIL).
//   even:  amax_eps rounded half-up at the element's mantissa width, then floor; a rounding that
//          reaches Inf gives the NaN scale (torchao EVEN).
FP8SIM_HD uint32_t e8m0_code(float amax_eps, const ScaleConsts& c) {
  if (c.mx == MxRound::Rceil) {
    const uint32_t b = f32_bits(scale_quotient(amax_eps, c));
    const uint32_t e = b >> 23, m = b & 0x7FFFFFu;
    if (e == 0u) return m > 0x400000u ? 1u : 0u;
    return (m != 0u && e < 254u) ? e + 1u : e;
  }
  // The element format's largest exponent and mantissa width: E4M3 (448 = 1.75 * 2^8) 8 and 3,
  // E5M2 (57344 = 1.75 * 2^15) 15 and 2, E2M1 (6 = 1.5 * 2^2) 2 and 1, E2M3 (7.5) 2 and 3, E3M2 (28) 4 and 2.
  const int elem_emax = floor_log2_f32(c.fmax);
  const int elem_mbits = c.elem_mbits;
  uint32_t b = f32_bits(amax_eps);
  if (c.mx == MxRound::Even) {
    b = (b + (1u << (22 - elem_mbits))) & 0xFF800000u;
    if (b >= 0x7F800000u) return 255u;
  }
  int p = static_cast<int>(b >> 23) - 127;
  if (c.mx == MxRound::Ceil && (b & 0x7FFFFFu) != 0u) p += 1;
  const int u = p - elem_emax;
  return static_cast<uint32_t>((u < -127 ? -127 : u) + 127);
}

// True when plain_scales_common below computes the spec's scales: the quotient an IEEE
// division or a product with RN(1/fmax), elements divided by the scale, E8M0 rounded up (rceil).
// The throughput kernels (GPU fast quantizers, the fused optimizer step) take only these: the
// general plain_scales costs them registers.
FP8SIM_HD bool plain_scales_common_ok(const ScaleConsts& c) {
  return c.scale_div != ScaleDiv::Fdiv && c.apply == Apply::Div && c.mx == MxRound::Rceil;
}

// plain_scales for the specs plain_scales_common_ok accepts (same bits, fewer branches):
// s_quant is the divisor.
FP8SIM_HD void plain_scales_common(float amax_eps, const ScaleConsts& c, float& s_quant, float& s_stored) {
  if (c.mode == ScaleMode::None) {
    s_quant = s_stored = 1.0f;
    return;
  }
  if (amax_eps == 0.0f) {  // E8M0: 2^-127 (code 0), what the rounding below gives for t = 0
    s_quant = s_stored = c.mode == ScaleMode::E8M0 ? f32_from_bits(0x00400000u) : 1.0f;
    return;
  }
  if (c.mode == ScaleMode::Pow2) {
    const float m = div_rn(c.fmax, amax_eps);
    const int e = is_finite_bits(f32_bits(m)) ? floor_log2_f32(m) : 127;  // FLT_MAX's exponent
    s_quant = s_stored = pow2_exact(-e);
    return;
  }
  const float t = c.scale_div == ScaleDiv::Rcp ? mul_rn(amax_eps, div_rn(1.0f, c.fmax)) : div_rn(amax_eps, c.fmax);
  if (c.mode == ScaleMode::E8M0) {  // t rounded up to a power of two in [2^-127, 2^127] (e8m0_code's rceil)
    int e = t == 0.0f ? -127 : ceil_log2_f32(t);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    s_quant = s_stored = pow2_exact(e);
  } else {
    s_quant = t == 0.0f ? f32_from_bits(1u) : t;  // 2^-149 when amax / fmax underflows
    if (c.mode == ScaleMode::Bf16) {
      const float b = bf16_to_f32(f32_to_bf16_rne(s_quant));
      s_stored = b == 0.0f ? f32_from_bits(0x00010000u) : b;  // at least the smallest bf16 subnormal
    } else {
      s_stored = s_quant;
    }
  }
}

// A group's scales from its amax (after amax_with_eps): `qv` is what meets each element (the
// divisor for apply=div / fdiv, the multiplier for apply=rcp / mul: apply_scale below), and
// `s_stored` the dequantizing scale as stored.
FP8SIM_HD void plain_scales(float amax_eps, const ScaleConsts& c, float& qv, float& s_stored) {
  if (plain_scales_common_ok(c)) {
    plain_scales_common(amax_eps, c, qv, s_stored);
    return;
  }
  if (c.mode == ScaleMode::None) {
    qv = s_stored = 1.0f;
    return;
  }
  if (c.apply == Apply::Mul) {  // TE: m = fmax / amax (FLT_MAX on overflow; pow2: rounded down)
    float m = 1.0f;
    if (amax_eps != 0.0f) {
      m = div_rn(c.fmax, amax_eps);
      if (!is_finite_bits(f32_bits(m))) m = f32_from_bits(0x7F7FFFFFu);
      if (c.mode == ScaleMode::Pow2) m = f32_from_bits(f32_bits(m) & 0xFF800000u);
    }
    qv = m;
    s_stored = div_rn(1.0f, m);
    return;
  }
  float s_quant;
  if (c.mode == ScaleMode::E8M0) {
    const uint32_t e = e8m0_code(amax_eps, c);
    s_quant = s_stored = e == 255u ? f32_from_bits(0x7FC00000u) : pow2_exact(static_cast<int>(e) - 127);
  } else if (amax_eps == 0.0f) {
    s_quant = s_stored = 1.0f;
  } else if (c.mode == ScaleMode::Pow2) {
    const float m = div_rn(c.fmax, amax_eps);
    const int e = is_finite_bits(f32_bits(m)) ? floor_log2_f32(m) : 127;  // FLT_MAX's exponent
    s_quant = s_stored = pow2_exact(-e);
  } else {
    const float t = scale_quotient(amax_eps, c);
    const float tiny = f32_from_bits(1u);  // 2^-149
    s_quant = t == 0.0f ? tiny : t;
    if (c.mode == ScaleMode::Bf16) {
      const float b = bf16_to_f32(f32_to_bf16_rne(s_quant));
      s_stored = b == 0.0f ? f32_from_bits(0x00010000u) : b;  // at least the smallest bf16 subnormal
    } else {
      s_stored = s_quant;
    }
  }
  qv = c.apply == Apply::Rcp ? div_rn(1.0f, s_quant) : s_quant;
}

// One element scaled for the encoder: x / qv, x * qv or div.full(x, qv) as the spec's apply says.
FP8SIM_HD float apply_scale(float x, float qv, const ScaleConsts& c) {
  if (c.apply == Apply::Div) return div_rn(x, qv);
  if (c.apply == Apply::Fdiv) return div_full(x, qv);
  return mul_rn(x, qv);
}

// NVFP4's two-level scales (scale=e4m3), in the order of TransformerEngine's reference quantizer
// (all fp32; fmax_e = the element format's largest value, 6 for E2M1):
//   tensor: S_enc = min(RN(448 * fmax_e / tensor_amax), FLT_MAX), 1 where that is 0; S_dec = RN(1 / S_enc)
//   group:  d = min(RN(RN(amax_g / fmax_e) * S_enc), 448) -> E4M3 (nearest even), e = its value;
//           stored (dequantizing) scale RN(e * S_dec); the elements meet the multiplier
//           min(RN(1 / stored), FLT_MAX).
struct Nvfp4TensorScale {
  float s_enc = 1.0f, s_dec = 1.0f;
};
FP8SIM_HD Nvfp4TensorScale nvfp4_tensor_scale(float tensor_amax, float fmax_e) {
  constexpr float kFltMax = 3.40282347e38f;
  Nvfp4TensorScale t;
  t.s_enc = div_rn(mul_rn(448.0f, fmax_e), tensor_amax);
  if (!(t.s_enc <= kFltMax)) t.s_enc = kFltMax;  // a zero amax gives +Inf
  if (t.s_enc == 0.0f) t.s_enc = 1.0f;
  t.s_dec = div_rn(1.0f, t.s_enc);
  return t;
}
// The multiplier the encoder applies for a stored (dequantizing) NVFP4 group scale: 1 / stored,
// FLT_MAX where that overflows (a group whose E4M3 scale underflowed to 0).
FP8SIM_HD float nvfp4_multiplier(float stored) {
  constexpr float kFltMax = 3.40282347e38f;
  const float mult = div_rn(1.0f, stored);
  return mult <= kFltMax ? mult : kFltMax;
}
// A group's scales in two halves around the E4M3 rounding (a GPU kernel rounds with the hardware
// converter where it is proven equal): the value to round, finite and in [0, 448], then the
// stored scale and the multiplier from the rounded value.
FP8SIM_HD float nvfp4_group_scale_value(float amax_g, float fmax_e, const Nvfp4TensorScale& t) {
  const float d = mul_rn(div_rn(amax_g, fmax_e), t.s_enc);
  return d <= 448.0f ? d : 448.0f;
}
FP8SIM_HD void nvfp4_group_scale_from(float e4m3, const Nvfp4TensorScale& t, float& mult, float& stored) {
  stored = mul_rn(e4m3, t.s_dec);
  mult = nvfp4_multiplier(stored);
}
FP8SIM_HD void nvfp4_group_scale(float amax_g, float fmax_e, const Nvfp4TensorScale& t, float& mult, float& stored) {
  const float d = nvfp4_group_scale_value(amax_g, fmax_e, t);
  nvfp4_group_scale_from(decode_fp8<E4M3Traits>(encode_fp8_rne<E4M3Traits>(d, true)), t, mult, stored);
}

// Group statistics over finite elements, as fp32 bits (non-negative floats order like their
// bits; max and min are exact in any reduction order, so every backend agrees).
struct GroupStatBits {
  uint32_t amax = 0u;           // max |x|
  uint32_t amin = 0x7F800000u;  // min nonzero |x|; 0x7F800000 when the group has none
};
FP8SIM_HD void group_stat_add(GroupStatBits& s, float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  const bool fin = a < 0x7F800000u;
  const uint32_t fa = fin ? a : 0u;
  s.amax = fa > s.amax ? fa : s.amax;
  const uint32_t nz = (fin && a != 0u) ? a : 0x7F800000u;
  s.amin = nz < s.amin ? nz : s.amin;
}
FP8SIM_HD void group_stat_merge(GroupStatBits& s, const GroupStatBits& o) {
  s.amax = o.amax > s.amax ? o.amax : s.amax;
  s.amin = o.amin < s.amin ? o.amin : s.amin;
}
FP8SIM_HD float group_absmax_value(const GroupStatBits& s) { return f32_from_bits(s.amax); }
FP8SIM_HD float group_absmin_value(const GroupStatBits& s) {
  return s.amin == 0x7F800000u ? 0.0f : f32_from_bits(s.amin);
}

}  // namespace fp8sim
