// AdamW kernels. Every arithmetic step is sim/optim's FP8SIM_HD code (adamw_element, and for FP8
// states lowp_group.hpp's group_decode / group_params_from_stats / group_encode and scale.hpp's
// group statistics, which are sim/quant's DE functions), or a restructuring of it that performs
// the same operations (per-group work hoisted), or, for DE moments, one of two exact shortcuts
// (mantissa-table log2 for dequantization, proven in gpu/quant/dmath_gpu.cuh; guarded
// approximation for requantization, proven in gpu/quant/guarded_encode.cuh), so the GPU's p, codes and group parameters
// equal the CPU reference's bit for bit (tests/test_optim_gpu.cpp, fp8sim compare).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/optim/adamw_launch.hpp"
#include "gpu/quant/dmath_gpu.cuh"
#include "gpu/quant/guarded_encode.cuh"
#include "gpu/quant/quantize_kernels.cuh"
#include "sim/formats/philox.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

__global__ void __launch_bounds__(256)
    adamw_fp32_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                      int64_t n, bool vec, optim::AdamwStepConsts c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 pp = reinterpret_cast<float4*>(p)[i];
    const float4 gg = reinterpret_cast<const float4*>(g)[i];
    float4 mm = reinterpret_cast<float4*>(m)[i];
    float4 vv = reinterpret_cast<float4*>(v)[i];
    optim::adamw_element(pp.x, gg.x, mm.x, vv.x, c);
    optim::adamw_element(pp.y, gg.y, mm.y, vv.y, c);
    optim::adamw_element(pp.z, gg.z, mm.z, vv.z, c);
    optim::adamw_element(pp.w, gg.w, mm.w, vv.w, c);
    reinterpret_cast<float4*>(p)[i] = pp;
    reinterpret_cast<float4*>(m)[i] = mm;
    reinterpret_cast<float4*>(v)[i] = vv;
  }
  for (int64_t i = 4 * n4 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float pp = p[i], mm = m[i], vv = v[i];
    optim::adamw_element(pp, g[i], mm, vv, c);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
  }
}

// ---- Elementwise-state AdamW (bf16, te-fp8, fp8lm and every per-tensor or 16-bit state) ----
// Each element: its moments decoded (16-bit widening, FP8 through a 256-entry table, times the old
// per-tensor scale where there is one, as the dequantizer does), adamw_element, and the new
// moments encoded as the quantizer stores them. A scaled moment needs the amax of the whole new
// moment before its first code is written (the CPU quantizes the finished moment), so such states
// take two passes: pass 1 recomputes only the new moments (adamw_moments: the same operations),
// reduces their finite amax and, in its last block, turns it into the new scale (plain_scales, as
// the per-tensor quantizer's stage 2 does); pass 2 is the fused step. Pass 1 reads g and the
// codes: 6 of te-fp8's 22 bytes per parameter. States without a scale (bf16) run pass 2 alone.
// Versions: sim/speed/kernel_versions.hpp's kAdamwBf16mKernelVersion and kAdamwLowpKernelVersion.
// Workspace words: 0 amax of m, 1 amax of v (bits), 2 block counter (all zeroed by the launcher),
// 3 / 4 the old scales of m / v, 5 / 6 the new divisors (s_quant) of m / v.

constexpr int kElemUnits = 2;  // 4-element units per thread per iteration (loads first, then math)

struct ElemUnit {
  float4 p, g;
  uint2 m, v;  // codes: 4 bytes (FP8, in .x) or 8 bytes (16-bit)
};

__device__ __forceinline__ bool elem_scaled(const ElemMoment& e) { return e.kind != ElemKind::Pass16; }

// The kernels are instantiated per pair of moment kinds (KM, KV: ElemKind values, known at compile
// time, so every per-element choice of kind folds away; the launch dispatches on the moments' kinds).
template <int K>
__device__ __forceinline__ ElemMoment elem_fixed(ElemMoment e) {
  e.kind = static_cast<ElemKind>(K);
  return e;
}

__device__ __forceinline__ uint2 elem_load_codes(const ElemMoment& e, int64_t unit) {
  if (e.kind == ElemKind::Fp8) return make_uint2(static_cast<const uint32_t*>(e.codes)[unit], 0u);
  return static_cast<const uint2*>(e.codes)[unit];
}
__device__ __forceinline__ uint32_t elem_load_code(const ElemMoment& e, int64_t i) {
  if (e.kind == ElemKind::Fp8) return static_cast<const uint8_t*>(e.codes)[i];
  return static_cast<const uint16_t*>(e.codes)[i];
}

// Element j (0..3) of a unit's codes.
__device__ __forceinline__ uint32_t elem_code_of(const ElemMoment& e, uint2 w, int j) {
  if (e.kind == ElemKind::Fp8) return (w.x >> (8 * j)) & 0xFFu;
  return ((j < 2 ? w.x : w.y) >> (16 * (j & 1))) & 0xFFFFu;
}

// Bits of the kernels' `hw` argument: the hardware converters proven equal to the reference on this
// device (hw_cvt_verified for FP8, hw_fp16_verified for fp16), and kPow2: the product by an exact
// power-of-two reciprocal may replace the division. The launcher always sets kPow2; it is a run-time
// bit because under the 64-register bound the te-fp8 pair spills with the test compiled away and
// not with it (kernel-tuning.md).
constexpr unsigned kHwFp8 = 1u, kHwFp16 = 2u, kPow2 = 4u;

__device__ __forceinline__ float elem_widen16(const ElemMoment& e, uint32_t h, bool hw16) {
  if (e.format == 2) return bf16_to_f32(static_cast<uint16_t>(h));
  const bool nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;  // keeps its payload: the reference
  return hw16 && !nan ? fp16_to_f32_hw(h) : fp16_to_f32(static_cast<uint16_t>(h));
}

// The dequantized moment (dequant_kernel / dequant_passthrough_kernel's operations).
__device__ __forceinline__ float elem_decode(const ElemMoment& e, uint32_t code, float s_old, const float* lut,
                                             bool hw16) {
  if (e.kind == ElemKind::Fp8) return mul_rn(lut[code], s_old);
  const float w = elem_widen16(e, code, hw16);
  return e.kind == ElemKind::Scaled16 ? mul_rn_nan_kept(w, s_old) : w;
}

struct ElemEnc {
  float sq = 1.0f;    // the new divisor
  float rinv = 1.0f;  // pow2: 1 / sq, exact
  FastRecip rc{1.0f, 1.0f};
  // sq is a power of two with a normal reciprocal: x * rinv is RN(x / sq) for every x, the same
  // real number rounded once (fp32 subnormal results included), so the product replaces the division.
  bool pow2 = false;
  bool fast = false;  // FP8: elem_quot stands for the quotient of finite values (apply=div, round-to-nearest)
  bool hw = false;    // FP8: the hardware converter encodes finite values
  bool hw16 = false;  // fp16: the hardware converters encode and decode every value but NaN
};

// RN(x / sq) for a finite x, where k.fast holds (div_by's range, or an exact power-of-two product).
__device__ __forceinline__ float elem_quot(float x, const ElemEnc& k) {
  return k.pow2 ? __fmul_rn(x, k.rinv) : div_by(x, k.rc);
}

__device__ __forceinline__ uint32_t elem_encode16(const ElemMoment& e, float x, const ElemEnc& k) {
  float q = x;  // scaled16_kernel / passthrough_kernel
  if (e.kind == ElemKind::Scaled16) q = k.pow2 ? mul_rn_nan_kept(x, k.rinv) : div_rn_nan_kept(x, k.sq);
  if (e.format == 2) return f32_to_bf16_rne(q, e.saturate);
  return k.hw16 && !is_nan_bits(f32_bits(q)) ? f32_to_fp16_hw(q, e.saturate) : f32_to_fp16_rne(q, e.saturate);
}

