// Quantize / dequantize kernels. The arithmetic is sim/quant's FP8SIM_HD code (scale.hpp for the
// plain scales, expand.hpp for dynamic range expansion, fp8.hpp for the encoders), so every code,
// scale, k and c equals the CPU reference's bit for bit. Three kernel shapes:
//
//  * team kernel: 1xG groups with G <= 512 (and rows of <= 512 elements): a team of
//    T = next_pow2(ceil(G/16)) lanes per group, 16 elements per lane held in registers, stats
//    reduced with shuffles, scales computed by every lane of the team (uniform), one pass over
//    memory. Robust DE's squared-error sums use the CPU's bisection tree: each lane's 16 terms
//    pairwise, then shfl_xor 1, 2, 4, ... across the team.
//  * block kernel: any other geometry (long rows, RxC blocks, columns, a whole tensor with DE):
//    one thread block per group; stats, then the encode pass re-reads the group (from L2).
//  * tensor kernels (per-tensor plain / delayed scaling and pass-through formats): plain scaling's
//    stage 1 writes the max |x| of every 16K-element chunk, stage 2 reduces them and computes the
//    scale (or takes maxima a producer emitted: "group scaling", one pass), stage 3 encodes;
//    delayed scaling encodes with the history's scale in one pass and one launch, whose last
//    block reduces the blocks' maxima into the amax for the history.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/quant/dmath_gpu.cuh"
#include "gpu/quant/guarded_encode.cuh"
#include "gpu/quant/quantize_kernels.cuh"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/formats/philox.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

namespace {

constexpr int kPlain = 0, kDelayed = 1, kCoat = 2, kRobust = 3;
constexpr int64_t kChunk = 16384;           // elements per stage-1 chunk of the tensor kernels
constexpr int64_t kOneBlockMaxima = 16384;  // longer maxima lists take the multi-block reduction

struct GroupQ {
  float sq = 1.0f;        // plain: divisor; delayed: multiplier
  float s_stored = 1.0f;  // the dequantizing scale as stored
  ExpandParams ep;        // DE
};

// grp: the group's index, where de_min=kernel's minimum (P.group_min) may replace the statistics'.
__device__ __forceinline__ GroupQ group_params(const QuantKernelParams& P, int mode, const Stats& st,
                                               int64_t grp = -1) {
  GroupQ g;
  const float absmax = f32_from_bits(st.amax);
  if (mode == kCoat) {
    const float absmin = P.group_min != nullptr && grp >= 0 ? P.group_min[grp]
                         : st.amin == 0x7F800000u           ? 0.0f
                                                            : f32_from_bits(st.amin);
    g.ep = coat_group_expand_params(absmax, absmin, P.fmax, P.fmax_target, P.eps, P.eps_add_fp64);
    g.s_stored = g.ep.s;
  } else if (mode == kDelayed) {
    g.sq = P.delayed_scale;
    g.s_stored = P.delayed_scale_inv;
  } else {
    plain_scales(amax_with_eps(absmax, P.scale), P.scale, g.sq, g.s_stored);
  }
  return g;
}

template <class T>
__device__ __forceinline__ uint8_t encode_value(const QuantKernelParams& P, float v, uint64_t flat) {
  return P.stochastic ? encode_fp8_sr<T>(v, P.saturate, philox_word(P.seed, P.index_offset + flat))
                      : encode_fp8_rne<T>(v, P.saturate);
}

template <int MODE>
__device__ __forceinline__ float transform(const QuantKernelParams& P, float x, const GroupQ& g) {
  if constexpr (MODE == kPlain) return apply_scale(x, g.sq, P.scale);
  else if constexpr (MODE == kDelayed) return mul_rn(x, g.sq);
  else return expand_value(x, g.ep);
}

// Robust DE's error sum of a lane's 16 terms is the bisection tree of sq_err_tree_sum: its first
// level adds the pairs t[2i] + t[2i + 1], which the loops form as the terms come (8 doubles live
// instead of 16), and tree8 sums those pairs in place by the remaining levels; returns the total.
__device__ __forceinline__ double tree8(double (&t)[8]) {
#pragma unroll
  for (int w = 1; w < 8; w *= 2) {
#pragma unroll
    for (int i = 0; i + w < 8; i += 2 * w) t[i] = t[i] + t[i + w];
  }
  return t[0];
}

// The pairs tree8 sums, from the 16 terms term(j) of a lane (each pair's first term first).
// UNROLL = 1 keeps the loop rolled (a rare path's code stays small).
template <int UNROLL = 8, class Term>
__device__ __forceinline__ void pair_sums(double (&pairs)[8], Term term) {
#pragma unroll UNROLL
  for (int j = 0; j < 16; j += 2) {
    double t[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) t[h] = term(j + h);
    pairs[j / 2] = t[0] + t[1];
  }
}

// ---- team kernel ----------------------------------------------------------------------------------
// Storage format of an encoder traits type, as encode_guarded's template argument.
template <class T>
constexpr int kFmt = std::is_same_v<T, E4M3Traits> ? 0 : 1;

// The guarded encoder's state for one coat group (the GPU quantizer counts no saturated values,
// so only the storage's saturation mode limits it).
__device__ __forceinline__ GuardedEnc coat_guarded(const QuantKernelParams& P, const ExpandParams& ep) {
  float I, F;
  guarded_log_consts(ep, I, F);
  return guarded_prep(ep, I, F, guarded_lim(P.format, P.saturate, f32_from_bits(0x7F800000u)));
}

// The encoder of the reference paths below: encode_value, or, for RNE (the caller guarantees
// !P.stochastic), encode_fp8_rne alone, which is what encode_value then computes.
template <class T, bool RNE>
__device__ __forceinline__ uint8_t encode_ref(const QuantKernelParams& P, float v, uint64_t flat) {
  if constexpr (RNE) return encode_fp8_rne<T>(v, P.saturate);
  else return encode_value<T>(P, v, flat);
}

// The reference for coat_encode16's flagged elements (bit j of todo), inline and out of line.
template <class T, bool RNE>
__device__ __forceinline__ void coat_encode_ref(const QuantKernelParams& P, const float (&v)[16],
                                                const ExpandParams& ep, uint64_t flat0, uint32_t todo,
                                                uint8_t (&q)[16]) {
  const PowY Y = pow_y(ep.k);
  for (int j = 0; j < 16; ++j) {
    if (!((todo >> j) & 1u)) continue;
    const float mag = pow_det_y(div_rn(dmath::abs_bits(v[j]), ep.c), Y);
    const float t = div_rn(dmath::neg_if(mag, dmath::sign_bit(v[j])), ep.s);
    q[j] = encode_ref<T, RNE>(P, t, flat0 + j);
  }
}
template <class T>
__device__ __noinline__ void coat_encode_outlined(const QuantKernelParams& P, const float (&v)[16],
                                                  const ExpandParams& ep, uint64_t flat0, uint32_t todo,
                                                  uint8_t (&q)[16]) {
  coat_encode_ref<T, true>(P, v, ep, flat0, todo, q);
}

// The codes of 16 elements of one coat group (flat index of the first: flat0): the guarded
// encoder where hw allows it (verified hardware converter, nearest rounding), and the reference
// for every element it flags: expand_value with pow_det's y-only work done once per group
// (pow_y / pow_det_y: same bits), then encode_fp8_*. OUT (the caller guarantees !P.stochastic):
// the flagged elements through coat_encode_outlined, for robust DE, whose kernel is large enough
// that rare paths inline between the common ones cost instruction fetches. The out-of-line
// functions take copies of the lane's arrays, so that the arrays themselves stay in registers.
template <class T, bool OUT = false>
__device__ __forceinline__ void coat_encode16(const QuantKernelParams& P, const float (&v)[16], const ExpandParams& ep,
                                              bool hw, uint64_t flat0, uint8_t (&q)[16]) {
  uint32_t todo = 0xFFFFu;
  if (hw) {
    const GuardedEnc f = coat_guarded(P, ep);
    todo = 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t r = encode_guarded<kFmt<T>>(v[j], f);
      q[j] = static_cast<uint8_t>(r);
      todo |= ((r >> 8) & 1u) << j;
    }
  }
  if (OUT && todo != 0u) {
    float vt[16];
    uint8_t qt[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) vt[j] = v[j], qt[j] = q[j];
    coat_encode_outlined<T>(P, vt, ep, flat0, todo, qt);
#pragma unroll
    for (int j = 0; j < 16; ++j) q[j] = qt[j];
  } else if (todo != 0u) {
    coat_encode_ref<T, false>(P, v, ep, flat0, todo, q);
  }
}

// fallback_pair's reference path, inline and out of line.
template <class T, bool RNE>
__device__ __forceinline__ uint32_t fallback_pair_ref(const QuantKernelParams& P, float v0, float v1, float s,
                                                      uint64_t flat) {
  return encode_ref<T, RNE>(P, div_rn(v0, s), flat) |
         (static_cast<uint32_t>(encode_ref<T, RNE>(P, div_rn(v1, s), flat + 1)) << 8);
}
template <class T>
__device__ __noinline__ uint32_t fallback_pair_outlined(const QuantKernelParams& P, float v0, float v1, float s,
                                                        uint64_t flat) {
  return fallback_pair_ref<T, true>(P, v0, v1, s, flat);
}

