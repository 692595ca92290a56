#pragma once
// Dynamic Range Expansion (COAT: Xi et al., "COAT: Compressing Optimizer states and Activation for Memory-efficient FP8
// Training", ICLR 2025), as FP8SIM_HD building blocks that the CPU reference (quantize.cpp) and the CUDA kernels
// (gpu/quant) call alike, so both produce the same bits. All arithmetic is correctly rounded fp32 (plus one fp64 add
// for COAT's epsilon, exactly as COAT's kernel does), and pow/log2 come from dmath.hpp.
//
// Per group, from its maximum magnitude `absmax` and its minimum NONZERO magnitude `absmin`
// (both over finite elements; absmin = 0 when the group has no nonzero element):
//
// coat mode (COAT's kernel fp8_adamw_expand_cuda_kernel.cu, step by step):
//   max = float(double(absmax) + eps)     min = float(double(absmin) + eps)      eps = 1e-30
//   r = max / min          c = sqrt(max) * sqrt(min)
//   k = floor(log2(B) / log2(r) * 16) / 16          B = fmax_target^2 / 2 (100352 for E4M3),
//                                                   no clamp: k < 1 happens, k = +Inf when r = 1
//   s = pow(max / c, k) / fmax
//   quantize:   q = fp8( sign(x) * pow(|x| / c, k) / s )
//   dequantize: y = sign(q*s) * pow(|q*s|, 1/k) * c        (1/k is an fp32 division)
// A group without a finite nonzero element (all zeros, NaN or +-Inf: absmax 0) has nothing to
// expand and gets k = c = s = 1, plain scaling with scale 1: zeros stay exact zeros, NaN gives
// the NaN code and NaN back, +-Inf saturates to +-fmax, as under a plain spec. COAT's kernel
// gets r = 1 and k = +Inf there and dequantizes zeros to pow(0, 1/k) * c = c = 1e-30 (its
// epsilon, through C99's pow(0, 0) = 1), and NaN codes to 1e-30 too; the codes agree, only that
// group's stored k, c, s and dequantized values differ. Other degenerate groups are reproduced,
// not fixed: a group of one nonzero magnitude (r = 1: constant, a single element, one value among
// zeros) gets k = +Inf and whatever C99 pow gives (see tests), as the kernel does.
// The group minimum: de_min=nonzero (the default) takes the minimum nonzero magnitude, what the
// formulas intend. de_min=kernel (the coat-opt preset) reproduces COAT's kernel instead
// (coat_kernel_group_min below): its reduction skips only zeros ARRIVING from other lanes, so a
// lane whose own value is 0 hides every value merged into it (a group whose first element is 0
// gets min 0), and its block-level step starts idle lanes at 1e9, which caps the minimum at 1e9.
//
// robust mode (fp8sim): the same expansion, made safe and never worse than plain scaling:
//   all-zero group          -> k = 1, c = 1, s = 1 (codes 0, exact)
//   r == 1 (constant, single element), k not finite or <= 0, s not finite or 0
//                           -> fallback k = 1, c = 1, s = absmax / fmax (plain absmax scaling)
//   otherwise both candidates are quantized and the one with the smaller sum of squared errors
//   wins (ties go to the fallback). The sums are computed in fp64 over a fixed contiguous
//   bisection tree (see sq_err_tree_order below) so that every backend decides identically.
//   No epsilon is added in robust mode (zero groups are handled explicitly).
#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/dmath.hpp"

namespace fp8sim {

constexpr int kExpandMin = 16;        // k is a multiple of 1/16 (COAT's expand_min)
constexpr double kCoatDeEps = 1e-30;  // COAT's QUANT_MIN_VAL in the expansion kernel

struct ExpandParams {
  float k = 1.0f;  // exponent
  float c = 1.0f;  // centre sqrt(max)*sqrt(min)
  float s = 1.0f;  // scale of the expanded values
};

// COAT adds its epsilons in double precision on a float (`float + 1e-30` promotes to double,
// the result is stored back to float): reproduce that exactly.
FP8SIM_HD float add_eps_fp64(float v, double eps) { return static_cast<float>(static_cast<double>(v) + eps); }

// B = fmax^2 / 2 for the target format, in fp32 (exact for E4M3 and E5M2).
FP8SIM_HD float expand_ratio_bound(float fmax_target) { return div_rn(mul_rn(fmax_target, fmax_target), 2.0f); }

// k = floor(log2(B) / log2(r) * 16) / 16, in fp32 steps.
FP8SIM_HD float expand_exponent(float ratio, float ratio_bound) {
  const float q = div_rn(dmath::log2_det(ratio_bound), dmath::log2_det(ratio));
  return div_rn(dmath::floor_det(mul_rn(q, static_cast<float>(kExpandMin))), static_cast<float>(kExpandMin));
}

// coat mode parameters (formulas in the header comment). eps: 1e-30 in COAT.
FP8SIM_HD ExpandParams coat_expand_params(float absmax, float absmin, float fmax_store, float fmax_target,
                                          double eps = kCoatDeEps) {
  const float maxv = add_eps_fp64(absmax, eps);
  const float minv = add_eps_fp64(absmin, eps);
  ExpandParams p;
  const float ratio = div_rn(maxv, minv);
  p.c = mul_rn(sqrt_rn(maxv), sqrt_rn(minv));
  p.k = expand_exponent(ratio, expand_ratio_bound(fmax_target));
  p.s = div_rn(dmath::pow_det(div_rn(maxv, p.c), p.k), fmax_store);
  return p;
}

// COAT's FP8 AdamW kernel reduces a group of 128 elements with 128 threads (4 warps): each lane
// starts from its own |x| (an idle lane, past the end of the tensor, from FLT_MAX); five
// shfl_down steps (16, 8, 4, 2, 1; a lane whose partner is past lane 31 reads itself) combine
// min = other > 0 ? fmin(min, other) : min; lane 0 of each warp publishes its result; warp 0 then
// repeats the five steps over the 4 warp results, its lanes 4..31 starting from 1e9. This is
// that reduction, lane by lane. Non-finite elements act as idle lanes (fp8sim keeps NaN and Inf
// out of every group statistic).
constexpr int kCoatKernelLanes = 128;
constexpr float kCoatKernelMinSentinel = 1e9f;

// Lane 0's result of the five steps, left in mn[0] (the other entries are scratch). Lane 0 reads
// only lanes 0..15 after step 16, those read lanes 0..7 after step 8, and so on, and none of them
// has its partner past lane 31: so each step updates lanes [0, off) in place from [off, 2 off).
FP8SIM_HD void coat_kernel_warp_min(float (&mn)[32]) {
  for (int off = 16; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l) {
      const float other = mn[l + off];
      mn[l] = other > 0.0f ? (other < mn[l] ? other : mn[l]) : mn[l];
    }
}

// x: the group's n <= 128 elements in order.
FP8SIM_HD float coat_kernel_group_min(const float* x, int n) {
  float warp_min[4];
  for (int w = 0; w < 4; ++w) {
    float mn[32];
    for (int l = 0; l < 32; ++l) {
      const int i = 32 * w + l;
      const uint32_t a = i < n ? (f32_bits(x[i]) & 0x7FFFFFFFu) : 0x7F800000u;
      mn[l] = a < 0x7F800000u ? f32_from_bits(a) : f32_from_bits(0x7F7FFFFFu);
    }
    coat_kernel_warp_min(mn);
    warp_min[w] = mn[0];
  }
  float mn[32];
  for (int l = 0; l < 32; ++l) mn[l] = l < 4 ? warp_min[l] : kCoatKernelMinSentinel;
  coat_kernel_warp_min(mn);
  return mn[0];
}

// coat mode's parameters of a group from its statistics, with the spec's epsilon added in fp64
// (COAT's CUDA kernel) or in fp32: the one entry point every backend calls.
FP8SIM_HD ExpandParams coat_group_expand_params(float absmax, float absmin, float fmax_store, float fmax_target,
                                                double eps, bool eps_fp64) {
  if (!(absmax > 0.0f)) return ExpandParams{};  // no finite nonzero element: k = c = s = 1
  if (eps_fp64) return coat_expand_params(absmax, absmin, fmax_store, fmax_target, eps);
  const float e32 = static_cast<float>(eps);
  return coat_expand_params(add_rn(absmax, e32), add_rn(absmin, e32), fmax_store, fmax_target, 0.0);
}

// The plain-scaling fallback of robust mode, expressed as expansion parameters (k = c = 1).
FP8SIM_HD ExpandParams robust_fallback_params(float absmax, float fmax_store) {
  ExpandParams p;
  p.k = 1.0f;
  p.c = 1.0f;
  p.s = absmax == 0.0f ? 1.0f : div_rn(absmax, fmax_store);
  if (p.s == 0.0f) p.s = f32_from_bits(1u);  // amax below fmax * 2^-150: smallest positive scale
  return p;
}

// robust mode's expansion candidate; `ok` is false when only the fallback is valid (all-zero,
// constant or single-element group, or a non-finite / zero k or s).
FP8SIM_HD ExpandParams robust_expand_candidate(float absmax, float absmin, float fmax_store, float fmax_target,
                                               bool& ok) {
  ExpandParams p;
  ok = false;
  if (!(absmax > 0.0f) || !(absmin > 0.0f)) return p;
  const float ratio = div_rn(absmax, absmin);
  if (!(ratio > 1.0f)) return p;
  p.c = mul_rn(sqrt_rn(absmax), sqrt_rn(absmin));
  p.k = expand_exponent(ratio, expand_ratio_bound(fmax_target));
  if (!(p.k > 0.0f) || !is_finite_bits(f32_bits(p.k))) return p;
  p.s = div_rn(dmath::pow_det(div_rn(absmax, p.c), p.k), fmax_store);
  ok = p.s > 0.0f && is_finite_bits(f32_bits(p.s));
  return p;
}

// The value handed to the FP8 encoder: sign(x) * pow(|x| / c, k) / s.
FP8SIM_HD_INLINE float expand_value(float x, const ExpandParams& p) {
  const float mag = dmath::pow_det(div_rn(dmath::abs_bits(x), p.c), p.k);
  return div_rn(dmath::neg_if(mag, dmath::sign_bit(x)), p.s);
}

// Dequantize one decoded code value q: sign(q*s) * pow(|q*s|, 1/k) * c.
FP8SIM_HD_INLINE float compress_value(float q, const ExpandParams& p) {
  const float qs = mul_rn(q, p.s);
  const float mag = dmath::pow_det(dmath::abs_bits(qs), div_rn(1.0f, p.k));
  return mul_rn(dmath::neg_if(mag, dmath::sign_bit(qs)), p.c);
}

// One squared-error term of robust mode's comparison: (double(x) - double(y))^2 in fp64;
// 0 for a non-finite x (such elements are excluded from group statistics).
FP8SIM_HD double sq_err_term(float x, float y) {
  const double d = static_cast<double>(x) - static_cast<double>(y);
  return is_finite_bits(f32_bits(x)) ? d * d : 0.0;  // a select, so loops over it vectorize
}
// sq_err_tree_order: a group of n terms is summed as a contiguous bisection tree over
// P = next power of two >= n, zero-padded: sum(lo, P) = sum(lo, P/2) + sum(lo + P/2, P/2).
// (On a GPU: each thread adds its contiguous elements pairwise, then shfl_xor 1, 2, 4, ...)
// In place over v[0..n): level w = 1, 2, 4, ... adds v[i + w] into v[i] for i = 0, 2w, 4w, ...
// (absent right partners are the zero padding, and x + 0 == x). Returns v[0] (0 for n == 0).
FP8SIM_HD double sq_err_tree_sum(double* v, int64_t n) {
  if (n <= 0) return 0.0;
  for (int64_t w = 1; w < n; w *= 2)
    for (int64_t i = 0; i + w < n; i += 2 * w) v[i] = v[i] + v[i + w];
  return v[0];
}

}  // namespace fp8sim
