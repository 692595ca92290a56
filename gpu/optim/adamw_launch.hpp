#pragma once
// Thin launch interface of gpu/optim/adamw.cu (plain data; no fmt, no exceptions).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sim/optim/adamw_math.hpp"
#include "sim/optim/lowp_group.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

struct Fp8MomentPtrs {
  uint8_t* codes;
  float* scales;
  float* k;
  float* c;
};

void launch_adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                       cudaStream_t stream);

// A moment stored one value per element (the elementwise-state step): a 16-bit value (bf16/fp16)
// without a scale, a 16-bit value with one per-tensor scale, or an FP8 code with one per-tensor
// scale. Scaled kinds follow the per-tensor quantizer: the scale comes from the finite amax of the
// whole new moment (plain_scales), 16-bit values are divided by it with div_rn (or multiplied by
// its exact reciprocal where it is a power of two: the same result), FP8 values with apply_scale's
// quotient.
enum class ElemKind : int { Pass16 = 0, Scaled16 = 1, Fp8 = 2 };
struct ElemMoment {
  void* codes = nullptr;   // 2 bytes (16-bit kinds) or 1 byte per element
  float* scale = nullptr;  // scaled kinds: one float, the old scale on entry, the new one on return
  ElemKind kind = ElemKind::Pass16;
  int format = 0;  // gpu_format_code: 0 E4M3, 1 E5M2, 2 BF16, 3 FP16
  bool saturate = true;
  bool stochastic = false;  // FP8: stochastic rounding keyed on (seed, element index)
  uint64_t seed = 0;
  ScaleConsts sc{};  // scaled kinds
};
// Words of device workspace launch_adamw_elementwise needs when a moment is scaled.
constexpr int kElemWsWords = 8;
// One AdamW step over n elements with elementwise moments: a pass computing the new moments' amax
// (only when a moment is scaled; its last block writes the new scales) and the fused step.
void launch_adamw_elementwise(float* p, const float* g, const ElemMoment& m, const ElemMoment& v, size_t n,
                              const optim::AdamwStepConsts& c, uint32_t* ws, cudaStream_t stream);
// group_size <= 128.
void launch_adamw_fp8_grouped(float* p, const float* g, Fp8MomentPtrs m, Fp8MomentPtrs v, size_t n, int group_size,
                              const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                              const optim::GroupMomentConsts& cv, cudaStream_t stream);

// Test hooks of the fused kernel's exact shortcuts (gpu/optim/adamw.cu).
// While counting is on, every fused launch adds how many elements took each path to 4 device
// counters: {dequantize via the mantissa table, dequantize reference, requantize guarded,
// requantize reference}; adamw_path_counts synchronizes, reads them and resets them to 0.
void adamw_path_counting(bool on);
// Which exact shortcuts the fused kernel may take (bit 0: dequantize via the mantissa table, bit 1:
// guarded requantize; default 3 = both), the shape for DE groups of 65..128 elements (wide: 16
// lanes x 8 elements, the default; else 32 x 4), the wide kernel's __launch_bounds__ minimum
// blocks per SM (2 or 3; default 2) and whether the kernel compiled without element-wise paths may
// run (full, the default): it is instantiated for G = 128 only (16 x 8 with 2 blocks per SM, and
// 32 x 4), and taken when n is a multiple of G and every pointer is aligned; for tests and timing
// comparisons (results are identical).
void adamw_fast_paths(int mask, int min_blocks, bool wide = true, bool full = true);
// Whether the last fused launch took that kernel (tests).
bool adamw_last_launch_full();
void adamw_path_counts(unsigned long long out[4]);
// decode_table vs compress_value for every code and each of the params: out = {mismatches,
// table-eligible (params, code) pairs}.
void check_decode_table(const ExpandParams* params, int n_params, int fmt, unsigned long long out[2]);
// encode_guarded vs encode_fp8(expand_value(x)) for x[i] with params[i / per]: out = {mismatches
// among guarded elements, guarded elements, elements flagged for the reference path}.
void check_encode_guarded(const float* x, const ExpandParams* params, int64_t n, int per,
                          const optim::GroupMomentConsts& mc, unsigned long long out[3]);
// Largest lg2.approx absolute error over [1, 2) and ex2.approx relative error over [-21, 16],
// every float (what the guarded requantization's bound assumes: at most 2^-21 each).
void mufu_max_errors(double out[2]);

}  // namespace fp8sim::gpu::detail
