// The speed replay's kernels (see kernels.hpp). Memory-bound by design: 16-byte loads and stores,
// one 1x16 group per thread in the elementwise kernels, persistent row loops in the norms, a
// 128x128 shared-memory tile with a 4x4 byte transpose in registers for the transposed casts.
// Hardware conversions (cvt.rn.satfinite.{e4m3,e5m2}x2.f32, cvt.rn.bf16x2.f32, cvt.f16x2.{e4m3,e5m2}x2)
// give the same bits as sim/formats' RNE/SATFINITE scalar routines for finite inputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gpu/common/cuda_check.hpp"
#include "gpu/speed/kernels.hpp"
#include "sim/speed/group16.hpp"

namespace fp8sim::gpu::speed {

using fp8sim::speed::bf16_round_up;
using fp8sim::speed::g16_inverse;
using fp8sim::speed::g16_scale;
using fp8sim::speed::kE4M3Max;
using fp8sim::speed::kE5M2Max;
using fp8sim::speed::tensor_inverse;
using fp8sim::speed::transpose4x4_bytes;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// ---------------------------------------------------------------------------- small helpers
__device__ __forceinline__ uint4 ld16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ void st16(void* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// 8 bf16 in a uint4 -> 8 floats.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = bf16_lo(w[k]);
    f[2 * k + 1] = bf16_hi(w[k]);
  }
}
// Two floats -> two bf16 (round to nearest even), low half first.
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// 8 floats -> 8 bf16; `rounded` receives the bf16 values as floats (what a reader will see).
__device__ __forceinline__ uint4 pack8(const float* f, float* rounded) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w[k] = pack_bf16x2(f[2 * k], f[2 * k + 1]);
    rounded[2 * k] = bf16_lo(w[k]);
    rounded[2 * k + 1] = bf16_hi(w[k]);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void load16_bf16(const uint16_t* p, float* f) {
  unpack8(ld16(p), f);
  unpack8(ld16(p + 8), f + 8);
}
// Stores 16 floats as bf16 and returns max |stored value|.
__device__ __forceinline__ float store16_bf16(uint16_t* p, const float* f) {
  float r[16];
  st16(p, pack8(f, r));
  st16(p + 8, pack8(f + 8, r + 8));
  float m = 0.f;
#pragma unroll
  for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(r[e]));
  return m;
}

template <bool E5M2>
__device__ __forceinline__ void decode16(const uint4& v, float scale, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((w[k] >> (16 * h)) & 0xFFFFu), E5M2 ? __NV_E5M2 : __NV_E4M3);
      const float2 x = __half22float2(__half2(raw));
      f[4 * k + 2 * h] = __fmul_rn(x.x, scale);
      f[4 * k + 2 * h + 1] = __fmul_rn(x.y, scale);
    }
  }
}
template <bool E5M2>
__device__ __forceinline__ uint32_t encode4(float a, float b, float c, float d) {
  constexpr __nv_fp8_interpretation_t fmt = E5M2 ? __NV_E5M2 : __NV_E4M3;
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, fmt);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, fmt);
  return lo | (hi << 16);
}
// 16 values already multiplied by the inverse scale -> 16 codes.
template <bool E5M2>
__device__ __forceinline__ uint4 encode16(const float* f) {
  return make_uint4(encode4<E5M2>(f[0], f[1], f[2], f[3]), encode4<E5M2>(f[4], f[5], f[6], f[7]),
                    encode4<E5M2>(f[8], f[9], f[10], f[11]), encode4<E5M2>(f[12], f[13], f[14], f[15]));
}
// Quantizes 16 values as one 1x16 group: codes to q, bf16 scale to *s.
template <bool E5M2>
__device__ __forceinline__ void quantize_group(const float* f, uint8_t* q, uint16_t* s) {
  float m = 0.f;
#pragma unroll
  for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(f[e]));
  const uint16_t scale = g16_scale(m, E5M2 ? kE5M2Max : kE4M3Max);
  const float inv = g16_inverse(scale);
  float x[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) x[e] = __fmul_rn(f[e], inv);
  st16(q, encode16<E5M2>(x));
  *s = scale;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
// Block-wide sum / max for kThreads threads; every thread gets the result. `red` holds kWarps
// floats; the leading barrier lets consecutive calls reuse it.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) t += red[i];
  return t;
}
__device__ __forceinline__ float block_max(float v, float* red) {
  v = warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) t = fmaxf(t, red[i]);
  return t;
}
// Non-negative float max into *out through its bit pattern (monotonic for x >= 0).
__device__ __forceinline__ void atomic_max_nonneg(float* out, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(v));
}

__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

int grid_for(int64_t items, int per_sm) {
  const int64_t want = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sm_count()) * per_sm;
  return static_cast<int>(want < 1 ? 1 : (want < cap ? want : cap));
}
int grid_for_rows(int64_t rows, int per_sm) {
  const int64_t cap = static_cast<int64_t>(sm_count()) * per_sm;
  return static_cast<int>(rows < cap ? (rows < 1 ? 1 : rows) : cap);
}

// ---------------------------------------------------------------------------- RMSNorm
// One row per block iteration (persistent grid), a thread owns 1x16 chunks c = tid + j*256.
template <bool G16, bool ROWMAX, int MAXC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_fwd_kernel(const uint16_t* __restrict__ x, const uint8_t* __restrict__ xq, const uint16_t* __restrict__ xs,
                       const uint16_t* __restrict__ w, uint16_t* __restrict__ y, float* __restrict__ rstd_out,
                       float* __restrict__ row_amax, int64_t rows, int chunks, float inv_cols, float eps) {
  __shared__ float red[kWarps];
  const int64_t cols = static_cast<int64_t>(chunks) * 16;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    uint4 xr[MAXC][2];
    float xsc[MAXC];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < chunks) {
        float f[16];
        if constexpr (G16) {
          xr[j][0] = ld16(xq + row * cols + c * 16);
          xsc[j] = fp8sim::bf16_to_f32(xs[row * chunks + c]);
          decode16<false>(xr[j][0], xsc[j], f);
        } else {
          xr[j][0] = ld16(x + row * cols + c * 16);
          xr[j][1] = ld16(x + row * cols + c * 16 + 8);
          unpack8(xr[j][0], f);
          unpack8(xr[j][1], f + 8);
        }
#pragma unroll
        for (int e = 0; e < 16; ++e) ss += f[e] * f[e];
      }
    }
    const float r = rsqrtf(block_sum(ss, red) * inv_cols + eps);
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < chunks) {
        float f[16], wf[16];
        if constexpr (G16) {
          decode16<false>(xr[j][0], xsc[j], f);
        } else {
          unpack8(xr[j][0], f);
          unpack8(xr[j][1], f + 8);
        }
        load16_bf16(w + c * 16, wf);
#pragma unroll
        for (int e = 0; e < 16; ++e) f[e] = (f[e] * r) * wf[e];
        amax = fmaxf(amax, store16_bf16(y + row * cols + c * 16, f));
      }
    }
    if (threadIdx.x == 0) rstd_out[row] = r;
    if constexpr (ROWMAX) {
      const float m = block_max(amax, red);
      if (threadIdx.x == 0) row_amax[row] = m;
    }
  }
}

