// Quantize / dequantize kernels for the 4- and 6-bit element formats (E2M1, E2M3, E3M2: OCP MX
// and NVFP4) and for every format under the random Hadamard transform (rht=N), bit-identical to
// sim/quant's reference: the statistics, scales (plain_scales, nvfp4_group_scale, COAT's
// expansion), the butterfly (sim/quant/hadamard.hpp) and the encoders are the same FP8SIM_HD
// functions, applied in the same order.
//
// One thread owns one 16-element segment of a row (rows are a whole number of segments). A
// group of R x C elements (C a multiple of 16, R * C / 16 <= 32 segments) is owned by a team of
// `team` consecutive lanes (the next power of two): lane l holds row r0 + l / (C/16), columns
// c0 + 16 (l % (C/16)) .. + 15, and the group's statistics are reduced with shuffles inside the
// team. Per-tensor scaling maps thread t to segment t instead. The RHT's first four butterfly
// stages (h = 1..8) run in registers; stages h = 16..128 pair lane l with lane l ^ (h / 16),
// which holds the partner segment because consecutive lanes hold consecutive segments of a row
// (the host admits rht > 16 only for 1xC groups with C / 16 a power of two, and per tensor).
//
// Scales that need the tensor's amax (NVFP4's two-level scales, per-tensor scaling) take two
// passes: the first reduces max |x| over the finite (transformed) elements into one word (a warp
// max, then one atomicMax per warp: non-negative floats order like their bits), the second
// encodes. Codes are written packed (sim/quant/packing.hpp): 8 bytes per segment for 4-bit
// codes, 12 for 6-bit, 16 for 8-bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/quant/quantize_kernels.cuh"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/formats/philox.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/hadamard.hpp"
#include "sim/quant/packing.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

namespace {

template <class F>
void dispatch_lowbit(int fmt, InDt dt, F&& f) {
  auto with_dt = [&]<class T>() {
    if (dt == InDt::F32) f.template operator()<T, InDt::F32>();
    else if (dt == InDt::BF16) f.template operator()<T, InDt::BF16>();
    else f.template operator()<T, InDt::FP16>();
  };
  switch (fmt) {
    case 0:
      return with_dt.template operator()<E4M3Traits>();
    case 1:
      return with_dt.template operator()<E5M2Traits>();
    case 4:
      return with_dt.template operator()<E2M1Traits>();
    case 5:
      return with_dt.template operator()<E2M3Traits>();
    default:
      return with_dt.template operator()<E3M2Traits>();
  }
}

// Where thread-slot t's segment lies: its group, team lane, row and column (the first of 16).
struct Seg {
  int64_t grp, row, col;
  int lane;
  bool lane_ok;  // the lane holds a segment of an existing group (else it only joins the shuffles)
  bool valid;    // ... and that segment lies inside the tensor
};
__device__ __forceinline__ Seg seg_of(const QuantKernelParams& P, const LowbitParams& S, int64_t t) {
  Seg s;
  if (S.mode == kLowbitTensor || S.row_major) {  // thread t owns segment t
    const int64_t segs_per_row = P.cols / 16;
    s.row = t / segs_per_row;
    s.col = (t % segs_per_row) * 16;
    s.lane = 0;
    s.lane_ok = s.row < P.rows;
    s.valid = s.lane_ok;
    s.grp = s.valid ? (s.row / P.group_rows) * P.grid_cols + s.col / P.group_cols : 0;
    return s;
  }
  const int64_t tm = t / S.team;
  s.lane = static_cast<int>(t % S.team);
  s.grp = tm;
  s.lane_ok = tm < P.grid_rows * P.grid_cols && s.lane < S.lanes;
  const int64_t gi = tm / P.grid_cols, gj = tm % P.grid_cols;
  s.row = gi * P.group_rows + s.lane / S.lanes_c;
  s.col = gj * P.group_cols + 16 * (s.lane % S.lanes_c);
  s.valid = s.lane_ok && s.row < P.rows && s.col < P.cols;
  return s;
}

template <InDt D>
__device__ __forceinline__ void load_segment(const void* x, int64_t flat0, bool vec, bool valid, float (&v)[16]) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = 0.0f;
    return;
  }
  if (vec) {
    constexpr int W = kWordElems<D>;
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(x) + flat0 * (D == InDt::F32 ? 4 : 2));
#pragma unroll
    for (int w = 0; w < 16 / W; ++w) {
      float t[W];
      widen_word<D>(p[w], t);
#pragma unroll
      for (int j = 0; j < W; ++j) v[w * W + j] = t[j];
    }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = load_elem<D>(x, flat0 + j);
  }
}

