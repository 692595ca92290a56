// Bandwidth-bound quantize kernels for the common geometries (plain scaling), bit-identical to
// sim/quant's reference like every kernel in gpu/quant:
//
//  * 1xG (G = 16, 32, ..., 512; whole groups, 16-byte aligned): a team of G/16 lanes per group,
//    16 elements per lane loaded as 16-byte words, two segments per thread in flight, the group
//    max reduced with shuffles inside the team, one pass over memory.
//  * register-resident groups (rows longer than 512, RxC blocks such as 128x128, 1xG with
//    G > 512): one 256-thread block per group, the whole group held in registers (up to 16
//    16-byte words per thread), a block max, then the codes written from the registers: the
//    input is read once.
//
// Per element the work is the group max (integer max of magnitudes; 16-bit pairs for bf16/fp16),
// q = x / s as the correctly rounded quotient from a per-group reciprocal (div_by: Markstein
// corrections, see quantize_kernels.cuh) and the encode: the hardware converter (cvt.rn.satfinite)
// where it is proven equal to the reference encoder, else encode_fp8_rne / encode_fp8_sr. A group
// holding NaN or Inf, or whose scale lies outside div_by's range, takes the reference path
// (div_rn and the software encoders) for the whole group.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/quant/dmath_gpu.cuh"
#include "gpu/quant/quantize_kernels.cuh"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/formats/philox.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

