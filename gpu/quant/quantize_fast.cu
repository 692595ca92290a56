// Bandwidth-bound quantize kernels for the common geometries (plain scaling), bit-identical to
// sim/quant's reference like every kernel in gpu/quant:
//
//  * 1xG (G = 16, 32, ..., 512; whole groups, 16-byte aligned): a team of G/E lanes per group,
//    E = 32 elements per lane for bf16/fp16 with G >= 64, else 16, loaded as 16-byte words
//    straight into registers (three units per thread in flight), the group max reduced with
//    shuffles inside the team, one pass over memory.
//  * warp groups (rows, RxC blocks and 1xG groups of more than 512 elements and at most 512
//    16-byte words, e.g. rows of up to 4096 bf16 elements): one warp per group, the group's words
//    loaded straight into registers, a warp max, one pass over memory.
//  * staged groups (longer rows, larger blocks such as 128x128): one 256-thread block per group at
//    a time, the group staged in shared memory by cp.async while the previous group is reduced and
//    encoded (two stages), a block max, then the codes written from the staged copy: the input is
//    read once.
//
// Per element the work is the group max (integer max of magnitudes; 16-bit pairs for bf16/fp16),
// q = x / s as the correctly rounded quotient from a per-group reciprocal (div_by: Markstein
// corrections, see quantize_kernels.cuh; one product where s is a power of two, as E8M0 scales
// are) and the encode: the hardware converter (cvt.rn.satfinite)
// where it is proven equal to the reference encoder, else encode_fp8_rne / encode_fp8_sr. A group
// holding NaN or Inf, or whose scale lies outside div_by's range, takes the reference path
// (div_rn and the software encoders) for the whole group.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "gpu/common/buffer.hpp"
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
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 31);
       i += stride) {
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

// Every fp32 bit pattern that is not a NaN: count those whose f32_to_fp16_hw code differs from
// f32_to_fp16_rne's, saturating and not; and every fp16 code that is not a NaN: count those whose
// fp16_to_f32_hw value differs from fp16_to_f32's in any bit.
__global__ void __launch_bounds__(256) hw_fp16_check_kernel(unsigned long long* mismatches) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const auto u = static_cast<uint32_t>(i);
    if (is_nan_bits(u)) continue;
    const float x = f32_from_bits(u);
    bad +=
        (f32_to_fp16_hw(x, false) != f32_to_fp16_rne(x, false)) + (f32_to_fp16_hw(x, true) != f32_to_fp16_rne(x, true));
    if (i < 65536 && ((u & 0x7C00u) != 0x7C00u || (u & 0x3FFu) == 0))
      bad += f32_bits(fp16_to_f32_hw(u)) != f32_bits(fp16_to_f32(static_cast<uint16_t>(u)));
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
    const uint32_t rb = mix32(seed * 0x9E3779B97F4A7C15ull + 2 * i),
                   ra = mix32(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1);
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
      const float sp[32] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            f32_from_bits(0x7F800000u),
                            f32_from_bits(0xFF800000u),
                            f32_from_bits(0x7FC00000u),
                            16384.0f,
                            16385.5f,
                            -16390.25f,
                            1099511627776.0f,
                            3e12f,
                            -0.5f,
                            -2.0f,
                            0.3333f,
                            1e-7f,
                            -1e-7f,
                            2.5f,
                            127.0f,
                            -127.0f,
                            300.0f,
                            1e-30f,
                            0.0625f,
                            7.9375f,
                            12.3125f,
                            -0.0625f,
                            2048.0f,
                            1.0000001f,
                            0.99999994f,
                            65504.0f,
                            -65504.0f,
                            8.0f};
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
__global__ void __launch_bounds__(256)
    div_code_check_kernel(float s, unsigned long long* code_bad, unsigned long long* quot_bad) {
  const FastRecip rc = fast_recip(s);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long cb = 0, qb = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 31);
       i += stride) {
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
  bool pow2;  // fast and sq a power of two: rc.r = 1/sq exactly, so RN(x * rc.r) = RN(x / sq)
};
__device__ __forceinline__ PlainGroup plain_group(const QuantKernelParams& P, uint32_t amax_bits, bool finite) {
  PlainGroup g;
  plain_scales_common(amax_with_eps(f32_from_bits(amax_bits), P.scale), P.scale, g.sq, g.stored);
  g.fast = finite && fast_recip_ok(g.sq);
  // fast_recip_ok keeps sq in [2^-80, 2^81): a normal power of two there has an exact reciprocal,
  // 2^-k, written directly (the division RN(1 / sq) would give the same bits).
  g.pow2 = g.fast && (f32_bits(g.sq) & 0x7FFFFFu) == 0u;
  if (g.pow2) g.rc = FastRecip{g.sq, f32_from_bits((254u - (f32_bits(g.sq) >> 23)) << 23)};
  else g.rc = fast_recip(g.fast ? g.sq : 1.0f);
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

// The codes of NW consecutive 16-byte words of elements (the first element's flat index: flat0),
// packed little-endian: 4 codes (fp32 input) or 8 (16-bit input) per word in out[w], by one of the
// three paths (the choice is the caller's, once for all the words):
enum class EncPath { Pow2, DivBy, Reference };
template <class T, InDt D, int NW, EncPath M>
__device__ __forceinline__ void encode_words_path(const QuantKernelParams& P, const uint4 (&u)[NW], const PlainGroup& g,
                                                  uint64_t flat0, uint32_t (&out)[NW][kWordElems<D> / 4]) {
  constexpr int W = kWordElems<D>;
  if constexpr (M == EncPath::Reference) {
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const Codes2 c = encode_word_ref<T, D>(P, u[w], g.sq, g.rc, g.fast, flat0 + w * W);
#pragma unroll
      for (int j = 0; j < W / 4; ++j) out[w][j] = c.w[j];
    }
  } else {
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      float v[W];
      widen_word<D>(u[w], v);
      float q[W];
#pragma unroll
      for (int e = 0; e < W; ++e)  // Pow2 (E8M0 and other power-of-two scales): one exact product
        q[e] = M == EncPath::Pow2 ? __fmul_rn(v[e], g.rc.r) : div_by(v[e], g.rc);
#pragma unroll
      for (int j = 0; j < W / 4; ++j)
        out[w][j] = cvt2_hw<T>(q[4 * j], q[4 * j + 1]) | (cvt2_hw<T>(q[4 * j + 2], q[4 * j + 3]) << 16);
    }
  }
}
// The path for a group: the fast arithmetic with the hardware converter where both apply.
__device__ __forceinline__ EncPath enc_path(const PlainGroup& g, bool hw) {
  return g.fast && hw ? (g.pow2 ? EncPath::Pow2 : EncPath::DivBy) : EncPath::Reference;
}
// f.template operator()<M>() with the path as a template argument.
template <class F>
__device__ __forceinline__ void with_enc_path(EncPath p, F&& f) {
  switch (p) {
    case EncPath::Pow2:
      f.template operator()<EncPath::Pow2>();
      break;
    case EncPath::DivBy:
      f.template operator()<EncPath::DivBy>();
      break;
    default:
      f.template operator()<EncPath::Reference>();
      break;
  }
}
template <class T, InDt D, int NW>
__device__ __forceinline__ void encode_words(const QuantKernelParams& P, const uint4 (&u)[NW], const PlainGroup& g,
                                             bool hw, uint64_t flat0, uint32_t (&out)[NW][kWordElems<D> / 4]) {
  with_enc_path(enc_path(g, hw), [&]<EncPath M>() { encode_words_path<T, D, NW, M>(P, u, g, flat0, out); });
}

