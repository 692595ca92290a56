#pragma once
// Device building blocks shared by the quantize kernels (gpu/quant/quantize.cu) and the fused
// optimizer kernels (gpu/optim/adamw.cu). CUDA only; no fmt, no exceptions.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/launch.cuh"
#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/expand.hpp"

namespace fp8sim::gpu::detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Element loaders: every input is widened to fp32 exactly (one rounding only, at the encoder).
enum class InDt : int { F32 = 0, BF16 = 1, FP16 = 2 };

// Host side: calls f.template operator()<Traits, D>() for a runtime format (0 = E4M3, 1 = E5M2)
// and input dtype, so a launcher instantiates its kernel for every combination once.
template <class F>
void dispatch_fmt_dt(int fmt, InDt dt, F&& f) {
  if (fmt == 0) {
    if (dt == InDt::F32) f.template operator()<E4M3Traits, InDt::F32>();
    else if (dt == InDt::BF16) f.template operator()<E4M3Traits, InDt::BF16>();
    else f.template operator()<E4M3Traits, InDt::FP16>();
  } else {
    if (dt == InDt::F32) f.template operator()<E5M2Traits, InDt::F32>();
    else if (dt == InDt::BF16) f.template operator()<E5M2Traits, InDt::BF16>();
    else f.template operator()<E5M2Traits, InDt::FP16>();
  }
}