namespace {

constexpr uint32_t kInfBits = 0x7F800000u;


// ---- the hardware converter's proof --------------------------------------------------------------
// Every fp32 bit pattern (as pairs 2i, 2i+1): count the finite inputs whose hardware code differs
// from encode_fp8_rne<T>(x, true).
template <class T>
__global__ void __launch_bounds__(256) hw_cvt_check_kernel(unsigned long long* mismatches) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 31); i += stride) {
    const uint32_t u0 = static_cast<uint32_t>(2 * i), u1 = u0 + 1u;
    const bool f0 = (u0 & kInfBits) != kInfBits, f1 = (u1 & kInfBits) != kInfBits;
    const float x0 = f0 ? f32_from_bits(u0) : 0.0f, x1 = f1 ? f32_from_bits(u1) : 0.0f;
    const uint32_t hw = cvt2_hw<T>(x0, x1);
    const uint32_t r0 = encode_fp8_rne<T>(x0, true), r1 = encode_fp8_rne<T>(x1, true);
    bad += ((hw & 0xFFu) != r0) + ((hw >> 8) != r1);
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(kFullMask, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// ---- div_by's check (test hook) ------------------------------------------------------------------
__device__ __forceinline__ uint32_t mix32(uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  v ^= v >> 33;
  v *= 0xc4ceb9fe1a85ec53ull;
  v ^= v >> 33;
  return static_cast<uint32_t>(v);
}
// Random divisors b in div_by's range and random dividends with |a/b| >= 2^-20 (plus values near
// the quotient's binade edges): count results that differ from div_rn in any bit.
__global__ void __launch_bounds__(256) div_by_check_kernel(uint64_t n, uint64_t seed, unsigned long long* mismatches) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t rb = mix32(seed * 0x9E3779B97F4A7C15ull + 2 * i), ra = mix32(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1);
    // b: any significand, exponent in [2^-80, 2^80]
    const uint32_t eb = 47u + (rb >> 23) % 161u;
    const float b = f32_from_bits((eb << 23) | (rb & 0x7FFFFFu));
    // a / b spread over [2^-20, 2^10]; every 8th pair has a quotient near a power of two or
    // with a significand of all ones (the cases where the first product is least accurate).
    const int eq = -20 + static_cast<int>((ra >> 23) % 31u);
    uint32_t mq = ra & 0x7FFFFFu;
    if ((i & 7) == 0) mq = (ra & 1u) ? 0x7FFFFFu - (ra >> 27) : (ra >> 27);
    const float qt = f32_from_bits((static_cast<uint32_t>(eq + 127) << 23) | mq);
    float a = __fmul_rn(qt, b);
    if (ra & 0x10u) a = -a;
    const FastRecip d = fast_recip(b);
    bad += f32_bits(div_by(a, d)) != f32_bits(div_rn(a, b));
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(kFullMask, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// pow_det_y against pow_det: x random bit patterns (every class: zero, subnormal, normal, Inf,
// NaN, negative) and half of them near 1; y from DE's exponents (i/16 and 16/i) and special values.
__global__ void __launch_bounds__(256) pow_y_check_kernel(uint64_t n, uint64_t seed, unsigned long long* mismatches) {
  __shared__ float ys[192];
  for (int i = threadIdx.x; i < 192; i += blockDim.x) {
    float y;
    if (i < 160) y = i < 80 ? static_cast<float>(i + 1) / 16.0f : div_rn(1.0f, static_cast<float>(i - 79) / 16.0f);
    else {
      const float sp[32] = {0.0f, -0.0f, 1.0f, -1.0f, f32_from_bits(0x7F800000u), f32_from_bits(0xFF800000u),
                            f32_from_bits(0x7FC00000u), 16384.0f, 16385.5f, -16390.25f, 1099511627776.0f, 3e12f,
                            -0.5f, -2.0f, 0.3333f, 1e-7f, -1e-7f, 2.5f, 127.0f, -127.0f, 300.0f, 1e-30f,
                            0.0625f, 7.9375f, 12.3125f, -0.0625f, 2048.0f, 1.0000001f, 0.99999994f, 65504.0f,
                            -65504.0f, 8.0f};
      y = sp[i - 160];
    }
    ys[i] = y;
  }
  __syncthreads();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t r = mix32(seed * 0x9E3779B97F4A7C15ull + i);
    uint32_t ux = mix32(seed + 77 * i + 5);
    if (r & 1u) ux = 0x3F000000u + (ux & 0x00FFFFFFu);  // [0.5, 2): near 1
    const float x = f32_from_bits(ux);
    const float y = ys[(r >> 1) % 192u];
    const PowY Y = pow_y(y);
    bad += f32_bits(pow_det_y(x, Y)) != f32_bits(dmath::pow_det(x, y));
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(kFullMask, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// log2_parts_fast against dmath::log2_parts on every positive finite fp32 value (x = 0 and
// non-finite x never reach it: pow_det feeds it 1.0 there).
__global__ void __launch_bounds__(256) log2_fast_check_kernel(unsigned long long* mismatches) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t u = 1 + static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < 0x7F800000u; u += stride) {
    const float x = f32_from_bits(static_cast<uint32_t>(u));
    const dmath::Log2Parts a = log2_parts_fast(x), b = dmath::log2_parts(x);
    bad += (f32_bits(a.e) != f32_bits(b.e)) || (f32_bits(a.l) != f32_bits(b.l));
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(kFullMask, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// For a divisor s, every finite fp32 x: the FP8 code the fast path produces (div_by + the hardware
// converter) against the reference (div_rn + encode_fp8_rne, saturating), wherever |x / s| <= 2^17;
// also counts quotients that differ in any bit where 2^-20 <= |x / s| <= 2^17.
template <class T>
__global__ void __launch_bounds__(256) div_code_check_kernel(float s, unsigned long long* code_bad,
                                                             unsigned long long* quot_bad) {
  const FastRecip rc = fast_recip(s);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long cb = 0, qb = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 31); i += stride) {
    const uint32_t u0 = static_cast<uint32_t>(2 * i), u1 = u0 + 1u;
    const bool f0 = (u0 & kInfBits) != kInfBits, f1 = (u1 & kInfBits) != kInfBits;
    const float x0 = f0 ? f32_from_bits(u0) : 0.0f, x1 = f1 ? f32_from_bits(u1) : 0.0f;
    const float a0 = div_by(x0, rc), a1 = div_by(x1, rc);
    const float r0 = div_rn(x0, s), r1 = div_rn(x1, s);
    const uint32_t hw = cvt2_hw<T>(a0, a1);
    // The quantizers' domain: |x / s| <= fmax (1 + 2^-22) since s >= amax / fmax; checked with
    // margin up to 2^17 (above E5M2's 57344).
    const uint32_t m0 = f32_bits(r0) & 0x7FFFFFFFu, m1 = f32_bits(r1) & 0x7FFFFFFFu;
    const uint32_t top = 0x48000000u, big = 0x35800000u;  // 2^17, 2^-20
    cb += (m0 <= top && (hw & 0xFFu) != encode_fp8_rne<T>(r0, true)) +
          (m1 <= top && (hw >> 8) != encode_fp8_rne<T>(r1, true));
    qb += (m0 >= big && m0 <= top && f32_bits(a0) != f32_bits(r0)) +
          (m1 >= big && m1 <= top && f32_bits(a1) != f32_bits(r1));
  }
  for (int off = 16; off > 0; off >>= 1) {
    cb += __shfl_xor_sync(kFullMask, cb, off);
    qb += __shfl_xor_sync(kFullMask, qb, off);
  }
  if ((threadIdx.x & 31) == 0) {
    if (cb) atomicAdd(code_bad, cb);
    if (qb) atomicAdd(quot_bad, qb);
  }
}

// ---- shared per-group logic --------------------------------------------------------------------------
// The group's quantizing divisor and stored scale from its finite max (plain scaling), and whether
// the fast arithmetic applies (finite group, divisor in div_by's range).
struct PlainGroup {
  float sq;
  float stored;
  FastRecip rc;
  bool fast;
};
__device__ __forceinline__ PlainGroup plain_group(const QuantKernelParams& P, uint32_t amax_bits, bool finite) {
  PlainGroup g;
  plain_scales(amax_with_eps(f32_from_bits(amax_bits), P.scale), P.scale, g.sq, g.stored);
  g.fast = finite && fast_recip_ok(g.sq);
  g.rc = fast_recip(g.fast ? g.sq : 1.0f);
  return g;
}

// Finite-only max |x| bits of the elements of one 16-byte word (the reference's statistic).
template <InDt D>
__device__ __forceinline__ uint32_t finite_absmax_word(const uint4& u) {
  float v[kWordElems<D>];
  widen_word<D>(u, v);
  Stats st = stats_init();
#pragma unroll
  for (int j = 0; j < kWordElems<D>; ++j) stats_add(st, v[j]);
  return st.amax;
}

// The reference path for one 16-byte word (flat index of its first element: flat0): div_rn or
// div_by, then encode_fp8_rne / encode_fp8_sr. Not inlined: it is the rare path (or the
// stochastic one), and keeping it out of line keeps the fast path's code and registers small.
// Returned by value (a pointer argument would put the caller's `out` in local memory for the
// fast path too).
struct Codes2 {
  uint32_t w[2];
};
template <class T, InDt D>
__device__ __noinline__ Codes2 encode_word_ref(const QuantKernelParams& P, uint4 u, float sq, FastRecip rc, bool fast,
                                               uint64_t flat0) {
  float v[kWordElems<D>];
  widen_word<D>(u, v);
  Codes2 out{{0u, 0u}};
  for (int j = 0; j < kWordElems<D> / 4; ++j) {
    uint32_t w = 0;
    for (int e = 0; e < 4; ++e) {
      const float xv = v[4 * j + e];
      // div_by only for round-to-nearest: its result can be inexact where |x / s| < 2^-20 (the
      // dividend's remainder underflows), which never changes a nearest-rounded code (0 with x's
      // sign) but could change a stochastic one.
      const float q = fast && !P.stochastic && is_finite_bits(f32_bits(xv)) ? div_by(xv, rc) : div_rn(xv, sq);
      const uint64_t flat = flat0 + 4 * j + e;
      const uint8_t c = P.stochastic ? encode_fp8_sr<T>(q, P.saturate, philox_word(P.seed, P.index_offset + flat))
                                     : encode_fp8_rne<T>(q, P.saturate);
      w |= static_cast<uint32_t>(c) << (8 * e);
    }
    out.w[j] = w;
  }
  return out;
}

// The codes of one 16-byte word of elements, packed little-endian: 4 codes (fp32 input) or 8
// (16-bit input) in `out`.
template <class T, InDt D>
__device__ __forceinline__ void encode_word(const QuantKernelParams& P, const uint4& u, const PlainGroup& g, bool hw,
                                            uint64_t flat0, uint32_t (&out)[kWordElems<D> / 4]) {
  if (g.fast && hw) {
    float v[kWordElems<D>];
    widen_word<D>(u, v);
#pragma unroll
    for (int j = 0; j < kWordElems<D> / 4; ++j) {
      const uint32_t lo = cvt2_hw<T>(div_by(v[4 * j], g.rc), div_by(v[4 * j + 1], g.rc));
      const uint32_t hi = cvt2_hw<T>(div_by(v[4 * j + 2], g.rc), div_by(v[4 * j + 3], g.rc));
      out[j] = lo | (hi << 16);
    }
  } else {
    const Codes2 c = encode_word_ref<T, D>(P, u, g.sq, g.rc, g.fast, flat0);
#pragma unroll
    for (int j = 0; j < kWordElems<D> / 4; ++j) out[j] = c.w[j];
  }
}

// ---- 1xG, G = 16 * team ------------------------------------------------------------------------------
// Loads go through shared memory with cp.async (LDGSTS): each thread copies the 16-byte words of
// its own segments into its own slots, kStages segments ahead, so a thread always has
// (kStages - 1) segments in flight without holding them in registers; it reads back only what it
// copied itself, so cp.async.wait_group alone orders the accesses (no block barrier).
template <InDt D>
constexpr int kStages = D == InDt::F32 ? 3 : 4;  // 48 KB / 32 KB of shared memory per block
template <InDt D>
constexpr size_t kStageBytes = static_cast<size_t>(kStages<D>) * 256 * 64 / (D == InDt::F32 ? 1 : 2);


template <class T, InDt D>
__global__ void __launch_bounds__(256) quant_1xg_fast_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes,
                                                             float* __restrict__ scales, QuantKernelParams P, int team,
                                                             int64_t segs, bool hw) {
  constexpr int W = kWordElems<D>;
  constexpr int NW = 16 / W;  // 16-byte words per 16-element segment
  constexpr int S = kStages<D>;
  extern __shared__ uint4 stage_buf[];  // [S][256][NW]
  const int lane = threadIdx.x & 31;
  const int team_lane = threadIdx.x & (team - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto slot = [&](int st) { return stage_buf + (static_cast<size_t>(st) * 256 + threadIdx.x) * NW; };
  auto issue = [&](int st, int64_t seg) {
    if (seg < segs) {
#pragma unroll
      for (int w = 0; w < NW; ++w) cp_async16(slot(st) + w, x + seg * NW + w);
    }
    cp_async_commit();  // an empty group when out of range keeps the group count uniform
  };
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < S - 1; ++k) issue(k, s0 + k * stride);
  int st = 0;
  for (int64_t seg = s0; seg - lane < segs; seg += stride) {
    issue(st == 0 ? S - 1 : st - 1, seg + (S - 1) * stride);
    cp_async_wait<S - 1>();  // this thread's copies of stage `st` have landed
    uint4 raw[NW];
#pragma unroll
    for (int w = 0; w < NW; ++w) raw[w] = seg < segs ? slot(st)[w] : make_uint4(0u, 0u, 0u, 0u);
    st = st == S - 1 ? 0 : st + 1;
    // Teams are whole groups and whole teams are in or out of range, so every shuffle below
    // runs on all 32 lanes with the same trip count.
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < NW; ++w) m = max(m, absmax_bits_word<D>(raw[w]));
    for (int off = 1; off < team; off <<= 1) m = max(m, __shfl_xor_sync(kFullMask, m, off));
    const bool finite = m < kInfBits;
    if (__any_sync(kFullMask, !finite)) {  // warp-uniform: the reference statistic over finite values
      uint32_t f = 0;
#pragma unroll
      for (int w = 0; w < NW; ++w) f = max(f, finite_absmax_word<D>(raw[w]));
      for (int off = 1; off < team; off <<= 1) f = max(f, __shfl_xor_sync(kFullMask, f, off));
      if (!finite) m = f;
    }
    if (seg < segs) {
      const PlainGroup g = plain_group(P, m, finite);
      uint32_t out[NW][W / 4];
#pragma unroll
      for (int w = 0; w < NW; ++w) encode_word<T, D>(P, raw[w], g, hw, static_cast<uint64_t>(seg * 16 + w * W), out[w]);
      uint4 packed;
      if constexpr (D == InDt::F32) packed = make_uint4(out[0][0], out[1][0], out[2][0], out[3][0]);
      else packed = make_uint4(out[0][0], out[0][1], out[1][0], out[1][1]);
      reinterpret_cast<uint4*>(codes)[seg] = packed;
      if (team_lane == 0) scales[seg / team] = g.stored;
    }
  }
  cp_async_wait<0>();  // nothing may stay in flight into shared memory at exit
}

// ---- register-resident groups (one block per group) ---------------------------------------------------
__device__ __forceinline__ uint32_t block_max_u32(uint32_t v, uint32_t* red) {
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, off));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  uint32_t r = 0;
  const int nw = blockDim.x >> 5;
  for (int i = 0; i < nw; ++i) r = max(r, red[i]);
  __syncthreads();  // red may be reused next
  return r;
}

