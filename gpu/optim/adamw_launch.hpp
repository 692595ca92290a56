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
// group_size <= 128.
void launch_adamw_fp8_grouped(float* p, const float* g, Fp8MomentPtrs m, Fp8MomentPtrs v, size_t n, int group_size,
                              const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                              const optim::GroupMomentConsts& cv, cudaStream_t stream);

}  // namespace fp8sim::gpu::detail