// Robust DE's fallback codes (k = c = 1: plain scaling, encode_value(x / s)) of elements j and
// j + 1 (bits 0-7 and 8-15). `fast` (uniform over the lane): the converter is verified, s suits
// the reciprocal division (fast_recip_ok) and the lane's 16 elements are finite. Then every
// quotient is RN(x / s) by div_by with |x / s| <= fmax (1 + 2^-23), as |x| <= the group's absmax
// and s = RN(absmax / fmax), so cvt2_hw's code equals encode_fp8_rne's under either saturation
// mode (saturating storage: every finite input; otherwise everything below the overflow
// threshold, fmax + half its ulp). Otherwise div_rn and encode_value (OUT: out of line, as
// coat_encode16's OUT).
template <class T, bool OUT = false>
__device__ __forceinline__ uint32_t fallback_pair(const QuantKernelParams& P, bool fast, const FastRecip& r, float v0,
                                                  float v1, float s, uint64_t flat) {
  if (fast) return cvt2_hw<T>(div_by(v0, r), div_by(v1, r));
  return OUT ? fallback_pair_outlined<T>(P, v0, v1, s, flat) : fallback_pair_ref<T, false>(P, v0, v1, s, flat);
}
__device__ __forceinline__ bool lane_finite16(const float (&v)[16]) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) m = max(m, f32_bits(v[j]) & 0x7FFFFFFFu);
  return m < 0x7F800000u;
}

// The candidate's pair sums (pair_sums' pairs, for tree8) through pow_det_y, for a group outside
// the mantissa table's range or a lane with an Inf / NaN code: out of line, on copies of the
// lane's arrays, and rolled, as the path is rare.
__device__ __noinline__ void cand_pairs_outlined(const float (&v)[16], const uint8_t (&qc)[16], const float* lut,
                                                 const ExpandParams& cand, const PowY& Yinv, int valid,
                                                 double (&pairs)[8]) {
  pair_sums<1>(pairs, [&](int j) {
    const float qs = mul_rn(lut[qc[j]], cand.s);
    const float y = mul_rn(dmath::neg_if(pow_det_y(dmath::abs_bits(qs), Yinv), dmath::sign_bit(qs)), cand.c);
    return j < valid ? sq_err_term(v[j], y) : 0.0;
  });
}

// One team of `team` lanes per 1xG group, 16 elements per lane. A lane loads and stores only its
// own `valid` elements (0..16), one element at a time, so the last group of a row (shorter than
// the team) and the teams past the last group touch no element outside their own group; every
// lane, with elements or not, runs every shuffle (the loop over `base` is block-uniform and the
// shuffles sit outside any per-lane branch). There is deliberately no 16-byte path: it needs a
// per-lane "all 16 elements present" branch, and ptxas 13.0 (sm_90a) compiles the natural form
// of that test, clamp(n - start, 0, 16) == 16, into the predicate output of a VIMNMX.RELU which
// on the H200 sends lanes with no elements down the 16-byte path, past the end of their group
// (clamp_guard_mismatches reports whether a build still does this). The aligned whole-group
// shapes, where 16-byte accesses pay, go to quant_1xg_fast_kernel / quant_coat_1xg_kernel, whose
// lanes are all full and need no such test. Robust DE asks for two resident blocks per SM (128
// registers; the out-of-line calls' array copies in a stack frame); the other modes give no minimum (0: nvcc then emits
// no .minnctapersm, as when the argument is left out, and keeps their smaller register counts). SR = false: the caller
// guarantees !P.stochastic, and the kernel and its out-of-line reference paths carry no
// stochastic-rounding code (robust DE's round-to-nearest instance, whose code size limits it
// through instruction fetch); SR = true: P.stochastic decides at run time.
template <class T, InDt D, int MODE, bool SR = true>
__global__ void __launch_bounds__(256, MODE == kRobust ? 2 : 0)
    quant_team_kernel(const void* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                      float* __restrict__ ks, float* __restrict__ cs, QuantKernelParams P, int team, bool hw) {
  if constexpr (!SR) P.stochastic = false;  // a constant from here: every encode_value folds to RNE
  __shared__ float lut[256];
  __shared__ float2 mant_tab[MODE == kRobust ? 256 : 1][8];  // robust: each team's candidate table
  if constexpr (MODE == kRobust) fill_decode_table(lut, P.format);
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int team_lane = threadIdx.x & (team - 1);
  const int teams_per_block = blockDim.x / team;
  const int team_in_block = threadIdx.x / team;
  const int64_t G = P.group_cols;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * teams_per_block; base < groups;
       base += static_cast<int64_t>(gridDim.x) * teams_per_block) {
    const int64_t grp = base + team_in_block;
    const bool active = grp < groups;
    const int64_t r = active ? grp / P.grid_cols : 0;
    const int64_t c0 = active ? (grp % P.grid_cols) * G : 0;
    const int n = active ? static_cast<int>(G < P.cols - c0 ? G : P.cols - c0) : 0;
    const int start = team_lane * 16;
    const int64_t flat0 = r * P.cols + c0 + start;  // flat index of this lane's first element
    int valid = n - start;
    valid = valid < 0 ? 0 : (valid > 16 ? 16 : valid);
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = j < valid ? load_elem<D>(x, flat0 + j) : 0.0f;
    Stats st = stats_init();
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (j < valid) stats_add(st, v[j]);
    st = stats_reduce_lanes(st, team);

    uint8_t q[16];
    GroupQ g;
    if constexpr (MODE == kRobust) {
      const float absmax = f32_from_bits(st.amax);
      const float absmin = st.amin == 0x7F800000u ? 0.0f : f32_from_bits(st.amin);
      const ExpandParams fb = robust_fallback_params(absmax, P.fmax);
      bool ok = false;
      const ExpandParams cand = robust_expand_candidate(absmax, absmin, P.fmax, P.fmax_target, ok);
      g.ep = fb;
      // The fallback is plain scaling: with k = c = 1, expand_value is x / s and compress_value
      // q * s, bit for bit (pow_det(x, 1) == x; dividing or multiplying by 1 is exact; every NaN
      // encodes to the NaN code and adds no error term), so it needs no pow. Its codes are made
      // again below if it wins: cheaper than keeping them live through the candidate's work.
      const bool fb_fast = hw && fast_recip_ok(fb.s) && lane_finite16(v);
      double sse_fb;
      {
        const FastRecip fr = fast_recip(fb_fast ? fb.s : 1.0f);
        double pairs[8];  // the fallback's pair sums (tree8)
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
          const uint32_t c =
              fallback_pair<T, !SR>(P, fb_fast, fr, v[j], v[j + 1], fb.s, static_cast<uint64_t>(flat0 + j));
          const double t0 = j < valid ? sq_err_term(v[j], mul_rn(lut[c & 0xFFu], fb.s)) : 0.0;
          const double t1 = j + 1 < valid ? sq_err_term(v[j + 1], mul_rn(lut[(c >> 8) & 0xFFu], fb.s)) : 0.0;
          pairs[j / 2] = t0 + t1;
        }
        sse_fb = tree8(pairs);
      }
      for (int off = 1; off < team; off <<= 1) sse_fb = sse_fb + __shfl_xor_sync(kFullMask, sse_fb, off);
      {  // every lane of the warp runs the shuffles below (ok may differ between the warp's teams)
        // The candidate's dequantized values with 1/k's y-only work hoisted once per group
        // (pow_det_y: pow_det's bits) and, where dec_table_ok holds, log2_parts from the team's
        // mantissa table (compress_table_finite: the same bits; non-finite codes take pow_det_y).
        const PowY Yinv = pow_y(div_rn(1.0f, cand.k));
        const bool table = ok && dec_table_ok(cand.s, Yinv);  // uniform over the team
        __syncwarp();                                         // the previous group's readers are done
        if (table)
          for (int j = team_lane; j < 8; j += team) mant_tab[team_in_block][j] = mant_entry(j, cand.s);
        __syncwarp();
        uint8_t qc[16];
        double pairs[8];  // the candidate's pair sums (tree8)
        if (ok) {         // uniform over the team: ok comes from its reduced statistics
          // The candidate's codes as coat mode makes them (coat_encode16: the guarded encoder where
          // the converter is verified, else expand_value's operations with the y-only work of
          // pow_det hoisted; same bits as encode_value(expand_value(x))).
          coat_encode16<T, !SR>(P, v, cand, hw, static_cast<uint64_t>(flat0), qc);
          bool special = false;
#pragma unroll
          for (int j = 0; j < 16; ++j) special |= (f32_bits(lut[qc[j]]) & 0x7FFFFFFFu) >= 0x7F800000u;  // Inf, NaN
          if (table && !special) {
            pair_sums(pairs, [&](int j) {
              const float qd = lut[qc[j]];
              const float y = compress_table_finite(qd, mant_tab[team_in_block][mant_index(qd)], cand.s, cand.c, Yinv);
              return j < valid ? sq_err_term(v[j], y) : 0.0;
            });
          } else {
            float vt[16];
            uint8_t qt[16];
            double pt[8];
#pragma unroll
            for (int j = 0; j < 16; ++j) vt[j] = v[j], qt[j] = qc[j];
            cand_pairs_outlined(vt, qt, lut, cand, Yinv, valid, pt);
#pragma unroll
            for (int j = 0; j < 8; ++j) pairs[j] = pt[j];
          }
        } else {
#pragma unroll
          for (int j = 0; j < 16; ++j) qc[j] = 0;
#pragma unroll
          for (int j = 0; j < 8; ++j) pairs[j] = 0.0;
        }
        double sse_c = tree8(pairs);
        for (int off = 1; off < team; off <<= 1) sse_c = sse_c + __shfl_xor_sync(kFullMask, sse_c, off);
        if (ok && sse_c < sse_fb) {
          g.ep = cand;
#pragma unroll
          for (int j = 0; j < 16; ++j) q[j] = qc[j];
        } else {
          const FastRecip fr = fast_recip(fb_fast ? fb.s : 1.0f);
#pragma unroll
          for (int j = 0; j < 16; j += 2) {
            const uint32_t c =
                fallback_pair<T, !SR>(P, fb_fast, fr, v[j], v[j + 1], fb.s, static_cast<uint64_t>(flat0 + j));
            q[j] = static_cast<uint8_t>(c);
            q[j + 1] = static_cast<uint8_t>(c >> 8);
          }
        }
      }
      g.s_stored = g.ep.s;
    } else if constexpr (MODE == kCoat) {
      // expand_value with pow_det's y-only work done once per group (pow_y / pow_det_y: same
      // bits), encoded by coat_encode16 (the guarded encoder where the converter is verified, the
      // exact path for the elements it flags).
      g = group_params(P, MODE, st, active ? grp : -1);  // no minimum past the last group
      coat_encode16<T>(P, v, g.ep, hw, static_cast<uint64_t>(flat0), q);
    } else {
      g = group_params(P, MODE, st, active ? grp : -1);
#pragma unroll
      for (int j = 0; j < 16; ++j)
        q[j] = encode_value<T>(P, transform<MODE>(P, v[j], g), static_cast<uint64_t>(flat0 + j));
    }
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (j < valid) codes[flat0 + j] = q[j];
    if (active && team_lane == 0) {
      scales[grp] = g.s_stored;
      if constexpr (MODE == kCoat || MODE == kRobust) {
        ks[grp] = g.ep.k;
        cs[grp] = g.ep.c;
      }
    }
  }
}