// K 16-byte words per thread: K = 8 holds groups up to 2048 words (a bf16 row of 16K elements, a
// 128x128 bf16 block) at 4 blocks per SM; K = 16 up to 4096 words at 2 blocks per SM. Word
// addresses are recomputed rather than kept, to spend the registers on data.
template <class T, InDt D, int K>
__global__ void __launch_bounds__(256, K <= 8 ? 4 : 2) quant_reg_kernel(const uint4* __restrict__ x,
                                                                        uint8_t* __restrict__ codes,
                                                                        float* __restrict__ scales,
                                                                        QuantKernelParams P, bool hw) {
  constexpr int W = kWordElems<D>;
  __shared__ uint32_t red[32];
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int64_t wcols = P.cols / W;  // words per tensor row
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int64_t gi = grp / P.grid_cols, gj = grp % P.grid_cols;
    const int64_t r0 = gi * P.group_rows, c0 = gj * P.group_cols;
    const int64_t r1 = r0 + P.group_rows < P.rows ? r0 + P.group_rows : P.rows;
    const int64_t c1 = c0 + P.group_cols < P.cols ? c0 + P.group_cols : P.cols;
    const int wpr = static_cast<int>((c1 - c0) / W);  // words per group row
    const int nwords = static_cast<int>(r1 - r0) * wpr;
    const int64_t base = r0 * wcols + c0 / W;
    auto word_index = [&](int i) {
      const int row = i / wpr;
      return base + static_cast<int64_t>(row) * wcols + (i - row * wpr);
    };
    uint4 raw[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * 256;
      raw[k] = i < nwords ? x[word_index(i)] : make_uint4(0u, 0u, 0u, 0u);
    }
    uint32_t m = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) m = max(m, absmax_bits_word<D>(raw[k]));
    m = block_max_u32(m, red);
    const bool finite = m < kInfBits;
    if (!finite) {  // block-uniform
      uint32_t f = 0;
#pragma unroll
      for (int k = 0; k < K; ++k) f = max(f, finite_absmax_word<D>(raw[k]));
      m = block_max_u32(f, red);
    }
    const PlainGroup g = plain_group(P, m, finite);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * 256;
      if (i < nwords) {
        const int64_t wi = word_index(i);
        uint32_t out[W / 4];
        encode_word<T, D>(P, raw[k], g, hw, static_cast<uint64_t>(wi * W), out);
        if constexpr (D == InDt::F32) reinterpret_cast<uint32_t*>(codes)[wi] = out[0];
        else reinterpret_cast<uint2*>(codes)[wi] = make_uint2(out[0], out[1]);
      }
    }
    if (threadIdx.x == 0) scales[grp] = g.stored;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The hardware converter may replace the reference encoder for this launch: proven on this device,
