// Cast kernels: the same FP8SIM_HD scalar routines as sim/formats/cast.cpp, so the bits match.
// Memory-bound: each thread moves 16 bytes of input per iteration (float4 / 8 x bf16) and writes
// its codes with one 4- or 8-byte store, grid-stride; the tail (n not a multiple of the vector
// width, or a misaligned pointer) goes through a scalar loop. Stochastic rounding draws one
// Philox4x32-10 block per 4 elements when the element index is 4-aligned (the counter of
// element i is i >> 2 and its word i & 3, sim/formats/philox.hpp), else one block per element.
#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"

namespace fp8sim::gpu {

namespace {

// The 4 random words of elements 4*b .. 4*b+3 (offset included by the caller).
__device__ __forceinline__ Philox4 philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

template <class T>
__device__ __forceinline__ uint32_t encode4(const float (&xs)[4], bool sat, bool stochastic, uint64_t seed,
                                            uint64_t first_index) {
  uint32_t packed = 0;
  if (!stochastic) {
#pragma unroll
    for (int k = 0; k < 4; ++k) packed |= static_cast<uint32_t>(encode_fp8_rne<T>(xs[k], sat)) << (8 * k);
  } else if ((first_index & 3u) == 0) {
    const Philox4 r = philox_block(seed, first_index >> 2);
#pragma unroll
    for (int k = 0; k < 4; ++k) packed |= static_cast<uint32_t>(encode_fp8_sr<T>(xs[k], sat, r.v[k])) << (8 * k);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      packed |= static_cast<uint32_t>(encode_fp8_sr<T>(xs[k], sat, philox_word(seed, first_index + k))) << (8 * k);
  }
  return packed;
}

template <class T>
__device__ __forceinline__ uint8_t encode1(float x, bool sat, bool stochastic, uint64_t seed, uint64_t index) {
  return stochastic ? encode_fp8_sr<T>(x, sat, philox_word(seed, index)) : encode_fp8_rne<T>(x, sat);
}

template <class T>
__global__ void cast_f32_to_fp8_kernel(const float* __restrict__ in, uint8_t* __restrict__ out, size_t n,
                                       bool vec, bool sat, bool stochastic, uint64_t seed, uint64_t offset) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n4 = n / 4;
    for (size_t i = tid; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(in)[i];
      const float xs[4] = {v.x, v.y, v.z, v.w};
      reinterpret_cast<uint32_t*>(out)[i] = encode4<T>(xs, sat, stochastic, seed, offset + 4 * i);
    }
    done = 4 * n4;
  }
  for (size_t i = done + tid; i < n; i += stride) out[i] = encode1<T>(in[i], sat, stochastic, seed, offset + i);
}

template <bool BF16>
__device__ __forceinline__ float widen16(uint16_t h) {
  return BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

template <class T, bool BF16>
__global__ void cast_16_to_fp8_kernel(const uint16_t* __restrict__ in, uint8_t* __restrict__ out, size_t n, bool vec,
                                      bool sat, bool stochastic, uint64_t seed, uint64_t offset) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n8 = n / 8;
    for (size_t i = tid; i < n8; i += stride) {
      const uint4 v = reinterpret_cast<const uint4*>(in)[i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      const float lo[4] = {widen16<BF16>(static_cast<uint16_t>(w[0])), widen16<BF16>(static_cast<uint16_t>(w[0] >> 16)),
                           widen16<BF16>(static_cast<uint16_t>(w[1])), widen16<BF16>(static_cast<uint16_t>(w[1] >> 16))};
      const float hi[4] = {widen16<BF16>(static_cast<uint16_t>(w[2])), widen16<BF16>(static_cast<uint16_t>(w[2] >> 16)),
                           widen16<BF16>(static_cast<uint16_t>(w[3])), widen16<BF16>(static_cast<uint16_t>(w[3] >> 16))};
      uint2 packed;
      packed.x = encode4<T>(lo, sat, stochastic, seed, offset + 8 * i);
      packed.y = encode4<T>(hi, sat, stochastic, seed, offset + 8 * i + 4);
      reinterpret_cast<uint2*>(out)[i] = packed;
    }
    done = 8 * n8;
  }
  for (size_t i = done + tid; i < n; i += stride)
    out[i] = encode1<T>(widen16<BF16>(in[i]), sat, stochastic, seed, offset + i);
}

template <class T>
__global__ void cast_fp8_to_f32_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, size_t n, bool vec) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n4 = n / 4;
    for (size_t i = tid; i < n4; i += stride) {
      const uint32_t c = reinterpret_cast<const uint32_t*>(in)[i];
      float4 v;
      v.x = decode_fp8<T>(static_cast<uint8_t>(c));
      v.y = decode_fp8<T>(static_cast<uint8_t>(c >> 8));
      v.z = decode_fp8<T>(static_cast<uint8_t>(c >> 16));
      v.w = decode_fp8<T>(static_cast<uint8_t>(c >> 24));
      reinterpret_cast<float4*>(out)[i] = v;
    }
    done = 4 * n4;
  }
  for (size_t i = done + tid; i < n; i += stride) out[i] = decode_fp8<T>(in[i]);
}

bool aligned(const void* p, unsigned bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// Enough blocks to fill the GPU several times over, never more than the work needs.
int grid_for(size_t work_items, int block) {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const size_t want = (work_items + block - 1) / block;
  const size_t cap = static_cast<size_t>(sms) * 16;
  return static_cast<int>(want < cap ? (want > 0 ? want : 1) : cap);
}

}  // namespace

void cast_f32_to_fp8_cuda(const float* d_in, uint8_t* d_out, size_t n, const CastParams& p, cudaStream_t stream) {
  if (n == 0) return;
  const int block = 256;
  const bool vec = aligned(d_in, 16) && aligned(d_out, 4);
  const int grid = grid_for(vec ? n / 4 + 1 : n, block);
  if (p.e4m3)
    cast_f32_to_fp8_kernel<E4M3Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
  else
    cast_f32_to_fp8_kernel<E5M2Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void cast_16_to_fp8_cuda(const uint16_t* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                         cudaStream_t stream) {
  if (n == 0) return;
  const int block = 256;
  const bool vec = aligned(d_in, 16) && aligned(d_out, 8);
  const int grid = grid_for(vec ? n / 8 + 1 : n, block);
  if (p.e4m3) {
    if (bf16) cast_16_to_fp8_kernel<E4M3Traits, true><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
    else cast_16_to_fp8_kernel<E4M3Traits, false><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
  } else {
    if (bf16) cast_16_to_fp8_kernel<E5M2Traits, true><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
    else cast_16_to_fp8_kernel<E5M2Traits, false><<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void cast_fp8_to_f32_cuda(const uint8_t* d_in, float* d_out, size_t n, bool e4m3, cudaStream_t stream) {
  if (n == 0) return;
  const int block = 256;
  const bool vec = aligned(d_in, 4) && aligned(d_out, 16);
  const int grid = grid_for(vec ? n / 4 + 1 : n, block);
  if (e4m3) cast_fp8_to_f32_kernel<E4M3Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, vec);
  else cast_fp8_to_f32_kernel<E5M2Traits><<<grid, block, 0, stream>>>(d_in, d_out, n, vec);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu
