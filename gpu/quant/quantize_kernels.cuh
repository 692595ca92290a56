#pragma once
// Device building blocks shared by the quantize kernels (gpu/quant/quantize.cu) and the fused
// optimizer kernels (gpu/optim/adamw.cu). CUDA only; no fmt, no exceptions.
#include <cuda_runtime.h>

#include <cstdint>

#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/expand.hpp"

namespace fp8sim::gpu::detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Element loaders: every input is widened to fp32 exactly (one rounding only, at the encoder).
enum class InDt : int { F32 = 0, BF16 = 1, FP16 = 2 };

template <InDt D>
__device__ __forceinline__ float load_elem(const void* x, int64_t i) {
  if constexpr (D == InDt::F32) return static_cast<const float*>(x)[i];
  else if constexpr (D == InDt::BF16) return bf16_to_f32(static_cast<const uint16_t*>(x)[i]);
  else return fp16_to_f32(static_cast<const uint16_t*>(x)[i]);
}

// 16 consecutive elements starting at i (16-element aligned; the pointer 32/64-byte aligned).
template <InDt D>
__device__ __forceinline__ void load16(const void* x, int64_t i, float (&v)[16]) {
  if constexpr (D == InDt::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + i);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 f = p[q];
      v[4 * q] = f.x;
      v[4 * q + 1] = f.y;
      v[4 * q + 2] = f.z;
      v[4 * q + 3] = f.w;
    }
  } else {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint4 u = p[q];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint16_t lo = static_cast<uint16_t>(w[j]), hi = static_cast<uint16_t>(w[j] >> 16);
        v[8 * q + 2 * j] = D == InDt::BF16 ? bf16_to_f32(lo) : fp16_to_f32(lo);
        v[8 * q + 2 * j + 1] = D == InDt::BF16 ? bf16_to_f32(hi) : fp16_to_f32(hi);
      }
    }
  }
}

// Group statistics over finite elements as fp32 bits (order-free): max |x|, min nonzero |x|
// (0x7F800000 when none), and whether an Inf was seen.
struct Stats {
  uint32_t amax;
  uint32_t amin;
  uint32_t inf;
};
__device__ __forceinline__ Stats stats_init() { return Stats{0u, 0x7F800000u, 0u}; }
__device__ __forceinline__ void stats_add(Stats& s, float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  const bool fin = a < 0x7F800000u;
  const uint32_t fa = fin ? a : 0u;
  s.amax = fa > s.amax ? fa : s.amax;
  const uint32_t nz = (fin && a != 0u) ? a : 0x7F800000u;
  s.amin = nz < s.amin ? nz : s.amin;
  s.inf |= a == 0x7F800000u ? 1u : 0u;
}
__device__ __forceinline__ void stats_merge(Stats& s, const Stats& o) {
  s.amax = o.amax > s.amax ? o.amax : s.amax;
  s.amin = o.amin < s.amin ? o.amin : s.amin;
  s.inf |= o.inf;
}
// Reduction across `width` consecutive lanes (width a power of two <= 32; every lane of the warp
// must call it).
__device__ __forceinline__ Stats stats_reduce_lanes(Stats s, int width) {
  for (int off = 1; off < width; off <<= 1) {
    Stats o;
    o.amax = __shfl_xor_sync(kFullMask, s.amax, off);
    o.amin = __shfl_xor_sync(kFullMask, s.amin, off);
    o.inf = __shfl_xor_sync(kFullMask, s.inf, off);
    stats_merge(s, o);
  }
  return s;
}
// Block-wide reduction (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ Stats stats_reduce_block(Stats s) {
  __shared__ Stats warp_stats[32];
  __shared__ Stats result;
  s = stats_reduce_lanes(s, 32);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_stats[warp] = s;
  __syncthreads();
  if (warp == 0) {
    Stats t = lane < static_cast<int>(blockDim.x >> 5) ? warp_stats[lane] : stats_init();
    t = stats_reduce_lanes(t, 32);
    if (lane == 0) result = t;
  }
  __syncthreads();
  const Stats r = result;
  __syncthreads();  // `result` may be reused by the next call
  return r;
}

// The decoded value of every FP8 code (exact), in shared memory so a per-element lookup is one
// LDS instead of the branchy bit decode. Fill with fill_decode_table() at kernel start.
__device__ __forceinline__ void fill_decode_table(float* table, int fmt) {
  for (int c = threadIdx.x; c < 256; c += blockDim.x) table[c] = decode_fp8(static_cast<uint8_t>(c), fmt);
  __syncthreads();
}

}  // namespace fp8sim::gpu::detail
