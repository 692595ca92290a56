// AdamW kernels. Every arithmetic step is sim/optim's FP8SIM_HD code (adamw_element, and for FP8
// states lowp_group.hpp's group_decode / group_params_from_stats / group_encode and scale.hpp's
// group statistics,
// which are sim/quant's DE functions), so the GPU's p, codes and group parameters equal the CPU
// reference's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/optim/adamw_launch.hpp"
#include "gpu/quant/dmath_gpu.cuh"
#include "gpu/quant/quantize_kernels.cuh"

namespace fp8sim::gpu::detail {

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

__global__ void __launch_bounds__(256) adamw_fp32_kernel(float* __restrict__ p, const float* __restrict__ g,
                                                         float* __restrict__ m, float* __restrict__ v, int64_t n,
                                                         bool vec, optim::AdamwStepConsts c) {
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

__device__ __forceinline__ GroupStatBits reduce_group_stats(GroupStatBits s, int width) {
  for (int off = 1; off < width; off <<= 1) {
    GroupStatBits o;
    o.amax = __shfl_xor_sync(kFull, s.amax, off);
    o.amin = __shfl_xor_sync(kFull, s.amin, off);
    group_stat_merge(s, o);
  }
  return s;
}

__device__ __forceinline__ optim::GroupParams shfl_params(const optim::GroupParams& p, int src) {
  optim::GroupParams r;
  r.e.k = __shfl_sync(kFull, p.e.k, src);
  r.e.c = __shfl_sync(kFull, p.e.c, src);
  r.e.s = __shfl_sync(kFull, p.e.s, src);
  r.s_quant = __shfl_sync(kFull, p.s_quant, src);
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

__device__ __forceinline__ float decode_fast(uint8_t code, const float* lut, const MomentGroup& g,
                                             const optim::GroupMomentConsts& mc) {
  const float q = lut[code];
  if (!mc.expand) return mul_rn(q, g.gp.e.s);
  const float qs = mul_rn(q, g.gp.e.s);  // compress_value
  const float mag = pow_det_y(dmath::abs_bits(qs), g.y);
  return mul_rn(dmath::neg_if(mag, dmath::sign_bit(qs)), g.gp.e.c);
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

// Codes of 4 encoder inputs (the first `valid`), packed little-endian.
__device__ __forceinline__ uint32_t encode4_fast(const float (&v)[4], int valid, const optim::GroupMomentConsts& mc,
                                                 bool hw, uint64_t idx) {
  if (hw && valid == 4) {
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

// One team of TEAM lanes per group, 4 consecutive elements per lane, the whole group in registers.
template <int TEAM>
__global__ void __launch_bounds__(256, 3) adamw_fp8_grouped_kernel(float* __restrict__ p, const float* __restrict__ g,
                                                                Fp8MomentPtrs m, Fp8MomentPtrs v, int64_t n, int G,
                                                                bool vec, optim::AdamwStepConsts c,
                                                                optim::GroupMomentConsts cm,
                                                                optim::GroupMomentConsts cv, bool hw) {
  __shared__ float lut_m[256], lut_v[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    lut_m[i] = decode_fp8(static_cast<uint8_t>(i), cm.format);
    lut_v[i] = decode_fp8(static_cast<uint8_t>(i), cv.format);
  }
  __syncthreads();
  const bool hw_m = hw && !cm.stochastic, hw_v = hw && !cv.stochastic;
  const int lane = threadIdx.x & 31;
  const int team_lane = lane & (TEAM - 1);
  constexpr int kTeamsPerBlock = 256 / TEAM;
  const int team_in_block = threadIdx.x / TEAM;
  const int64_t groups = (n + G - 1) / G;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock; base < groups;
       base += static_cast<int64_t>(gridDim.x) * kTeamsPerBlock) {
    const int64_t grp = base + team_in_block;
    const bool active = grp < groups;
    const int64_t i0 = active ? grp * G : 0;
    const int len = active ? static_cast<int>(G < n - i0 ? G : n - i0) : 0;
    const int start = team_lane * 4;
    int valid = len - start;
    valid = valid < 0 ? 0 : (valid > 4 ? 4 : valid);
    const int64_t idx = i0 + start;

    float pv[4] = {0.f, 0.f, 0.f, 0.f}, gv[4] = {0.f, 0.f, 0.f, 0.f};
    uint8_t qm[4] = {0, 0, 0, 0}, qv[4] = {0, 0, 0, 0};
    if (vec && valid == 4) {
      const float4 p4 = *reinterpret_cast<const float4*>(p + idx);
      const float4 g4 = *reinterpret_cast<const float4*>(g + idx);
      const uint32_t m4 = *reinterpret_cast<const uint32_t*>(m.codes + idx);
      const uint32_t v4 = *reinterpret_cast<const uint32_t*>(v.codes + idx);
      pv[0] = p4.x; pv[1] = p4.y; pv[2] = p4.z; pv[3] = p4.w;
      gv[0] = g4.x; gv[1] = g4.y; gv[2] = g4.z; gv[3] = g4.w;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qm[j] = static_cast<uint8_t>(m4 >> (8 * j));
        qv[j] = static_cast<uint8_t>(v4 >> (8 * j));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
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
    if (active) {
      pm_old.e = ExpandParams{m.k ? m.k[grp] : 1.0f, m.c ? m.c[grp] : 1.0f, m.scales[grp]};
      pv_old.e = ExpandParams{v.k ? v.k[grp] : 1.0f, v.c ? v.c[grp] : 1.0f, v.scales[grp]};
    }
    float mv[4], vvv[4];
    GroupStatBits sm, sv;
    const MomentGroup gm_old = decode_group(pm_old, cm), gv_old = decode_group(pv_old, cv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mv[j] = 0.f;
      vvv[j] = 0.f;
      if (j < valid) {
        mv[j] = decode_fast(qm[j], lut_m, gm_old, cm);
        vvv[j] = decode_fast(qv[j], lut_v, gv_old, cv);
        optim::adamw_element(pv[j], gv[j], mv[j], vvv[j], c);
        group_stat_add(sm, mv[j]);
        group_stat_add(sv, vvv[j]);
      }
    }
    sm = reduce_group_stats(sm, TEAM);
    sv = reduce_group_stats(sv, TEAM);
    optim::GroupParams pm_new, pv_new;
    if constexpr (TEAM == 32) {
      // The m parameters on lanes 0-15, the v parameters on lanes 16-31, at the same time.
      const bool is_v = lane >= 16;
      const GroupStatBits st = is_v ? sv : sm;
      const optim::GroupParams np = optim::group_params_from_stats(st, is_v ? cv : cm);
      pm_new = shfl_params(np, 0);
      pv_new = shfl_params(np, 16);
    } else {
      pm_new = optim::group_params_from_stats(sm, cm);
      pv_new = optim::group_params_from_stats(sv, cv);
    }
    const MomentGroup gm_new = encode_group(pm_new, cm), gv_new = encode_group(pv_new, cv);
    float tm[4], tv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      tm[j] = j < valid ? transform_fast(mv[j], gm_new, cm) : 0.0f;
      tv[j] = j < valid ? transform_fast(vvv[j], gv_new, cv) : 0.0f;
    }
    const uint32_t m4 = encode4_fast(tm, valid, cm, hw_m, static_cast<uint64_t>(idx));
    const uint32_t v4 = encode4_fast(tv, valid, cv, hw_v, static_cast<uint64_t>(idx));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      qm[j] = static_cast<uint8_t>(m4 >> (8 * j));
      qv[j] = static_cast<uint8_t>(v4 >> (8 * j));
    }
    if (vec && valid == 4) {
      *reinterpret_cast<float4*>(p + idx) = make_float4(pv[0], pv[1], pv[2], pv[3]);
      *reinterpret_cast<uint32_t*>(m.codes + idx) = m4;
      *reinterpret_cast<uint32_t*>(v.codes + idx) = v4;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j < valid) {
          p[idx + j] = pv[j];
          m.codes[idx + j] = qm[j];
          v.codes[idx + j] = qv[j];
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


bool aligned(const void* q, unsigned b) { return reinterpret_cast<uintptr_t>(q) % b == 0; }

}  // namespace

void launch_adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                       cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16);
  const int grid = grid_cap(static_cast<int64_t>((vec ? n / 4 : n) + 255) / 256, 16);
  adamw_fp32_kernel<<<grid, 256, 0, stream>>>(p, g, m, v, static_cast<int64_t>(n), vec, c);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void launch_adamw_fp8_grouped(float* p, const float* g, Fp8MomentPtrs m, Fp8MomentPtrs v, size_t n, int G,
                              const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                              const optim::GroupMomentConsts& cv, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = G % 4 == 0 && aligned(p, 16) && aligned(g, 16) && aligned(m.codes, 4) && aligned(v.codes, 4);
  int team = 1;
  while (team * 4 < G) team <<= 1;
  const int64_t groups = (static_cast<int64_t>(n) + G - 1) / G;
  const int64_t teams_per_block = 256 / team;
  const int grid = grid_cap((groups + teams_per_block - 1) / teams_per_block, 8);
  const auto N = static_cast<int64_t>(n);
  const bool hw = hw_cvt_verified();
  switch (team) {
    case 1: adamw_fp8_grouped_kernel<1><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
    case 2: adamw_fp8_grouped_kernel<2><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
    case 4: adamw_fp8_grouped_kernel<4><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
    case 8: adamw_fp8_grouped_kernel<8><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
    case 16: adamw_fp8_grouped_kernel<16><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
    default: adamw_fp8_grouped_kernel<32><<<grid, 256, 0, stream>>>(p, g, m, v, N, G, vec, c, cm, cv, hw); break;
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu::detail