// The FP8 code of one value, by the per-tensor encode's reference path (encode_tensor_word_ref).
// Out of line (rare: non-finite values, stochastic rounding, scales outside div_by's range), with
// scalar arguments (a reference to a kernel parameter would copy the parameter to local memory).
__device__ __noinline__ uint32_t encode_fp8_ref_scalar(float x, ElemEnc k, Apply apply, int format, bool saturate,
                                                       bool stochastic, uint64_t seed, uint64_t idx) {
  ScaleConsts sc;
  sc.apply = apply;
  const bool fin = is_finite_bits(f32_bits(x));
  const float q = k.fast && fin ? elem_quot(x, k) : apply_scale(x, k.sq, sc);
  return stochastic ? encode_fp8_stochastic(q, format, saturate, philox_word(seed, idx))
                    : encode_fp8(q, format, saturate);
}
__device__ __forceinline__ uint32_t elem_encode_fp8_ref(const ElemMoment& e, float x, const ElemEnc& k, uint64_t idx) {
  return encode_fp8_ref_scalar(x, k, e.sc.apply, e.format, e.saturate, e.stochastic, e.seed, idx);
}

// The codes of 4 consecutive new moments (elements idx .. idx + 3), packed as elem_load_codes reads them.
__device__ __forceinline__ uint2 elem_encode4(const ElemMoment& e, const float (&x)[4], const ElemEnc& k,
                                              uint64_t idx) {
  if (e.kind != ElemKind::Fp8) {
    uint32_t h[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = elem_encode16(e, x[j], k);
    return make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
  }
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) m = max(m, f32_bits(x[j]) & 0x7FFFFFFFu);
  if (k.hw && k.fast && m < 0x7F800000u) {  // every value finite: the encode kernel's hardware path
    float q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = elem_quot(x[j], k);
    const uint32_t w = e.format == 0 ? cvt2_hw<E4M3Traits>(q[0], q[1]) | (cvt2_hw<E4M3Traits>(q[2], q[3]) << 16)
                                     : cvt2_hw<E5M2Traits>(q[0], q[1]) | (cvt2_hw<E5M2Traits>(q[2], q[3]) << 16);
    return make_uint2(w, 0u);
  }
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) w |= elem_encode_fp8_ref(e, x[j], k, idx + j) << (8 * j);
  return make_uint2(w, 0u);
}

__device__ __forceinline__ void elem_store_codes(const ElemMoment& e, int64_t unit, uint2 w) {
  if (e.kind == ElemKind::Fp8) static_cast<uint32_t*>(e.codes)[unit] = w.x;
  else static_cast<uint2*>(e.codes)[unit] = w;
}
__device__ __forceinline__ void elem_store_code(const ElemMoment& e, int64_t i, uint32_t code) {
  if (e.kind == ElemKind::Fp8) static_cast<uint8_t*>(e.codes)[i] = static_cast<uint8_t>(code);
  else static_cast<uint16_t*>(e.codes)[i] = static_cast<uint16_t>(code);
}

__device__ __forceinline__ void elem_fill_luts(const ElemMoment& m, const ElemMoment& v, float* lut_m, float* lut_v) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    if (m.kind == ElemKind::Fp8) lut_m[i] = decode_fp8(static_cast<uint8_t>(i), m.format);
    if (v.kind == ElemKind::Fp8) lut_v[i] = decode_fp8(static_cast<uint8_t>(i), v.format);
  }
  __syncthreads();
}

__device__ __forceinline__ void elem_amax_add(uint32_t& amax, float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  amax = a < 0x7F800000u && a > amax ? a : amax;  // finite values only, as the quantizer's stage 1
}

// A scaled moment's new scale from the amax of the new moment (the per-tensor quantizer's
// finish_scale): the divisor into *sq_out, the stored scale over the old one.
__device__ __forceinline__ void elem_new_scale(const ElemMoment& e, uint32_t* amax, uint32_t* sq_out) {
  if (!elem_scaled(e)) return;
  float sq, stored;
  plain_scales(amax_with_eps(f32_from_bits(atomicMax(amax, 0u)), e.sc), e.sc, sq, stored);
  *sq_out = f32_bits(sq);
  e.scale[0] = stored;
}

// Pass 1: the finite amax of the new m and v; the last block writes the new scales.
template <int KM, int KV>
__global__ void __launch_bounds__(256)
    adamw_elem_amax_kernel(const float* __restrict__ g, ElemMoment m_arg, ElemMoment v_arg, int64_t n, bool vec,
                           optim::AdamwStepConsts c, uint32_t* __restrict__ ws, unsigned hw) {
  const ElemMoment m = elem_fixed<KM>(m_arg), v = elem_fixed<KV>(v_arg);
  __shared__ float lut_m[256], lut_v[256];
  __shared__ uint32_t warp_max[2][8];
  elem_fill_luts(m, v, lut_m, lut_v);
  const float sm_old = elem_scaled(m) ? m.scale[0] : 1.0f, sv_old = elem_scaled(v) ? v.scale[0] : 1.0f;
  const bool hw16 = hw & kHwFp16;
  uint32_t am = 0, av = 0;
  const int64_t units = vec ? n / 4 : 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u0 < units;
       u0 += kElemUnits * stride) {
    float4 gg[kElemUnits];
    uint2 cm[kElemUnits], cv[kElemUnits];
#pragma unroll
    for (int k = 0; k < kElemUnits; ++k) {
      const int64_t u = u0 + k * stride;
      if (u < units) {
        gg[k] = reinterpret_cast<const float4*>(g)[u];
        cm[k] = elem_load_codes(m, u);
        cv[k] = elem_load_codes(v, u);
      }
    }
#pragma unroll
    for (int k = 0; k < kElemUnits; ++k) {
      if (u0 + k * stride >= units) break;
      const float gj[4] = {gg[k].x, gg[k].y, gg[k].z, gg[k].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float mm = elem_decode(m, elem_code_of(m, cm[k], j), sm_old, lut_m, hw16);
        float vv = elem_decode(v, elem_code_of(v, cv[k], j), sv_old, lut_v, hw16);
        optim::adamw_moments(gj[j], mm, vv, c);
        elem_amax_add(am, mm);
        elem_amax_add(av, vv);
      }
    }
  }
  for (int64_t i = 4 * units + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float mm = elem_decode(m, elem_load_code(m, i), sm_old, lut_m, hw16);
    float vv = elem_decode(v, elem_load_code(v, i), sv_old, lut_v, hw16);
    optim::adamw_moments(g[i], mm, vv, c);
    elem_amax_add(am, mm);
    elem_amax_add(av, vv);
  }
  am = warp_max_u32(am);
  av = warp_max_u32(av);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_max[0][warp] = am;
    warp_max[1][warp] = av;
  }
  __syncthreads();
  if (threadIdx.x < 2) {
    uint32_t r = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) r = max(r, warp_max[threadIdx.x][w]);
    if (r) atomicMax(ws + threadIdx.x, r);  // non-negative floats order like their bits
  }
  if (last_block_done(ws + 2) && threadIdx.x == 0) {
    ws[3] = f32_bits(sm_old);
    ws[4] = f32_bits(sv_old);
    elem_new_scale(m, ws + 0, ws + 5);
    elem_new_scale(v, ws + 1, ws + 6);
  }
}