// The codes of one 16-byte word of elements (the tensor's wi-th word) by path M, stored at the
// word's place in `codes` (4 codes for fp32 input, 8 for 16-bit): the staged and warp-group kernels.
template <class T, InDt D, EncPath M>
__device__ __forceinline__ void encode_store_word(const QuantKernelParams& P, const uint4& u, const PlainGroup& g,
                                                  int64_t wi, uint8_t* __restrict__ codes) {
  constexpr int W = kWordElems<D>;
  uint32_t out[1][W / 4];
  const uint4 one[1] = {u};
  encode_words_path<T, D, 1, M>(P, one, g, static_cast<uint64_t>(wi * W), out);
  if constexpr (D == InDt::F32) reinterpret_cast<uint32_t*>(codes)[wi] = out[0][0];
  else reinterpret_cast<uint2*>(codes)[wi] = make_uint2(out[0][0], out[0][1]);
}

// ---- 1xG, G = E * team ----------------------------------------------------------------------------
// Each lane owns units of E consecutive elements (E = 32 for 16-bit inputs with G >= 64, else 16);
// a team of G/E lanes owns one group. Every iteration a thread first loads U units (U * E/W
// 16-byte words, each unit one contiguous span) straight into registers, then reduces and encodes
// them one after another: U * 64 bytes per thread in flight (for G = 16 with 16-bit input: E = 16,
// 3 * 32 bytes; U = 4 measured 9% slower there on the H200). Measured on the H200 (bf16
// 16384x11008, 1x128): this direct form with U = 3 reaches 89% of the copy bandwidth where the
// cp.async-staged form reached 81% and the same direct form with one unit 68%; the fewer
// per-element instructions of E = 32 (the group's scale, reciprocal and addresses once per 32
// elements) only paid off once enough bytes were in flight per thread.
template <InDt D>
constexpr int kUnit1xg = D == InDt::F32 ? 16 : 32;  // E for G >= 64 (G = 32 takes E = 16: see the launcher)
constexpr int kUnits1xg = 3;                        // U