// round-to-nearest, and no |x/s| can reach the overflow threshold (plain group scaling keeps
// |x/s| <= fmax * (1 + 2^-22) when eps >= 0, so saturating and non-saturating encodes agree).
bool hw_allowed(const QuantKernelParams& P) {
  return !P.stochastic && (P.saturate || P.scale.eps >= 0.0) && hw_cvt_verified();
}

}  // namespace

bool hw_cvt_verified() {
  static const bool ok = [] {
    unsigned long long* d = nullptr;
    if (cudaMalloc(&d, sizeof(unsigned long long)) != cudaSuccess) return false;
    cudaStream_t s = nullptr;
    bool good = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
    unsigned long long h = 1;
    if (good) {
      cudaMemsetAsync(d, 0, sizeof(unsigned long long), s);
      hw_cvt_check_kernel<E4M3Traits><<<sm_count_cached() * 8, 256, 0, s>>>(d);
      hw_cvt_check_kernel<E5M2Traits><<<sm_count_cached() * 8, 256, 0, s>>>(d);
      good = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
      cudaStreamDestroy(s);
    }
    cudaFree(d);
    return good && h == 0;
  }();
  return ok;
}

// Runs launch(d) with d = n zeroed device counters and returns them (the test hooks below).
template <int N, class Launch>
void device_counters(unsigned long long (&h)[N], Launch launch) {
  unsigned long long* d = nullptr;
  FP8SIM_CUDA_CHECK(cudaMalloc(&d, N * sizeof(unsigned long long)));
  FP8SIM_CUDA_CHECK(cudaMemset(d, 0, N * sizeof(unsigned long long)));
  launch(d);
  FP8SIM_CUDA_CHECK_LAUNCH();
  FP8SIM_CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  FP8SIM_CUDA_CHECK(cudaFree(d));
}