__device__ __forceinline__ ElemEnc elem_enc(const ElemMoment& e, const uint32_t* ws, int k, unsigned hw) {
  ElemEnc r;
  r.hw16 = (hw & kHwFp16) && e.kind != ElemKind::Fp8 && e.format == 3;
  if (!elem_scaled(e)) return r;
  r.sq = f32_from_bits(ws[5 + k]);
  const uint32_t b = f32_bits(r.sq);
  r.pow2 = (hw & kPow2) && (b & 0x007FFFFFu) == 0 && (b >> 23) - 1u < 253u;  // 2^-126 <= sq <= 2^126
  r.rinv = r.pow2 ? div_rn(1.0f, r.sq) : 1.0f;
  if (e.kind == ElemKind::Fp8) {
    r.fast = e.sc.apply == Apply::Div && !e.stochastic && (r.pow2 || fast_recip_ok(r.sq));
    r.rc = fast_recip(r.fast && !r.pow2 ? r.sq : 1.0f);
    // As the per-tensor encode (tensor_hw_ok): non-saturating storage only where no |x / s| can
    // overflow, which a scale from the moment's own amax without a negative epsilon guarantees.
    r.hw = (hw & kHwFp8) && !e.stochastic && (e.saturate || e.sc.eps >= 0.0);
  }
  return r;
}

// Pass 2: the fused step (decode, adamw_element, encode), 4 elements per unit. At most 64
// registers, four blocks of 256 per SM: the FP8-moment pairs would otherwise take 76-90 registers
// and two or three blocks, which measured slower (docs/dev-notes/kernel-tuning.md).
template <int KM, int KV>
__global__ void __launch_bounds__(256, 4)
    adamw_elem_step_kernel(float* __restrict__ p, const float* __restrict__ g, ElemMoment m_arg, ElemMoment v_arg,
                           int64_t n, bool vec, optim::AdamwStepConsts c, const uint32_t* __restrict__ ws,
                           unsigned hw) {
  const ElemMoment m = elem_fixed<KM>(m_arg), v = elem_fixed<KV>(v_arg);
  __shared__ float lut_m[256], lut_v[256];
  elem_fill_luts(m, v, lut_m, lut_v);
  const float sm_old = elem_scaled(m) ? f32_from_bits(ws[3]) : 1.0f;
  const float sv_old = elem_scaled(v) ? f32_from_bits(ws[4]) : 1.0f;
  const ElemEnc km = elem_enc(m, ws, 0, hw), kv = elem_enc(v, ws, 1, hw);
  const bool hw16 = hw & kHwFp16;
  const int64_t units = vec ? n / 4 : 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u0 < units;
       u0 += kElemUnits * stride) {
    ElemUnit in[kElemUnits];
#pragma unroll
    for (int k = 0; k < kElemUnits; ++k) {
      const int64_t u = u0 + k * stride;
      if (u < units) {
        in[k].p = reinterpret_cast<const float4*>(p)[u];
        in[k].g = reinterpret_cast<const float4*>(g)[u];
        in[k].m = elem_load_codes(m, u);
        in[k].v = elem_load_codes(v, u);
      }
    }
#pragma unroll
    for (int k = 0; k < kElemUnits; ++k) {
      const int64_t u = u0 + k * stride;
      if (u >= units) break;
      float pj[4] = {in[k].p.x, in[k].p.y, in[k].p.z, in[k].p.w};
      const float gj[4] = {in[k].g.x, in[k].g.y, in[k].g.z, in[k].g.w};
      float mm[4], vv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mm[j] = elem_decode(m, elem_code_of(m, in[k].m, j), sm_old, lut_m, hw16);
        vv[j] = elem_decode(v, elem_code_of(v, in[k].v, j), sv_old, lut_v, hw16);
        optim::adamw_element(pj[j], gj[j], mm[j], vv[j], c);
      }
      reinterpret_cast<float4*>(p)[u] = make_float4(pj[0], pj[1], pj[2], pj[3]);
      elem_store_codes(m, u, elem_encode4(m, mm, km, static_cast<uint64_t>(4 * u)));
      elem_store_codes(v, u, elem_encode4(v, vv, kv, static_cast<uint64_t>(4 * u)));
    }
  }
  for (int64_t i = 4 * units + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float pp = p[i];
    float mm = elem_decode(m, elem_load_code(m, i), sm_old, lut_m, hw16);
    float vv = elem_decode(v, elem_load_code(v, i), sv_old, lut_v, hw16);
    optim::adamw_element(pp, g[i], mm, vv, c);
    p[i] = pp;
    const uint64_t idx = static_cast<uint64_t>(i);
    elem_store_code(m, i, m.kind == ElemKind::Fp8 ? elem_encode_fp8_ref(m, mm, km, idx) : elem_encode16(m, mm, km));
    elem_store_code(v, i, v.kind == ElemKind::Fp8 ? elem_encode_fp8_ref(v, vv, kv, idx) : elem_encode16(v, vv, kv));
  }
}

__device__ __forceinline__ GroupStatBits reduce_group_stats(GroupStatBits s, int width) {
  for (int off = 1; off < width; off <<= 1) {
    GroupStatBits o;
    o.amax = __shfl_xor_sync(kFull, s.amax, off);
    o.amin = __shfl_xor_sync(kFull, s.amin, off);
    group_stat_merge(s, o);
  }
  return s;
}

// b ? y : x for a plain struct, word by word: `b ? y : x` on two kernel parameters of struct type
// made nvcc copy both to local memory and select an address (four local loads per group).
template <class S>
__device__ __forceinline__ S select_words(bool b, const S& x, const S& y) {
  static_assert(sizeof(S) % 4 == 0, "whole 32-bit words");
  constexpr int N = sizeof(S) / 4;
  uint32_t wx[N], wy[N];
  memcpy(wx, &x, sizeof(S));
  memcpy(wy, &y, sizeof(S));
#pragma unroll
  for (int i = 0; i < N; ++i) wx[i] = b ? wy[i] : wx[i];
  S r;
  memcpy(&r, wx, sizeof(S));
  return r;
}

__device__ __forceinline__ optim::GroupParams shfl_params(const optim::GroupParams& p, int src, int width = 32) {
  optim::GroupParams r;
  r.e.k = __shfl_sync(kFull, p.e.k, src, width);
  r.e.c = __shfl_sync(kFull, p.e.c, src, width);
  r.e.s = __shfl_sync(kFull, p.e.s, src, width);
  r.s_quant = __shfl_sync(kFull, p.s_quant, src, width);
  return r;
}

// The per-element pieces of lowp_group.hpp's group_decode / group_encode with the work that
// depends only on the group moved out of the element loop (same operations, same order, so the
// same bits): decode_fp8 as a shared-memory table of its 256 results; compress_value's 1/k
// (div_rn(1, k)) and the y-only parts of pow_det (pow_y) once per group; and, where the value is
// finite (and for non-saturating storage below the format's max, so nothing overflows), the
// hardware converter instead of encode_fp8 (equal there: detail::hw_cvt_verified).
struct MomentGroup {
  optim::GroupParams gp;
  PowY y;  // decode: y = 1/k; encode: y = k
};

__device__ __forceinline__ MomentGroup decode_group(const optim::GroupParams& gp, const optim::GroupMomentConsts& mc) {
  MomentGroup g;
  g.gp = gp;
  if (mc.expand) g.y = pow_y(div_rn(1.0f, gp.e.k));
  return g;
}
__device__ __forceinline__ MomentGroup encode_group(const optim::GroupParams& gp, const optim::GroupMomentConsts& mc) {
  MomentGroup g;
  g.gp = gp;
  if (mc.expand) g.y = pow_y(gp.e.k);
  return g;
}