template <class T, InDt D, int E, int U>
__global__ void __launch_bounds__(256)
    quant_1xg_fast_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                          QuantKernelParams P, int team, int team_log2, int64_t units, bool hw) {
  constexpr int W = kWordElems<D>;
  constexpr int NW = E / W;  // 16-byte words per unit
  const int lane = threadIdx.x & 31;
  const int team_lane = threadIdx.x & (team - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Teams are whole groups and whole teams are in or out of range, so every shuffle below runs
  // on all 32 lanes with the same trip count (the loop runs while any lane of the warp has work).
  for (int64_t u0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u0 - lane < units; u0 += U * stride) {
    uint4 raw[U][NW];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t u = u0 + k * stride;
#pragma unroll
      for (int w = 0; w < NW; ++w) raw[k][w] = u < units ? x[u * NW + w] : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t u = u0 + k * stride;
      uint32_t m = absmax_bits_words<D, NW>(raw[k]);
      for (int off = 1; off < team; off <<= 1) m = max(m, __shfl_xor_sync(kFullMask, m, off));
      const bool finite = m < kInfBits;
      if (__any_sync(kFullMask, !finite)) {  // warp-uniform: the reference statistic over finite values
        uint32_t f = 0;
#pragma unroll
        for (int w = 0; w < NW; ++w) f = max(f, finite_absmax_word<D>(raw[k][w]));
        for (int off = 1; off < team; off <<= 1) f = max(f, __shfl_xor_sync(kFullMask, f, off));
        if (!finite) m = f;
      }
      if (u < units) {
        const PlainGroup g = plain_group(P, m, finite);
        uint32_t out[NW][W / 4];
        encode_words<T, D, NW>(P, raw[k], g, hw, static_cast<uint64_t>(u * E), out);
        const uint32_t* o = &out[0][0];  // E / 4 words of codes, in element order
        uint4* dst = reinterpret_cast<uint4*>(codes) + u * (E / 16);
#pragma unroll
        for (int q = 0; q < E / 16; ++q) dst[q] = make_uint4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
        if (team_lane == 0) scales[u >> team_log2] = g.stored;
      }
    }
  }
}