// ---- DE (coat) over aligned 1xG groups ----------------------------------------------------------------
// G = 16 * team (16..512, a power of two), every row a whole number of groups, input and codes
// 16-byte aligned: each lane owns one 16-element segment (16-byte loads, one 16-byte store of its
// codes), a team of G / 16 lanes one group. The arithmetic is the team kernel's: statistics over
// finite values reduced across the team, coat_expand_params, then the guarded encoder with the
// reference (pow_det_y, div_rn, encode_fp8_*) for the elements it flags. Teams are whole groups and
// segs is a multiple of team, so whole teams are in or out of range and every shuffle runs on all
// 32 lanes.
template <class T, InDt D>
__global__ void __launch_bounds__(256)
    quant_coat_1xg_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                          float* __restrict__ ks, float* __restrict__ cs, QuantKernelParams P, int team, int64_t segs,
                          bool hw) {
  constexpr int W = kWordElems<D>;
  constexpr int NW = 16 / W;  // 16-byte words per segment
  const int lane = threadIdx.x & 31;
  const int team_lane = threadIdx.x & (team - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t seg = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; seg - lane < segs; seg += stride) {
    const bool in = seg < segs;
    float v[16];
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      float t[W];
      widen_word<D>(in ? x[seg * NW + w] : make_uint4(0u, 0u, 0u, 0u), t);
#pragma unroll
      for (int j = 0; j < W; ++j) v[w * W + j] = t[j];
    }
    Stats st = stats_init();
#pragma unroll
    for (int j = 0; j < 16; ++j) stats_add(st, v[j]);
    st = stats_reduce_lanes(st, team);
    if (!in) continue;
    const int64_t grp = seg / team;
    const GroupQ g = group_params(P, kCoat, st, grp);
    uint8_t q[16];
    coat_encode16<T>(P, v, g.ep, hw, static_cast<uint64_t>(seg * 16), q);
    uint32_t w4[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w4[k] = static_cast<uint32_t>(q[4 * k]) | (static_cast<uint32_t>(q[4 * k + 1]) << 8) |
              (static_cast<uint32_t>(q[4 * k + 2]) << 16) | (static_cast<uint32_t>(q[4 * k + 3]) << 24);
    reinterpret_cast<uint4*>(codes)[seg] = make_uint4(w4[0], w4[1], w4[2], w4[3]);
    if (team_lane == 0) {
      scales[grp] = g.s_stored;
      ks[grp] = g.ep.k;
      cs[grp] = g.ep.c;
    }
  }
}

// ---- block kernel (one thread block per group, any geometry) ----------------------------------------
struct GroupBounds {
  int64_t r0, c0, w, n;
};
__device__ __forceinline__ GroupBounds bounds_of(const QuantKernelParams& P, int64_t grp) {
  const int64_t gi = grp / P.grid_cols, gj = grp % P.grid_cols;
  GroupBounds b;
  b.r0 = gi * P.group_rows;
  b.c0 = gj * P.group_cols;
  const int64_t r1 = b.r0 + P.group_rows < P.rows ? b.r0 + P.group_rows : P.rows;
  const int64_t c1 = b.c0 + P.group_cols < P.cols ? b.c0 + P.group_cols : P.cols;
  b.w = c1 - b.c0;
  b.n = (r1 - b.r0) * b.w;
  return b;
}
// Flat tensor index of the j-th element of a group in group order (row-major within the group).
__device__ __forceinline__ int64_t flat_of(const QuantKernelParams& P, const GroupBounds& b, int64_t j) {
  return (b.r0 + j / b.w) * P.cols + b.c0 + j % b.w;
}

// de_min=kernel: each 1xG group's (G <= 128) minimum as COAT's kernel reduces it
// (coat_kernel_group_min: element i on lane i % 32 of warp i / 32, zeros arriving from other lanes
// skipped, a lane's own zero kept), one thread per group, into P.group_min for the coat kernels.
// Not a fast path: it reads the tensor once more, a group per thread.
template <InDt D>
__global__ void __launch_bounds__(256) coat_group_min_kernel(const void* __restrict__ x, QuantKernelParams P) {
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t grp = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; grp < groups; grp += stride) {
    const GroupBounds b = bounds_of(P, grp);  // one row: b.n = b.w
    const int64_t base = b.r0 * P.cols + b.c0;
    float v[kCoatKernelLanes];
    for (int j = 0; j < static_cast<int>(b.n); ++j) v[j] = load_elem<D>(x, base + j);
    P.group_min[grp] = coat_kernel_group_min(v, static_cast<int>(b.n));
  }
}

// One element of robust DE: its code under p, and with `y` its dequantized value. `plain`: p is
// the fallback (k = c = 1), where expand_value is x / s and compress_value q * s bit for bit
// (pow_det(x, 1) == x, and / 1, * 1 are exact); otherwise Yk and Yinv are pow_y(k) and
// pow_y(1 / k), pow_det's y-only work done once per group (pow_det_y: the same bits).
template <class T>
__device__ __forceinline__ uint8_t robust_encode(const QuantKernelParams& P, float xv, const ExpandParams& p,
                                                 bool plain, const PowY& Yk, uint64_t flat) {
  if (plain) return encode_value<T>(P, div_rn(xv, p.s), flat);
  const float mag = pow_det_y(div_rn(dmath::abs_bits(xv), p.c), Yk);
  return encode_value<T>(P, div_rn(dmath::neg_if(mag, dmath::sign_bit(xv)), p.s), flat);
}
__device__ __forceinline__ float robust_decode(float q, const ExpandParams& p, bool plain, const PowY& Yinv) {
  const float qs = mul_rn(q, p.s);
  if (plain) return qs;
  return mul_rn(dmath::neg_if(pow_det_y(dmath::abs_bits(qs), Yinv), dmath::sign_bit(qs)), p.c);
}

// Robust DE's squared error of one candidate over the group, summed in the CPU's bisection order:
// each thread owns a contiguous power-of-two chunk of the zero-padded index space [0, P2) and
// sums it pairwise (binary-counter stack), then the chunks combine pairwise across lanes and warps.
template <class T, InDt D>
__device__ double robust_sse_block(const void* x, const QuantKernelParams& P, const GroupBounds& b,
                                   const ExpandParams& p, bool plain, const float* lut) {
  const PowY Yk = pow_y(p.k), Yinv = pow_y(div_rn(1.0f, p.k));
  __shared__ double warp_sums[32];
  int64_t P2 = 1;
  while (P2 < b.n) P2 <<= 1;
  const int64_t nthreads = blockDim.x;
  const int64_t E = P2 >= nthreads ? P2 / nthreads : 1;
  const int64_t begin = static_cast<int64_t>(threadIdx.x) * E;
  double stack[64];
  int depth = 0;
  for (int64_t i = 0; i < E; ++i) {
    const int64_t j = begin + i;
    double val = 0.0;
    if (j < b.n && j < P2) {
      const int64_t flat = flat_of(P, b, j);
      const float xv = load_elem<D>(x, flat);
      const uint8_t q = robust_encode<T>(P, xv, p, plain, Yk, static_cast<uint64_t>(flat));
      val = sq_err_term(xv, robust_decode(lut[q], p, plain, Yinv));
    }
    for (int64_t k = i; k & 1; k >>= 1) val = stack[--depth] + val;
    stack[depth++] = val;
  }
  double s = depth ? stack[0] : 0.0;
  for (int off = 1; off < 32; off <<= 1) s = s + __shfl_xor_sync(kFullMask, s, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  // Bisection over the warps' sums (a power-of-two count of warps).
  const int nw = blockDim.x >> 5;
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; w *= 2)
      for (int i = 0; i + w < nw; i += 2 * w) warp_sums[i] = warp_sums[i] + warp_sums[i + w];
    total = warp_sums[0];
    warp_sums[0] = total;
  }
  __syncthreads();
  total = warp_sums[0];
  __syncthreads();
  return total;
}