// compress_value of a decoded q (DE), with pow_det's y-only work from the group.
__device__ __forceinline__ float decode_ref_q(float q, const MomentGroup& g) {
  const float qs = mul_rn(q, g.gp.e.s);
  const float mag = pow_det_y(dmath::abs_bits(qs), g.y);
  return mul_rn(dmath::neg_if(mag, dmath::sign_bit(qs)), g.gp.e.c);
}

__device__ __forceinline__ float decode_fast(uint8_t code, const float* lut, const MomentGroup& g,
                                             const optim::GroupMomentConsts& mc) {
  const float q = lut[code];
  return mc.expand ? decode_ref_q(q, g) : mul_rn(q, g.gp.e.s);
}

// The value handed to the encoder (group_encode's v).
__device__ __forceinline__ float transform_fast(float x, const MomentGroup& g, const optim::GroupMomentConsts& mc) {
  if (!mc.expand) return div_rn(x, g.gp.s_quant);
  const float mag = pow_det_y(div_rn(dmath::abs_bits(x), g.gp.e.c), g.y);  // expand_value
  return div_rn(dmath::neg_if(mag, dmath::sign_bit(x)), g.gp.e.s);
}

__device__ __noinline__ uint32_t encode4_ref(float v0, float v1, float v2, float v3, int valid,
                                             optim::GroupMomentConsts mc, uint64_t idx) {
  const float v[4] = {v0, v1, v2, v3};
  uint32_t w = 0;
  for (int j = 0; j < 4; ++j) {
    if (j >= valid) break;
    const uint8_t q = mc.stochastic ? encode_fp8_stochastic(v[j], mc.format, mc.saturate, philox_word(mc.key, idx + j))
                                    : encode_fp8(v[j], mc.format, mc.saturate);
    w |= static_cast<uint32_t>(q) << (8 * j);
  }
  return w;
}

// Codes of 4 encoder inputs (the first `valid`), packed little-endian. `full` is valid == 4,
// computed by the caller from the unclamped count (see the kernel's full_lane).
__device__ __forceinline__ uint32_t encode4_fast(const float (&v)[4], int valid, bool full,
                                                 const optim::GroupMomentConsts& mc, bool hw, uint64_t idx) {
  if (hw && full) {
    const uint32_t lim = mc.saturate ? 0x7F800000u : (mc.format == 0 ? 0x43E00000u : 0x47600000u);
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) m = max(m, f32_bits(v[j]) & 0x7FFFFFFFu);
    if (m < lim) {
      if (mc.format == 0) return cvt2_hw<E4M3Traits>(v[0], v[1]) | (cvt2_hw<E4M3Traits>(v[2], v[3]) << 16);
      return cvt2_hw<E5M2Traits>(v[0], v[1]) | (cvt2_hw<E5M2Traits>(v[2], v[3]) << 16);
    }
  }
  return encode4_ref(v[0], v[1], v[2], v[3], valid, mc, idx);
}

// ---------------------------------------------------------------------------------------------
// Exact shortcuts for the DE (de=coat) moments. Both give the reference's bits on every input;
// lanes / groups outside the proven range take the reference code above.
//
// (1) Dequantize: log2_parts(|q*s|) from a per-group table of the 8 FP8 mantissas
// (gpu/quant/dmath_gpu.cuh has the proof; tests/test_optim_gpu.cpp checks every code against
// compress_value for many (s, k)).
//
// (2) Requantize: the guarded encoder of gpu/quant/guarded_encode.cuh (its comment has the proof).

// compress_value of a finite decoded q with log2_parts from the mantissa table, in a group where
// dec_table_ok holds (q = +-0 gives +-0 * c, as compress_value: pow_det(+0, y > 0) = +0).
__device__ __forceinline__ float decode_table_finite(float q, float2 entry_of_q, const MomentGroup& g) {
  return compress_table_finite(q, entry_of_q, g.gp.e.s, g.gp.e.c, g.y);
}

// The same for any code: zero and non-finite codes (rare) take decode_ref_q.
__device__ __forceinline__ float decode_table(float q, float2 entry_of_q, const MomentGroup& g) {
  const uint32_t uq = f32_bits(q) & 0x7FFFFFFFu;
  if (uq - 1u >= 0x7F7FFFFFu) return decode_ref_q(q, g);  // q = +-0, Inf or NaN
  return decode_table_finite(q, entry_of_q, g);
}

// optim::group_params_from_stats for de=coat with two per-launch constants hoisted: log2_det of
// the ratio bound B (the same FP8SIM_HD function, evaluated once on the host) and pow_det(., k)
// as pow_det_y with pow_y(k), and log2_det(ratio) as log2_det_fast (the same bits, see
// dmath_gpu.cuh). Same operations in the same
// order as coat_expand_params otherwise; plain scaling calls the reference.
__device__ __forceinline__ optim::GroupParams group_params_fast(const GroupStatBits& st,
                                                                const optim::GroupMomentConsts& mc, float log2_bound) {
  if (!mc.expand) return optim::group_params_from_stats(st, mc);
  float amax = group_absmax_value(st), amin = group_absmin_value(st);
  if (!(amax > 0.0f)) return optim::GroupParams{};  // coat_group_expand_params: k = c = s = 1
  double eps = mc.scale.eps;
  if (mc.scale.eps_add != EpsAdd::Fp64) {  // eps added in fp32 (group_params_from_stats)
    const float e32 = static_cast<float>(mc.scale.eps);
    amax = add_rn(amax, e32);
    amin = add_rn(amin, e32);
    eps = 0.0;
  }
  const float maxv = add_eps_fp64(amax, eps);
  const float minv = add_eps_fp64(amin, eps);
  optim::GroupParams gp;
  const float ratio = div_rn(maxv, minv);
  gp.e.c = mul_rn(sqrt_rn(maxv), sqrt_rn(minv));
  const float q = div_rn(log2_bound, log2_det_fast(ratio));
  gp.e.k = div_rn(dmath::floor_det(mul_rn(q, static_cast<float>(kExpandMin))), static_cast<float>(kExpandMin));
  gp.e.s = div_rn(pow_det_y(div_rn(maxv, gp.e.c), pow_y(gp.e.k)), mc.scale.fmax);
  return gp;
}

// The reference transform + encode of one DE value (group_encode, nearest rounding), for the
// elements the guarded encoder flags (out of line: rare).
__device__ __noinline__ uint32_t encode_expand_ref(float x, ExpandParams e, int fmt, bool sat) {
  return encode_fp8(expand_value(x, e), fmt, sat);
}

// One lane's share of a group as it comes from memory: W words of 4 elements and the group's old
// parameters.
template <int W>
struct LaneRaw {
  float4 p[W], g[W];
  uint32_t m[W], v[W];
  ExpandParams em, ev;
};
template <int W>
__device__ __forceinline__ void load_lane(LaneRaw<W>& r, const float* p, const float* g, const Fp8MomentPtrs& m,
                                          const Fp8MomentPtrs& v, int64_t idx, int64_t grp) {
#pragma unroll
  for (int w = 0; w < W; ++w) {
    r.p[w] = *reinterpret_cast<const float4*>(p + idx + 4 * w);
    r.g[w] = *reinterpret_cast<const float4*>(g + idx + 4 * w);
    r.m[w] = *reinterpret_cast<const uint32_t*>(m.codes + idx + 4 * w);
    r.v[w] = *reinterpret_cast<const uint32_t*>(v.codes + idx + 4 * w);
  }
  r.em = ExpandParams{m.k ? m.k[grp] : 1.0f, m.c ? m.c[grp] : 1.0f, m.scales[grp]};
  r.ev = ExpandParams{v.k ? v.k[grp] : 1.0f, v.c ? v.c[grp] : 1.0f, v.scales[grp]};
}

