#pragma once
// The tensor-core GEMM model (sim/gemm/tc_gemm.hpp) on the GPU's CUDA cores, bit for bit the CPU's:
// for shapes the CPU model would take minutes over. Pointers are device pointers in tc_gemm's
// layouts; the launch is asynchronous on `stream`.
#include <cuda_runtime.h>

#include <cstdint>

#include "sim/gemm/tc_gemm.hpp"

namespace fp8sim::gpu {

// Throws fp8sim::Error for the configurations tc_gemm refuses.
void tc_gemm_cuda(const uint8_t* x, const uint8_t* w, const float* x_scales, const float* w_scales, float* y, int64_t m,
                  int64_t n, int64_t k, const gemm::TcGemmConfig& config, cudaStream_t stream);

}  // namespace fp8sim::gpu
