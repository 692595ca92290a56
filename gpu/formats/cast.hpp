#pragma once
// Device casts matching sim/formats/cast.hpp bit for bit. Pointers are device pointers; the
// float input must be 16-byte aligned (cudaMalloc'd buffers are). Launches are asynchronous on
// the given stream.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fp8sim::gpu {

struct CastParams {
  bool e4m3 = true;
  int small_format = 0;  // gpu_format_code of E2M1, E2M3 or E3M2 (one code per byte, low bits); 0: e4m3 decides
  bool saturate = true;
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t offset = 0;  // global index of element 0
};

void cast_f32_to_fp8_cuda(const float* d_in, uint8_t* d_out, size_t n, const CastParams& p, cudaStream_t stream);
void cast_16_to_fp8_cuda(const uint16_t* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                         cudaStream_t stream);
// The 4- and 6-bit formats (p.small_format), fp32 or bf16 input, one code per byte as
// sim/formats/cast.hpp writes them (gpu/quant/quantize_lowbit.cu: the quantizers' table encoder).
void cast_to_small_cuda(const void* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                        cudaStream_t stream);
void cast_fp8_to_f32_cuda(const uint8_t* d_in, float* d_out, size_t n, bool e4m3, cudaStream_t stream);

}  // namespace fp8sim::gpu