// One team of TEAM lanes per group, EPL (4 or 8) consecutive elements per lane, the whole group
// in registers. DE moments use the exact shortcuts above: the mantissa table for dequantization
// (teams of 16 or 32 lanes) and the guarded requantization (nearest rounding with the verified
// hardware converter). The per-group work (new parameters, their shortcut constants) is split
// over the team: for TEAM == 32 the m parameters on lanes 0-15 and v's on 16-31, for TEAM == 16
// with EPL == 8 lanes 0-7 and 8-15 of each 16-lane team. `counts` (optional, tests) receives how
// many elements took each path: {decode table, decode reference, encode guarded, encode reference}.
// Version: sim/speed/kernel_versions.hpp's kAdamwFp8DeKernelVersion.
template <int TEAM, int EPL, int MINB, bool FULL>
__global__ void __launch_bounds__(256, MINB)
    adamw_fp8_grouped_kernel(float* __restrict__ p, const float* __restrict__ g, Fp8MomentPtrs m, Fp8MomentPtrs v,
                             int64_t n, int G, bool vec, optim::AdamwStepConsts c, optim::GroupMomentConsts cm,
                             optim::GroupMomentConsts cv, bool hw, int fast, float log2b_m, float log2b_v,
                             unsigned long long* counts) {
  static_assert(EPL == 4 || EPL == 8, "4 or 8 elements per lane");
  constexpr int kTeamsPerBlock = 256 / TEAM;
  constexpr bool kTable = TEAM >= 16;
  constexpr int W = EPL / 4;  // 32-bit code words per lane and moment
  __shared__ float lut_m[256], lut_v[256];
  __shared__ float2 mant_tab[kTable ? kTeamsPerBlock : 1][16];  // per team: m's 8 entries, then v's
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    lut_m[i] = decode_fp8(static_cast<uint8_t>(i), cm.format);
    lut_v[i] = decode_fp8(static_cast<uint8_t>(i), cv.format);
  }
  __syncthreads();
  const bool hw_m = hw && !cm.stochastic, hw_v = hw && !cv.stochastic;
  // Guarded requantization: DE, nearest rounding, verified hardware converter (launch-uniform).
  const bool fe_m = cm.expand && hw_m && (fast & 2), fe_v = cv.expand && hw_v && (fast & 2);
  const int lane = threadIdx.x & 31;
  const int team_lane = lane & (TEAM - 1);
  const int team_in_block = threadIdx.x / TEAM;
  const int64_t groups = (n + G - 1) / G;
  const int64_t team_stride = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock; base < groups; base += team_stride) {
    const int64_t grp = base + team_in_block;
    LaneRaw<W> cur;
    const bool active = grp < groups;
    const int64_t i0 = active ? grp * G : 0;
    const int len = active ? static_cast<int>(G < n - i0 ? G : n - i0) : 0;
    const int start = team_lane * EPL;
    int valid;
    if constexpr (FULL) {
      valid = active ? EPL : 0;
    } else {
      valid = len - start;
      valid = valid < 0 ? 0 : (valid > EPL ? EPL : valid);
    }
    const int64_t idx = i0 + start;
    // Whole 16-byte / 4-byte words for this lane. Tested on len - start, not as valid == EPL: ptxas
    // 13.0 folds the clamp above and that comparison into one VIMNMX.RELU whose predicate is not
    // valid == EPL (QuantizeGpu.ToolchainClampGuardProbe measures it). FULL launches need no
    // element-wise path at all.
    const bool full_lane = FULL ? active : len - start >= EPL;  // valid == EPL
    const bool vec_lane = FULL ? active : (vec && full_lane);

    float pv[EPL], gv[EPL];
    uint8_t qm[EPL], qv[EPL];
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      pv[j] = 0.f;
      gv[j] = 0.f;
      qm[j] = 0;
      qv[j] = 0;
    }
    if (vec_lane) {
      load_lane(cur, p, g, m, v, idx, grp);
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float4 p4 = cur.p[w];
        const float4 g4 = cur.g[w];
        const uint32_t m4 = cur.m[w];
        const uint32_t v4 = cur.v[w];
        pv[4 * w + 0] = p4.x;
        pv[4 * w + 1] = p4.y;
        pv[4 * w + 2] = p4.z;
        pv[4 * w + 3] = p4.w;
        gv[4 * w + 0] = g4.x;
        gv[4 * w + 1] = g4.y;
        gv[4 * w + 2] = g4.z;
        gv[4 * w + 3] = g4.w;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          qm[4 * w + j] = static_cast<uint8_t>(m4 >> (8 * j));
          qv[4 * w + j] = static_cast<uint8_t>(v4 >> (8 * j));
        }
      }
    } else if constexpr (!FULL) {
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        if (j < valid) {
          pv[j] = p[idx + j];
          gv[j] = g[idx + j];
          qm[j] = m.codes[idx + j];
          qv[j] = v.codes[idx + j];
        }
      }
    }
    // The old parameters (plain scaling keeps no k, c: decode uses only the stored scale).
    optim::GroupParams pm_old, pv_old;
    if (vec_lane) {
      pm_old.e = cur.em;
      pv_old.e = cur.ev;
    } else if (active) {
      pm_old.e = ExpandParams{m.k ? m.k[grp] : 1.0f, m.c ? m.c[grp] : 1.0f, m.scales[grp]};
      pv_old.e = ExpandParams{v.k ? v.k[grp] : 1.0f, v.c ? v.c[grp] : 1.0f, v.scales[grp]};
    }
    float mv[EPL], vvv[EPL];
    GroupStatBits sm, sv;
    const MomentGroup gm_old = decode_group(pm_old, cm), gv_old = decode_group(pv_old, cv);
    bool dt_m = false, dt_v = false;
    if constexpr (kTable) {
      dt_m = cm.expand && (fast & 1) && dec_table_ok(pm_old.e.s, gm_old.y);
      dt_v = cv.expand && (fast & 1) && dec_table_ok(pv_old.e.s, gv_old.y);
      if ((cm.expand || cv.expand) && (fast & 1)) {  // launch-uniform
        const int j = team_lane & 15;
        const float2 ent = mant_entry(j & 7, j < 8 ? pm_old.e.s : pv_old.e.s);
        __syncwarp();  // the previous group's readers are done
        if (team_lane < 16) mant_tab[team_in_block][j] = ent;
        __syncwarp();
      }
    }
    // Dequantize in two phases per moment: a lane whose elements are all present with finite
    // codes in a table group decodes them branch-free (the chains interleave); other
    // lanes take the per-element path. Element results do not depend on the phase order.
    float q_m[EPL], q_v[EPL];
    uint32_t special_m = 0u, special_v = 0u;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      q_m[j] = lut_m[qm[j]];
      q_v[j] = lut_v[qv[j]];
      special_m |= (f32_bits(q_m[j]) & 0x7FFFFFFFu) >= 0x7F800000u ? 1u : 0u;  // Inf, NaN
      special_v |= (f32_bits(q_v[j]) & 0x7FFFFFFFu) >= 0x7F800000u ? 1u : 0u;
    }
    if (kTable && dt_m && full_lane && special_m == 0u) {
#pragma unroll
      for (int j = 0; j < EPL; ++j)
        mv[j] = decode_table_finite(q_m[j], mant_tab[kTable ? team_in_block : 0][mant_index(q_m[j])], gm_old);
    } else {
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        mv[j] = 0.f;
        if (j < valid) {
          if (kTable && dt_m)
            mv[j] = decode_table(q_m[j], mant_tab[kTable ? team_in_block : 0][mant_index(q_m[j])], gm_old);
          else mv[j] = decode_fast(qm[j], lut_m, gm_old, cm);
        }
      }
    }
    if (kTable && dt_v && full_lane && special_v == 0u) {
#pragma unroll
      for (int j = 0; j < EPL; ++j)
        vvv[j] = decode_table_finite(q_v[j], mant_tab[kTable ? team_in_block : 0][8 + mant_index(q_v[j])], gv_old);
    } else {
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        vvv[j] = 0.f;
        if (j < valid) {
          if (kTable && dt_v)
            vvv[j] = decode_table(q_v[j], mant_tab[kTable ? team_in_block : 0][8 + mant_index(q_v[j])], gv_old);
          else vvv[j] = decode_fast(qv[j], lut_v, gv_old, cv);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      if (j < valid) {
        optim::adamw_element(pv[j], gv[j], mv[j], vvv[j], c);
        group_stat_add(sm, mv[j]);
        group_stat_add(sv, vvv[j]);
      }
    }
    sm = reduce_group_stats(sm, TEAM);
    sv = reduce_group_stats(sv, TEAM);
    optim::GroupParams pm_new, pv_new;
    float Im = 0.f, Fm = 0.f, Iv = 0.f, Fv = 0.f;
    if constexpr (TEAM == 32 || (TEAM == 16 && EPL == 8)) {
      // The m parameters on the team's first half, the v parameters on its second, at the same time.
      constexpr int kHalf = TEAM / 2;
      const bool is_v = team_lane >= kHalf;
      const GroupStatBits st = is_v ? sv : sm;
      const optim::GroupParams np = group_params_fast(st, select_words(is_v, cm, cv), is_v ? log2b_v : log2b_m);
      float I = 0.f, F = 0.f;
      if (fe_m || fe_v) guarded_log_consts(np.e, I, F);
      pm_new = shfl_params(np, 0, TEAM);
      pv_new = shfl_params(np, kHalf, TEAM);
      Im = __shfl_sync(kFull, I, 0, TEAM);
      Fm = __shfl_sync(kFull, F, 0, TEAM);
      Iv = __shfl_sync(kFull, I, kHalf, TEAM);
      Fv = __shfl_sync(kFull, F, kHalf, TEAM);
    } else {
      pm_new = group_params_fast(sm, cm, log2b_m);
      pv_new = group_params_fast(sv, cv, log2b_v);
      if (fe_m) guarded_log_consts(pm_new.e, Im, Fm);
      if (fe_v) guarded_log_consts(pv_new.e, Iv, Fv);
    }
    // (pow_y(k) only where the reference transform runs for every element.)
    MomentGroup gm_new, gv_new;
    gm_new.gp = pm_new;
    gv_new.gp = pv_new;
    if (!fe_m) gm_new = encode_group(pm_new, cm);
    if (!fe_v) gv_new = encode_group(pv_new, cv);
    uint32_t mw[W], vw[W];  // codes, 4 per word, little-endian
    uint32_t pend = 0;      // bit j (m) / EPL + j (v): element j takes the reference path
#pragma unroll
    for (int w = 0; w < W; ++w) {
      mw[w] = 0;
      vw[w] = 0;
    }
    if (fe_m) {
      const GuardedEnc f = guarded_prep(pm_new.e, Im, Fm, guarded_lim(cm.format, cm.saturate, cm.sat_bound));
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        if (j < valid) {
          const uint32_t r = encode_guarded(mv[j], f, cm.format);
          mw[j / 4] |= (r & 0xFFu) << (8 * (j % 4));
          pend |= ((r >> 8) & 1u) << j;
        }
      }
    } else {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        float tm[4];
        const int vw_valid = valid - 4 * w < 0 ? 0 : (valid - 4 * w > 4 ? 4 : valid - 4 * w);
#pragma unroll
        for (int j = 0; j < 4; ++j) tm[j] = j < vw_valid ? transform_fast(mv[4 * w + j], gm_new, cm) : 0.0f;
        mw[w] = vw_valid > 0
                    ? encode4_fast(tm, vw_valid, valid - 4 * w >= 4, cm, hw_m, static_cast<uint64_t>(idx + 4 * w))
                    : 0u;
      }
    }
    if (fe_v) {
      const GuardedEnc f = guarded_prep(pv_new.e, Iv, Fv, guarded_lim(cv.format, cv.saturate, cv.sat_bound));
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        if (j < valid) {
          const uint32_t r = encode_guarded(vvv[j], f, cv.format);
          vw[j / 4] |= (r & 0xFFu) << (8 * (j % 4));
          pend |= ((r >> 8) & 1u) << (EPL + j);
        }
      }
    } else {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        float tv[4];
        const int vw_valid = valid - 4 * w < 0 ? 0 : (valid - 4 * w > 4 ? 4 : valid - 4 * w);
#pragma unroll
        for (int j = 0; j < 4; ++j) tv[j] = j < vw_valid ? transform_fast(vvv[4 * w + j], gv_new, cv) : 0.0f;
        vw[w] = vw_valid > 0
                    ? encode4_fast(tv, vw_valid, valid - 4 * w >= 4, cv, hw_v, static_cast<uint64_t>(idx + 4 * w))
                    : 0u;
      }
    }
    if (counts != nullptr) {  // test hook
      unsigned long long dt = 0, dr = 0, ef = 0, er = 0;
      if (cm.expand) (kTable && dt_m ? dt : dr) += valid;
      if (cv.expand) (kTable && dt_v ? dt : dr) += valid;
      const uint32_t lowmask = (1u << EPL) - 1u;
      const int pm_cnt = __popc(pend & lowmask), pv_cnt = __popc(pend >> EPL);
      if (fe_m) {
        ef += valid - pm_cnt;
        er += pm_cnt;
      }
      if (fe_v) {
        ef += valid - pv_cnt;
        er += pv_cnt;
      }
      if (dt) atomicAdd(&counts[0], dt);
      if (dr) atomicAdd(&counts[1], dr);
      if (ef) atomicAdd(&counts[2], ef);
      if (er) atomicAdd(&counts[3], er);
    }
    // The reference path for the flagged elements, one per lane per round, so a warp pays for
    // as many rounds as its busiest lane has flagged elements (usually 0 or 1).
    while (__any_sync(kFull, pend != 0u)) {
      if (pend != 0u) {
        const int b = __ffs(pend) - 1;
        pend &= pend - 1u;
        const bool isv = b >= EPL;
        const int jj = b & (EPL - 1);
        float xm = mv[0], xv = vvv[0];
#pragma unroll
        for (int j = 1; j < EPL; ++j) {
          xm = jj == j ? mv[j] : xm;
          xv = jj == j ? vvv[j] : xv;
        }
        const uint32_t code = encode_expand_ref(isv ? xv : xm, isv ? pv_new.e : pm_new.e, isv ? cv.format : cm.format,
                                                isv ? cv.saturate : cm.saturate);
        // Written back with selects over every word (a conditional store to word jj / 4 was
        // turned into a dynamically indexed local-memory array by nvcc, on the hot path too).
        const uint32_t sh = 8u * static_cast<uint32_t>(jj & 3);
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const bool hit = (jj >> 2) == w;
          const uint32_t keep = hit ? ~(0xFFu << sh) : 0xFFFFFFFFu, put = hit ? code << sh : 0u;
          mw[w] = isv ? mw[w] : ((mw[w] & keep) | put);
          vw[w] = isv ? ((vw[w] & keep) | put) : vw[w];
        }
      }
    }
    if (vec_lane) {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        *reinterpret_cast<float4*>(p + idx + 4 * w) =
            make_float4(pv[4 * w], pv[4 * w + 1], pv[4 * w + 2], pv[4 * w + 3]);
        *reinterpret_cast<uint32_t*>(m.codes + idx + 4 * w) = mw[w];
        *reinterpret_cast<uint32_t*>(v.codes + idx + 4 * w) = vw[w];
      }
    } else if constexpr (!FULL) {
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        if (j < valid) {
          p[idx + j] = pv[j];
          m.codes[idx + j] = static_cast<uint8_t>(mw[j / 4] >> (8 * (j % 4)));
          v.codes[idx + j] = static_cast<uint8_t>(vw[j / 4] >> (8 * (j % 4)));
        }
      }
    }
    if (active && team_lane == 0) {
      m.scales[grp] = pm_new.e.s;
      v.scales[grp] = pv_new.e.s;
      if (m.k) {
        m.k[grp] = pm_new.e.k;
        m.c[grp] = pm_new.e.c;
      }
      if (v.k) {
        v.k[grp] = pv_new.e.k;
        v.c[grp] = pv_new.e.c;
      }
    }
  }
}