// ---- group geometry in 16-byte words (the staged and warp-group kernels) -----------------------------
// A group of the 2-D view (rows and group rows a whole number of W-element words) as words: the
// first word, words per group row, words in the group (the last row / column of groups may be
// partial), and the index of the group's i-th word in the tensor (row-major within the group).
struct GroupWords {
  int64_t base;  // first word of the group
  int wpr;       // words per group row
  int nwords;    // words in the group
  int wpr_log2;  // log2(wpr) when wpr is a power of two, else -1
  // wcols: words per tensor row (P.cols / W), kept by the kernel outside the per-group state
  __device__ __forceinline__ int64_t index(int i, int64_t wcols) const {
    if (nwords == wpr) return base + i;  // one row (row groups, long 1xG groups)
    const int row = wpr_log2 >= 0 ? i >> wpr_log2 : i / wpr;
    return base + static_cast<int64_t>(row) * wcols + (i - row * wpr);
  }
};
template <InDt D>
__device__ __forceinline__ GroupWords group_words(const QuantKernelParams& P, int64_t wcols, int64_t grp) {
  constexpr int W = kWordElems<D>;
  const int64_t gi = grp / P.grid_cols, gj = grp % P.grid_cols;
  const int64_t r0 = gi * P.group_rows, c0 = gj * P.group_cols;
  const int64_t r1 = r0 + P.group_rows < P.rows ? r0 + P.group_rows : P.rows;
  const int64_t c1 = c0 + P.group_cols < P.cols ? c0 + P.group_cols : P.cols;
  GroupWords g;
  g.wpr = static_cast<int>((c1 - c0) / W);
  g.nwords = static_cast<int>(r1 - r0) * g.wpr;
  g.base = r0 * wcols + c0 / W;
  g.wpr_log2 = (g.wpr & (g.wpr - 1)) == 0 ? __ffs(g.wpr) - 1 : -1;
  return g;
}

// ---- staged groups (one block per group at a time) ----------------------------------------------------
__device__ __forceinline__ uint32_t block_max_u32(uint32_t v, uint32_t* red) {
  v = warp_max_u32(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  uint32_t r = 0;
  const int nw = blockDim.x >> 5;
  for (int i = 0; i < nw; ++i) r = max(r, red[i]);
  __syncthreads();  // red may be reused next
  return r;
}

// One 256-thread block per group at a time (a persistent grid walks the groups). The group's
// 16-byte words are staged in shared memory with cp.async in S stages: while a block reduces and
// encodes one group, the next S - 1 groups' loads are in flight (S = 2; 3 measured slower on the
// H200: fewer blocks fit). Thread t copies words t, t + 256, ...
// of each group and later reads back only those, so cp.async.wait_group orders its accesses; the
// block barriers are the max reduction's. Word addresses are recomputed rather than kept.
template <class T, InDt D, int S>
__global__ void __launch_bounds__(256)
    quant_staged_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                        QuantKernelParams P, int stage_words, bool hw) {
  constexpr int W = kWordElems<D>;
  extern __shared__ uint4 stage_buf[];  // [S][stage_words]
  __shared__ uint32_t red[32];
  // The current group's scale (written by thread 0 between the two barriers of the max, read by
  // every thread after the second: the next write comes after the next group's first barrier).
  __shared__ PlainGroup shared_group;
  __shared__ bool shared_finite;
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int64_t wcols = P.cols / W;  // words per tensor row
  auto issue = [&](int st, int64_t grp) {
    if (grp < groups) {
      const GroupWords g = group_words<D>(P, wcols, grp);
      uint4* buf = stage_buf + static_cast<size_t>(st) * stage_words;
      for (int i = threadIdx.x; i < g.nwords; i += 256) cp_async16(buf + i, x + g.index(i, wcols));
    }
    cp_async_commit();
  };
#pragma unroll
  for (int k = 0; k < S - 1; ++k) issue(k, blockIdx.x + static_cast<int64_t>(k) * gridDim.x);
  int st = 0;
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    issue(st == 0 ? S - 1 : st - 1, grp + static_cast<int64_t>(S - 1) * gridDim.x);
    cp_async_wait<S - 1>();  // this thread's copies of the current group have landed
    const uint4* buf = stage_buf + static_cast<size_t>(st) * stage_words;
    const GroupWords gg = group_words<D>(P, wcols, grp);
    uint32_t m = 0;
    if constexpr (D == InDt::F32) {
      for (int i = threadIdx.x; i < gg.nwords; i += 256) m = max(m, absmax_bits_word<D>(buf[i]));
    } else {  // 16-bit magnitudes reduced pairwise over all the thread's words, widened once
      for (int i = threadIdx.x; i < gg.nwords; i += 256) {
        const uint4 u = buf[i];
        m = __vmaxu2(m, pair_absmax16(u));
      }
      m = absmax_bits_word<D>(make_uint4(m, 0u, 0u, 0u));
    }
    // The block max; warp 0 finishes it and derives the group's scale and reciprocal once for the
    // block (the per-group arithmetic is a few hundred instructions: done by every thread, it
    // cost the issue slots this kernel is short of).
    m = warp_max_u32(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
      uint32_t v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0u;
      v = warp_max_u32(v);
      if (threadIdx.x == 0) {
        shared_finite = v < kInfBits;
        if (v < kInfBits) shared_group = plain_group(P, v, true);
      }
    }
    __syncthreads();  // also: every read of red above is done before red is written again
    PlainGroup g;
    if (shared_finite) {  // block-uniform
      g = shared_group;
    } else {  // a NaN or Inf in the group: the reference statistic over its finite values
      uint32_t f = 0;
      for (int i = threadIdx.x; i < gg.nwords; i += 256) f = max(f, finite_absmax_word<D>(buf[i]));
      g = plain_group(P, block_max_u32(f, red), false);
    }
    // The path chosen once per group (block-uniform), the words encoded in its own loop.
    auto encode_group = [&]<EncPath M>() {
      for (int i = threadIdx.x; i < gg.nwords; i += 256)
        encode_store_word<T, D, M>(P, buf[i], g, gg.index(i, wcols), codes);
    };
    with_enc_path(enc_path(g, hw), encode_group);
    if (threadIdx.x == 0) scales[grp] = g.stored;
    st = st == S - 1 ? 0 : st + 1;
  }
  cp_async_wait<0>();  // nothing may stay in flight into shared memory at exit
}

