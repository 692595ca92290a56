#pragma once
// The fused per-group FP8-state AdamW step: COAT's kernel structure (one thread block per group
// of G = 128 elements of the FLATTENED parameter, the last group short), written once as
// FP8SIM_HD code so the CUDA kernel (gpu/optim) and the CPU loop (lowp_adamw_step_grouped) run
// the same operations in the same order:
//
//   for each element of the group:   m = dequantize(qm), v = dequantize(qv)   (the OLD group params)
//                                     adamw_element(p, g, m, v)                 (fp32, adamw_math.hpp)
//   group statistics of the NEW m, v: max |x|, min nonzero |x| over finite x   (order-free)
//   new group parameters:             de=coat: coat_expand_params -> (s, k, c)
//                                     plain:   plain_scales(amax_with_eps(max)) -> s
//   for each element:                 qm = fp8(transform(m)), qv = fp8(transform(v))
//                                     (de: expand_value; plain: x / s), RNE or stochastic
//
// Every piece is sim/quant's (scale.hpp, expand.hpp) or sim/formats' (fp8.hpp, philox.hpp), so
// the result is bit-identical to quantize()/dequantize() of the whole tensor
// (tests/test_optim_lowp.cpp pins it): the three-phase lowp_adamw_step and this loop are
// interchangeable.
//
// Scope: each moment FP8 (E4M3 or E5M2) in 1xG groups over the flattened tensor (same G for
// both), scale fp32 / pow2 / e8m0 / bf16 or de=coat; nearest or stochastic rounding. Per-tensor
// scaling (te-fp8, fp8lm), robust DE and 16-bit moments go through lowp_adamw_step.
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"
#include "sim/optim/adamw_math.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/scale.hpp"

// On the host the per-element pieces are forced inline so the CPU group loop can vectorize
// (nvcc inlines FP8SIM_HD functions already).
#if defined(__CUDACC__)
#define FP8SIM_OPTIM_HD FP8SIM_HD
#else
#define FP8SIM_OPTIM_HD inline __attribute__((always_inline))
#endif