// ---- test support: the shortcuts against the FP8SIM_HD reference, element by element ----

// For every (params i, code): decode_table vs compress_value. counts: {mismatches, table-eligible
// (params, code) pairs}.
__global__ void decode_table_check_kernel(const ExpandParams* prm, int n_params, int fmt, unsigned long long* counts) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(n_params) * 256) return;
  const ExpandParams e = prm[t / 256];
  const uint8_t code = static_cast<uint8_t>(t % 256);
  optim::GroupParams gp;
  gp.e = e;
  MomentGroup gr;
  gr.gp = gp;
  gr.y = pow_y(div_rn(1.0f, e.k));
  if (!dec_table_ok(e.s, gr.y)) return;
  const float q = decode_fp8(code, fmt);
  const float2 ent = mant_entry(static_cast<int>(mant_index(q)), e.s);
  const float fast = decode_table(q, ent, gr);
  const float ref = compress_value(q, e);
  bool bad = f32_bits(fast) != f32_bits(ref);
  // The branch-free form, for every finite code (zeros included).
  if ((f32_bits(q) & 0x7FFFFFFFu) < 0x7F800000u) bad |= f32_bits(decode_table_finite(q, ent, gr)) != f32_bits(ref);
  if (bad) atomicAdd(&counts[0], 1ull);
  atomicAdd(&counts[1], 1ull);
}