template <InDt D>
__device__ __forceinline__ float load_elem(const void* x, int64_t i) {
  if constexpr (D == InDt::F32) return static_cast<const float*>(x)[i];
  else if constexpr (D == InDt::BF16) return bf16_to_f32(static_cast<const uint16_t*>(x)[i]);
  else return fp16_to_f32(static_cast<const uint16_t*>(x)[i]);
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
// The max of v over the 32 lanes of a warp (every lane must call it; every lane gets the result).
__device__ __forceinline__ uint32_t warp_max_u32(uint32_t v) {
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// Whether this block is the last of the grid to finish (`done`: a counter zeroed by the caller):
// every block's earlier global writes and atomics (e.g. an atomicMax of its maximum) are then
// visible to it (the pattern of CUDA's threadFenceReduction sample). Every thread of the block
// gets the answer.
__device__ __forceinline__ bool last_block_done(unsigned* done) {
  __shared__ bool last;
  __syncthreads();  // every warp's writes and atomics are issued
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible device-wide before this block counts itself done
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  return last;
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

// ---- fast exact pieces for memory-bound kernels -------------------------------------------------
// RN(a / b) for a divisor b shared by many elements, from r = RN(1/b) computed once: q0 = a*r is
// within 2 ulp, one Markstein correction makes it faithful, the second makes it the correctly
// rounded quotient (Markstein's theorem: r within 1/2 ulp of 1/b and a faithful q give
// RN(q + r*(a - b*q)) = RN(a/b); the remainders are exact by the faithful-q lemma). Valid when
// no intermediate leaves the normal range: the caller keeps b in [2^-80, 2^80] and uses the
// result only where |a/b| >= 2^-20 or where any value below 2^-17 gives the same FP8 code (zero
// with a's sign). The remainder is formed as b*q - a and subtracted, so that q keeps a's sign
// even for a = -0 or a tiny negative a (RN(-0 + -0) = -0; x + (-x) = +0 is never the last add).
struct FastRecip {
  float b;  // divisor
  float r;  // RN(1 / b)
};
__device__ __forceinline__ bool fast_recip_ok(float b) {
  const uint32_t e = f32_bits(b) & 0x7F800000u;  // b > 0 here (a scale)
  return e >= (47u << 23) && e <= (207u << 23);  // 2^-80 <= b < 2^81
}
__device__ __forceinline__ FastRecip fast_recip(float b) { return FastRecip{b, div_rn(1.0f, b)}; }
__device__ __forceinline__ float div_by(float a, const FastRecip& d) {
  const float q0 = __fmul_rn(a, d.r);
  const float e0 = __fmaf_rn(d.b, q0, -a);
  const float q1 = __fmaf_rn(-e0, d.r, q0);
  const float e1 = __fmaf_rn(d.b, q1, -a);
  return __fmaf_rn(-e1, d.r, q1);
}

// Two fp32 values to two FP8 codes with the hardware converter (cvt.rn.satfinite; F2FP on sm_90):
// RNE, then saturation to +-max. For every FINITE input this equals encode_fp8_rne<T>(x, true)
// (checked on the device over all 2^32 inputs by hw_cvt_verified() before any kernel uses it, and
// by tests/test_quant_gpu.cpp); NaN and Inf inputs never take this path. Returns lo's code in
// bits 0-7 and hi's in bits 8-15.
template <class T>
__device__ __forceinline__ uint32_t cvt2_hw(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  if constexpr (T::kOverflowCode == 0x7F) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(encode_fp8_rne<T>(lo, true)) | (static_cast<uint32_t>(encode_fp8_rne<T>(hi, true)) << 8);
#endif
}

// fp32 -> fp16 by the hardware converter (cvt.rn.f16.f32: RNE, subnormal results kept, overflow
// to Inf), then saturation to +-65504 when asked: equal to f32_to_fp16_rne(x, saturate) for every
// input that is not a NaN (which keeps its payload only in the reference), checked on the device
// by hw_fp16_verified() before any kernel uses it. fp16 -> fp32 likewise for every code that is
// not a NaN (the conversion is exact).
__device__ __forceinline__ uint32_t f32_to_fp16_hw(float x, bool saturate) {
  uint32_t h = __half_as_ushort(__float2half_rn(x));
  if (saturate && (h & 0x7FFFu) == 0x7C00u) h ^= 0x7C00u ^ 0x7BFFu;  // +-Inf -> +-65504
  return h;
}
__device__ __forceinline__ float fp16_to_f32_hw(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// 8 bf16 / fp16 values of a 16-byte word (element 2j in the low half of w[j]) or 4 fp32 values.
template <InDt D>
__device__ __forceinline__ float widen_lo(uint32_t w) {
  if constexpr (D == InDt::BF16) return f32_from_bits(w << 16);
  else return fp16_to_f32(static_cast<uint16_t>(w));
}
template <InDt D>
__device__ __forceinline__ float widen_hi(uint32_t w) {
  if constexpr (D == InDt::BF16) return f32_from_bits(w & 0xFFFF0000u);
  else return fp16_to_f32(static_cast<uint16_t>(w >> 16));
}

// The 16-bit magnitudes of a word of bf16 / fp16 elements, maxed pairwise: two halves, each the
// max of four elements (the sign bits cleared; magnitudes order like their bits).
__device__ __forceinline__ uint32_t pair_absmax16(const uint4& u) {
  return __vmaxu2(__vmaxu2(u.x & 0x7FFF7FFFu, u.y & 0x7FFF7FFFu), __vmaxu2(u.z & 0x7FFF7FFFu, u.w & 0x7FFF7FFFu));
}

// Max |x| as fp32 bits over a 16-byte word of elements, NaN and Inf included (they compare above
// every finite magnitude, so a result >= 0x7F800000 says "the word holds a non-finite value").
template <InDt D>
__device__ __forceinline__ uint32_t absmax_bits_word(const uint4& u) {
  if constexpr (D == InDt::F32) {
    const uint32_t a = max(u.x & 0x7FFFFFFFu, u.y & 0x7FFFFFFFu), b = max(u.z & 0x7FFFFFFFu, u.w & 0x7FFFFFFFu);
    return max(a, b);
  } else if constexpr (D == InDt::BF16) {
    // Pairwise 16-bit max of the magnitudes (one VIMNMX.U16x2 per pair of words), then widen.
    uint32_t m = pair_absmax16(u);
    const uint32_t lo = m & 0xFFFFu, hi = m >> 16;
    return (lo > hi ? lo : hi) << 16;
  } else {
    uint32_t m = pair_absmax16(u);
    const uint32_t lo = m & 0xFFFFu, hi = m >> 16;
    const uint32_t h = lo > hi ? lo : hi;  // fp16 magnitudes order like their bits too
    return h >= 0x7C00u ? (h > 0x7C00u ? 0x7FC00000u : 0x7F800000u) : f32_bits(fp16_to_f32(static_cast<uint16_t>(h)));
  }
}

// The same over NW 16-byte words: 16-bit magnitudes are reduced pairwise across all the words
// first and widened once.
template <InDt D, int NW>
__device__ __forceinline__ uint32_t absmax_bits_words(const uint4 (&u)[NW]) {
  if constexpr (D == InDt::F32 || NW == 1) {
    uint32_t m = absmax_bits_word<D>(u[0]);
#pragma unroll
    for (int w = 1; w < NW; ++w) m = max(m, absmax_bits_word<D>(u[w]));
    return m;
  } else {
    uint32_t m = pair_absmax16(u[0]);
#pragma unroll
    for (int w = 1; w < NW; ++w) m = __vmaxu2(m, pair_absmax16(u[w]));
    const uint4 one = make_uint4(m, 0u, 0u, 0u);  // the pair max, widened by the one-word form
    return absmax_bits_word<D>(one);
  }
}

// The elements of a 16-byte word as fp32 (4 for F32, 8 for BF16/FP16).
template <InDt D>
constexpr int kWordElems = D == InDt::F32 ? 4 : 8;
template <InDt D>
__device__ __forceinline__ void widen_word(const uint4& u, float (&v)[kWordElems<D>]) {
  if constexpr (D == InDt::F32) {
    v[0] = f32_from_bits(u.x);
    v[1] = f32_from_bits(u.y);
    v[2] = f32_from_bits(u.z);
    v[3] = f32_from_bits(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = widen_lo<D>(w[j]);
      v[2 * j + 1] = widen_hi<D>(w[j]);
    }
  }
}

// 16-byte asynchronous copies global -> shared (cp.async, sm_80+), for kernels that stage data in
// shared memory while they work on earlier data (the staged row / block quantize kernel).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Set by hw_cvt_verified() (gpu/quant/quantize_fast.cu): whether cvt2_hw equals the reference
// encoder on every finite fp32 input for both formats on this device (host side).
bool hw_cvt_verified();
// Set by hw_fp16_verified() (gpu/quant/quantize_fast.cu): whether f32_to_fp16_hw equals
// f32_to_fp16_rne on every non-NaN fp32 input (saturating and not) and fp16_to_f32_hw equals
// fp16_to_f32 on every non-NaN code, on this device (host side).
bool hw_fp16_verified();

// The decoded value of every FP8 code (exact), in shared memory so a per-element lookup is one
// LDS instead of the branchy bit decode. Fill with fill_decode_table() at kernel start.
__device__ __forceinline__ void fill_decode_table(float* table, int fmt) {
  for (int c = threadIdx.x; c < 256; c += blockDim.x) table[c] = decode_fp8(static_cast<uint8_t>(c), fmt);
  __syncthreads();
}

}  // namespace fp8sim::gpu::detail