// dx = (w*dy - xhat * mean(xhat*w*dy)) * rstd; this block's rows' sum of dy*xhat into one row of
// dw_partial.
template <bool G16, int MAXC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_bwd_kernel(const uint16_t* __restrict__ x, const uint8_t* __restrict__ xq, const uint16_t* __restrict__ xs,
                       const uint16_t* __restrict__ w, const float* __restrict__ rstd, const uint16_t* __restrict__ dy,
                       uint16_t* __restrict__ dx, float* __restrict__ dw_partial, int64_t rows, int chunks,
                       float inv_cols) {
  __shared__ float red[kWarps];
  const int64_t cols = static_cast<int64_t>(chunks) * 16;
  float acc[MAXC][16];
#pragma unroll
  for (int j = 0; j < MAXC; ++j)
#pragma unroll
    for (int e = 0; e < 16; ++e) acc[j][e] = 0.f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float r = rstd[row];
    uint4 xr[MAXC][2], gr[MAXC][2];
    float xsc[MAXC];
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < chunks) {
        float f[16], g[16], wf[16];
        if constexpr (G16) {
          xr[j][0] = ld16(xq + row * cols + c * 16);
          xsc[j] = fp8sim::bf16_to_f32(xs[row * chunks + c]);
          decode16<false>(xr[j][0], xsc[j], f);
        } else {
          xr[j][0] = ld16(x + row * cols + c * 16);
          xr[j][1] = ld16(x + row * cols + c * 16 + 8);
          unpack8(xr[j][0], f);
          unpack8(xr[j][1], f + 8);
        }
        gr[j][0] = ld16(dy + row * cols + c * 16);
        gr[j][1] = ld16(dy + row * cols + c * 16 + 8);
        unpack8(gr[j][0], g);
        unpack8(gr[j][1], g + 8);
        load16_bf16(w + c * 16, wf);
#pragma unroll
        for (int e = 0; e < 16; ++e) dot += (f[e] * r) * (wf[e] * g[e]);
      }
    }
    const float c1 = block_sum(dot, red) * inv_cols;
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < chunks) {
        float f[16], g[16], wf[16], d[16];
        if constexpr (G16) {
          decode16<false>(xr[j][0], xsc[j], f);
        } else {
          unpack8(xr[j][0], f);
          unpack8(xr[j][1], f + 8);
        }
        unpack8(gr[j][0], g);
        unpack8(gr[j][1], g + 8);
        load16_bf16(w + c * 16, wf);
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          const float xhat = f[e] * r;
          d[e] = (wf[e] * g[e] - xhat * c1) * r;
          acc[j][e] += g[e] * xhat;
        }
        store16_bf16(dx + row * cols + c * 16, d);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < MAXC; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) {
      float4* out = reinterpret_cast<float4*>(dw_partial + static_cast<int64_t>(blockIdx.x) * cols + c * 16);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        out[q] = make_float4(acc[j][4 * q], acc[j][4 * q + 1], acc[j][4 * q + 2], acc[j][4 * q + 3]);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    column_sum_kernel(const float* __restrict__ partial, float* __restrict__ out, int64_t parts, int64_t cols) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * kThreads) {
    float s = 0.f;
    for (int64_t p = 0; p < parts; ++p) s += partial[p * cols + c];
    out[c] = s;
  }
}

// ---------------------------------------------------------------------------- elementwise
#define FP8SIM_GROUP_LOOP(groups)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < (groups); \
       i += static_cast<int64_t>(gridDim.x) * kThreads)

__global__ void __launch_bounds__(kThreads)
    silu_mul_fwd_bf16_kernel(const uint16_t* __restrict__ g, const uint16_t* __restrict__ u, uint16_t* __restrict__ m,
                             int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float gf[16], uf[16], mf[16];
    load16_bf16(g + i * 16, gf);
    load16_bf16(u + i * 16, uf);
#pragma unroll
    for (int e = 0; e < 16; ++e) mf[e] = (gf[e] * sigmoid(gf[e])) * uf[e];
    store16_bf16(m + i * 16, mf);
  }
}

__global__ void __launch_bounds__(kThreads)
    silu_mul_fwd_g16_kernel(const uint8_t* __restrict__ gq, const uint16_t* __restrict__ gs,
                            const uint8_t* __restrict__ uq, const uint16_t* __restrict__ us,
                            uint8_t* __restrict__ silu_q, uint16_t* __restrict__ silu_s, uint16_t* __restrict__ m,
                            uint16_t* __restrict__ m_gmax, int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float gf[16], uf[16], sf[16], mf[16];
    decode16<false>(ld16(gq + i * 16), fp8sim::bf16_to_f32(gs[i]), gf);
    decode16<false>(ld16(uq + i * 16), fp8sim::bf16_to_f32(us[i]), uf);
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      sf[e] = gf[e] * sigmoid(gf[e]);
      mf[e] = sf[e] * uf[e];
    }
    quantize_group<false>(sf, silu_q + i * 16, silu_s + i);
    m_gmax[i] = bf16_round_up(store16_bf16(m + i * 16, mf));
  }
}

__device__ __forceinline__ void silu_mul_grads(const float* gf, const float* uf, const float* dmf, float* dg,
                                               float* du) {
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const float s = sigmoid(gf[e]);
    const float silu = gf[e] * s;
    const float dsilu = s * (1.0f + gf[e] * (1.0f - s));
    dg[e] = (dmf[e] * uf[e]) * dsilu;
    du[e] = dmf[e] * silu;
  }
}

__global__ void __launch_bounds__(kThreads)
    silu_mul_bwd_bf16_kernel(const uint16_t* __restrict__ g, const uint16_t* __restrict__ u,
                             const uint16_t* __restrict__ dm, uint16_t* __restrict__ dg, uint16_t* __restrict__ du,
                             int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float gf[16], uf[16], dmf[16], dgf[16], duf[16];
    load16_bf16(g + i * 16, gf);
    load16_bf16(u + i * 16, uf);
    load16_bf16(dm + i * 16, dmf);
    silu_mul_grads(gf, uf, dmf, dgf, duf);
    store16_bf16(dg + i * 16, dgf);
    store16_bf16(du + i * 16, duf);
  }
}

__global__ void __launch_bounds__(kThreads)
    silu_mul_bwd_g16_kernel(const uint8_t* __restrict__ gq, const uint16_t* __restrict__ gs,
                            const uint8_t* __restrict__ uq, const uint16_t* __restrict__ us,
                            const uint16_t* __restrict__ dm, uint16_t* __restrict__ dg, uint16_t* __restrict__ dg_gmax,
                            uint16_t* __restrict__ du, uint16_t* __restrict__ du_gmax, int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float gf[16], uf[16], dmf[16], dgf[16], duf[16];
    decode16<false>(ld16(gq + i * 16), fp8sim::bf16_to_f32(gs[i]), gf);
    decode16<false>(ld16(uq + i * 16), fp8sim::bf16_to_f32(us[i]), uf);
    load16_bf16(dm + i * 16, dmf);
    silu_mul_grads(gf, uf, dmf, dgf, duf);
    dg_gmax[i] = bf16_round_up(store16_bf16(dg + i * 16, dgf));
    du_gmax[i] = bf16_round_up(store16_bf16(du + i * 16, duf));
  }
}