template <class T, InDt D, int MODE>
__global__ void __launch_bounds__(256)
    quant_block_kernel(const void* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                       float* __restrict__ ks, float* __restrict__ cs, QuantKernelParams P, bool hw_ok) {
  __shared__ float lut[256];
  if constexpr (MODE == kRobust) fill_decode_table(lut, P.format);
  const int64_t groups = P.grid_rows * P.grid_cols;
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const GroupBounds b = bounds_of(P, grp);
    Stats st = stats_init();
    for (int64_t j = threadIdx.x; j < b.n; j += blockDim.x) stats_add(st, load_elem<D>(x, flat_of(P, b, j)));
    st = stats_reduce_block(st);
    GroupQ g;
    if constexpr (MODE == kRobust) {
      const float absmax = f32_from_bits(st.amax);
      const float absmin = st.amin == 0x7F800000u ? 0.0f : f32_from_bits(st.amin);
      const ExpandParams fb = robust_fallback_params(absmax, P.fmax);
      bool ok = false;
      const ExpandParams cand = robust_expand_candidate(absmax, absmin, P.fmax, P.fmax_target, ok);
      g.ep = fb;
      bool plain = true;
      const double sse_fb = robust_sse_block<T, D>(x, P, b, fb, true, lut);
      if (ok) {
        const double sse_c = robust_sse_block<T, D>(x, P, b, cand, false, lut);
        if (sse_c < sse_fb) {
          g.ep = cand;
          plain = false;
        }
      }
      g.s_stored = g.ep.s;
      const PowY Yk = pow_y(g.ep.k);
      for (int64_t j = threadIdx.x; j < b.n; j += blockDim.x) {
        const int64_t flat = flat_of(P, b, j);
        codes[flat] = robust_encode<T>(P, load_elem<D>(x, flat), g.ep, plain, Yk, static_cast<uint64_t>(flat));
      }
    } else {
      g = group_params(P, MODE, st, grp);
      const bool guarded = MODE == kCoat && !P.stochastic && hw_ok;
      GuardedEnc f{};
      if (guarded) f = coat_guarded(P, g.ep);
      for (int64_t j = threadIdx.x; j < b.n; j += blockDim.x) {
        const int64_t flat = flat_of(P, b, j);
        const float xv = load_elem<D>(x, flat);
        if (guarded) {
          const uint32_t r = encode_guarded<kFmt<T>>(xv, f);
          if (!(r & 0x100u)) {
            codes[flat] = static_cast<uint8_t>(r);
            continue;
          }
        }
        codes[flat] = encode_value<T>(P, transform<MODE>(P, xv, g), static_cast<uint64_t>(flat));
      }
    }
    if (threadIdx.x == 0) {
      scales[grp] = g.s_stored;
      if constexpr (MODE == kCoat || MODE == kRobust) {
        ks[grp] = g.ep.k;
        cs[grp] = g.ep.c;
      }
    }
    __syncthreads();
  }
}

// ---- tensor kernels ---------------------------------------------------------------------------------
// Stage 1: the max |x| of every kChunk-element chunk (finite values; the Inf flag on the side).
// Aligned chunks are read as 16-byte words, 8 words per thread in flight; a word holding a
// non-finite value takes the element-wise statistic. The grid walks the chunks from the last to
// the first, so the tensor's head is what stays in L2 when the encode pass (stage 3) starts
// reading it from the head (H200, bf16 8192x4096 JIT: 0.0521 -> 0.0506 ms; the bits are the same
// in any order).
template <InDt D>
__global__ void __launch_bounds__(256)
    chunk_stats_kernel(const void* __restrict__ x, int64_t n, int64_t chunk, bool vec,
                       uint32_t* __restrict__ chunk_amax, uint32_t* __restrict__ inf_flag) {
  constexpr int W = kWordElems<D>;
  const int64_t chunks = (n + chunk - 1) / chunk;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t ch = chunks - 1 - c;
    const int64_t b0 = ch * chunk, b1 = b0 + chunk < n ? b0 + chunk : n;
    Stats st = stats_init();
    if (vec && b1 - b0 == chunk) {
      const uint4* xw = static_cast<const uint4*>(x) + b0 / W;
      const int64_t words = chunk / W;
      for (int64_t w0 = threadIdx.x; w0 < words; w0 += 8 * static_cast<int64_t>(blockDim.x)) {
        uint4 u[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int64_t w = w0 + k * static_cast<int64_t>(blockDim.x);
          u[k] = w < words ? xw[w] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const uint32_t m = absmax_bits_word<D>(u[k]);
          if (m < 0x7F800000u) {
            st.amax = m > st.amax ? m : st.amax;
          } else {
            float v[W];
            widen_word<D>(u[k], v);
#pragma unroll
            for (int j = 0; j < W; ++j) stats_add(st, v[j]);
          }
        }
      }
    } else {
      for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) stats_add(st, load_elem<D>(x, i));
    }
    st = stats_reduce_block(st);
    if (threadIdx.x == 0) {
      chunk_amax[ch] = st.amax;
      if (st.inf && inf_flag) atomicOr(inf_flag, 1u);
    }
  }
}

// Stage 2's last step, from the tensor amax (bits): the scale into slot[0] = s_quant, slot[1] =
// s_stored (as float bits), tensor_amax (optional) and scales[0] (optional). One thread.
__device__ void finish_scale(const QuantKernelParams& P, int mode, uint32_t amax_bits, uint32_t* slot,
                             float* tensor_amax, float* scales) {
  Stats st = stats_init();
  st.amax = amax_bits;
  GroupQ g;
  if (mode == kPlain || mode == kDelayed) g = group_params(P, mode, st);
  if (slot) {
    slot[0] = f32_bits(g.sq);
    slot[1] = f32_bits(g.s_stored);
  }
  if (tensor_amax) *tensor_amax = f32_from_bits(amax_bits);
  if (scales && (mode == kPlain || mode == kDelayed)) scales[0] = g.s_stored;
}

// Stage 2, first level for long lists (group scaling hands over one maximum per 1x128 group:
// 1.4M for an 11008x16384 tensor): every block reduces a slice and raises *out (zeroed by the
// caller) with atomicMax; non-negative floats order like their bits, NaN/Inf maxima never enter.
__device__ __forceinline__ void raise_max_of_slice(const uint32_t* __restrict__ maxima, int64_t m, uint32_t* out) {
  uint32_t r = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t m4 = (reinterpret_cast<uintptr_t>(maxima) % 16) == 0 ? m / 4 : 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m4; i += stride) {
    const uint4 u = reinterpret_cast<const uint4*>(maxima)[i];
    const uint32_t v[4] = {u.x & 0x7FFFFFFFu, u.y & 0x7FFFFFFFu, u.z & 0x7FFFFFFFu, u.w & 0x7FFFFFFFu};
#pragma unroll
    for (int j = 0; j < 4; ++j) r = v[j] < 0x7F800000u && v[j] > r ? v[j] : r;
  }
  for (int64_t i = 4 * m4 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += stride) {
    const uint32_t a = maxima[i] & 0x7FFFFFFFu;
    r = a < 0x7F800000u && a > r ? a : r;
  }
  r = warp_max_u32(r);
  if ((threadIdx.x & 31) == 0 && r) atomicMax(out, r);
}

// With `done`, the last block also runs finish_scale on the result, so stage 2 is one launch.
__global__ void __launch_bounds__(256)
    max_maxima_kernel(const uint32_t* __restrict__ maxima, int64_t m, uint32_t* __restrict__ out,
                      unsigned* done = nullptr, QuantKernelParams P = {}, int mode = -1, uint32_t* slot = nullptr,
                      float* tensor_amax = nullptr, float* scales = nullptr) {
  raise_max_of_slice(maxima, m, out);
  if (done == nullptr) return;
  if (last_block_done(done) && threadIdx.x == 0) finish_scale(P, mode, atomicMax(out, 0u), slot, tensor_amax, scales);
}

// Stage 2: the tensor amax from m chunk maxima (bits or floats: the same ordering for non-negative
// values), then the scale (finish_scale). One block.
__global__ void __launch_bounds__(1024)
    reduce_scale_kernel(const uint32_t* __restrict__ maxima, int64_t m, QuantKernelParams P, int mode, uint32_t* slot,
                        float* tensor_amax, float* scales) {
  Stats st = stats_init();
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const uint32_t a = maxima[i] & 0x7FFFFFFFu;
    if (a < 0x7F800000u) st.amax = a > st.amax ? a : st.amax;  // NaN / Inf maxima never enter
  }
  st = stats_reduce_block(st);
  if (threadIdx.x == 0) finish_scale(P, mode, st.amax, slot, tensor_amax, scales);
}

// Stage 3: elementwise encode with the scale from stage 2 (plain: divisor in slot[0]) or the
// host multiplier (delayed). Delayed scaling also emits one max |x| per thread block (and the Inf
// flag) in the same pass: the amax TE records, without a second read of the tensor.
// Aligned tensors go by units of E elements (32 for 16-bit inputs, 16 for fp32: two or four
// 16-byte words); every iteration a thread loads kTensorUnits units straight into registers, then
// encodes them (like the 1xG kernel: the direct form measured faster than cp.async staging). Per
// unit: the exact quotient from the reciprocal (div_by; plain) or the reference multiply
// (delayed), then the hardware converter when the unit is finite and `hw` allows it, else the
// reference encoders word by word.
template <InDt D>
constexpr int kTensorUnit = D == InDt::F32 ? 16 : 32;  // elements per unit
constexpr int kTensorUnits = 3;                        // units per thread per iteration

// The reference path of one 16-byte word of the per-tensor encode (out of line: rare, or
// stochastic). Returns the packed codes by value (a pointer would put the caller's array in
// local memory on the fast path too).
struct WordCodes {
  uint32_t w[2];
};
template <class T, InDt D, int MODE>
__device__ __noinline__ WordCodes encode_tensor_word_ref(const QuantKernelParams& P, uint4 u, float sq, FastRecip rc,
                                                         bool fast, uint64_t flat0) {
  constexpr int W = kWordElems<D>;
  float v[W];
  widen_word<D>(u, v);
  WordCodes out{{0u, 0u}};
  for (int j = 0; j < W / 4; ++j) {
    uint32_t w = 0;
    for (int e = 0; e < 4; ++e) {
      const float xv = v[4 * j + e];
      const bool fin = is_finite_bits(f32_bits(xv));  // div_by is exact for finite dividends only
      // div_by for round-to-nearest only (see encode_word_ref in quantize_fast.cu).
      const float q = MODE == kPlain ? (fast && fin && !P.stochastic ? div_by(xv, rc) : apply_scale(xv, sq, P.scale))
                                     : mul_rn(xv, sq);
      w |= static_cast<uint32_t>(encode_value<T>(P, q, flat0 + 4 * j + e)) << (8 * e);
    }
    out.w[j] = w;
  }
  return out;
}