// The random Hadamard transform of the thread's segment within its row's n-element blocks
// (rht_forward's order: signs, then stages h = 1, 2, 4, ... with a halving before every second
// stage). Every lane of the warp calls it (stages h >= 16 shuffle); col is the segment's first column.
__device__ __forceinline__ void rht_segment(float (&v)[16], int64_t col, const LowbitParams& S, bool inverse) {
  const int n = S.rht;
  if (!inverse) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (S.signs.negate(static_cast<int>((col + j) & (n - 1)))) v[j] = -v[j];
  }
  int stage = 0;
#pragma unroll
  for (int h = 1; h < 16; h <<= 1, ++stage) {
    if (h >= n) break;
    if (stage % 2 == 1) {
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = mul_rn(v[j], 0.5f);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if (j & h) continue;
      const float a = v[j], b = v[j + h];
      v[j] = add_rn(a, b);
      v[j + h] = add_rn(a, -b);
    }
  }
  for (int h = 16; h < n; h <<= 1, ++stage) {
    if (stage % 2 == 1) {
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = mul_rn(v[j], 0.5f);
    }
    const int lane_xor = h / 16;
    const bool upper = ((col / 16) & lane_xor) != 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float o = __shfl_xor_sync(kFullMask, v[j], lane_xor);
      v[j] = upper ? add_rn(o, -v[j]) : add_rn(v[j], o);
    }
  }
  if (inverse) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (S.signs.negate(static_cast<int>((col + j) & (n - 1)))) v[j] = -v[j];
  }
}

template <class T>
__device__ __forceinline__ uint32_t encode_one(const QuantKernelParams& P, float v, uint64_t flat) {
  return P.stochastic ? encode_fp8_sr<T>(v, P.saturate, philox_word(P.seed, P.index_offset + flat))
                      : encode_fp8_rne<T>(v, P.saturate);
}

// 16 codes of `bits` bits into the packed stream at element flat0 (a multiple of 16).
__device__ __forceinline__ void store_codes(uint8_t* codes, int64_t flat0, int bits, bool aligned,
                                            const uint32_t (&q)[16]) {
  if (bits == 4) {
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 16; ++j) w[j / 8] |= (q[j] & 0xFu) << (4 * (j % 8));
    uint8_t* p = codes + flat0 / 2;
    if (aligned) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
      for (int b = 0; b < 8; ++b) p[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
    }
  } else if (bits == 6) {
    uint64_t lo = 0, hi = 0;  // bits 0-63 and 64-95 of the segment's 96
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint64_t c = q[j] & 0x3Fu;
      const int off = 6 * j;
      if (off + 6 <= 64) lo |= c << off;
      else if (off >= 64) hi |= c << (off - 64);
      else {
        lo |= c << off;
        hi |= c >> (64 - off);
      }
    }
    uint8_t* p = codes + flat0 / 4 * 3;
    const uint32_t w[3] = {static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi)};
    if (aligned) {
#pragma unroll
      for (int k = 0; k < 3; ++k) reinterpret_cast<uint32_t*>(p)[k] = w[k];
    } else {
#pragma unroll
      for (int b = 0; b < 12; ++b) p[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
    }
  } else {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 16; ++j) w[j / 4] |= (q[j] & 0xFFu) << (8 * (j % 4));
    uint8_t* p = codes + flat0;
    if (aligned) {
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int b = 0; b < 16; ++b) p[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
    }
  }
}

// Warp max of `bits` (non-negative float bits), then one atomicMax per warp into *dst.
__device__ __forceinline__ void warp_atomic_max(uint32_t bits, uint32_t* dst) {
  const uint32_t m = warp_max_u32(bits);
  if ((threadIdx.x & 31) == 0 && m != 0u) atomicMax(dst, m);
}