// MODE 0: c only; 1: c and c as E4M3 1x16; 2: c and its group maxima.
template <int MODE>
__global__ void __launch_bounds__(kThreads)
    add_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, uint16_t* __restrict__ c,
               uint8_t* __restrict__ cq, uint16_t* __restrict__ cs, int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float af[16], bf[16], cf[16];
    load16_bf16(a + i * 16, af);
    load16_bf16(b + i * 16, bf);
#pragma unroll
    for (int e = 0; e < 16; ++e) cf[e] = af[e] + bf[e];
    float rounded[16];
    st16(c + i * 16, pack8(cf, rounded));
    st16(c + i * 16 + 8, pack8(cf + 8, rounded + 8));
    if constexpr (MODE == 1) quantize_group<false>(rounded, cq + i * 16, cs + i);
    if constexpr (MODE == 2) {
      float m = 0.f;
#pragma unroll
      for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(rounded[e]));
      cs[i] = bf16_round_up(m);
    }
  }
}

template <bool E5M2>
__global__ void __launch_bounds__(kThreads) quantize_g16_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q,
                                                                uint16_t* __restrict__ s, int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float f[16];
    load16_bf16(x + i * 16, f);
    quantize_group<E5M2>(f, q + i * 16, s + i);
  }
}

__global__ void __launch_bounds__(kThreads)
    group_max_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ gmax, int64_t groups) {
  FP8SIM_GROUP_LOOP(groups) {
    float f[16];
    load16_bf16(x + i * 16, f);
    float m = 0.f;
#pragma unroll
    for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(f[e]));
    gmax[i] = bf16_round_up(m);
  }
}

// MODE 0: bf16 values; 1: fp32 values. max |v| of n values into *out (zeroed by the launcher).
template <int MODE>
__global__ void __launch_bounds__(kThreads)
    reduce_max_kernel(const void* __restrict__ v, int64_t n, float* __restrict__ out) {
  __shared__ float red[kWarps];
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  constexpr int per_vec = MODE == 0 ? 8 : 4;
  const int64_t nv = n / per_vec;
  float m = 0.f;
  for (int64_t i = tid; i < nv; i += stride) {
    const uint4 q = ld16(static_cast<const uint8_t*>(v) + i * 16);
    if constexpr (MODE == 0) {
      float f[8];
      unpack8(q, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(f[e]));
    } else {
      m = fmaxf(
          fmaxf(fmaxf(m, fabsf(__uint_as_float(q.x))), fmaxf(fabsf(__uint_as_float(q.y)), fabsf(__uint_as_float(q.z)))),
          fabsf(__uint_as_float(q.w)));
    }
  }
  for (int64_t i = nv * per_vec + tid; i < n; i += stride) {
    const float x =
        MODE == 0 ? fp8sim::bf16_to_f32(static_cast<const uint16_t*>(v)[i]) : static_cast<const float*>(v)[i];
    m = fmaxf(m, fabsf(x));
  }
  m = block_max(m, red);
  if (threadIdx.x == 0) atomic_max_nonneg(out, m);
}

// ---------------------------------------------------------------------------- cast + transpose
constexpr int kTile = 128;        // tile rows and columns
constexpr int kTileStride = 136;  // bytes per shared-memory tile row: 8-byte aligned stores, conflict-free word reads

template <bool FP8IN, bool PLAIN, bool TRANS, bool AMAX, bool E5M2>
__global__ void __launch_bounds__(kThreads)
    cast_transpose_kernel(const void* __restrict__ in, int64_t rows, int64_t cols, const float* __restrict__ amax_in,
                          uint8_t* __restrict__ out, uint8_t* __restrict__ out_t, float* __restrict__ amax_out) {
  __shared__ __align__(16) uint8_t tile[kTile * kTileStride];
  __shared__ float red[kWarps];
  float inv = 1.f;
  if constexpr (!FP8IN) inv = tensor_inverse(*amax_in, E5M2 ? kE5M2Max : kE4M3Max);
  const int64_t tiles_c = (cols + kTile - 1) / kTile;
  const int64_t tiles = ((rows + kTile - 1) / kTile) * tiles_c;
  float amax = 0.f;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    if constexpr (FP8IN) {
      // 128 rows x 8 vectors of 16 codes, 4 per thread; a warp reads 4 rows x 128 bytes.
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int v = threadIdx.x + k * kThreads;
        const int rr = v >> 3, cv = v & 7;
        const int64_t r = r0 + rr, c = c0 + cv * 16;
        if (r < rows && c < cols) {
          const uint4 q = ld16(static_cast<const uint8_t*>(in) + r * cols + c);
          uint2* dst = reinterpret_cast<uint2*>(&tile[rr * kTileStride + cv * 16]);
          dst[0] = make_uint2(q.x, q.y);
          dst[1] = make_uint2(q.z, q.w);
        }
      }
    } else {
      // 128 rows x 16 vectors of 8 bf16, 8 per thread; a warp reads 2 rows x 256 bytes.
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int v = threadIdx.x + k * kThreads;
        const int rr = v >> 4, cv = v & 15;
        const int64_t r = r0 + rr, c = c0 + cv * 8;
        if (r < rows && c < cols) {
          float f[8];
          unpack8(ld16(static_cast<const uint16_t*>(in) + r * cols + c), f);
          if constexpr (AMAX) {
#pragma unroll
            for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
          }
#pragma unroll
          for (int e = 0; e < 8; ++e) f[e] = __fmul_rn(f[e], inv);
          const uint2 codes = make_uint2(encode4<E5M2>(f[0], f[1], f[2], f[3]), encode4<E5M2>(f[4], f[5], f[6], f[7]));
          if constexpr (PLAIN) *reinterpret_cast<uint2*>(out + r * cols + c) = codes;
          if constexpr (TRANS) *reinterpret_cast<uint2*>(&tile[rr * kTileStride + cv * 8]) = codes;
        }
      }
    }
    if constexpr (TRANS) {
      __syncthreads();
      // Warp w writes rows r0 + 16w .. +15 of the input as 16-byte pieces of out_t's rows
      // c0 + 4*lane .. +3: a 4x4 byte transpose in registers per 4 input rows.
      const int rg = threadIdx.x >> 5, cg = threadIdx.x & 31;
      const int64_t r = r0 + rg * 16, cb = c0 + cg * 4;
      if (r < rows && cb < cols) {
        uint32_t o[4][4];
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
          uint32_t wv[4], ov[4];
#pragma unroll
          for (int k = 0; k < 4; ++k)
            wv[k] = *reinterpret_cast<const uint32_t*>(&tile[(rg * 16 + k4 * 4 + k) * kTileStride + cg * 4]);
          transpose4x4_bytes(wv, ov);
#pragma unroll
          for (int m = 0; m < 4; ++m) o[m][k4] = ov[m];
        }
#pragma unroll
        for (int m = 0; m < 4; ++m) st16(out_t + (cb + m) * rows + r, make_uint4(o[m][0], o[m][1], o[m][2], o[m][3]));
      }
      __syncthreads();
    }
  }
  if constexpr (AMAX) {
    const float m = block_max(amax, red);
    if (threadIdx.x == 0) atomic_max_nonneg(amax_out, m);
  }
}