// Group Scaling's stage 2 run inside the encode kernel (plain mode, long producer-maxima lists):
// every block first reduces a slice of the maxima, the last block computes the scale, and all
// blocks wait for it at a grid barrier. The launch is cooperative, so all blocks are resident and
// the barrier cannot deadlock. slot[2..4] (max, block counter, barrier flag) are zeroed by the
// caller. Delayed scaling's kernels use only tensor_amax and scales (delayed_out), where their
// last block puts the amax and the stored scale.
struct FusedStage2 {
  const uint32_t* maxima = nullptr;  // plain mode, null: the scale is already in slot[0]
  int64_t m = 0;
  float* tensor_amax = nullptr;
  float* scales = nullptr;
};

// Delayed scaling's stage 2 in the encode launch itself: every block has written its amax word
// (block_amax[blockIdx.x]); the last block to finish (slot[3], zeroed with the slot words before
// the launch) reduces them as reduce_scale_kernel does and runs finish_scale, which saves the
// separate stage-2 launch. Block-uniform; every block must reach it.
__device__ __forceinline__ void delayed_stage2_last_block(const QuantKernelParams& P, const uint32_t* block_amax,
                                                          uint32_t* slot, const FusedStage2& out) {
  if (!last_block_done(slot + 3)) return;
  __threadfence();  // acquire: the other blocks' words are read after their count was seen
  Stats st = stats_init();
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
    const uint32_t a = __ldcg(block_amax + i) & 0x7FFFFFFFu;  // from L2: written by other blocks
    if (a < 0x7F800000u) st.amax = a > st.amax ? a : st.amax;
  }
  st = stats_reduce_block(st);
  if (threadIdx.x == 0) finish_scale(P, kDelayed, st.amax, slot, out.tensor_amax, out.scales);
}

// The plain per-tensor divisor, from slot[0]; with `fused.maxima`, after Group Scaling's stage 2
// run by the blocks of this (cooperative) launch, the last of which computes the scale.
__device__ __forceinline__ float plain_tensor_scale(const QuantKernelParams& P, uint32_t* slot,
                                                    const FusedStage2& fused) {
  if (fused.maxima) {
    raise_max_of_slice(fused.maxima, fused.m, slot + 2);
    if (last_block_done(slot + 3) && threadIdx.x == 0) {
      finish_scale(P, kPlain, atomicMax(slot + 2, 0u), slot, fused.tensor_amax, fused.scales);
      __threadfence();
      atomicExch(slot + 4, 1u);  // release: the scale is in slot[0..1]
    }
    if (threadIdx.x == 0)
      while (atomicAdd(slot + 4, 0u) == 0u) __nanosleep(64);
    __syncthreads();
    __threadfence();
  }
  return f32_from_bits(__ldcg(slot));  // from L2: written by another block in the fused case
}

template <class T, InDt D, int MODE, int E = kTensorUnit<D>, int U = kTensorUnits>
__global__ void __launch_bounds__(256)
    encode_tensor_kernel(const void* __restrict__ x, uint8_t* __restrict__ codes, int64_t n, bool vec, bool hw,
                         QuantKernelParams P, uint32_t* slot, uint32_t* __restrict__ block_amax,
                         uint32_t* __restrict__ inf_flag, FusedStage2 fused) {
  constexpr bool kEmit = MODE == kDelayed;
  constexpr int W = kWordElems<D>;
  constexpr int NW = E / W;
  Stats st = stats_init();
  GroupQ g;
  g.sq = MODE == kPlain ? plain_tensor_scale(P, slot, fused) : P.delayed_scale;
  // fast: the quotient from the reciprocal (x / s only); other apply= forms compute it exactly
  // with apply_scale, so they also take the hardware converter.
  const bool div = P.scale.apply == Apply::Div;
  const bool fast = MODE == kDelayed || (div && fast_recip_ok(g.sq));
  const bool exact = fast || (MODE == kPlain && !div);
  const FastRecip rc = fast_recip(MODE == kPlain && fast ? g.sq : 1.0f);
  const int64_t units = vec ? n / E : 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint4* xw = static_cast<const uint4*>(x);
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t0 < units; t0 += U * stride) {
    uint4 raw[U][NW];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t t = t0 + k * stride;
#pragma unroll
      for (int w = 0; w < NW; ++w) raw[k][w] = t < units ? xw[t * NW + w] : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t t = t0 + k * stride;
      if (t >= units) break;
      const uint32_t m = absmax_bits_words<D, NW>(raw[k]);
      const bool finite = m < 0x7F800000u;
      if constexpr (kEmit) {
        if (finite) {
          st.amax = m > st.amax ? m : st.amax;
        } else {
#pragma unroll
          for (int w = 0; w < NW; ++w) {
            float v[W];
            widen_word<D>(raw[k][w], v);
#pragma unroll
            for (int j = 0; j < W; ++j) stats_add(st, v[j]);
          }
        }
      }
      uint32_t out[E / 4];
      if (finite && exact && hw) {
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          float v[W];
          widen_word<D>(raw[k][w], v);
#pragma unroll
          for (int j = 0; j < W / 4; ++j) {
            float q[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
              q[e] = MODE == kPlain ? (div ? div_by(v[4 * j + e], rc) : apply_scale(v[4 * j + e], g.sq, P.scale))
                                    : mul_rn(v[4 * j + e], g.sq);
            out[w * (W / 4) + j] = cvt2_hw<T>(q[0], q[1]) | (cvt2_hw<T>(q[2], q[3]) << 16);
          }
        }
      } else {
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          const WordCodes c =
              encode_tensor_word_ref<T, D, MODE>(P, raw[k][w], g.sq, rc, fast, static_cast<uint64_t>(E * t + W * w));
#pragma unroll
          for (int j = 0; j < W / 4; ++j) out[w * (W / 4) + j] = c.w[j];
        }
      }
      uint4* dst = reinterpret_cast<uint4*>(codes) + t * (E / 16);
#pragma unroll
      for (int q = 0; q < E / 16; ++q) dst[q] = make_uint4(out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]);
    }
  }
  for (int64_t i = E * units + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load_elem<D>(x, i);
    if constexpr (kEmit) stats_add(st, v);
    codes[i] = encode_value<T>(P, transform<MODE>(P, v, g), static_cast<uint64_t>(i));
  }
  if constexpr (kEmit) {
    st = stats_reduce_block(st);
    if (threadIdx.x == 0) {
      block_amax[blockIdx.x] = st.amax;
      if (st.inf && inf_flag) atomicOr(inf_flag, 1u);
    }
    delayed_stage2_last_block(P, block_amax, slot, fused);
  }
}

// ---- cast-transpose ----------------------------------------------------------------------------------
// The per-tensor encode with the codes written twice, row-major (as encode_tensor_kernel) and
// transposed ((cols x rows) row-major over the 2-D view), from one read of the input:
// TransformerEngine's cast_transpose, whose second layout the backward's weight-gradient GEMM reads.
// Every code is encode_tensor_kernel's for the same element: the same scale, quotient and encoder,
// and the row-major flat index as stochastic rounding's counter.
//
// A block takes tiles of kCtRows x kCtCols elements. Thread t owns rows 4 (t / 8) .. + 3 of the
// tile's 8-column piece t % 8: four 16-byte loads for 16-bit input (eight for fp32) and four 8-byte
// row-major code stores. Byte permutes turn its 4 x 8 codes into eight words of 4 rows each, which
// go to shared memory at [column][row word], each column's 16-byte groups XOR-swizzled by column / 8
// so that the stores and the 16-byte loads that follow are free of bank conflicts. After one barrier
// every thread loads two 16-byte runs of the transposed tile (16 rows of one column) and stores
// them: eight threads write one 128-byte row of the transposed output. The shared tile alternates
// between two buffers, so one barrier per tile suffices. Tiles that are partial, and inputs or
// outputs not aligned for these accesses (`vec` false), go element by element.
constexpr int kCtRows = 128, kCtCols = 64;

