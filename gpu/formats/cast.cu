// Cast kernels: the same FP8SIM_HD scalar routines as sim/formats/cast.cpp, so the bits match.
#include "gpu/common/cuda_check.hpp"
#include "gpu/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"

namespace fp8sim::gpu {

namespace {

// 16 bytes in per thread per iteration (4 floats), grid-stride.
template <class T>
__global__ void cast_f32_to_fp8_kernel(const float* __restrict__ in, uint8_t* __restrict__ out, size_t n, bool sat,
                                       bool stochastic, uint64_t seed, uint64_t offset) {
  const size_t n4 = n / 4;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(in)[i];
    const float xs[4] = {v.x, v.y, v.z, v.w};
    uint32_t packed = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint8_t c = stochastic ? encode_fp8_sr<T>(xs[k], sat, philox_word(seed, offset + 4 * i + k))
                                   : encode_fp8_rne<T>(xs[k], sat);
      packed |= static_cast<uint32_t>(c) << (8 * k);
    }
    reinterpret_cast<uint32_t*>(out)[i] = packed;
  }
  // tail
  for (size_t i = 4 * n4 + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = stochastic ? encode_fp8_sr<T>(in[i], sat, philox_word(seed, offset + i)) : encode_fp8_rne<T>(in[i], sat);
}

template <class T, bool BF16>
__global__ void cast_16_to_fp8_kernel(const uint16_t* __restrict__ in, uint8_t* __restrict__ out, size_t n, bool sat,
                                      bool stochastic, uint64_t seed, uint64_t offset) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = BF16 ? bf16_to_f32(in[i]) : fp16_to_f32(in[i]);
    out[i] = stochastic ? encode_fp8_sr<T>(x, sat, philox_word(seed, offset + i)) : encode_fp8_rne<T>(x, sat);
  }
}

template <class T>
__global__ void cast_fp8_to_f32_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = decode_fp8<T>(in[i]);
}

int grid_for(size_t work, int block) {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const size_t want = (work + block - 1) / block;
  const size_t cap = static_cast<size_t>(sms) * 16;
  return static_cast<int>(want < cap ? (want > 0 ? want : 1) : cap);
}

}  // namespace

void cast_f32_to_fp8_cuda(const float* d_in, uint8_t* d_out, size_t n, const CastParams& p, cudaStream_t stream) {
  const int block = 256;
  const int grid = grid_for(n / 4 + 1, block);
  if (p.e4m3)
    cast_f32_to_fp8_kernel<E4M3Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
  else
    cast_f32_to_fp8_kernel<E5M2Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void cast_16_to_fp8_cuda(const uint16_t* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                         cudaStream_t stream) {
  const int block = 256;
  const int grid = grid_for(n, block);
  if (p.e4m3) {
    if (bf16) cast_16_to_fp8_kernel<E4M3Traits, true><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
    else cast_16_to_fp8_kernel<E4M3Traits, false><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
  } else {
    if (bf16) cast_16_to_fp8_kernel<E5M2Traits, true><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
    else cast_16_to_fp8_kernel<E5M2Traits, false><<<grid, block, 0, stream>>>(d_in, d_out, n, p.saturate, p.stochastic, p.seed, p.offset);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void cast_fp8_to_f32_cuda(const uint8_t* d_in, float* d_out, size_t n, bool e4m3, cudaStream_t stream) {
  const int block = 256;
  const int grid = grid_for(n, block);
  if (e4m3) cast_fp8_to_f32_kernel<E4M3Traits><<<grid, block, 0, stream>>>(d_in, d_out, n);
  else cast_fp8_to_f32_kernel<E5M2Traits><<<grid, block, 0, stream>>>(d_in, d_out, n);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu
