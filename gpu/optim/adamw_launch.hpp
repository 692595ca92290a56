#pragma once
// Thin launch interface of gpu/optim/adamw.cu (plain data; no fmt, no exceptions).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sim/optim/adamw_math.hpp"
#include "sim/optim/lowp_group.hpp"

namespace fp8sim::gpu::detail {

struct Fp8MomentPtrs {
  uint8_t* codes;
  float* scales;
  float* k;
  float* c;
};

void launch_adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                       cudaStream_t stream);
void launch_adamw_bf16_moments(float* p, const float* g, uint16_t* m, uint16_t* v, size_t n,
                               const optim::AdamwStepConsts& c, bool saturate_m, bool saturate_v, cudaStream_t stream);
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
