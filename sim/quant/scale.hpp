#pragma once
// Plain (non-expanding) scale computation, FP8SIM_HD so the CPU reference (quantize.cpp) and
// the CUDA kernels (gpu/quant) compute every per-group scale with the same operations.
// nvcc-safe: no fmt, no exceptions; scale_consts() (host only) is defined in quantize.cpp.
//
// Per group, from amax = max |x| over the finite elements:
//   amax_eps = amax                                  eps == 0
//            = amax + float(eps)                     eps_add fp32 (COAT's Triton kernels)
//            = float(double(amax) + eps)             eps_add fp64 (COAT's CUDA kernels)
//   amax_eps == 0 (all-zero group)       -> s_quant = s_stored = 1
//   t = amax_eps / fmax                  (fp32 division)
//   Fp32:  s = t  (t == 0, i.e. amax below fmax * 2^-150: s = 2^-149)
//   Bf16:  s_quant = t as above, s_stored = bf16_rne(s_quant) (at least 2^-133, the smallest
//          bf16 subnormal): COAT's Triton kernels divide by the fp32 scale and store it as bf16
//   Pow2:  TransformerEngine's power-of-two current scaling: m = fmax / amax_eps in fp32
//          (FLT_MAX where that overflows), rounded down to a power of two by dropping its
//          mantissa; s = 1/m (exact), so s lies in [2^-127, 2^120]. Where t is a normal number
//          (amax_eps >= fmax * 2^-126) s is also the smallest power of two >= t; below that t
//          loses bits to subnormal rounding and the two rules part (amax 2.6331075e-36 gives
//          2^-126 here, where the smallest power of two >= t is 2^-127).
//   E8M0:  as Pow2, exponent clamped to [-127, 127] (TE's MXFP8 rounds the scale up the same
//          way; OCP MX's reference floor rule would saturate instead)
//   None:  unscaled 16-bit storage (bf16 / fp16 pass-through): s = 1
// Quantize: q = encode(x / s_quant); dequantize: decode(q) * s_stored.
#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {

struct ScaleConsts {
  float fmax = 448.0f;  // largest finite value of the storage format (65504 for fp16, bf16's max)
  ScaleMode mode = ScaleMode::Fp32;
  double eps = 0.0;
  EpsAdd eps_add = EpsAdd::Fp32;
};

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
  if (c.eps == 0.0) return amax;
  return c.eps_add == EpsAdd::Fp64 ? static_cast<float>(static_cast<double>(amax) + c.eps)
                                   : add_rn(amax, static_cast<float>(c.eps));
}

FP8SIM_HD void plain_scales(float amax_eps, const ScaleConsts& c, float& s_quant, float& s_stored) {
  if (amax_eps == 0.0f || c.mode == ScaleMode::None) {
    s_quant = s_stored = 1.0f;
    return;
  }
  const float t = div_rn(amax_eps, c.fmax);
  const float tiny = f32_from_bits(1u);  // 2^-149
  if (c.mode == ScaleMode::Fp32) {
    s_quant = s_stored = t == 0.0f ? tiny : t;
  } else if (c.mode == ScaleMode::Bf16) {
    s_quant = t == 0.0f ? tiny : t;
    const float b = bf16_to_f32(f32_to_bf16_rne(s_quant));
    s_stored = b == 0.0f ? f32_from_bits(0x00010000u) : b;  // at least the smallest bf16 subnormal
  } else if (c.mode == ScaleMode::Pow2) {
    const float m = div_rn(c.fmax, amax_eps);
    const int e = is_finite_bits(f32_bits(m)) ? floor_log2_f32(m) : 127;  // FLT_MAX's exponent
    s_quant = s_stored = pow2_exact(-e);
  } else {  // E8M0
    int e = t == 0.0f ? -127 : ceil_log2_f32(t);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    s_quant = s_stored = pow2_exact(e);
  }
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