// For every x[i] with params prm[i / per]: encode_guarded (where it does not flag the element)
// vs encode_fp8(expand_value(x)). counts: {mismatches, guarded, flagged}.
__global__ void encode_guarded_check_kernel(const float* x, const ExpandParams* prm, int64_t n, int per,
                                            optim::GroupMomentConsts mc, unsigned long long* counts) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const ExpandParams e = prm[i / per];
  float I, F;
  guarded_log_consts(e, I, F);
  const GuardedEnc f = guarded_prep(e, I, F, guarded_lim(mc.format, mc.saturate, mc.sat_bound));
  const uint32_t r = encode_guarded(x[i], f, mc.format);
  if (r & 0x100u) {
    atomicAdd(&counts[2], 1ull);
    return;
  }
  const uint32_t ref = encode_fp8(expand_value(x[i], e), mc.format, mc.saturate);
  if (ref != (r & 0xFFu)) atomicAdd(&counts[0], 1ull);
  atomicAdd(&counts[1], 1ull);
}

// The approximations' errors the requantization bound assumes, exhaustively: lg2.approx's
// absolute error over every float in [1, 2) and ex2.approx's relative error over every float t
// in [-21, 16] (guarded_encode.cuh keeps every guarded lane's t inside it). Maxima as double bits
// in out[0..1].
__global__ void mufu_error_kernel(unsigned long long* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double worst_lg2 = 0.0, worst_ex2 = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (int64_t{1} << 23); i += stride) {
    const float mx = f32_from_bits(0x3F800000u | static_cast<uint32_t>(i));
    const float lx = lg2_mant(static_cast<uint32_t>(i));
    worst_lg2 = fmax(worst_lg2, fabs(static_cast<double>(lx) - log2(static_cast<double>(mx))));
  }
  // Positive t in (0, 16]: bits 0x00000001 .. 0x41800000; negative t in [-21, 0): 0x80000001 .. 0xC1A80000.
  const int64_t n_pos = 0x41800000LL, n_neg = 0x41A80000LL;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i <= n_pos + n_neg; i += stride) {
    const uint32_t u = i <= n_pos ? static_cast<uint32_t>(i) : 0x80000000u | static_cast<uint32_t>(i - n_pos);
    const float t = f32_from_bits(u);
    float A;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(A) : "f"(t));
    const double ref = exp2(static_cast<double>(t));
    worst_ex2 = fmax(worst_ex2, fabs(static_cast<double>(A) / ref - 1.0));
  }
  atomicMax(&out[0], static_cast<unsigned long long>(__double_as_longlong(worst_lg2)));
  atomicMax(&out[1], static_cast<unsigned long long>(__double_as_longlong(worst_ex2)));
}

bool aligned(const void* q, unsigned b) { return reinterpret_cast<uintptr_t>(q) % b == 0; }

unsigned long long* g_path_counts = nullptr;  // device, 4 counters; null = not counting
int g_fast_paths = 3;                         // bit 0: decode table, bit 1: guarded encode
int g_min_blocks = 2;                         // __launch_bounds__ blocks per SM of the 16 x 8 kernel
bool g_wide = true;                           // G > 64: 16 lanes x 8 elements (else 32 x 4)
bool g_full = true;                           // whole-group launches may take the FULL kernel
bool g_last_full = false;                     // whether the last fused launch took it (test hook)

}  // namespace

void adamw_fast_paths(int mask, int min_blocks, bool wide, bool full) {
  g_fast_paths = mask & 3;
  g_min_blocks = min_blocks == 2 ? 2 : 3;
  g_wide = wide;
  g_full = full;
}

bool adamw_last_launch_full() { return g_last_full; }

void adamw_path_counting(bool on) {
  if (on && g_path_counts == nullptr) {
    FP8SIM_CUDA_CHECK(cudaMalloc(&g_path_counts, 4 * sizeof(unsigned long long)));
    FP8SIM_CUDA_CHECK(cudaMemset(g_path_counts, 0, 4 * sizeof(unsigned long long)));
  } else if (!on && g_path_counts != nullptr) {
    FP8SIM_CUDA_CHECK(cudaFree(g_path_counts));
    g_path_counts = nullptr;
  }
}