// Four rows' codes of 4 columns (row i in r[i], column j in byte j) -> four words of one column
// each (column j in out[j], row i in byte i).
__device__ __forceinline__ void transpose4x4_bytes(const uint32_t (&r)[4], uint32_t (&out)[4]) {
  const uint32_t lo01 = __byte_perm(r[0], r[1], 0x5140), hi01 = __byte_perm(r[0], r[1], 0x7362);
  const uint32_t lo23 = __byte_perm(r[2], r[3], 0x5140), hi23 = __byte_perm(r[2], r[3], 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

template <class T, InDt D, int MODE>
__global__ void __launch_bounds__(256)
    cast_transpose_kernel(const void* __restrict__ x, uint8_t* __restrict__ codes, uint8_t* __restrict__ codes_t,
                          int64_t rows, int64_t cols, bool vec, bool hw, QuantKernelParams P, uint32_t* slot,
                          uint32_t* __restrict__ block_amax, uint32_t* __restrict__ inf_flag, FusedStage2 fused) {
  constexpr bool kEmit = MODE == kDelayed;
  constexpr int W = kWordElems<D>;  // elements per 16-byte word
  constexpr int NW = 8 / W;         // words per thread and row (8 columns)
  __shared__ __align__(16) uint32_t tile[2][kCtCols][kCtRows / 4];
  Stats st = stats_init();
  GroupQ g;
  g.sq = MODE == kPlain ? plain_tensor_scale(P, slot, fused) : P.delayed_scale;
  const bool div = P.scale.apply == Apply::Div;
  const bool fast = MODE == kDelayed || (div && fast_recip_ok(g.sq));
  const bool exact = fast || (MODE == kPlain && !div);
  const FastRecip rc = fast_recip(MODE == kPlain && fast ? g.sq : 1.0f);
  const int64_t tiles_c = (cols + kCtCols - 1) / kCtCols;
  const int64_t tiles = (rows + kCtRows - 1) / kCtRows * tiles_c;
  const int tc = threadIdx.x & 7, tr = threadIdx.x >> 3;
  const uint4* xw = static_cast<const uint4*>(x);
  int buf = 0;
  // A full tile (block-uniform) takes the 16-byte path. For 16-bit input its loads are issued one
  // tile ahead (before this tile's encode, shared-memory transpose and barrier), so that each
  // thread keeps a tile's loads in flight across them (72-80 registers: three blocks per SM); fp32
  // input, whose tile takes twice the registers, loads each tile when it comes.
  constexpr bool kAhead = D != InDt::F32;
  const auto full_tile = [&](int64_t t) {
    const int64_t r0 = t / tiles_c * kCtRows, c0 = t % tiles_c * kCtCols;
    return t < tiles && vec && r0 + kCtRows <= rows && c0 + kCtCols <= cols;
  };
  const auto load_tile = [&](int64_t t, uint4(&r)[4][NW]) {
    const int64_t c0 = t % tiles_c * kCtCols + 8 * tc;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t base = (t / tiles_c * kCtRows + 4 * tr + i) * cols + c0;
#pragma unroll
      for (int w = 0; w < NW; ++w) r[i][w] = xw[base / W + w];
    }
  };
  uint4 ahead[4][NW];
  if (kAhead && full_tile(blockIdx.x)) load_tile(blockIdx.x, ahead);
  for (int64_t ti = blockIdx.x; ti < tiles; ti += gridDim.x) {
    const int64_t row0 = ti / tiles_c * kCtRows, col0 = ti % tiles_c * kCtCols;
    const int64_t next = ti + gridDim.x;
    if (!full_tile(ti)) {  // block-uniform
      if (kAhead && full_tile(next)) load_tile(next, ahead);
      for (int e = threadIdx.x; e < kCtRows * kCtCols; e += blockDim.x) {
        const int64_t r = row0 + e / kCtCols, c = col0 + e % kCtCols;
        if (r >= rows || c >= cols) continue;
        const int64_t i = r * cols + c;
        const float v = load_elem<D>(x, i);
        if constexpr (kEmit) stats_add(st, v);
        const uint8_t q = encode_value<T>(P, transform<MODE>(P, v, g), static_cast<uint64_t>(i));
        codes[i] = q;
        codes_t[c * rows + r] = q;
      }
      continue;
    }
    const int64_t c0 = col0 + 8 * tc;
    uint4 raw[4][NW];
    if constexpr (kAhead) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int w = 0; w < NW; ++w) raw[i][w] = ahead[i][w];
      if (full_tile(next)) load_tile(next, ahead);
    } else {
      load_tile(ti, raw);
    }
    uint32_t rc_lo[4], rc_hi[4];  // row i's codes of columns 0-3 and 4-7
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t base = (row0 + 4 * tr + i) * cols + c0;
      uint32_t out[2];
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const uint32_t m = absmax_bits_word<D>(raw[i][w]);
        const bool finite = m < 0x7F800000u;
        if constexpr (kEmit) {
          if (finite) {
            st.amax = m > st.amax ? m : st.amax;
          } else {
            float v[W];
            widen_word<D>(raw[i][w], v);
#pragma unroll
            for (int j = 0; j < W; ++j) stats_add(st, v[j]);
          }
        }
        if (finite && exact && hw) {
          float v[W];
          widen_word<D>(raw[i][w], v);
#pragma unroll
          for (int j = 0; j < W / 4; ++j) {
            float q[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
              q[e] = MODE == kPlain ? (div ? div_by(v[4 * j + e], rc) : apply_scale(v[4 * j + e], g.sq, P.scale))
                                    : mul_rn(v[4 * j + e], g.sq);
            out[w * (W / 4) + j] = cvt2_hw<T>(q[0], q[1]) | (cvt2_hw<T>(q[2], q[3]) << 16);
          }
        } else {
          const WordCodes c =
              encode_tensor_word_ref<T, D, MODE>(P, raw[i][w], g.sq, rc, fast, static_cast<uint64_t>(base + W * w));
#pragma unroll
          for (int j = 0; j < W / 4; ++j) out[w * (W / 4) + j] = c.w[j];
        }
      }
      rc_lo[i] = out[0];
      rc_hi[i] = out[1];
      *reinterpret_cast<uint2*>(codes + base) = make_uint2(out[0], out[1]);
    }
    uint32_t col_lo[4], col_hi[4];  // column j's (and 4 + j's) codes of the 4 rows
    transpose4x4_bytes(rc_lo, col_lo);
    transpose4x4_bytes(rc_hi, col_hi);
    const int phys = tr ^ (tc << 2);  // this row word's swizzled place in every column of piece tc
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      tile[buf][8 * tc + j][phys] = col_lo[j];
      tile[buf][8 * tc + 4 + j][phys] = col_hi[j];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = threadIdx.x + 256 * h;
      const int c = p >> 3, k = p & 7;  // column of the tile, 16-row run
      const uint4 v = *reinterpret_cast<const uint4*>(&tile[buf][c][4 * (k ^ (c >> 3))]);
      *reinterpret_cast<uint4*>(codes_t + (col0 + c) * rows + row0 + 16 * k) = v;
    }
    buf ^= 1;
  }
  if constexpr (kEmit) {
    st = stats_reduce_block(st);
    if (threadIdx.x == 0) {
      block_amax[blockIdx.x] = st.amax;
      if (st.inf && inf_flag) atomicOr(inf_flag, 1u);
    }
    delayed_stage2_last_block(P, block_amax, slot, fused);
  }
}

// Pass-through formats (bf16 / fp16 storage, no scale).
template <InDt D, bool BF16>
__global__ void __launch_bounds__(256)
    passthrough_kernel(const void* __restrict__ x, uint16_t* __restrict__ out, int64_t n, bool saturate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load_elem<D>(x, i);
    out[i] = BF16 ? f32_to_bf16_rne(v, saturate) : f32_to_fp16_rne(v, saturate);
  }
}

// 16-bit storage with a per-tensor scale (FP8-LM's scaled fp16 v): q = f32_to_16(x / s_quant).
template <InDt D, bool BF16>
__global__ void __launch_bounds__(256) scaled16_kernel(const void* __restrict__ x, uint16_t* __restrict__ out,
                                                       int64_t n, bool saturate, const uint32_t* __restrict__ slot) {
  const float sq = f32_from_bits(slot[0]);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = div_rn_nan_kept(load_elem<D>(x, i), sq);
    out[i] = BF16 ? f32_to_bf16_rne(v, saturate) : f32_to_fp16_rne(v, saturate);
  }
}

// ---- dequantize -------------------------------------------------------------------------------------
template <bool EXPAND>
__global__ void __launch_bounds__(256)
    dequant_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales, const float* __restrict__ ks,
                   const float* __restrict__ cs, float* __restrict__ out, QuantKernelParams P, bool vec4) {
  __shared__ float lut[256];
  fill_decode_table(lut, P.format);
  const int64_t n = P.rows * P.cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // vec4: cols and group_cols are multiples of 4, so 4 consecutive elements share one group.
  const int64_t units = vec4 ? n / 4 : n;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t i0 = vec4 ? 4 * u : u;
    const int64_t r = i0 / P.cols, c = i0 % P.cols;
    const int64_t grp = (r / P.group_rows) * P.grid_cols + c / P.group_cols;
    ExpandParams p;
    float s = scales[grp];
    if constexpr (EXPAND) p = ExpandParams{ks[grp], cs[grp], s};
    if (vec4) {
      const uint32_t q = reinterpret_cast<const uint32_t*>(codes)[u];
      float4 o;
      float* of = &o.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float d = lut[(q >> (8 * j)) & 0xFFu];
        of[j] = EXPAND ? compress_value(d, p) : mul_rn(d, s);
      }
      reinterpret_cast<float4*>(out)[u] = o;
    } else {
      const float d = lut[codes[i0]];
      out[i0] = EXPAND ? compress_value(d, p) : mul_rn(d, s);
    }
  }
}

template <bool BF16>
__global__ void __launch_bounds__(256)
    dequant_passthrough_kernel(const uint16_t* __restrict__ codes, const float* __restrict__ scale,
                               float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float w = BF16 ? bf16_to_f32(codes[i]) : fp16_to_f32(codes[i]);
    out[i] = scale ? mul_rn_nan_kept(w, scale[0]) : w;
  }
}

template <InDt D>
void launch_chunk_stats(const void* x, int64_t n, int64_t chunk, uint32_t* chunk_amax, uint32_t* inf_flag,
                        cudaStream_t s) {
  const bool vec = (reinterpret_cast<uintptr_t>(x) % 16) == 0 && chunk % 16 == 0;
  const int64_t chunks = (n + chunk - 1) / chunk;
  chunk_stats_kernel<D><<<grid_cap(chunks, 8), 256, 0, s>>>(x, n, chunk, vec, chunk_amax, inf_flag);
}

void launch_chunk_stats_dt(InDt dt, const void* x, int64_t n, int64_t chunk, uint32_t* chunk_amax, uint32_t* inf_flag,
                           cudaStream_t s) {
  if (dt == InDt::F32) launch_chunk_stats<InDt::F32>(x, n, chunk, chunk_amax, inf_flag, s);
  else if (dt == InDt::BF16) launch_chunk_stats<InDt::BF16>(x, n, chunk, chunk_amax, inf_flag, s);
  else launch_chunk_stats<InDt::FP16>(x, n, chunk, chunk_amax, inf_flag, s);
}