// ---------------------------------------------------------------------------- block quantize
// A 128x128 tile per iteration, read once into shared memory as bf16 (row stride 130 halves: 65
// words, so a warp reading one column from 32 rows hits 32 banks, and reading a row, consecutive
// words). The row-wise copy: a warp per tile row, 4 columns a lane, group maxima by shuffles, one
// 4-byte store per lane. The column-wise copy transposed: a warp per tile column, 4 rows a lane,
// 4-byte stores along the output row; in place: a thread per (column, group), one byte per
// store with consecutive threads on consecutive columns. Numerics: sim/quant/scale.hpp.
constexpr int kBqTile = 128;
constexpr int kBqStride = 130;  // halves per shared-memory row

__device__ __forceinline__ uint32_t finite_abs_bits(float x) {
  const uint32_t a = __float_as_uint(x) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;  // group_stat_add's amax: non-finite elements do not count
}

// The E8M0 byte of a power-of-two scale in [2^-127, 2^127] (2^-127 is the subnormal 0x00400000).
__device__ __forceinline__ uint8_t e8m0_byte(float s) {
  const uint32_t b = __float_as_uint(s);
  return static_cast<uint8_t>(b >= 0x00800000u ? b >> 23 : 0u);
}

template <bool E8M0>
__device__ __forceinline__ void store_scale(void* s, int64_t i, float v) {
  if constexpr (E8M0) static_cast<uint8_t*>(s)[i] = e8m0_byte(v);
  else static_cast<float*>(s)[i] = v;
}

__device__ __forceinline__ uint32_t encode4_spec(const float* f, float qv, const ScaleConsts& sc, bool sat) {
  uint32_t w = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) w |= static_cast<uint32_t>(encode_fp8(apply_scale(f[e], qv, sc), 0, sat)) << (8 * e);
  return w;
}

template <int G, bool BLOCK2D, bool TRANS, bool E8M0>
__global__ void __launch_bounds__(kThreads)
    block_quantize_kernel(const uint16_t* __restrict__ x, int64_t rows, int64_t cols, ScaleConsts sc, bool sat,
                          uint8_t* __restrict__ q_row, void* __restrict__ s_row, uint8_t* __restrict__ q_col,
                          void* __restrict__ s_col) {
  static_assert(G == 32 || G == 128, "groups of 32 or 128");
  static_assert(!BLOCK2D || (G == 128 && TRANS), "128x128 blocks come with the transposed copy");
  __shared__ uint32_t tile_w[kBqTile * kBqStride / 2];
  __shared__ float red[kWarps];
  const uint16_t* tile = reinterpret_cast<const uint16_t*>(tile_w);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tiles_c = (cols + kBqTile - 1) / kBqTile;
  const int64_t tiles = ((rows + kBqTile - 1) / kBqTile) * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kBqTile, c0 = (t % tiles_c) * kBqTile;
    const int tr = static_cast<int>(rows - r0 < kBqTile ? rows - r0 : kBqTile);  // multiples of G
    const int tc = static_cast<int>(cols - c0 < kBqTile ? cols - c0 : kBqTile);
    // Load: 128 rows x 16 vectors of 8 bf16, 8 per thread.
    uint32_t amax_bits = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int v = threadIdx.x + k * kThreads;
      const int rr = v >> 4, cv = v & 15;
      if (rr < tr && cv * 8 < tc) {
        const uint4 q = ld16(x + (r0 + rr) * cols + c0 + cv * 8);
        uint32_t* dst = &tile_w[rr * (kBqStride / 2) + cv * 4];
        dst[0] = q.x;
        dst[1] = q.y;
        dst[2] = q.z;
        dst[3] = q.w;
        if constexpr (BLOCK2D) {
          const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            amax_bits = max(amax_bits, max(finite_abs_bits(bf16_lo(w[e])), finite_abs_bits(bf16_hi(w[e]))));
        }
      }
    }
    float block_qv = 1.f, block_s = 1.f;
    if constexpr (BLOCK2D) {
      // Non-negative floats order like their bits: the block max of the bits as floats.
      const float m = block_max(__uint_as_float(amax_bits), red);
      plain_scales(amax_with_eps(m, sc), sc, block_qv, block_s);
    } else {
      __syncthreads();
    }

    // Row-wise copy: warp w takes rows w, w + 8, ...; lane l columns 4l .. 4l + 3.
    for (int rr = warp; rr < tr; rr += kWarps) {
      const bool active = lane * 4 < tc;
      float f[4] = {0.f, 0.f, 0.f, 0.f};
      if (active) {
        const uint32_t w0 = tile_w[rr * (kBqStride / 2) + lane * 2], w1 = tile_w[rr * (kBqStride / 2) + lane * 2 + 1];
        f[0] = bf16_lo(w0);
        f[1] = bf16_hi(w0);
        f[2] = bf16_lo(w1);
        f[3] = bf16_hi(w1);
      }
      float qv = block_qv, s = block_s;
      if constexpr (!BLOCK2D) {
        uint32_t m =
            max(max(finite_abs_bits(f[0]), finite_abs_bits(f[1])), max(finite_abs_bits(f[2]), finite_abs_bits(f[3])));
#pragma unroll
        for (int off = G / 8; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
        plain_scales(amax_with_eps(__uint_as_float(m), sc), sc, qv, s);
      }
      if (active) {
        const int64_t r = r0 + rr, c = c0 + lane * 4;
        *reinterpret_cast<uint32_t*>(q_row + r * cols + c) = encode4_spec(f, qv, sc, sat);
        if constexpr (!BLOCK2D)
          if ((lane * 4) % G == 0) store_scale<E8M0>(s_row, r * (cols / G) + c / G, s);
      }
    }
    if constexpr (BLOCK2D)
      if (threadIdx.x == 0) store_scale<E8M0>(s_row, (r0 / 128) * (cols / 128) + c0 / 128, block_s);

    if constexpr (TRANS) {
      // Transposed column-wise copy: warp w takes columns w, w + 8, ...; lane l rows 4l .. 4l + 3
      // (G = 128: the tile's 128 rows are one group).
      for (int cc = warp; cc < tc; cc += kWarps) {
        float f[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          f[e] = __uint_as_float(static_cast<uint32_t>(tile[(lane * 4 + e) * kBqStride + cc]) << 16);
        float qv = block_qv, s = block_s;
        if constexpr (!BLOCK2D) {
          uint32_t m =
              max(max(finite_abs_bits(f[0]), finite_abs_bits(f[1])), max(finite_abs_bits(f[2]), finite_abs_bits(f[3])));
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
          plain_scales(amax_with_eps(__uint_as_float(m), sc), sc, qv, s);
        }
        const int64_t c = c0 + cc;
        *reinterpret_cast<uint32_t*>(q_col + c * rows + r0 + lane * 4) = encode4_spec(f, qv, sc, sat);
        if constexpr (!BLOCK2D)
          if (lane == 0) store_scale<E8M0>(s_col, c * (rows / 128) + r0 / 128, s);
      }
      if constexpr (BLOCK2D)
        if (threadIdx.x == 0) store_scale<E8M0>(s_col, (c0 / 128) * (rows / 128) + r0 / 128, block_s);
    } else {
      // In-place column-wise copy: thread t takes column t % 128 and the groups t / 128, t / 128 + 2, ...
      const int cc = threadIdx.x & (kBqTile - 1);
      if (cc < tc) {
        for (int gr = threadIdx.x >> 7; gr * G < tr; gr += kThreads / kBqTile) {
          uint32_t m = 0;
          for (int i = 0; i < G; ++i)
            m = max(m,
                    finite_abs_bits(__uint_as_float(static_cast<uint32_t>(tile[(gr * G + i) * kBqStride + cc]) << 16)));
          float qv, s;
          plain_scales(amax_with_eps(__uint_as_float(m), sc), sc, qv, s);
          const int64_t c = c0 + cc, rg = r0 + gr * G;
          for (int i = 0; i < G; ++i) {
            const float f = __uint_as_float(static_cast<uint32_t>(tile[(gr * G + i) * kBqStride + cc]) << 16);
            q_col[(rg + i) * cols + c] = encode_fp8(apply_scale(f, qv, sc), 0, sat);
          }
          store_scale<E8M0>(s_col, (rg / G) * cols + c, s);
        }
      }
    }
    __syncthreads();  // the tile is rewritten next iteration
  }
}

