// Cast kernels: the same FP8SIM_HD scalar routines as sim/formats/cast.cpp, so the bits match.
// Memory-bound: each thread moves 16 bytes of input per iteration (float4 / 8 x bf16) and writes
// its codes with one 4- or 8-byte store, grid-stride; the tail (n not a multiple of the vector
// width, or a misaligned pointer) goes through a scalar loop. Stochastic rounding draws one
// Philox4x32-10 block per 4 elements when the element index is 4-aligned (the counter of
// element i is i >> 2 and its word i & 3, sim/formats/philox.hpp), else one block per element.
#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/formats/cast.hpp"
#include "gpu/quant/quantize_kernels.cuh"
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

// The 16-byte words of a cast are handled U at a time, their loads issued before any use. With
// `hw`, a word whose magnitudes all lie below `hw_limit` (bits; SAT: every finite value, NOSAT:
// below the format's max, so nothing can overflow) is encoded by the hardware converter, which
// equals encode_fp8_rne there (detail::hw_cvt_verified); other words use the reference encoder.
constexpr int kCastUnroll = 4;

// The reference encoder for 4 values, out of line (the rare path for `hw`, and the stochastic one).
template <class T>
__device__ __noinline__ uint32_t encode4_ref(float x0, float x1, float x2, float x3, bool sat, bool stochastic,
                                             uint64_t seed, uint64_t first_index) {
  const float xs[4] = {x0, x1, x2, x3};
  return encode4<T>(xs, sat, stochastic, seed, first_index);
}

template <class T>
__device__ __forceinline__ uint32_t encode4_fast(const float (&xs)[4], bool sat, bool stochastic, uint64_t seed,
                                                 uint64_t first_index, bool hw, uint32_t hw_limit) {
  if (hw) {
    uint32_t m = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) m = max(m, f32_bits(xs[k]) & 0x7FFFFFFFu);
    if (m < hw_limit) return detail::cvt2_hw<T>(xs[0], xs[1]) | (detail::cvt2_hw<T>(xs[2], xs[3]) << 16);
  }
  return encode4_ref<T>(xs[0], xs[1], xs[2], xs[3], sat, stochastic, seed, first_index);
}

template <class T>
__global__ void __launch_bounds__(256)
    cast_f32_to_fp8_kernel(const float* __restrict__ in, uint8_t* __restrict__ out, size_t n, bool vec, bool sat,
                           bool stochastic, uint64_t seed, uint64_t offset, bool hw, uint32_t hw_limit) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n4 = n / 4;
    for (size_t i0 = tid; i0 < n4; i0 += kCastUnroll * stride) {
      float4 v[kCastUnroll];
#pragma unroll
      for (int k = 0; k < kCastUnroll; ++k)
        v[k] = i0 + k * stride < n4 ? reinterpret_cast<const float4*>(in)[i0 + k * stride] : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < kCastUnroll; ++k) {
        const size_t i = i0 + k * stride;
        if (i >= n4) break;
        const float xs[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        reinterpret_cast<uint32_t*>(out)[i] = encode4_fast<T>(xs, sat, stochastic, seed, offset + 4 * i, hw, hw_limit);
      }
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
__global__ void __launch_bounds__(256)
    cast_16_to_fp8_kernel(const uint16_t* __restrict__ in, uint8_t* __restrict__ out, size_t n, bool vec, bool sat,
                          bool stochastic, uint64_t seed, uint64_t offset, bool hw, uint32_t hw_limit) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n8 = n / 8;
    for (size_t i0 = tid; i0 < n8; i0 += kCastUnroll * stride) {
      uint4 v[kCastUnroll];
#pragma unroll
      for (int k = 0; k < kCastUnroll; ++k)
        v[k] = i0 + k * stride < n8 ? reinterpret_cast<const uint4*>(in)[i0 + k * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < kCastUnroll; ++k) {
        const size_t i = i0 + k * stride;
        if (i >= n8) break;
        const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        const float lo[4] = {
            widen16<BF16>(static_cast<uint16_t>(w[0])), widen16<BF16>(static_cast<uint16_t>(w[0] >> 16)),
            widen16<BF16>(static_cast<uint16_t>(w[1])), widen16<BF16>(static_cast<uint16_t>(w[1] >> 16))};
        const float hi[4] = {
            widen16<BF16>(static_cast<uint16_t>(w[2])), widen16<BF16>(static_cast<uint16_t>(w[2] >> 16)),
            widen16<BF16>(static_cast<uint16_t>(w[3])), widen16<BF16>(static_cast<uint16_t>(w[3] >> 16))};
        uint2 packed;
        packed.x = encode4_fast<T>(lo, sat, stochastic, seed, offset + 8 * i, hw, hw_limit);
        packed.y = encode4_fast<T>(hi, sat, stochastic, seed, offset + 8 * i + 4, hw, hw_limit);
        reinterpret_cast<uint2*>(out)[i] = packed;
      }
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

// The hardware path's switch and limit for a cast (see encode4_fast).
bool cast_hw(const CastParams& p) { return !p.stochastic && detail::hw_cvt_verified(); }
uint32_t cast_hw_limit(const CastParams& p) {
  if (p.saturate) return 0x7F800000u;
  return p.e4m3 ? 0x43E00000u /* 448 */ : 0x47600000u /* 57344 */;
}

// Enough blocks to fill the GPU several times over (16 per multiprocessor), never more than the
// work needs.
int grid_for(size_t work_items, int block) {
  return grid_cap(static_cast<int64_t>((work_items + block - 1) / block), 16);
}

}  // namespace

void cast_f32_to_fp8_cuda(const float* d_in, uint8_t* d_out, size_t n, const CastParams& p, cudaStream_t stream) {
  if (n == 0) return;
  const int block = 256;
  const bool vec = aligned(d_in, 16) && aligned(d_out, 4);
  const int grid = grid_for(vec ? n / 16 + 1 : n, block);
  const bool hw = cast_hw(p);
  const uint32_t lim = cast_hw_limit(p);
  if (p.e4m3)
    cast_f32_to_fp8_kernel<E4M3Traits>
        <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
  else
    cast_f32_to_fp8_kernel<E5M2Traits>
        <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void cast_16_to_fp8_cuda(const uint16_t* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                         cudaStream_t stream) {
  if (n == 0) return;
  const int block = 256;
  const bool vec = aligned(d_in, 16) && aligned(d_out, 8);
  const int grid = grid_for(vec ? n / 32 + 1 : n, block);
  const bool hw = cast_hw(p);
  const uint32_t lim = cast_hw_limit(p);
  if (p.e4m3) {
    if (bf16)
      cast_16_to_fp8_kernel<E4M3Traits, true>
          <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
    else
      cast_16_to_fp8_kernel<E4M3Traits, false>
          <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
  } else {
    if (bf16)
      cast_16_to_fp8_kernel<E5M2Traits, true>
          <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
    else
      cast_16_to_fp8_kernel<E5M2Traits, false>
          <<<grid, block, 0, stream>>>(d_in, d_out, n, vec, p.saturate, p.stochastic, p.seed, p.offset, hw, lim);
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
