#pragma once
// The per-element AdamW update, shared bit-for-bit by the CPU reference (sim/optim) and the
// fused CUDA kernel (gpu/optim). FP8SIM_HD code: correctly rounded + - * / sqrt and, where the
// emulated implementation itself fuses, fma_rn. No libm: everything that needs pow() (bias
// corrections) is a per-step constant computed once on the host (adamw_consts.hpp) and passed
// in as fp32, so both sides see the same bits.
//
// Two update rules, mathematically identical, different in rounding:
//
// * Torch: torch.optim.AdamW (decoupled weight decay) as its default CPU implementation runs
//   it (the for-loop `_single_tensor_adam`; on the CPU `foreach=True` falls back to the same
//   per-tensor kernels and gives the same bits). Operation by operation, fp32:
//     p  = p * decay                              decay = fp32(1 - lr*wd)     (param.mul_)
//     m  = fma(1-b1, g - m, m)                    (exp_avg.lerp_(g, 1-b1): ATen's CPU lerp is
//                                                  a vectorized fmadd for weight < 0.5)
//     v  = fma((1-b2)*g, g, v*b2)                 (exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2):
//                                                  ATen's addcmul is fmadd(value*t1, t2, self))
//     d  = sqrt(v) / bc2_sqrt + eps               (sqrt, div_, add_)
//     p  = p + (neg_step_size * m) / d            (param.addcdiv_(m, d, value=-lr/bc1): ATen
//                                                  computes self + value*t1/t2 left to right)
//   Each step was confirmed bit-exact against torch 2.15 on an AVX2 CPU, except sqrt: ATen's
//   CPU sqrt calls MKL's vsSqrt in VML_HA mode, which is NOT correctly rounded (about a third
//   of random inputs come back 1 ulp off). We use the correctly rounded sqrt; that 1-ulp
//   difference in d is the only source of mismatch (bounded by tests/test_optim_adamw.cpp).
//
// * Coat: the formula of COAT's FP8 AdamW kernel (its fp8_adamw_expand kernel; docs/numerics.md), as written, with no
//   contraction (COAT's kernel is compiled with nvcc's default --fmad=true, so its own bits
//   depend on which products nvcc fused; the formula as written is the reproducible contract):
//     m = b1*m + (1-b1)*g
//     v = b2*v + ((1-b2)*g)*g
//     p = p - lr * ( m / ((sqrt(v)/bc2_sqrt + eps) * bc1) + wd*p )
//   with 1-b1, 1-b2 computed in fp32 from the fp32 betas as the kernel does.
//
// A NaN result (p, m or v) is stored as the one quiet NaN 0x7FC00000 (canonical_nan): the CPU's
// and the GPU's arithmetic produce different NaN bits, so NaN payloads are outside both the
// torch-exactness and the CPU-GPU contract, and this one value is what both sides store.
//
// The low-precision-state optimizers dequantize m and v, call adamw_element with the SAME rule,
// and requantize the new (unquantized) m and v: the quantization error of this step only
// reaches the parameters from the next step on (docs/numerics.md).
#include "sim/common/hd.hpp"

#if defined(__CUDACC__)
#define FP8SIM_ADAMW_HD FP8SIM_HD
#else
#define FP8SIM_ADAMW_HD inline __attribute__((always_inline))  // lets the CPU loops vectorize
#endif