// Pass 1 of the tensor-amax modes: max |x| over the finite (transformed) elements into *amax.
template <InDt D>
__global__ void __launch_bounds__(256) lowbit_amax_kernel(const void* __restrict__ x, QuantKernelParams P,
                                                          LowbitParams S, uint32_t* __restrict__ amax) {
  const int64_t total = S.slots;
  uint32_t m = 0u;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < total;
       base += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = base + threadIdx.x;
    const Seg sg = seg_of(P, S, t < total ? t : total);
    const bool valid = t < total && sg.valid;
    float v[16];
    load_segment<D>(x, sg.row * P.cols + sg.col, S.vec, valid, v);
    if (S.rht) rht_segment(v, sg.col, S, false);
    if (valid) {
      Stats st = stats_init();
#pragma unroll
      for (int j = 0; j < 16; ++j) stats_add(st, v[j]);
      m = st.amax > m ? st.amax : m;
    }
  }
  warp_atomic_max(m, amax);
}

// Pass 2 (or the only pass): statistics, scales and codes.
template <class T, InDt D>
__global__ void __launch_bounds__(256)
    lowbit_quant_kernel(const void* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                        float* __restrict__ ks, float* __restrict__ cs, QuantKernelParams P, LowbitParams S,
                        const uint32_t* __restrict__ tensor_amax_in, uint32_t* __restrict__ tensor_amax_out,
                        float* __restrict__ tensor_scale_out) {
  const int64_t total = S.slots;
  float t_amax = 0.0f;
  Nvfp4TensorScale nv;
  float t_sq = 1.0f, t_stored = 1.0f;  // per-tensor scaling's divisor and stored scale
  if (S.mode == kLowbitNvfp4 || S.mode == kLowbitTensor) {
    t_amax = f32_from_bits(*tensor_amax_in);
    if (S.mode == kLowbitNvfp4) nv = nvfp4_tensor_scale(t_amax, P.fmax);
    else plain_scales(amax_with_eps(t_amax, P.scale), P.scale, t_sq, t_stored);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      if (S.mode == kLowbitNvfp4 && tensor_scale_out) *tensor_scale_out = nv.s_dec;
      if (S.mode == kLowbitTensor) scales[0] = t_stored;
    }
  }
  uint32_t m = 0u;  // the tensor amax as a by-product (group modes)
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < total;
       base += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = base + threadIdx.x;
    const Seg sg = seg_of(P, S, t < total ? t : total);
    const bool valid = t < total && sg.valid;
    const int64_t flat0 = sg.row * P.cols + sg.col;
    float v[16];
    load_segment<D>(x, flat0, S.vec, valid, v);
    if (S.rht) rht_segment(v, sg.col, S, false);
    Stats st = stats_init();
    if (valid) {
#pragma unroll
      for (int j = 0; j < 16; ++j) stats_add(st, v[j]);
    }
    if (S.mode != kLowbitTensor) st = stats_reduce_lanes(st, S.team);
    m = st.amax > m ? st.amax : m;
    float sq = 1.0f, stored = 1.0f;
    ExpandParams ep;
    const float absmax = f32_from_bits(st.amax);
    if (S.mode == kLowbitPlain) {
      plain_scales(amax_with_eps(absmax, P.scale), P.scale, sq, stored);
    } else if (S.mode == kLowbitCoat) {
      const float absmin = st.amin == 0x7F800000u ? 0.0f : f32_from_bits(st.amin);
      ep = coat_group_expand_params(absmax, absmin, P.fmax, P.fmax_target, P.eps, P.eps_add_fp64);
      stored = ep.s;
    } else if (S.mode == kLowbitNvfp4) {
      nvfp4_group_scale(absmax, P.fmax, nv, sq, stored);
    } else {
      sq = t_sq;
    }
    if (!valid) continue;
    uint32_t q[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float y;
      if (S.mode == kLowbitCoat) y = expand_value(v[j], ep);
      else if (S.mode == kLowbitNvfp4) y = mul_rn(v[j], sq);
      else y = apply_scale(v[j], sq, P.scale);
      q[j] = encode_one<T>(P, y, static_cast<uint64_t>(flat0 + j));
    }
    store_codes(codes, flat0, S.bits, S.codes_aligned, q);
    if (S.mode != kLowbitTensor && sg.lane == 0) {
      scales[sg.grp] = stored;
      if (S.mode == kLowbitCoat) {
        ks[sg.grp] = ep.k;
        cs[sg.grp] = ep.c;
      }
    }
  }
  if (tensor_amax_out && S.mode != kLowbitNvfp4 && S.mode != kLowbitTensor) warp_atomic_max(m, tensor_amax_out);
}