// Whether this device runs cooperative launches (queried once).
bool coop_launch_ok() { return device_attr_cached<cudaDevAttrCooperativeLaunch>(0) != 0; }

// Whether the hardware converter may stand in for the reference encoder in the per-tensor
// encode: never for stochastic rounding; non-saturating only where no |x/s| can overflow (a scale
// from this tensor's own amax; delayed and producer-given scales can overflow).
bool tensor_hw_ok(const QuantLaunch& L) {
  const QuantKernelParams& P = L.params;
  if (!rne_hw_ok(P)) return false;
  if (P.saturate) return true;
  return L.mode == kPlain && !L.producer_maxima && P.scale.eps >= 0.0;
}

// The clamp test the team kernel does without (see quant_team_kernel), in the form ptxas turns
// into a VIMNMX.RELU predicate: out[i] = 0x110 where the branch for "vec && clamp(raw[i], 0,
// 16) == 16" is taken (ptxas folds the clamped value to 16 there), else the clamped value.
__global__ void __launch_bounds__(256)
    clamp_guard_probe_kernel(const int* __restrict__ raw, int n, bool vec, unsigned* __restrict__ out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  int valid = raw[i];
  valid = valid < 0 ? 0 : (valid > 16 ? 16 : valid);
  if (vec && valid == 16) out[i] = 0x100u | static_cast<unsigned>(valid);
  else out[i] = static_cast<unsigned>(valid);
}

// ---- launch_quantize's steps -------------------------------------------------------------------------

// The tensor amax as a by-product of an encode that does not compute it (bookkeeping): the two
// stages over the input, into L.tensor_amax when the caller asked for it.
void launch_tensor_amax(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  if (!L.tensor_amax) return;
  const QuantKernelParams& P = L.params;
  launch_chunk_stats_dt(dt, L.x, n, kChunk, L.chunk_maxima, nullptr, s);
  FP8SIM_CUDA_CHECK_LAUNCH();
  reduce_scale_kernel<<<1, 1024, 0, s>>>(L.chunk_maxima, (n + kChunk - 1) / kChunk, P, -1, nullptr, L.tensor_amax,
                                         nullptr);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// Stage 1 of the per-tensor scalings: the producer's maxima when it gave them, else the chunk
// maxima of the input (the same pass sets the inf flag).
struct Maxima {
  const uint32_t* bits;
  int64_t count;
};
Maxima stage1_maxima(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  if (L.producer_maxima) return {L.producer_maxima, static_cast<int64_t>(L.producer_maxima_count)};
  launch_chunk_stats_dt(dt, L.x, n, kChunk, L.chunk_maxima, L.inf_flag, s);
  FP8SIM_CUDA_CHECK_LAUNCH();
  return {L.chunk_maxima, (n + kChunk - 1) / kChunk};
}

// Plain scaling's stage 2 over the maxima into L.slot / tensor_amax / scales: one block for a
// short list; a long one (group scaling's per-group maxima) goes through the multi-block max into
// slot[2], whose last block to finish (slot[3]: its block counter; both zeroed with the slot words
// before the launch) also computes the scale.
void launch_stage2(const QuantLaunch& L, const Maxima& mx, cudaStream_t s) {
  uint32_t* acc = L.slot + 2;
  if (mx.count > kOneBlockMaxima) {
    max_maxima_kernel<<<grid_cap((mx.count / 4 + 255) / 256, 8), 256, 0, s>>>(mx.bits, mx.count, acc, acc + 1, L.params,
                                                                              kPlain, L.slot, L.tensor_amax, L.scales);
  } else {
    reduce_scale_kernel<<<1, mx.count <= 32 ? 32 : 1024, 0, s>>>(mx.bits, mx.count, L.params, kPlain, L.slot,
                                                                 L.tensor_amax, L.scales);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// Kind::Passthrough: a 16-bit format, element by element, unscaled.
void launch_passthrough(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  const int grid = grid_cap((n + 255) / 256, 16);
  auto* out = static_cast<uint16_t*>(L.codes);
  if (P.format == gpu_format_code(Format::BF16)) {
    if (dt == InDt::F32) passthrough_kernel<InDt::F32, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
    else if (dt == InDt::BF16) passthrough_kernel<InDt::BF16, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
    else passthrough_kernel<InDt::FP16, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
  } else {
    if (dt == InDt::F32) passthrough_kernel<InDt::F32, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
    else if (dt == InDt::BF16) passthrough_kernel<InDt::BF16, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
    else passthrough_kernel<InDt::FP16, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
  launch_tensor_amax(L, dt, n, s);
}

// Kind::Scaled16: a 16-bit format with a per-tensor scale: stage 1, stage 2, the scaled cast.
void launch_scaled16(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  const Maxima mx = stage1_maxima(L, dt, n, s);
  launch_stage2(L, mx, s);
  const int grid = grid_cap((n + 255) / 256, 16);
  auto* out = static_cast<uint16_t*>(L.codes);
  if (P.format == gpu_format_code(Format::BF16)) {
    if (dt == InDt::F32) scaled16_kernel<InDt::F32, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
    else if (dt == InDt::BF16) scaled16_kernel<InDt::BF16, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
    else scaled16_kernel<InDt::FP16, true><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
  } else {
    if (dt == InDt::F32) scaled16_kernel<InDt::F32, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
    else if (dt == InDt::BF16) scaled16_kernel<InDt::BF16, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
    else scaled16_kernel<InDt::FP16, false><<<grid, 256, 0, s>>>(L.x, out, n, P.saturate, L.slot);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// The per-tensor encode's grid: a persistent grid of at most the resident blocks (no partial
// last wave), at most 16 per SM (the delayed encode's per-block maxima must fit the workspace).
struct TensorEncodeShape {
  bool vec;      // 16-byte aligned input and codes (codes aligned to 8 only take the element-wise loop)
  bool hw;       // tensor_hw_ok
  int64_t want;  // blocks that cover the tensor
};
TensorEncodeShape tensor_encode_shape(const QuantLaunch& L, InDt dt, int64_t n) {
  const uint8_t* codes = static_cast<const uint8_t*>(L.codes);
  const bool vec = (reinterpret_cast<uintptr_t>(L.x) % 16) == 0 && (reinterpret_cast<uintptr_t>(codes) % 16) == 0;
  const int64_t unit = dt == InDt::F32 ? kTensorUnit<InDt::F32> : kTensorUnit<InDt::BF16>;
  const int64_t want = (n / unit + 256 * kTensorUnits - 1) / (256 * kTensorUnits) + 1;
  return {vec, tensor_hw_ok(L), want};
}
template <class Kernel>
int resident_of(Kernel kernel) {  // blocks per SM, at most 16
  const int b = resident_blocks(kernel);
  return b < 16 ? b : 16;
}

// A cooperative launch of `kernel` (every block resident at once: grid <= resident blocks x SMs,
// which a grid barrier in the kernel needs) with these arguments, converted to its parameter types.
template <class... Params>
void launch_cooperative(void (*kernel)(Params...), int grid, cudaStream_t s, std::type_identity_t<Params>... args) {
  void* ptrs[] = {&args...};
  FP8SIM_CUDA_CHECK(
      cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(256), ptrs, 0, s));
}

// Stages 1 and 2 of plain per-tensor scaling: stage 1 unless a producer gave maxima, then stage 2 as
// a launch of its own, or, for long maxima lists where the device runs cooperative launches, the
// maxima to reduce inside the (cooperative) encode launch.
FusedStage2 plain_stages_1_2(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const Maxima mx = stage1_maxima(L, dt, n, s);
  FusedStage2 fused;
  if (mx.count > kOneBlockMaxima && coop_launch_ok()) {
    fused.maxima = mx.bits;
    fused.m = mx.count;
    fused.tensor_amax = L.tensor_amax;
    fused.scales = L.scales;
  } else {
    launch_stage2(L, mx, s);
  }
  return fused;
}

// Where delayed scaling's encode kernels put the tensor amax and the stored scale (stage 2 runs in
// their last block: delayed_stage2_last_block).
FusedStage2 delayed_out(const QuantLaunch& L) { return FusedStage2{nullptr, 0, L.tensor_amax, L.scales}; }

// Kind::Tensor with delayed scaling, one pass and one launch: encode with the host's multiplier,
// emitting per-block maxima, whose amax (stage 2) the last block computes.
void launch_tensor_delayed(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  uint8_t* codes = static_cast<uint8_t*>(L.codes);
  const TensorEncodeShape t = tensor_encode_shape(L, dt, n);
  dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
    static const int b = resident_of(encode_tensor_kernel<T, D, kDelayed>);
    const int grid = grid_cap(t.want, b);
    encode_tensor_kernel<T, D, kDelayed>
        <<<grid, 256, 0, s>>>(L.x, codes, n, t.vec, t.hw, P, L.slot, L.chunk_maxima, L.inf_flag, delayed_out(L));
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// Kind::Tensor, plain: stage 1 (unless a producer gave maxima), stage 2, stage 3 (the encode).
// Long maxima lists (group scaling's per-group maxima) are reduced inside a cooperative encode
// launch where the device runs one.
void launch_tensor_plain(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  uint8_t* codes = static_cast<uint8_t*>(L.codes);
  const TensorEncodeShape t = tensor_encode_shape(L, dt, n);
  const FusedStage2 fused = plain_stages_1_2(L, dt, n, s);
  dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
    auto kernel = encode_tensor_kernel<T, D, kPlain>;
    static const int b = resident_of(kernel);
    const int grid = grid_cap(t.want, b);
    if (fused.maxima)
      launch_cooperative(kernel, grid, s, L.x, codes, n, t.vec, t.hw, P, L.slot, nullptr, nullptr, fused);
    else kernel<<<grid, 256, 0, s>>>(L.x, codes, n, t.vec, t.hw, P, L.slot, nullptr, nullptr, FusedStage2{});
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// Kind::Tensor with L.codes_t (cast-transpose): as launch_tensor_delayed / launch_tensor_plain, with
// cast_transpose_kernel as the encode.
void launch_tensor_transposed(const QuantLaunch& L, InDt dt, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  const int64_t rows = P.rows, cols = P.cols, n = rows * cols;
  auto* codes = static_cast<uint8_t*>(L.codes);
  auto* codes_t = static_cast<uint8_t*>(L.codes_t);
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  const bool vec = aligned(L.x, 16) && aligned(codes, 8) && aligned(codes_t, 16) && cols % 8 == 0 && rows % 16 == 0;
  const bool hw = tensor_hw_ok(L);
  const int64_t tiles = (rows + kCtRows - 1) / kCtRows * ((cols + kCtCols - 1) / kCtCols);
  if (L.mode == kDelayed) {
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      static const int b = resident_of(cast_transpose_kernel<T, D, kDelayed>);
      const int grid = grid_cap(tiles, b);
      cast_transpose_kernel<T, D, kDelayed><<<grid, 256, 0, s>>>(L.x, codes, codes_t, rows, cols, vec, hw, P, L.slot,
                                                                 L.chunk_maxima, L.inf_flag, delayed_out(L));
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
    return;
  }
  const FusedStage2 fused = plain_stages_1_2(L, dt, n, s);
  dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
    auto kernel = cast_transpose_kernel<T, D, kPlain>;
    static const int b = resident_of(kernel);
    const int grid = grid_cap(tiles, b);
    if (fused.maxima)
      launch_cooperative(kernel, grid, s, L.x, codes, codes_t, rows, cols, vec, hw, P, L.slot, nullptr, nullptr, fused);
    else
      kernel<<<grid, 256, 0, s>>>(L.x, codes, codes_t, rows, cols, vec, hw, P, L.slot, nullptr, nullptr, FusedStage2{});
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
}

// Kinds Team and Block (groups): the fast plain kernels (x / s; quantize_fast.cu) where they fit,
// COAT's aligned 1xG kernel, then the element-wise team kernel (1xG groups of at most 512) or one
// block per group; the tensor amax as a by-product.
void launch_groups(const QuantLaunch& L, InDt dt, int64_t n, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  uint8_t* codes = static_cast<uint8_t*>(L.codes);
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int64_t G = P.group_cols;
  if (P.group_min != nullptr) {  // de_min=kernel: the groups' minima first
    const int grid = grid_cap((groups + 255) / 256, 8);
    if (dt == InDt::F32) coat_group_min_kernel<InDt::F32><<<grid, 256, 0, s>>>(L.x, P);
    else if (dt == InDt::BF16) coat_group_min_kernel<InDt::BF16><<<grid, 256, 0, s>>>(L.x, P);
    else coat_group_min_kernel<InDt::FP16><<<grid, 256, 0, s>>>(L.x, P);
    FP8SIM_CUDA_CHECK_LAUNCH();
  }
  // The fast plain kernels divide (x / s): other apply= forms take the team and block kernels.
  if (L.mode == kPlain && P.scale.apply == Apply::Div && launch_quant_fast(L, s)) {
    // done: 1xG or staged groups (quantize_fast.cu)
  } else if (L.mode == kCoat && P.format <= 1 && whole_1xg_groups(P) && (reinterpret_cast<uintptr_t>(L.x) % 16) == 0 &&
             (reinterpret_cast<uintptr_t>(codes) % 16) == 0) {
    const int team = static_cast<int>(G / 16);
    const int64_t segs = n / 16;
    const bool hw = rne_hw_ok(P);
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      static const int b = resident_blocks(quant_coat_1xg_kernel<T, D>);
      const int grid = grid_cap((segs + 255) / 256, b);
      quant_coat_1xg_kernel<T, D>
          <<<grid, 256, 0, s>>>(static_cast<const uint4*>(L.x), codes, L.scales, L.k, L.c, P, team, segs, hw);
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
  } else if (L.kind == QuantLaunch::Kind::Team) {
    const int team = L.team;
    // 1xG groups of at most 512 elements that the kernels above do not take (a group wider than
    // the row, rows not a whole number of groups, G not a power of two, unaligned pointers,
    // robust DE): element-wise loads and stores (see quant_team_kernel).
    const int teams_per_block = 256 / team;
    const int grid = grid_cap((groups + teams_per_block - 1) / teams_per_block, 8);
    const bool hw = rne_hw_ok(P);
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      switch (L.mode) {
        case kPlain:
          quant_team_kernel<T, D, kPlain><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, team, hw);
          break;
        case kCoat:
          quant_team_kernel<T, D, kCoat><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, team, hw);
          break;
        default:
          if (P.stochastic)
            quant_team_kernel<T, D, kRobust><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, team, hw);
          else
            quant_team_kernel<T, D, kRobust, false><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, team, hw);
          break;
      }
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
  } else {
    const int grid = grid_cap(groups, 8);
    const bool hw = rne_hw_ok(P);
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      switch (L.mode) {
        case kPlain:
          quant_block_kernel<T, D, kPlain><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, hw);
          break;
        case kCoat:
          quant_block_kernel<T, D, kCoat><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, hw);
          break;
        default:
          quant_block_kernel<T, D, kRobust><<<grid, 256, 0, s>>>(L.x, codes, L.scales, L.k, L.c, P, hw);
          break;
      }
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
  }
  launch_tensor_amax(L, dt, n, s);
}

}  // namespace