// ---- warp groups (one warp per group, the group held in registers) -----------------------------------
// Rows and RxC blocks of at most 32 * NW 16-byte words (rows of up to 4096 bf16 / 2048 fp32
// elements), too long for the 1xG kernel and too short to keep the staged kernel's block busy: 8
// groups per block at a time, lane l loading words l, l + 32, ... of its warp's group straight into
// registers (NW 16-byte loads in flight per thread, coalesced across the warp), the max reduced
// with shuffles, the scale derived by every lane, the codes written from the registers. Measured
// on the H200 (bf16 8192x4096, rows): 0.036 ms where the staged kernel took 0.050 ms; teams of
// 64-256 threads per group (the same loading, the max through shared memory) were slower than the
// staged kernel on 16384x11008 rows (0.166 vs 0.151 ms) and 128x128 blocks (0.215 vs 0.152 ms).
template <class T, InDt D, int NW>
__global__ void __launch_bounds__(256)
    quant_warp_group_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                            QuantKernelParams P, bool hw) {
  constexpr int W = kWordElems<D>;
  const int lane = threadIdx.x & 31;
  const int64_t groups = P.grid_rows * P.grid_cols;
  const int64_t wcols = P.cols / W;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  // Warp-uniform loop: every shuffle below runs on all 32 lanes.
  for (int64_t grp = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); grp < groups;
       grp += warps) {
    const GroupWords gw = group_words<D>(P, wcols, grp);
    uint4 raw[NW];
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      const int i = lane + 32 * j;
      raw[j] = i < gw.nwords ? x[gw.index(i, wcols)] : make_uint4(0u, 0u, 0u, 0u);  // zeros leave the max alone
    }
    uint32_t m = absmax_bits_words<D, NW>(raw);
    m = warp_max_u32(m);
    const bool finite = m < kInfBits;
    if (!finite) {  // warp-uniform: the reference statistic over the finite values
      uint32_t f = 0;
#pragma unroll
      for (int j = 0; j < NW; ++j) f = max(f, finite_absmax_word<D>(raw[j]));
      f = warp_max_u32(f);
      m = f;
    }
    const PlainGroup g = plain_group(P, m, finite);
    auto encode_group = [&]<EncPath M>() {
#pragma unroll
      for (int j = 0; j < NW; ++j) {
        const int i = lane + 32 * j;
        if (i < gw.nwords) encode_store_word<T, D, M>(P, raw[j], g, gw.index(i, wcols), codes);
      }
    };
    with_enc_path(enc_path(g, hw), encode_group);
    if (lane == 0) scales[grp] = g.stored;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The hardware converter may replace the reference encoder for this launch: proven on this device,