// Dequantize: thread t owns segment t (row-major); decode, scale (or compress), then the inverse
// transform under rht.
template <class T>
__global__ void __launch_bounds__(256)
    lowbit_dequant_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                          const float* __restrict__ ks, const float* __restrict__ cs, float* __restrict__ out,
                          QuantKernelParams P, LowbitParams S, bool expand) {
  const int64_t total = S.slots;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < total;
       base += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = base + threadIdx.x;
    const Seg sg = seg_of(P, S, t < total ? t : total);
    const bool valid = t < total && sg.valid;
    const int64_t flat0 = sg.row * P.cols + sg.col;
    float v[16];
    if (valid) {
      const float s = scales[sg.grp];
      ExpandParams ep;
      if (expand) ep = ExpandParams{ks[sg.grp], cs[sg.grp], s};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float d = decode_fp8<T>(static_cast<uint8_t>(packed_code(codes, flat0 + j, S.bits)));
        v[j] = expand ? compress_value(d, ep) : mul_rn(d, s);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = 0.0f;
    }
    if (S.rht) rht_segment(v, sg.col, S, true);
    if (!valid) continue;
    if (S.out_aligned) {
      float4* o = reinterpret_cast<float4*>(out + flat0);
#pragma unroll
      for (int k = 0; k < 4; ++k) o[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[flat0 + j] = v[j];
    }
  }
}

}  // namespace

void launch_quantize_lowbit(const QuantLaunch& L, const LowbitParams& S, uint32_t* amax_word, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  const InDt dt = static_cast<InDt>(L.dtype);
  uint8_t* codes = static_cast<uint8_t*>(L.codes);
  const bool two_pass = S.mode == kLowbitNvfp4 || S.mode == kLowbitTensor;
  const int grid = grid_cap((S.slots + 255) / 256, 16);
  if (two_pass && L.producer_maxima) {  // a producer's chunk maxima stand for pass 1
    launch_reduce_maxima(L.producer_maxima, static_cast<int64_t>(L.producer_maxima_count),
                         reinterpret_cast<float*>(amax_word), s);
  } else if (two_pass) {
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(amax_word, 0, sizeof(uint32_t), s));
    if (dt == InDt::F32) lowbit_amax_kernel<InDt::F32><<<grid, 256, 0, s>>>(L.x, P, S, amax_word);
    else if (dt == InDt::BF16) lowbit_amax_kernel<InDt::BF16><<<grid, 256, 0, s>>>(L.x, P, S, amax_word);
    else lowbit_amax_kernel<InDt::FP16><<<grid, 256, 0, s>>>(L.x, P, S, amax_word);
    FP8SIM_CUDA_CHECK_LAUNCH();
  }
  uint32_t* amax_out = nullptr;
  if (L.tensor_amax && !two_pass) {
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(L.tensor_amax, 0, sizeof(float), s));
    amax_out = reinterpret_cast<uint32_t*>(L.tensor_amax);
  }
  dispatch_lowbit(P.format, dt, [&]<class T, InDt D>() {
    lowbit_quant_kernel<T, D><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, S, amax_word, amax_out,
                                                   S.tensor_scale);
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
  if (two_pass && L.tensor_amax)
    FP8SIM_CUDA_CHECK(cudaMemcpyAsync(L.tensor_amax, amax_word, sizeof(float), cudaMemcpyDeviceToDevice, s));
}

void launch_dequantize_lowbit(const QuantKernelParams& P, const LowbitParams& S, bool expand, const void* codes,
                              const float* scales, const float* k, const float* c, float* out, cudaStream_t s) {
  const int grid = grid_cap((S.slots + 255) / 256, 16);
  dispatch_lowbit(P.format, InDt::F32, [&]<class T, InDt D>() {
    if constexpr (D == InDt::F32)
      lowbit_dequant_kernel<T>
          <<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(codes), scales, k, c, out, P, S, expand);
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu::detail
