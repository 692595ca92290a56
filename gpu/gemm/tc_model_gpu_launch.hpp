#pragma once
// The nvcc-side entry of the tensor-core model on the GPU (no fmt): gpu/gemm/tc_model_gpu.cpp
// validates a TcGemmConfig and fills this.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8sim::gpu {

struct TcGemmLaunch {
  int tx = 0, tw = 0;    // operand types: 0 E4M3, 1 E5M2, 2 BF16 (both)
  int scaling = 1;       // tc_gemm.hpp's codes
  int64_t interval = 0;  // elements of K per block
  bool y_bf16 = false;
};

// x, w, xs, ws, y: device pointers in tc_gemm's layouts.
void tc_gemm_launch(const void* x, const void* w, const float* xs, const float* ws, float* y, int64_t m, int64_t n,
                    int64_t k, const TcGemmLaunch& p, cudaStream_t stream);

}  // namespace fp8sim::gpu