namespace fp8sim::optim {

enum class UpdateRule : int { Torch = 0, Coat = 1 };

// Per-step fp32 constants of one parameter (one param group at one step). Built on the host
// by make_step_consts(); plain data so it can be passed by value to a kernel.
struct AdamwStepConsts {
  UpdateRule rule;
  // Torch rule
  float decay;          // fp32(1 - lr*wd)
  float neg_step_size;  // fp32(-(lr / (1 - b1^t))), t the step count after this step
  // Both rules
  float beta1;            // fp32(b1)
  float one_minus_beta1;  // Torch: fp32(1 - b1) from doubles; Coat: 1.0f - fp32(b1)
  float beta2;            // fp32(b2)
  float one_minus_beta2;  // Torch: fp32(1 - b2) from doubles; Coat: 1.0f - fp32(b2)
  float bc2_sqrt;         // Torch: fp32(sqrt(1 - b2^t)) from doubles; Coat: sqrt_rn(1.0f - fp32(b2)^t)
  float eps;
  // Coat rule
  float bc1;  // 1.0f - fp32(b1)^t
  float lr;
  float wd;
};

// A NaN result is stored as the quiet NaN 0x7FC00000 whatever its sign and payload: IEEE 754
// leaves those to the hardware (an x86 invalid operation gives 0xFFC00000 and propagates an
// operand's payload; a CUDA core gives 0x7FFFFFFF), and a NaN's bits reach the stored state
// (16-bit moments keep the top of its payload, FP8 codes its sign). One pattern on both sides.
FP8SIM_ADAMW_HD float canonical_nan(float x) { return x != x ? f32_from_bits(0x7FC00000u) : x; }

// The moments' part of each rule alone (what a per-tensor state scale needs before the step: the
// amax of the new moments); adamw_element_* compute m and v with these, so both give the same bits.
FP8SIM_ADAMW_HD void adamw_moments_torch(float g, float& m, float& v, const AdamwStepConsts& c) {
  m = canonical_nan(fma_rn(c.one_minus_beta1, add_rn(g, -m), m));
  v = canonical_nan(fma_rn(mul_rn(c.one_minus_beta2, g), g, mul_rn(v, c.beta2)));
}
FP8SIM_ADAMW_HD void adamw_moments_coat(float g, float& m, float& v, const AdamwStepConsts& c) {
  m = canonical_nan(add_rn(mul_rn(c.beta1, m), mul_rn(c.one_minus_beta1, g)));
  v = canonical_nan(add_rn(mul_rn(c.beta2, v), mul_rn(mul_rn(c.one_minus_beta2, g), g)));
}

// torch.optim.AdamW's CPU for-loop step for one element (see the header comment).
FP8SIM_ADAMW_HD void adamw_element_torch(float& p, float g, float& m, float& v, const AdamwStepConsts& c) {
  p = mul_rn(p, c.decay);
  adamw_moments_torch(g, m, v, c);
  const float denom = add_rn(div_rn(sqrt_rn(v), c.bc2_sqrt), c.eps);
  p = canonical_nan(add_rn(p, div_rn(mul_rn(c.neg_step_size, m), denom)));
}

// COAT's FP8 AdamW kernel formula for one element (see the header comment).
FP8SIM_ADAMW_HD void adamw_element_coat(float& p, float g, float& m, float& v, const AdamwStepConsts& c) {
  adamw_moments_coat(g, m, v, c);
  const float denom = mul_rn(add_rn(div_rn(sqrt_rn(v), c.bc2_sqrt), c.eps), c.bc1);
  const float update = add_rn(div_rn(m, denom), mul_rn(c.wd, p));
  p = canonical_nan(add_rn(p, -mul_rn(c.lr, update)));
}

// The new moments of one element under the rule in `c` (p is not needed).
FP8SIM_ADAMW_HD void adamw_moments(float g, float& m, float& v, const AdamwStepConsts& c) {
  if (c.rule == UpdateRule::Torch) {
    adamw_moments_torch(g, m, v, c);
  } else {
    adamw_moments_coat(g, m, v, c);
  }
}

// One element under the rule in `c` (uniform across a launch, so the branch does not diverge).
FP8SIM_ADAMW_HD void adamw_element(float& p, float g, float& m, float& v, const AdamwStepConsts& c) {
  if (c.rule == UpdateRule::Torch) {
    adamw_element_torch(p, g, m, v, c);
  } else {
    adamw_element_coat(p, g, m, v, c);
  }
}

}  // namespace fp8sim::optim