namespace fp8sim::optim {

// Per-moment constants of a launch (host: group_moment_consts() in lowp_adamw.hpp).
struct GroupMomentConsts {
  int format;         // 0 = E4M3, 1 = E5M2 (storage)
  bool expand;        // de=coat
  ScaleConsts scale;  // plain scaling: fmax, mode, eps, eps_add
  float fmax_target;  // de: the ratio bound's format max
  bool saturate;      // SATFINITE
  float sat_bound;    // scaled magnitudes above this are counted as saturated: sim/quant's
                      // saturation_bound(format), where rounding to nearest leaves the format's
                      // range (464 for E4M3); bookkeeping only
  bool stochastic;    // stochastic rounding
  uint64_t key;       // Philox key of this step's rounding stream (state_rounding_key)
};

// A group's parameters. de: e = {k, c, s}; plain: e.s = stored (dequantizing) scale and
// s_quant = the divisor used to encode (they differ only for scale=bf16).
struct GroupParams {
  ExpandParams e;
  float s_quant = 1.0f;
};

// Code -> fp32 state value with the group's parameters (what dequantize() computes).
FP8SIM_OPTIM_HD float group_decode(uint8_t code, const GroupParams& gp, const GroupMomentConsts& mc) {
  const float q = decode_fp8(code, mc.format);
  return mc.expand ? compress_value(q, gp.e) : mul_rn(q, gp.e.s);
}

FP8SIM_OPTIM_HD GroupParams group_params_from_stats(const GroupStatBits& s, const GroupMomentConsts& mc) {
  GroupParams gp;
  const float absmax = group_absmax_value(s);
  if (mc.expand) {
    gp.e = coat_group_expand_params(absmax, group_absmin_value(s), mc.scale.fmax, mc.fmax_target, mc.scale.eps,
                                    mc.scale.eps_add == EpsAdd::Fp64);
  } else {
    float s_quant, s_stored;
    plain_scales_common(amax_with_eps(absmax, mc.scale), mc.scale, s_quant, s_stored);
    gp.e = ExpandParams{1.0f, 1.0f, s_stored};
    gp.s_quant = s_quant;
  }
  return gp;
}

// fp32 state value -> code with the group's NEW parameters. `index` = flat element index in the
// parameter (the Philox counter, independent of the launch shape). `saturated` is set when a
// finite x's scaled magnitude exceeds mc.sat_bound (clamping or overflow changed the code).
FP8SIM_OPTIM_HD uint8_t group_encode(float x, const GroupParams& gp, const GroupMomentConsts& mc, uint64_t index,
                                     bool& saturated) {
  const float v = mc.expand ? expand_value(x, gp.e) : div_rn(x, gp.s_quant);
  saturated = is_finite_bits(f32_bits(x)) && dmath::abs_bits(v) > mc.sat_bound;
  if (mc.stochastic) return encode_fp8_stochastic(v, mc.format, mc.saturate, philox_word(mc.key, index));
  return encode_fp8(v, mc.format, mc.saturate);
}

// Counts the CPU reference keeps per quantization (bookkeeping only; a kernel may ignore them).
struct GroupCounts {
  int saturated = 0;  // finite values clamped to fmax
  int underflow = 0;  // finite nonzero values whose code is +-0
};

// One group of n elements starting at flat index idx0. p, g, qm, qv point at the group's first
// element; pm, pv hold the group's parameters (read, then overwritten with the new ones);
// m_buf, v_buf are n floats of scratch (registers / shared memory on the GPU).
FP8SIM_HD void fp8_adamw_group_step(float* p, const float* g, uint8_t* qm, uint8_t* qv, GroupParams& pm,
                                    GroupParams& pv, int n, uint64_t idx0, const AdamwStepConsts& c,
                                    const GroupMomentConsts& cm, const GroupMomentConsts& cv, float* m_buf,
                                    float* v_buf, GroupCounts& count_m, GroupCounts& count_v) {
  // Phases as separate simple loops (same per-element operations as one fused loop; the group
  // statistics are order-free), so a CPU compiler can vectorize each of them.
  for (int i = 0; i < n; ++i) m_buf[i] = group_decode(qm[i], pm, cm);
  for (int i = 0; i < n; ++i) v_buf[i] = group_decode(qv[i], pv, cv);
  for (int i = 0; i < n; ++i) adamw_element(p[i], g[i], m_buf[i], v_buf[i], c);
  GroupStatBits sm, sv;
  for (int i = 0; i < n; ++i) group_stat_add(sm, m_buf[i]);
  for (int i = 0; i < n; ++i) group_stat_add(sv, v_buf[i]);
  pm = group_params_from_stats(sm, cm);
  pv = group_params_from_stats(sv, cv);
  int sat_m = 0, sat_v = 0, under_m = 0, under_v = 0;
  for (int i = 0; i < n; ++i) {
    bool sat;
    qm[i] = group_encode(m_buf[i], pm, cm, idx0 + static_cast<uint64_t>(i), sat);
    sat_m += sat ? 1 : 0;
    const uint32_t a = f32_bits(m_buf[i]) & 0x7FFFFFFFu;
    under_m += (a != 0u && a < 0x7F800000u && (qm[i] & 0x7Fu) == 0u) ? 1 : 0;
  }
  for (int i = 0; i < n; ++i) {
    bool sat;
    qv[i] = group_encode(v_buf[i], pv, cv, idx0 + static_cast<uint64_t>(i), sat);
    sat_v += sat ? 1 : 0;
    const uint32_t a = f32_bits(v_buf[i]) & 0x7FFFFFFFu;
    under_v += (a != 0u && a < 0x7F800000u && (qv[i] & 0x7Fu) == 0u) ? 1 : 0;
  }
  count_m.saturated += sat_m;
  count_v.saturated += sat_v;
  count_m.underflow += under_m;
  count_v.underflow += under_v;
}

}  // namespace fp8sim::optim