// y = bf16(decode(q) * 2^(s - 127)); 8 elements of one row a thread (one 8-byte load, one 16-byte store).
// A NaN code or the NaN scale (0xFF) gives CUDA's NaN, whose bf16 bits (0x7FFF) are not the CPU's:
// the replay times this kernel, and its tests compare finite values.
template <bool COLUMNWISE>
__global__ void __launch_bounds__(kThreads)
    dequantize_mx_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s, int64_t rows, int64_t cols,
                         uint16_t* __restrict__ y) {
  const int64_t n8 = rows * cols / 8;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e0 = i * 8, r = e0 / cols, c = e0 % cols;
    const uint2 codes = __ldg(reinterpret_cast<const uint2*>(q + e0));
    const uint32_t w[2] = {codes.x, codes.y};
    uint32_t h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t si = COLUMNWISE ? (r / 32) * cols + c + e : r * (cols / 32) + c / 32;
      const float v = mul_rn(decode_fp8(static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4))), 0), decode_e8m0(s[si]));
      h[e] = f32_to_bf16_rne(v);
    }
    st16(y + e0, make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16)));
  }
}

// ---------------------------------------------------------------------------- RoPE
__global__ void __launch_bounds__(kThreads)
    rope_kernel(uint16_t* __restrict__ q, uint16_t* __restrict__ k, const float2* __restrict__ cs, int64_t tokens,
                int heads, int kv_heads, int d, int64_t seq, float sin_sign) {
  const int half = d / 2, pcs = half / 8;  // chunks of 8 rotation pairs per head
  const int64_t per_token = static_cast<int64_t>(heads + kv_heads) * pcs;
  const int64_t total = tokens * per_token;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / per_token;
    const int rem = static_cast<int>(i - t * per_token);
    const int hh = rem / pcs, pc = rem - hh * pcs;
    uint16_t* base = hh < heads ? q + (t * heads + hh) * d : k + (t * kv_heads + (hh - heads)) * d;
    const float2* c = cs + (t % seq) * half + pc * 8;
    float x1[8], x2[8], y1[8], y2[8];
    unpack8(ld16(base + pc * 8), x1);
    unpack8(ld16(base + half + pc * 8), x2);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float2 v = c[e];
      const float s = sin_sign * v.y;
      y1[e] = x1[e] * v.x - x2[e] * s;
      y2[e] = x2[e] * v.x + x1[e] * s;
    }
    float r[8];
    st16(base + pc * 8, pack8(y1, r));
    st16(base + half + pc * 8, pack8(y2, r));
  }
}

__global__ void rope_table_kernel(float2* cs, int64_t seq, int d, float theta) {
  const int half = d / 2;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < seq * half;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / half;
    const int j = static_cast<int>(i - p * half);
    const double inv_freq = pow(static_cast<double>(theta), -2.0 * j / d);
    double s, c;
    sincos(static_cast<double>(p) * inv_freq, &s, &c);
    cs[i] = make_float2(static_cast<float>(c), static_cast<float>(s));
  }
}

// ---------------------------------------------------------------------------- loss, embedding
__device__ __forceinline__ void combine_max_sum(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float mm = fmaxf(m, m2);
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(const uint16_t* __restrict__ logits, const int32_t* __restrict__ labels,
                         float* __restrict__ loss, uint16_t* __restrict__ dlogits, int64_t tokens, int64_t vocab) {
  __shared__ float red_m[kWarps], red_s[kWarps];
  const int64_t nv = vocab / 8;
  const float inv_tokens = 1.0f / static_cast<float>(tokens);
  for (int64_t row = blockIdx.x; row < tokens; row += gridDim.x) {
    const uint16_t* x = logits + row * vocab;
    float m = -INFINITY, s = 0.f;
    for (int64_t v = threadIdx.x; v < nv; v += kThreads) {
      float f[8];
      unpack8(ld16(x + v * 8), f);
#pragma unroll
      for (int e = 0; e < 8; ++e) combine_max_sum(m, s, f[e], 1.0f);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
      combine_max_sum(m, s, m2, s2);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
      red_m[threadIdx.x >> 5] = m;
      red_s[threadIdx.x >> 5] = s;
    }
    __syncthreads();
    float M = -INFINITY, S = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) combine_max_sum(M, S, red_m[i], red_s[i]);
    const int32_t label = labels[row];
    if (threadIdx.x == 0) loss[row] = M + __logf(S) - fp8sim::bf16_to_f32(x[label]);
    const float inv_s = 1.0f / S;
    for (int64_t v = threadIdx.x; v < nv; v += kThreads) {
      float f[8];
      unpack8(ld16(x + v * 8), f);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float p = __expf(f[e] - M) * inv_s;
        if (v * 8 + e == label) p -= 1.0f;
        f[e] = p * inv_tokens;
      }
      float r[8];
      st16(dlogits + row * vocab + v * 8, pack8(f, r));
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    embedding_fwd_kernel(const int32_t* __restrict__ ids, const uint16_t* __restrict__ table,
                         uint16_t* __restrict__ out, int64_t tokens, int64_t hidden) {
  const int64_t nv = hidden / 8, total = tokens * nv;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / nv, v = i - t * nv;
    st16(out + t * hidden + v * 8, ld16(table + static_cast<int64_t>(ids[t]) * hidden + v * 8));
  }
}

__global__ void __launch_bounds__(kThreads)
    embedding_bwd_kernel(const int32_t* __restrict__ ids, const uint16_t* __restrict__ dy, float* __restrict__ dtable,
                         int64_t tokens, int64_t hidden) {
  const int64_t nv = hidden / 8, total = tokens * nv;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / nv, v = i - t * nv;
    float f[8];
    unpack8(ld16(dy + t * hidden + v * 8), f);
    float* dst = dtable + static_cast<int64_t>(ids[t]) * hidden + v * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) atomicAdd(dst + e, f[e]);
  }
}

// ---------------------------------------------------------------------------- fills
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ uint64_t hash_index(uint64_t seed, int64_t i) {
  return mix64(seed * 0x100000001B3ull ^ static_cast<uint64_t>(i));
}
#define FP8SIM_FILL_LOOP(n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void fill_bf16_normal_kernel(uint16_t* x, int64_t n, uint64_t seed, float stddev) {
  FP8SIM_FILL_LOOP(n) {
    const uint64_t h = hash_index(seed, i);
    const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = (static_cast<float>(h & 0xFFFFFFu) + 0.5f) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * stddev;
    x[i] = fp8sim::f32_to_bf16_rne(z);
  }
}
__global__ void fill_fp8_codes_kernel(uint8_t* x, int64_t n, uint64_t seed, bool e5m2) {
  FP8SIM_FILL_LOOP(n) {
    uint8_t c = static_cast<uint8_t>(hash_index(seed, i) >> 56);
    if (e5m2) {
      if ((c & 0x7Cu) == 0x7Cu) c = static_cast<uint8_t>(c & ~0x04u);  // no Inf/NaN exponent
    } else if ((c & 0x7Fu) == 0x7Fu) {
      c = static_cast<uint8_t>(c ^ 0x01u);  // no NaN
    }
    x[i] = c;
  }
}
__global__ void fill_bf16_scales_kernel(uint16_t* x, int64_t n, uint64_t seed) {
  FP8SIM_FILL_LOOP(n) {
    const uint64_t h = hash_index(seed, i);
    const int e = -12 + static_cast<int>((h >> 60) % 9u);                          // 2^-12 .. 2^-4
    const float mant = 1.0f + static_cast<float>((h >> 32) & 0xFFFFu) / 65536.0f;  // [1, 2)
    x[i] = fp8sim::f32_to_bf16_rne(ldexpf(mant, e));
  }
}
__global__ void fill_f32_uniform_kernel(float* x, int64_t n, uint64_t seed, float lo, float hi) {
  FP8SIM_FILL_LOOP(n) {
    const float u = static_cast<float>(hash_index(seed, i) >> 40) * (1.0f / 16777216.0f);
    x[i] = lo + (hi - lo) * u;
  }
}
__global__ void fill_i32_below_kernel(int32_t* x, int64_t n, uint64_t seed, int32_t bound) {
  FP8SIM_FILL_LOOP(n) { x[i] = static_cast<int32_t>((hash_index(seed, i) >> 33) % static_cast<uint64_t>(bound)); }
}

int fill_grid(int64_t n) { return grid_for(n, 32); }

}  // namespace

// ============================================================================ launchers
int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    FP8SIM_CUDA_CHECK(cudaGetDevice(&dev));
    FP8SIM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms > 0 ? sms : 1;
  }();
  return n;
}

bool rmsnorm_supported(int64_t cols) { return cols > 0 && cols % 16 == 0 && cols <= 16384; }

namespace {
template <bool G16, bool ROWMAX>
bool rmsnorm_fwd_dispatch(const uint16_t* x, const uint8_t* xq, const uint16_t* xs, const uint16_t* w, uint16_t* y,
                          float* rstd, float* row_amax, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (!rmsnorm_supported(cols) || rows <= 0) return false;
  const int chunks = static_cast<int>(cols / 16);
  const int grid = grid_for_rows(rows, 8);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  if (chunks <= kThreads)
    rmsnorm_fwd_kernel<G16, ROWMAX, 1>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, y, rstd, row_amax, rows, chunks, inv_cols, eps);
  else if (chunks <= 2 * kThreads)
    rmsnorm_fwd_kernel<G16, ROWMAX, 2>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, y, rstd, row_amax, rows, chunks, inv_cols, eps);
  else
    rmsnorm_fwd_kernel<G16, ROWMAX, 4>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, y, rstd, row_amax, rows, chunks, inv_cols, eps);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