// round-to-nearest, and no |x/s| can reach the overflow threshold (plain group scaling keeps
// |x/s| <= fmax * (1 + 2^-22) when eps >= 0, so saturating and non-saturating encodes agree).
bool hw_allowed(const QuantKernelParams& P) { return rne_hw_ok(P) && (P.saturate || P.scale.eps >= 0.0); }

}  // namespace

namespace {
// Runs the check kernels `launch(stream, counter)` adds their mismatches to, on a stream of its own
// (the first kernel that asks may be inside another stream's work); true when they ran and found none.
template <class Launch>
bool device_check_passes(Launch launch) {
  unsigned long long* d = nullptr;
  if (cudaMalloc(&d, sizeof(unsigned long long)) != cudaSuccess) return false;
  cudaStream_t s = nullptr;
  bool good = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
  unsigned long long h = 1;
  if (good) {
    cudaMemsetAsync(d, 0, sizeof(unsigned long long), s);
    launch(s, d);
    good = cudaGetLastError() == cudaSuccess &&  // a check that did not launch proves nothing
           cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
           cudaStreamSynchronize(s) == cudaSuccess;
    cudaStreamDestroy(s);
  }
  cudaFree(d);
  return good && h == 0;
}
}  // namespace

bool hw_cvt_verified() {
  static const bool ok = device_check_passes([](cudaStream_t s, unsigned long long* d) {
    hw_cvt_check_kernel<E4M3Traits><<<sm_count_cached() * 8, 256, 0, s>>>(d);
    hw_cvt_check_kernel<E5M2Traits><<<sm_count_cached() * 8, 256, 0, s>>>(d);
  });
  return ok;
}

bool hw_fp16_verified() {
  static const bool ok = device_check_passes(
      [](cudaStream_t s, unsigned long long* d) { hw_fp16_check_kernel<<<sm_count_cached() * 8, 256, 0, s>>>(d); });
  return ok;
}