int64_t tensor_chunk_elements() { return kChunk; }
int64_t max_encode_blocks() { return static_cast<int64_t>(sm_count_cached()) * 16; }

void launch_quantize(const QuantLaunch& L, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  const InDt dt = static_cast<InDt>(L.dtype);
  const int64_t n = P.rows * P.cols;
  if (n == 0) return;
  switch (L.kind) {
    case QuantLaunch::Kind::Passthrough:
      return launch_passthrough(L, dt, n, s);
    case QuantLaunch::Kind::Scaled16:
      return launch_scaled16(L, dt, n, s);
    case QuantLaunch::Kind::Tensor:
      if (L.codes_t) return launch_tensor_transposed(L, dt, s);
      return L.mode == kDelayed ? launch_tensor_delayed(L, dt, n, s) : launch_tensor_plain(L, dt, n, s);
    case QuantLaunch::Kind::Team:
    case QuantLaunch::Kind::Block:
      return launch_groups(L, dt, n, s);
  }
}

uint64_t clamp_guard_mismatches(int lo, int hi, int* first_bad) {
  const int n = hi - lo + 1;
  if (first_bad) *first_bad = 0;
  if (n <= 0) return 0;
  std::vector<int> raw(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) raw[static_cast<size_t>(i)] = lo + i;
  const DeviceBuffer<int> d_raw = to_device(raw);
  DeviceBuffer<unsigned> d_out(static_cast<size_t>(n));
  clamp_guard_probe_kernel<<<(n + 255) / 256, 256>>>(d_raw.get(), n, true, d_out.get());
  FP8SIM_CUDA_CHECK_LAUNCH();
  const std::vector<unsigned> out = d_out.download();
  uint64_t bad = 0;
  for (int i = 0; i < n; ++i) {
    const int r = lo + i;
    const unsigned want = r >= 16 ? 0x110u : static_cast<unsigned>(r < 0 ? 0 : r);
    if (out[static_cast<size_t>(i)] != want) {
      if (bad == 0 && first_bad) *first_bad = r;
      ++bad;
    }
  }
  return bad;
}

void launch_dequantize(const QuantKernelParams& P, bool sixteen_bit, bool expand, const void* codes,
                       const float* scales, const float* k, const float* c, float* out, cudaStream_t s) {
  const int64_t n = P.rows * P.cols;
  if (n == 0) return;
  if (sixteen_bit) {
    const int grid = grid_cap((n + 255) / 256, 16);
    if (P.format == gpu_format_code(Format::BF16))
      dequant_passthrough_kernel<true><<<grid, 256, 0, s>>>(static_cast<const uint16_t*>(codes), scales, out, n);
    else dequant_passthrough_kernel<false><<<grid, 256, 0, s>>>(static_cast<const uint16_t*>(codes), scales, out, n);
    FP8SIM_CUDA_CHECK_LAUNCH();
    return;
  }
  const bool vec4 = P.cols % 4 == 0 && P.group_cols % 4 == 0 && (reinterpret_cast<uintptr_t>(codes) % 4) == 0 &&
                    (reinterpret_cast<uintptr_t>(out) % 16) == 0;
  const int grid = grid_cap(((vec4 ? n / 4 : n) + 255) / 256, 16);
  if (expand) dequant_kernel<true><<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(codes), scales, k, c, out, P, vec4);
  else dequant_kernel<false><<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(codes), scales, k, c, out, P, vec4);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void launch_chunk_maxima(int dtype, const void* x, int64_t n, int64_t chunk, uint32_t* out, cudaStream_t s) {
  launch_chunk_stats_dt(static_cast<InDt>(dtype), x, n, chunk, out, nullptr, s);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void launch_reduce_maxima(const uint32_t* maxima, int64_t m, float* amax, cudaStream_t s) {
  if (m > kOneBlockMaxima) {  // multi-block: atomicMax straight into the result's bits
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), s));
    max_maxima_kernel<<<grid_cap((m / 4 + 255) / 256, 8), 256, 0, s>>>(maxima, m, reinterpret_cast<uint32_t*>(amax));
    FP8SIM_CUDA_CHECK_LAUNCH();
    return;
  }
  QuantKernelParams P{};
  reduce_scale_kernel<<<1, 1024, 0, s>>>(maxima, m, P, -1, nullptr, amax, nullptr);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu::detail