void adamw_path_counts(unsigned long long out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = 0;
  if (g_path_counts == nullptr) return;
  FP8SIM_CUDA_CHECK(cudaDeviceSynchronize());
  FP8SIM_CUDA_CHECK(cudaMemcpy(out, g_path_counts, 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  FP8SIM_CUDA_CHECK(cudaMemset(g_path_counts, 0, 4 * sizeof(unsigned long long)));
}

void check_decode_table(const ExpandParams* params, int n_params, int fmt, unsigned long long out[2]) {
  DeviceBuffer<ExpandParams> d_p;
  d_p.upload(params, static_cast<size_t>(n_params));
  unsigned long long h[2];
  device_counters(h, [&](unsigned long long* d) {
    const int64_t threads = static_cast<int64_t>(n_params) * 256;
    decode_table_check_kernel<<<static_cast<int>((threads + 255) / 256), 256>>>(d_p.get(), n_params, fmt, d);
  });
  out[0] = h[0];
  out[1] = h[1];
}

void check_encode_guarded(const float* x, const ExpandParams* params, int64_t n, int per,
                          const optim::GroupMomentConsts& mc, unsigned long long out[3]) {
  DeviceBuffer<float> d_x;
  d_x.upload(x, static_cast<size_t>(n));
  DeviceBuffer<ExpandParams> d_p;
  d_p.upload(params, static_cast<size_t>((n + per - 1) / per));
  unsigned long long h[3];
  device_counters(h, [&](unsigned long long* d) {
    encode_guarded_check_kernel<<<static_cast<int>((n + 255) / 256), 256>>>(d_x.get(), d_p.get(), n, per, mc, d);
  });
  for (int i = 0; i < 3; ++i) out[i] = h[i];
}

void mufu_max_errors(double out[2]) {
  unsigned long long h[2];
  device_counters(h, [&](unsigned long long* d) { mufu_error_kernel<<<132 * 16, 256>>>(d); });
  std::memcpy(&out[0], &h[0], sizeof(double));
  std::memcpy(&out[1], &h[1], sizeof(double));
}

void launch_adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                       cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16);
  const int grid = grid_cap(static_cast<int64_t>((vec ? n / 4 : n) + 255) / 256, 16);
  adamw_fp32_kernel<<<grid, 256, 0, stream>>>(p, g, m, v, static_cast<int64_t>(n), vec, c);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

namespace {

template <int KM, int KV>
void launch_elem_kernels(float* p, const float* g, const ElemMoment& m, const ElemMoment& v, int64_t N, bool vec,
                         const optim::AdamwStepConsts& c, uint32_t* ws, cudaStream_t stream) {
  // A grid of the blocks that fit at once (one wave of grid-stride blocks) leaves no partial last
  // wave.
  static const int per_sm_amax = resident_blocks(adamw_elem_amax_kernel<KM, KV>);
  static const int per_sm_step = resident_blocks(adamw_elem_step_kernel<KM, KV>);
  const int64_t want = (((vec ? N / 4 : N) + kElemUnits - 1) / kElemUnits + 255) / 256;
  const unsigned hw = (hw_cvt_verified() ? kHwFp8 : 0u) | (hw_fp16_verified() ? kHwFp16 : 0u) | kPow2;
  if (m.kind != ElemKind::Pass16 || v.kind != ElemKind::Pass16) {
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(ws, 0, 3 * sizeof(uint32_t), stream));
    adamw_elem_amax_kernel<KM, KV><<<grid_cap(want, per_sm_amax), 256, 0, stream>>>(g, m, v, N, vec, c, ws, hw);
    FP8SIM_CUDA_CHECK_LAUNCH();
  }
  adamw_elem_step_kernel<KM, KV><<<grid_cap(want, per_sm_step), 256, 0, stream>>>(p, g, m, v, N, vec, c, ws, hw);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

template <int KM>
void launch_elem_for_v(float* p, const float* g, const ElemMoment& m, const ElemMoment& v, int64_t N, bool vec,
                       const optim::AdamwStepConsts& c, uint32_t* ws, cudaStream_t stream) {
  switch (v.kind) {
    case ElemKind::Pass16:
      return launch_elem_kernels<KM, 0>(p, g, m, v, N, vec, c, ws, stream);
    case ElemKind::Scaled16:
      return launch_elem_kernels<KM, 1>(p, g, m, v, N, vec, c, ws, stream);
    case ElemKind::Fp8:
      return launch_elem_kernels<KM, 2>(p, g, m, v, N, vec, c, ws, stream);
  }
}

}  // namespace

void launch_adamw_elementwise(float* p, const float* g, const ElemMoment& m, const ElemMoment& v, size_t n,
                              const optim::AdamwStepConsts& c, uint32_t* ws, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned code_align_m = m.kind == ElemKind::Fp8 ? 4 : 8, code_align_v = v.kind == ElemKind::Fp8 ? 4 : 8;
  const bool vec = aligned(p, 16) && aligned(g, 16) && aligned(m.codes, code_align_m) && aligned(v.codes, code_align_v);
  const auto N = static_cast<int64_t>(n);
  switch (m.kind) {
    case ElemKind::Pass16:
      return launch_elem_for_v<0>(p, g, m, v, N, vec, c, ws, stream);
    case ElemKind::Scaled16:
      return launch_elem_for_v<1>(p, g, m, v, N, vec, c, ws, stream);
    case ElemKind::Fp8:
      return launch_elem_for_v<2>(p, g, m, v, N, vec, c, ws, stream);
  }
}

void launch_adamw_fp8_grouped(float* p, const float* g, Fp8MomentPtrs m, Fp8MomentPtrs v, size_t n, int G,
                              const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                              const optim::GroupMomentConsts& cv, cudaStream_t stream) {
  if (n == 0) return;
  // DE groups of 65..128 elements: 16 lanes x 8 elements (default: the per-group work, split over
  // half-teams, is shared by twice the elements) or 32 lanes x 4; everything else 4 elements per lane.
  const bool de = cm.expand || cv.expand;
  const bool wide = G > 64 && g_wide && de;  // plain scaling: 32 x 4 is faster
  const int epl = wide ? 8 : 4;
  const bool vec = G % epl == 0 && aligned(p, 16) && aligned(g, 16) && aligned(m.codes, 4) && aligned(v.codes, 4);
  int team = 1;
  while (team * epl < G) team <<= 1;
  const int64_t groups = (static_cast<int64_t>(n) + G - 1) / G;
  const int64_t teams_per_block = 256 / team;
  // DE: as many blocks as fit at once (3 per SM, or 2 for the 2-block variants): every block
  // loops over the same number of groups, so there is no partial last wave. Plain scaling keeps
  // its earlier launch (8 per SM), which timed slightly faster there.
  const int per_sm = !de ? 8 : (wide && g_min_blocks == 2 ? 2 : 3);
  const int grid = grid_cap((groups + teams_per_block - 1) / teams_per_block, per_sm);
  const auto N = static_cast<int64_t>(n);
  const bool hw = hw_cvt_verified();
  // log2_det(B) of each moment's ratio bound, as coat_expand_params computes it.
  const float lb_m = dmath::log2_det(expand_ratio_bound(cm.fmax_target));
  const float lb_v = dmath::log2_det(expand_ratio_bound(cv.fmax_target));
  unsigned long long* cnt = g_path_counts;
  const int fast = g_fast_paths;
  // Every lane of every group holds EPL elements in whole words: the kernel without element-wise
  // paths (the common G = 128 launches; others keep the general kernel).
  const bool full = vec && G == team * epl && N % G == 0 && g_full && (!wide || g_min_blocks == 2);
  g_last_full = full;
#define FP8SIM_ADAMW_LAUNCH(T, E, B, F) \
  adamw_fp8_grouped_kernel<T, E, B, F>  \
      <<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw, fast, lb_m, lb_v, cnt)
  if (wide) {
    if (g_min_blocks == 2) {
      if (full) FP8SIM_ADAMW_LAUNCH(16, 8, 2, true);
      else FP8SIM_ADAMW_LAUNCH(16, 8, 2, false);
    } else {
      FP8SIM_ADAMW_LAUNCH(16, 8, 3, false);
    }
  } else {
    switch (team) {
      case 1:
        FP8SIM_ADAMW_LAUNCH(1, 4, 3, false);
        break;
      case 2:
        FP8SIM_ADAMW_LAUNCH(2, 4, 3, false);
        break;
      case 4:
        FP8SIM_ADAMW_LAUNCH(4, 4, 3, false);
        break;
      case 8:
        FP8SIM_ADAMW_LAUNCH(8, 4, 3, false);
        break;
      case 16:
        FP8SIM_ADAMW_LAUNCH(16, 4, 3, false);
        break;
      default:
        if (full) FP8SIM_ADAMW_LAUNCH(32, 4, 3, true);
        else FP8SIM_ADAMW_LAUNCH(32, 4, 3, false);
        break;
    }
  }
#undef FP8SIM_ADAMW_LAUNCH
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu::detail