uint64_t hw_fp16_mismatches() {
  unsigned long long h[1];
  device_counters(h, [&](unsigned long long* d) { hw_fp16_check_kernel<<<sm_count_cached() * 8, 256>>>(d); });
  return h[0];
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
  if (L.mode != 0 || P.format > 1 || !aligned16(L.x) || !aligned16(L.codes) || !plain_scales_common_ok(P.scale))
    return false;
  const InDt dt = static_cast<InDt>(L.dtype);
  const int W = dt == InDt::F32 ? 4 : 8;
  const int64_t n = P.rows * P.cols;
  const int64_t G = P.group_cols;
  const bool hw = hw_allowed(P);
  // 1xG with whole units per lane and whole groups per row.
  if (whole_1xg_groups(P)) {
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      auto go = [&]<int E, int U>() {
        const int team = static_cast<int>(G / E);
        int team_log2 = 0;
        while ((1 << team_log2) < team) ++team_log2;
        const int64_t units = n / E;
        // A persistent grid of at most the resident blocks: each block takes an equal share.
        auto kernel = quant_1xg_fast_kernel<T, D, E, U>;
        static const int resident = resident_blocks(kernel);
        const int grid = grid_cap((units + 256 * U - 1) / (256 * U), resident);
        kernel<<<grid, 256, 0, s>>>(static_cast<const uint4*>(L.x), static_cast<uint8_t*>(L.codes), L.scales, P, team,
                                    team_log2, units, hw);
      };
      if constexpr (D == InDt::F32) {
        go.template operator()<kUnit1xg<D>, kUnits1xg>();  // E = 16 <= G (whole_1xg_groups: G >= 16)
      } else {
        // G = 32 (MXFP8): two 16-element lanes per group rather than one 32-element lane (71 instead of
        // 121 registers, three blocks per SM instead of two: 0.1445 vs 0.149 ms on the H200).
        if (G >= kUnit1xg<D> && G != 32) go.template operator()<kUnit1xg<D>, kUnits1xg>();
        else go.template operator()<16, kUnits1xg>();  // G = 16 or 32 with 16-bit inputs: one or two lanes per group
      }
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
    return true;
  }
  // Staged groups: every group row a whole number of 16-byte words, two stages of the largest
  // group within the shared memory a block may have (227 KB on sm_90).
  if (P.cols % W != 0 || P.group_cols % W != 0 || P.group_cols * P.group_rows <= 512) return false;
  const int64_t gw = P.group_cols < P.cols ? P.group_cols : P.cols;
  const int64_t gh = P.group_rows < P.rows ? P.group_rows : P.rows;
  const int64_t words = gw / W * gh;
  const size_t smem = static_cast<size_t>(2 * words) * 16;
  // At most 200 KB, and no more than this device lets a block opt in to (227 KB on sm_90) less 1 KB
  // for the kernel's static shared memory.
  static const size_t smem_cap = [] {
    const int optin = device_attr_cached<cudaDevAttrMaxSharedMemoryPerBlockOptin>(48 * 1024) - 1024;
    return static_cast<size_t>(optin < 200 * 1024 ? optin : 200 * 1024);
  }();
  if (smem > smem_cap) return false;
  const int64_t groups = P.grid_rows * P.grid_cols;
  // Groups of at most 512 words: one warp per group (quant_warp_group_kernel), NW words per lane.
  if (words <= 16 * 32) {
    const int per = static_cast<int>((words + 31) / 32);
    dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
      auto go = [&]<int NW>() {
        auto kernel = quant_warp_group_kernel<T, D, NW>;
        static const int resident = resident_blocks(kernel);
        const int grid = grid_cap((groups + 7) / 8, resident);
        kernel<<<grid, 256, 0, s>>>(static_cast<const uint4*>(L.x), static_cast<uint8_t*>(L.codes), L.scales, P, hw);
      };
      if (per <= 4) go.template operator()<4>();
      else if (per <= 8) go.template operator()<8>();
      else if (per <= 12) go.template operator()<12>();
      else go.template operator()<16>();
    });
    FP8SIM_CUDA_CHECK_LAUNCH();
    return true;
  }
  dispatch_fmt_dt(P.format, dt, [&]<class T, InDt D>() {
    auto kernel = quant_staged_kernel<T, D, 2>;
    {  // allow the largest dynamic size once per instantiation and device (CUDA keeps it per device)
      static std::mutex mu;
      static std::vector<bool> opted;
      int dev = 0;
      FP8SIM_CUDA_CHECK(cudaGetDevice(&dev));
      std::lock_guard<std::mutex> lock(mu);
      if (opted.size() <= static_cast<size_t>(dev)) opted.resize(static_cast<size_t>(dev) + 1, false);
      if (!opted[static_cast<size_t>(dev)]) {
        // a failure surfaces as the launch error below
        (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_cap));
        opted[static_cast<size_t>(dev)] = true;
      }
    }
    static size_t cached_smem = 0;  // the occupancy query, redone only when the stage size changes
    static int cached_blocks = 1;
    if (cached_smem != smem) {
      cached_blocks = resident_blocks(kernel, smem);
      cached_smem = smem;
    }
    const int grid = grid_cap(groups, cached_blocks);
    kernel<<<grid, 256, smem, s>>>(static_cast<const uint4*>(L.x), static_cast<uint8_t*>(L.codes), L.scales, P,
                                   static_cast<int>(words), hw);
  });
  FP8SIM_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace fp8sim::gpu::detail