template <bool G16>
bool rmsnorm_bwd_dispatch(const uint16_t* x, const uint8_t* xq, const uint16_t* xs, const uint16_t* w,
                          const float* rstd, const uint16_t* dy, uint16_t* dx, float* dw_partial, float* dw,
                          int64_t rows, int64_t cols, cudaStream_t stream) {
  if (!rmsnorm_supported(cols) || rows <= 0) return false;
  const int chunks = static_cast<int>(cols / 16);
  const int64_t parts = rmsnorm_bwd_partial_rows(rows);
  const int grid = static_cast<int>(parts);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  if (chunks <= kThreads)
    rmsnorm_bwd_kernel<G16, 1>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, rstd, dy, dx, dw_partial, rows, chunks, inv_cols);
  else if (chunks <= 2 * kThreads)
    rmsnorm_bwd_kernel<G16, 2>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, rstd, dy, dx, dw_partial, rows, chunks, inv_cols);
  else
    rmsnorm_bwd_kernel<G16, 4>
        <<<grid, kThreads, 0, stream>>>(x, xq, xs, w, rstd, dy, dx, dw_partial, rows, chunks, inv_cols);
  FP8SIM_CUDA_CHECK_LAUNCH();
  column_sum_kernel<<<static_cast<int>((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(dw_partial, dw, parts,
                                                                                                 cols);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
}  // namespace

bool rmsnorm_fwd_bf16(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                      float eps, cudaStream_t stream) {
  return rmsnorm_fwd_dispatch<false, false>(x, nullptr, nullptr, w, y, rstd, nullptr, rows, cols, eps, stream);
}
bool rmsnorm_fwd_g16(const uint8_t* xq, const uint16_t* xs, const uint16_t* w, uint16_t* y, float* rstd,
                     float* row_amax, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  return rmsnorm_fwd_dispatch<true, true>(nullptr, xq, xs, w, y, rstd, row_amax, rows, cols, eps, stream);
}
int64_t rmsnorm_bwd_partial_rows(int64_t rows) {
  const int64_t cap = static_cast<int64_t>(sm_count()) * 4;
  return rows < cap ? (rows < 1 ? 1 : rows) : cap;
}
bool rmsnorm_bwd_bf16(const uint16_t* x, const uint16_t* w, const float* rstd, const uint16_t* dy, uint16_t* dx,
                      float* dw_partial, float* dw, int64_t rows, int64_t cols, cudaStream_t stream) {
  return rmsnorm_bwd_dispatch<false>(x, nullptr, nullptr, w, rstd, dy, dx, dw_partial, dw, rows, cols, stream);
}
bool rmsnorm_bwd_g16(const uint8_t* xq, const uint16_t* xs, const uint16_t* w, const float* rstd, const uint16_t* dy,
                     uint16_t* dx, float* dw_partial, float* dw, int64_t rows, int64_t cols, cudaStream_t stream) {
  return rmsnorm_bwd_dispatch<true>(nullptr, xq, xs, w, rstd, dy, dx, dw_partial, dw, rows, cols, stream);
}

#define FP8SIM_GROUPS_OR_FAIL(n)               \
  if ((n) <= 0 || (n) % 16 != 0) return false; \
  const int64_t groups = (n) / 16;             \
  const int grid = grid_for(groups, 16)

bool silu_mul_fwd_bf16(const uint16_t* g, const uint16_t* u, uint16_t* m, int64_t n, cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  silu_mul_fwd_bf16_kernel<<<grid, kThreads, 0, stream>>>(g, u, m, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool silu_mul_fwd_g16(const uint8_t* gq, const uint16_t* gs, const uint8_t* uq, const uint16_t* us, uint8_t* silu_q,
                      uint16_t* silu_s, uint16_t* m, uint16_t* m_gmax, int64_t n, cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  silu_mul_fwd_g16_kernel<<<grid, kThreads, 0, stream>>>(gq, gs, uq, us, silu_q, silu_s, m, m_gmax, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool silu_mul_bwd_bf16(const uint16_t* g, const uint16_t* u, const uint16_t* dm, uint16_t* dg, uint16_t* du, int64_t n,
                       cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  silu_mul_bwd_bf16_kernel<<<grid, kThreads, 0, stream>>>(g, u, dm, dg, du, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool silu_mul_bwd_g16(const uint8_t* gq, const uint16_t* gs, const uint8_t* uq, const uint16_t* us, const uint16_t* dm,
                      uint16_t* dg, uint16_t* dg_gmax, uint16_t* du, uint16_t* du_gmax, int64_t n,
                      cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  silu_mul_bwd_g16_kernel<<<grid, kThreads, 0, stream>>>(gq, gs, uq, us, dm, dg, dg_gmax, du, du_gmax, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* c, int64_t n, cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  add_kernel<0><<<grid, kThreads, 0, stream>>>(a, b, c, nullptr, nullptr, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool add_bf16_g16(const uint16_t* a, const uint16_t* b, uint16_t* c, uint8_t* cq, uint16_t* cs, int64_t n,
                  cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  add_kernel<1><<<grid, kThreads, 0, stream>>>(a, b, c, cq, cs, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool add_bf16_gmax(const uint16_t* a, const uint16_t* b, uint16_t* c, uint16_t* c_gmax, int64_t n,
                   cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  add_kernel<2><<<grid, kThreads, 0, stream>>>(a, b, c, nullptr, c_gmax, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool quantize_g16(const uint16_t* x, uint8_t* q, uint16_t* s, int64_t n, bool e5m2, cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  if (e5m2) quantize_g16_kernel<true><<<grid, kThreads, 0, stream>>>(x, q, s, groups);
  else quantize_g16_kernel<false><<<grid, kThreads, 0, stream>>>(x, q, s, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
bool group_max(const uint16_t* x, uint16_t* gmax, int64_t n, cudaStream_t stream) {
  FP8SIM_GROUPS_OR_FAIL(n);
  group_max_kernel<<<grid, kThreads, 0, stream>>>(x, gmax, groups);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

namespace {
template <int MODE>
bool reduce_max_launch(const void* v, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return false;
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));
  const int64_t per_thread = MODE == 0 ? 8 : 4;
  reduce_max_kernel<MODE><<<grid_for((n + per_thread - 1) / per_thread, 8), kThreads, 0, stream>>>(v, n, out);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}
}  // namespace

bool reduce_max_bf16(const uint16_t* v, int64_t n, float* out, cudaStream_t stream) {
  return reduce_max_launch<0>(v, n, out, stream);
}
bool reduce_max_f32(const float* v, int64_t n, float* out, cudaStream_t stream) {
  return reduce_max_launch<1>(v, n, out, stream);
}
bool amax_bf16(const uint16_t* x, int64_t n, float* out, cudaStream_t stream) {
  return reduce_max_launch<0>(x, n, out, stream);
}

bool cast_transpose_supported(int64_t rows, int64_t cols, bool transposed) {
  return rows > 0 && cols > 0 && cols % 16 == 0 && (!transposed || rows % 16 == 0);
}

namespace {
template <bool PLAIN, bool TRANS, bool AMAX, bool E5M2>
void cast_transpose_launch(const uint16_t* x, int64_t rows, int64_t cols, const float* amax_in, uint8_t* out,
                           uint8_t* out_t, float* amax_out, int grid, cudaStream_t stream) {
  cast_transpose_kernel<false, PLAIN, TRANS, AMAX, E5M2>
      <<<grid, kThreads, 0, stream>>>(x, rows, cols, amax_in, out, out_t, amax_out);
}
template <bool PLAIN, bool TRANS, bool AMAX>
void cast_transpose_fmt(bool e5m2, const uint16_t* x, int64_t rows, int64_t cols, const float* amax_in, uint8_t* out,
                        uint8_t* out_t, float* amax_out, int grid, cudaStream_t stream) {
  if (e5m2) cast_transpose_launch<PLAIN, TRANS, AMAX, true>(x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
  else cast_transpose_launch<PLAIN, TRANS, AMAX, false>(x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
}
}  // namespace

bool cast_transpose(const uint16_t* x, int64_t rows, int64_t cols, const float* amax_in, bool e5m2, uint8_t* out,
                    uint8_t* out_t, float* amax_out, cudaStream_t stream) {
  const bool plain = out != nullptr, trans = out_t != nullptr, amax = amax_out != nullptr;
  if ((!plain && !trans) || !cast_transpose_supported(rows, cols, trans) || amax_in == nullptr) return false;
  const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  const int64_t cap = static_cast<int64_t>(sm_count()) * 8;
  const int grid = static_cast<int>(tiles < cap ? tiles : cap);
  if (plain && trans) {
    if (amax) cast_transpose_fmt<true, true, true>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
    else cast_transpose_fmt<true, true, false>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
  } else if (trans) {
    if (amax) cast_transpose_fmt<false, true, true>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
    else cast_transpose_fmt<false, true, false>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
  } else {
    if (amax) cast_transpose_fmt<true, false, true>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
    else cast_transpose_fmt<true, false, false>(e5m2, x, rows, cols, amax_in, out, out_t, amax_out, grid, stream);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool transpose_fp8(const uint8_t* x, int64_t rows, int64_t cols, uint8_t* xt, cudaStream_t stream) {
  if (!cast_transpose_supported(rows, cols, true)) return false;
  const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  const int64_t cap = static_cast<int64_t>(sm_count()) * 8;
  cast_transpose_kernel<true, false, true, false, false>
      <<<static_cast<int>(tiles < cap ? tiles : cap), kThreads, 0, stream>>>(x, rows, cols, nullptr, nullptr, xt,
                                                                             nullptr);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool block_quantize_supported(const BlockQuantizeParams& p) {
  const int64_t g = p.group;
  if (g != 32 && g != 128) return false;
  if ((p.block2d || p.col_transposed) && g != 128) return false;
  if (p.block2d && !p.col_transposed) return false;
  return p.rows > 0 && p.cols > 0 && p.rows % g == 0 && p.cols % g == 0 && p.rows < (int64_t{1} << 31) &&
         p.cols < (int64_t{1} << 31);
}

namespace {
template <int G, bool BLOCK2D, bool TRANS, bool E8M0>
void block_quantize_launch(const uint16_t* x, const BlockQuantizeParams& p, uint8_t* q_row, void* s_row, uint8_t* q_col,
                           void* s_col, cudaStream_t stream) {
  const int64_t tiles = ((p.rows + kBqTile - 1) / kBqTile) * ((p.cols + kBqTile - 1) / kBqTile);
  const int64_t cap = static_cast<int64_t>(sm_count()) * 8;
  block_quantize_kernel<G, BLOCK2D, TRANS, E8M0><<<static_cast<int>(tiles < cap ? tiles : cap), kThreads, 0, stream>>>(
      x, p.rows, p.cols, p.sc, p.saturate, q_row, s_row, q_col, s_col);
}
}  // namespace

bool block_quantize(const uint16_t* x, const BlockQuantizeParams& p, uint8_t* q_row, void* s_row, uint8_t* q_col,
                    void* s_col, cudaStream_t stream) {
  if (!block_quantize_supported(p)) return false;
  if (p.block2d) {
    if (p.e8m0) block_quantize_launch<128, true, true, true>(x, p, q_row, s_row, q_col, s_col, stream);
    else block_quantize_launch<128, true, true, false>(x, p, q_row, s_row, q_col, s_col, stream);
  } else if (p.col_transposed) {
    if (p.e8m0) block_quantize_launch<128, false, true, true>(x, p, q_row, s_row, q_col, s_col, stream);
    else block_quantize_launch<128, false, true, false>(x, p, q_row, s_row, q_col, s_col, stream);
  } else if (p.group == 128) {
    if (p.e8m0) block_quantize_launch<128, false, false, true>(x, p, q_row, s_row, q_col, s_col, stream);
    else block_quantize_launch<128, false, false, false>(x, p, q_row, s_row, q_col, s_col, stream);
  } else {
    if (p.e8m0) block_quantize_launch<32, false, false, true>(x, p, q_row, s_row, q_col, s_col, stream);
    else block_quantize_launch<32, false, false, false>(x, p, q_row, s_row, q_col, s_col, stream);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool dequantize_mx(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t cols, bool columnwise, uint16_t* y,
                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || (columnwise && rows % 32 != 0)) return false;
  const int grid = grid_for(rows * cols / 8, 16);
  if (columnwise) dequantize_mx_kernel<true><<<grid, kThreads, 0, stream>>>(q, s, rows, cols, y);
  else dequantize_mx_kernel<false><<<grid, kThreads, 0, stream>>>(q, s, rows, cols, y);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool rope(uint16_t* q, uint16_t* k, const float2* cos_sin, int64_t tokens, int64_t heads, int64_t kv_heads,
          int64_t head_dim, int64_t seq, bool backward, cudaStream_t stream) {
  if (tokens <= 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 || head_dim % 16 != 0 || seq <= 0) return false;
  const int64_t total = tokens * (heads + kv_heads) * (head_dim / 16);
  rope_kernel<<<grid_for(total, 16), kThreads, 0, stream>>>(q, k, cos_sin, tokens, static_cast<int>(heads),
                                                            static_cast<int>(kv_heads), static_cast<int>(head_dim), seq,
                                                            backward ? -1.0f : 1.0f);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

void rope_table(float2* cos_sin, int64_t seq, int64_t head_dim, float theta, cudaStream_t stream) {
  rope_table_kernel<<<grid_for(seq * (head_dim / 2), 8), kThreads, 0, stream>>>(cos_sin, seq,
                                                                                static_cast<int>(head_dim), theta);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

bool cross_entropy(const uint16_t* logits, const int32_t* labels, float* loss, uint16_t* dlogits, int64_t tokens,
                   int64_t vocab, cudaStream_t stream) {
  if (tokens <= 0 || vocab <= 0 || vocab % 8 != 0) return false;
  cross_entropy_kernel<<<grid_for_rows(tokens, 8), kThreads, 0, stream>>>(logits, labels, loss, dlogits, tokens, vocab);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool embedding_fwd(const int32_t* ids, const uint16_t* table, uint16_t* out, int64_t tokens, int64_t hidden,
                   cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0 || hidden % 8 != 0) return false;
  embedding_fwd_kernel<<<grid_for(tokens * (hidden / 8), 16), kThreads, 0, stream>>>(ids, table, out, tokens, hidden);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

bool embedding_bwd(const int32_t* ids, const uint16_t* dy, float* dtable, int64_t tokens, int64_t hidden, int64_t vocab,
                   cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0 || vocab <= 0 || hidden % 8 != 0) return false;
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(dtable, 0, static_cast<size_t>(vocab) * hidden * sizeof(float), stream));
  embedding_bwd_kernel<<<grid_for(tokens * (hidden / 8), 16), kThreads, 0, stream>>>(ids, dy, dtable, tokens, hidden);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

void fill_bf16_normal(uint16_t* x, int64_t n, uint64_t seed, float stddev, cudaStream_t stream) {
  if (n <= 0) return;
  fill_bf16_normal_kernel<<<fill_grid(n), kThreads, 0, stream>>>(x, n, seed, stddev);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_fp8_codes(uint8_t* x, int64_t n, uint64_t seed, bool e5m2, cudaStream_t stream) {
  if (n <= 0) return;
  fill_fp8_codes_kernel<<<fill_grid(n), kThreads, 0, stream>>>(x, n, seed, e5m2);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_bf16_scales(uint16_t* x, int64_t n, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  fill_bf16_scales_kernel<<<fill_grid(n), kThreads, 0, stream>>>(x, n, seed);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_f32_uniform(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return;
  fill_f32_uniform_kernel<<<fill_grid(n), kThreads, 0, stream>>>(x, n, seed, lo, hi);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_i32_below(int32_t* x, int64_t n, uint64_t seed, int32_t bound, cudaStream_t stream) {
  if (n <= 0 || bound <= 0) return;
  fill_i32_below_kernel<<<fill_grid(n), kThreads, 0, stream>>>(x, n, seed, bound);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu::speed