uint64_t hw_cvt_mismatches(bool e4m3) {
  unsigned long long h[1];
  device_counters(h, [&](unsigned long long* d) {
    if (e4m3) hw_cvt_check_kernel<E4M3Traits><<<sm_count_cached() * 8, 256>>>(d);
    else hw_cvt_check_kernel<E5M2Traits><<<sm_count_cached() * 8, 256>>>(d);
  });
  return h[0];
}

uint64_t div_by_mismatches(uint64_t n, uint64_t seed) {
  unsigned long long h[1];
  device_counters(h, [&](unsigned long long* d) { div_by_check_kernel<<<sm_count_cached() * 8, 256>>>(n, seed, d); });
  return h[0];
}

void div_code_mismatches(float s, bool e4m3, uint64_t& codes, uint64_t& quotients) {
  unsigned long long h[2];
  device_counters(h, [&](unsigned long long* d) {
    if (e4m3) div_code_check_kernel<E4M3Traits><<<sm_count_cached() * 8, 256>>>(s, d, d + 1);
    else div_code_check_kernel<E5M2Traits><<<sm_count_cached() * 8, 256>>>(s, d, d + 1);
  });
  codes = h[0];
  quotients = h[1];
}

uint64_t log2_fast_mismatches() {
  unsigned long long h[1];
  device_counters(h, [&](unsigned long long* d) { log2_fast_check_kernel<<<sm_count_cached() * 8, 256>>>(d); });
  return h[0];
}

uint64_t pow_y_mismatches(uint64_t n, uint64_t seed) {
  unsigned long long h[1];
  device_counters(h, [&](unsigned long long* d) { pow_y_check_kernel<<<sm_count_cached() * 8, 256>>>(n, seed, d); });
  return h[0];
}

bool launch_quant_fast(const QuantLaunch& L, cudaStream_t s) {
  const QuantKernelParams& P = L.params;
  if (L.mode != 0 || P.format > 1 || !aligned16(L.x) || !aligned16(L.codes)) return false;
  const InDt dt = static_cast<InDt>(L.dtype);
  const int W = dt == InDt::F32 ? 4 : 8;
  const int64_t n = P.rows * P.cols;
  const int64_t G = P.group_cols;
  const bool hw = hw_allowed(P);
  // 1xG with whole 16-element segments per lane and whole groups per row.
  if (whole_1xg_groups(P)) {
    const int team = static_cast<int>(G / 16);
    const int64_t segs = n / 16;
    const int64_t want = (segs + 255) / 256;
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      // A persistent grid of exactly the resident blocks: a partial last wave would leave part
      // of the GPU idle while it runs (each block takes an equal share of the segments).
      constexpr size_t smem = kStageBytes<D>;
      static const int resident = resident_blocks(quant_1xg_fast_kernel<T, D>, smem);
      const int grid = grid_cap(want, resident);
      quant_1xg_fast_kernel<T, D><<<grid, 256, smem, s>>>(static_cast<const uint4*>(L.x),
                                                           static_cast<uint8_t*>(L.codes), L.scales, P, team, segs, hw);
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
    return true;
  }
  // Register-resident groups: every group row a whole number of 16-byte words, the group at most
  // 16 words per thread.
  if (P.cols % W != 0 || P.group_cols % W != 0 || P.group_cols * P.group_rows <= 512) return false;
  const int64_t gw = P.group_cols < P.cols ? P.group_cols : P.cols;
  const int64_t gh = P.group_rows < P.rows ? P.group_rows : P.rows;
  const int64_t words = gw / W * gh;
  if (words > 16 * 256) return false;
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int grid = grid_cap(groups, 8);
  dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
    const auto* xw = static_cast<const uint4*>(L.x);
    auto* c = static_cast<uint8_t*>(L.codes);
    if (words <= 8 * 256) quant_reg_kernel<T, D, 8><<<grid, 256, 0, s>>>(xw, c, L.scales, P, hw);
    else quant_reg_kernel<T, D, 16><<<grid, 256, 0, s>>>(xw, c, L.scales, P, hw);
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace fp8sim::gpu::detail
