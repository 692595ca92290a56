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
#include <type_traits>

#include "gpu/common/cuda_check.hpp"
#include "gpu/formats/cast.hpp"
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
    case gpu_format_code(Format::E4M3):
      return with_dt.template operator()<E4M3Traits>();
    case gpu_format_code(Format::E5M2):
      return with_dt.template operator()<E5M2Traits>();
    case gpu_format_code(Format::E2M1):
      return with_dt.template operator()<E2M1Traits>();
    case gpu_format_code(Format::E2M3):
      return with_dt.template operator()<E2M3Traits>();
    default:
      return with_dt.template operator()<E3M2Traits>();
  }
}

// ---- the table encoder ----------------------------------------------------------------------------
// Round-to-nearest-even encoding depends only on the sign, the exponent, the kept mantissa bits,
// the first dropped bit and whether any later bit is set (in the target's subnormal range, where
// fewer bits are kept, the kept bits, round bit and sticky bit still determine it). The index
// sign | exp | kept | round | sticky (9 + mb + 2 bits: 4096 entries for E2M1, 16384 for E2M3 and
// E4M3) selects the code that encode_fp8_rne<T> gives every input of that class, NaN included.
// lowbit_lut_mismatches() checks this over all 2^32 inputs. The tables live in global memory,
// filled once per process, and each block copies its format's table to shared memory: the
// generic encoder costs ~20 integer operations per element, this one 4 and a shared load.
constexpr int kLutMaxEntries = 1 << 14;
__device__ uint8_t g_rne_lut[kGpuFormatCount][2][kLutMaxEntries];  // [format code][saturate]

// The format code of a traits type (QuantKernelParams::format).
template <class T>
constexpr int kFmt = gpu_format_code(std::is_same_v<T, E4M3Traits>   ? Format::E4M3
                                     : std::is_same_v<T, E5M2Traits> ? Format::E5M2
                                     : std::is_same_v<T, E2M1Traits> ? Format::E2M1
                                     : std::is_same_v<T, E2M3Traits> ? Format::E2M3
                                                                     : Format::E3M2);

template <class T>
constexpr int kLutShift = 22 - T::kMantissaBits;  // u >> kLutShift = sign | exp | kept | round
template <class T>
constexpr int kLutEntries = 1 << (9 + T::kMantissaBits + 2);

template <class T>
__device__ __forceinline__ uint32_t lut_index(uint32_t u) {
  const uint32_t sticky = min(u & ((1u << kLutShift<T>)-1u), 1u);
  return ((u >> (kLutShift<T> - 1)) & ~1u) | sticky;
}

template <class T>
__device__ __forceinline__ void fill_lut(uint8_t* lut, bool saturate) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kLutEntries<T>; i += gridDim.x * blockDim.x) {
    const uint32_t u = (static_cast<uint32_t>(i >> 1) << kLutShift<T>) | static_cast<uint32_t>(i & 1);
    lut[i] = encode_fp8_rne<T>(f32_from_bits(u), saturate);
  }
}
__global__ void fill_rne_luts_kernel() {
  for (int sat = 0; sat < 2; ++sat) {
    fill_lut<E4M3Traits>(g_rne_lut[0][sat], sat);
    fill_lut<E5M2Traits>(g_rne_lut[1][sat], sat);
    fill_lut<E2M1Traits>(g_rne_lut[4][sat], sat);
    fill_lut<E2M3Traits>(g_rne_lut[5][sat], sat);
    fill_lut<E3M2Traits>(g_rne_lut[6][sat], sat);
  }
}
// Fills the tables on first use (and waits for it, so that every later stream sees them).
void ensure_rne_luts() {
  static const bool done = [] {
    fill_rne_luts_kernel<<<64, 256>>>();
    FP8SIM_CUDA_CHECK_LAUNCH();
    FP8SIM_CUDA_CHECK(cudaDeviceSynchronize());
    return true;
  }();
  (void)done;
}

// The block's copy of its format's table (every thread of the block calls it).
template <class T>
__device__ __forceinline__ void load_lut(uint8_t* lut, int fmt, bool saturate) {
  const uint4* src = reinterpret_cast<const uint4*>(g_rne_lut[fmt][saturate ? 1 : 0]);
  for (int i = threadIdx.x; i < kLutEntries<T> / 16; i += blockDim.x) reinterpret_cast<uint4*>(lut)[i] = src[i];
  __syncthreads();
}

template <class T>
__device__ __forceinline__ uint32_t encode_lut(float y, const uint8_t* lut) {
  return lut[lut_index<T>(f32_bits(y))];
}

template <class T>
__global__ void __launch_bounds__(256) lut_check_kernel(int fmt, bool saturate, unsigned long long* mismatches) {
  __shared__ alignas(16) uint8_t lut[kLutMaxEntries];
  load_lut<T>(lut, fmt, saturate);
  unsigned long long bad = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float x = f32_from_bits(static_cast<uint32_t>(i));
    bad += encode_lut<T>(x, lut) != encode_fp8_rne<T>(x, saturate);
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(kFullMask, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// Where thread-slot t's segment lies: its group, team lane, row and column (the first of 16).
struct Seg {
  int64_t grp, row, col;
  int lane;
  bool lane_ok;  // the lane holds a segment of an existing group (else it only joins the shuffles)
  bool valid;    // ... and that segment lies inside the tensor
};
// Integer division in 32 bits where every operand fits (the host sets S.narrow: slots, group and
// segment counts below 2^31), else in 64 (an order of magnitude more instructions).
__device__ __forceinline__ void divmod(int64_t a, int64_t b, bool narrow, int64_t& q, int64_t& r) {
  if (narrow) {
    const uint32_t a32 = static_cast<uint32_t>(a), b32 = static_cast<uint32_t>(b);
    q = a32 / b32;
    r = a32 - static_cast<uint32_t>(q) * b32;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

__device__ __forceinline__ Seg seg_of(const QuantKernelParams& P, const LowbitParams& S, int64_t t) {
  Seg s;
  if (S.mode == kLowbitTensor || S.row_major) {  // thread t owns segment t
    int64_t c16;
    divmod(t, P.cols / 16, S.narrow, s.row, c16);
    s.col = c16 * 16;
    s.lane = 0;
    s.lane_ok = s.row < P.rows;
    s.valid = s.lane_ok;
    s.grp = 0;
    if (s.valid) {
      int64_t q, r;
      divmod(s.row, P.group_rows, S.narrow, q, r);
      int64_t qc, rc;
      divmod(s.col, P.group_cols, S.narrow, qc, rc);
      s.grp = q * P.grid_cols + qc;
    }
    return s;
  }
  const int64_t tm = t >> S.team_shift;
  s.lane = static_cast<int>(t & (S.team - 1));
  s.grp = tm;
  s.lane_ok = tm < P.grid_rows * P.grid_cols && s.lane < S.lanes;
  int64_t gi, gj;
  divmod(tm, P.grid_cols, S.narrow, gi, gj);
  const int lr = S.lanes_c == 1 ? s.lane : s.lane / S.lanes_c;
  const int lc = s.lane - lr * S.lanes_c;
  s.row = gi * P.group_rows + lr;
  s.col = gj * P.group_cols + 16 * lc;
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

// The segment's input as raw 16-byte words (4 for fp32, 2 for bf16/fp16; zeros where !valid), so
// that the next segment's loads are in flight while the current one is encoded.
template <InDt D>
constexpr int kRawWords = D == InDt::F32 ? 4 : 2;
template <InDt D>
__device__ __forceinline__ void load_raw(const void* x, int64_t flat0, bool valid, uint4 (&w)[kRawWords<D>]) {
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(x) + flat0 * (D == InDt::F32 ? 4 : 2));
#pragma unroll
  for (int k = 0; k < kRawWords<D>; ++k) w[k] = valid ? p[k] : make_uint4(0u, 0u, 0u, 0u);
}
template <InDt D>
__device__ __forceinline__ void widen_raw(const uint4 (&w)[kRawWords<D>], float (&v)[16]) {
  constexpr int W = kWordElems<D>;
#pragma unroll
  for (int k = 0; k < kRawWords<D>; ++k) {
    float t[W];
    widen_word<D>(w[k], t);
#pragma unroll
    for (int j = 0; j < W; ++j) v[k * W + j] = t[j];
  }
}

// One in-register butterfly stage (h < 16, a compile-time constant so that v stays in registers).
template <int H>
__device__ __forceinline__ void butterfly16(float (&v)[16], bool halve) {
  if (halve) {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = mul_rn(v[j], 0.5f);
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    if (j & H) continue;
    const float a = v[j], b = v[j + H];
    v[j] = add_rn(a, b);
    v[j + H] = add_rn(a, -b);
  }
}

// The signs of the segment's 16 elements (bit j: negate element j): bits (col mod n) .. + 15 of the
// block's sign vector, or a block of 4 signs repeated.
__device__ __forceinline__ uint32_t segment_signs(const RhtSigns& sg, int n, int64_t col) {
  if (n < 16) {
    const uint32_t m = static_cast<uint32_t>(sg.words[0]) & ((1u << n) - 1u);
    return n == 4 ? m * 0x1111u : m;  // n is 4 here (rht=4); the general form keeps the contract visible
  }
  const int i = static_cast<int>(col & (n - 1));
  const int w = i >> 6;  // selected without indexing the parameter array at run time
  const uint64_t word = w == 0 ? sg.words[0] : (w == 1 ? sg.words[1] : (w == 2 ? sg.words[2] : sg.words[3]));
  return static_cast<uint32_t>(word >> (i & 63)) & 0xFFFFu;
}

// max |x| over the finite elements of v, as bits, skipping NaN and Inf element by element (the
// rare path, for values known to hold one).
template <int N>
__device__ __forceinline__ uint32_t finite_only_amax(const float (&v)[N]) {
  uint32_t m = 0u;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const uint32_t a = f32_bits(v[j]) & 0x7FFFFFFFu;
    m = max(m, a < 0x7F800000u ? a : 0u);
  }
  return m;
}

// max |x| over the finite elements of a segment, as bits: the max of all magnitudes, recomputed
// without the non-finite ones in the rare segment that holds one.
__device__ __forceinline__ uint32_t finite_amax16(const float (&v)[16]) {
  uint32_t m = 0u;
#pragma unroll
  for (int j = 0; j < 16; ++j) m = max(m, f32_bits(v[j]) & 0x7FFFFFFFu);
  return m >= 0x7F800000u ? finite_only_amax(v) : m;
}

// The random Hadamard transform of the thread's segment within its row's n-element blocks
// (rht_forward's order: signs, then stages h = 1, 2, 4, ... with a halving before every second
// stage; the inverse runs the stages first, then the signs). Every lane of the warp calls it
// (stages h >= 16 shuffle); col is the segment's first column.
__device__ __forceinline__ void rht_segment(float (&v)[16], int64_t col, const LowbitParams& S, bool inverse) {
  const int n = S.rht;
  const uint32_t neg = segment_signs(S.signs, n, col);
  if (!inverse) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if ((neg >> j) & 1u) v[j] = -v[j];
  }
  if (n > 1) butterfly16<1>(v, false);
  if (n > 2) butterfly16<2>(v, true);
  if (n > 4) butterfly16<4>(v, false);
  if (n > 8) butterfly16<8>(v, true);
  int stage = 4;
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
      if ((neg >> j) & 1u) v[j] = -v[j];
  }
}

// The codes of 16 elements, xf(x) encoded. Every choice that is uniform over the segment (the
// rounding here, the scaling at the call) is taken outside the element loop: inside it the
// compiler if-converts the alternatives and would run all of them (Philox, pow, division) for
// every element.
template <class T, bool SR, class F>
__device__ __forceinline__ void encode16_as(const QuantKernelParams& P, const uint8_t* lut, const float (&v)[16],
                                            int64_t flat0, F xf, uint32_t (&q)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float y = xf(v[j]);
    if constexpr (SR)
      q[j] = encode_fp8_sr<T>(y, P.saturate, philox_word(P.seed, P.index_offset + static_cast<uint64_t>(flat0 + j)));
    else q[j] = encode_lut<T>(y, lut);
  }
}
template <class T, class F>
__device__ __forceinline__ void encode16(const QuantKernelParams& P, const uint8_t* lut, const float (&v)[16],
                                         int64_t flat0, F xf, uint32_t (&q)[16]) {
  if (P.stochastic) encode16_as<T, true>(P, lut, v, flat0, xf, q);
  else encode16_as<T, false>(P, lut, v, flat0, xf, q);
}

// 16 codes of `bits` bits into the packed stream at element flat0 (a multiple of 16).
__device__ __forceinline__ void store_codes(uint8_t* codes, int64_t flat0, int bits, bool aligned,
                                            const uint32_t (&q)[16]) {
  if (bits == 4) {
    uint32_t b[8];  // byte k = codes 2k (low nibble) and 2k + 1
#pragma unroll
    for (int k = 0; k < 8; ++k) b[k] = (q[2 * k] & 0xFu) | (q[2 * k + 1] << 4);
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      w[h] = __byte_perm(__byte_perm(b[4 * h], b[4 * h + 1], 0x0040), __byte_perm(b[4 * h + 2], b[4 * h + 3], 0x0040),
                         0x5410);
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
__global__ void __launch_bounds__(256)
    lowbit_amax_kernel(const void* __restrict__ x, QuantKernelParams P, LowbitParams S, uint32_t* __restrict__ amax) {
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
    if (valid) m = max(m, finite_amax16(v));
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
  __shared__ alignas(16) uint8_t lut[kLutEntries<T>];
  load_lut<T>(lut, P.format, P.saturate);
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
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  Seg sg = seg_of(P, S, t < total ? t : total);
  bool valid = t < total && sg.valid;
  uint4 raw[kRawWords<D>];
  load_raw<D>(x, sg.row * P.cols + sg.col, S.vec && valid, raw);
  // The loop bound is block-uniform, so every lane runs every shuffle.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < total; base += stride) {
    const int64_t tn = t + stride;
    const Seg sgn = seg_of(P, S, tn < total ? tn : total);
    const bool validn = tn < total && sgn.valid;
    uint4 rawn[kRawWords<D>];
    load_raw<D>(x, sgn.row * P.cols + sgn.col, S.vec && validn, rawn);

    const int64_t flat0 = sg.row * P.cols + sg.col;
    float v[16];
    if (S.vec) widen_raw<D>(raw, v);
    else load_segment<D>(x, flat0, false, valid, v);
    if (S.rht) rht_segment(v, sg.col, S, false);
    Stats st = stats_init();
    if (valid && S.mode == kLowbitCoat) {
#pragma unroll
      for (int j = 0; j < 16; ++j) stats_add(st, v[j]);
    } else if (valid) {  // the max of the finite magnitudes is all the other modes need
      st.amax = finite_amax16(v);
    }
    if (S.mode == kLowbitCoat) st = stats_reduce_lanes(st, S.team);
    else if (S.mode != kLowbitTensor)
      for (int off = 1; off < S.team; off <<= 1) st.amax = max(st.amax, __shfl_xor_sync(kFullMask, st.amax, off));
    m = st.amax > m ? st.amax : m;
    if (valid) {
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
      // x / s for a power-of-two s (E8M0, pow2) is x * (1 / s): 1 / s is exact (s in [2^-127,
      // 2^127]), so both are the correctly rounded x * 2^-k.
      const bool by_mul = S.mode == kLowbitNvfp4 || (S.pow2_div && S.mode != kLowbitCoat);
      const float mult = S.mode == kLowbitNvfp4 ? sq : (by_mul ? div_rn(1.0f, sq) : 0.0f);
      uint32_t q[16];
      if (S.mode == kLowbitCoat)
        encode16<T>(
            P, lut, v, flat0, [&](float x) { return expand_value(x, ep); }, q);
      else if (by_mul)
        encode16<T>(
            P, lut, v, flat0, [&](float x) { return mul_rn(x, mult); }, q);
      else
        encode16<T>(
            P, lut, v, flat0, [&](float x) { return apply_scale(x, sq, P.scale); }, q);
      store_codes(codes, flat0, S.bits, S.codes_aligned, q);
      if (S.mode != kLowbitTensor && sg.lane == 0) {
        scales[sg.grp] = stored;
        if (S.mode == kLowbitCoat) {
          ks[sg.grp] = ep.k;
          cs[sg.grp] = ep.c;
        }
      }
    }
    t = tn;
    sg = sgn;
    valid = validn;
#pragma unroll
    for (int k = 0; k < kRawWords<D>; ++k) raw[k] = rawn[k];
  }
  if (tensor_amax_out && S.mode != kLowbitNvfp4 && S.mode != kLowbitTensor) warp_atomic_max(m, tensor_amax_out);
}

// ---- the 1xG fast path -----------------------------------------------------------------------------
// The common activation quantizers, NVFP4 (1x16, two-level scales; also under rht=16, TE's NVFP4
// recipe for the weight-gradient operands, the segment's transform in registers) and power-of-two
// plain scales such as MX's E8M0 (1x16, 1x32), rounded to nearest, on whole groups of a 16-byte
// aligned input with aligned code stores: one thread per group (no team, no shuffles, no segment
// arithmetic), U groups' loads in flight per thread, without rht the group max as 16-bit pairs for
// bf16, each element one product, the table encoder and a share of the packing. The transform,
// group scale and encoding are the generic kernel's functions in the same order, so the bits are
// the same. The generic kernel holds every mode, layout and rounding in one body (about 36,000
// instructions of SASS per instantiation, against a few thousand here), which is what keeps it
// issue-bound.
template <InDt D, int G>
constexpr int kFastUnits = G / kWordElems<D> <= 2 ? 3 : 2;  // groups in flight per thread

// The group's fp32 values (under RHT transformed segment by segment) and their max |x| over the
// finite elements, as bits.
template <InDt D, int G, bool RHT>
__device__ __forceinline__ uint32_t fast_group_values(const uint4 (&raw)[G / kWordElems<D>], const LowbitParams& S,
                                                      float (&v)[G]) {
  constexpr int W = kWordElems<D>;
#pragma unroll
  for (int w = 0; w < G / W; ++w) {
    float t[W];
    widen_word<D>(raw[w], t);
#pragma unroll
    for (int j = 0; j < W; ++j) v[w * W + j] = t[j];
  }
  if constexpr (RHT) {
    uint32_t m = 0u;
#pragma unroll
    for (int s = 0; s < G / 16; ++s) {
      float seg[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) seg[j] = v[16 * s + j];
      rht_segment(seg, 16 * s, S, false);
#pragma unroll
      for (int j = 0; j < 16; ++j) v[16 * s + j] = seg[j];
      m = max(m, finite_amax16(seg));
    }
    return m;
  } else {
    const uint32_t m = absmax_bits_words<D, G / W>(raw);
    return m >= 0x7F800000u ? finite_only_amax(v) : m;  // a NaN or Inf in the group: its finite max
  }
}

// U units of NW 16-byte words each, unit k being `first + k * stride` of `count` (zeros past the
// end), straight into registers: the fast kernels' loads in flight.
template <int U, int NW>
__device__ __forceinline__ void load_units(const uint4* __restrict__ x, int64_t first, int64_t stride, int64_t count,
                                           uint4 (&raw)[U][NW]) {
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t u = first + k * stride;
#pragma unroll
    for (int w = 0; w < NW; ++w) raw[k][w] = u < count ? x[u * NW + w] : make_uint4(0u, 0u, 0u, 0u);
  }
}

// NVFP4's group scale rounded to E4M3 by the reference encoder: out of line, so that the hardware
// path (hw_e4m3) stays a branch instead of being if-converted into both.
__device__ __noinline__ uint32_t encode_e4m3_ref(float d) { return encode_fp8_rne<E4M3Traits>(d, true); }

// A group's multiplier and stored scale from its finite max m: NVFP4's two-level scales (E4M3
// rounding by cvt2_hw where hw_e4m3) or power-of-two plain scales.
template <bool NV>
__device__ __forceinline__ void fast_group_scale(const QuantKernelParams& P, const Nvfp4TensorScale& nv, uint32_t m,
                                                 bool hw_e4m3, float& mult, float& stored) {
  if constexpr (NV) {
    const float d = nvfp4_group_scale_value(f32_from_bits(m), P.fmax, nv);
    const uint32_t code = hw_e4m3 ? (cvt2_hw<E4M3Traits>(d, 0.0f) & 0xFFu) : encode_e4m3_ref(d);
    nvfp4_group_scale_from(decode_fp8<E4M3Traits>(static_cast<uint8_t>(code)), nv, mult, stored);
  } else {
    float sq;
    plain_scales(amax_with_eps(f32_from_bits(m), P.scale), P.scale, sq, stored);
    mult = div_rn(1.0f, sq);  // exact: sq is a power of two (the launcher's condition)
  }
}

// NVFP4's tensor scale from pass 1's amax (block 0 stores S_dec); unused for plain scales.
template <bool NV>
__device__ __forceinline__ Nvfp4TensorScale fast_tensor_scale(const QuantKernelParams& P, const LowbitParams& S,
                                                              const uint32_t* tensor_amax_in) {
  Nvfp4TensorScale nv;
  if constexpr (NV) {
    nv = nvfp4_tensor_scale(f32_from_bits(*tensor_amax_in), P.fmax);
    if (blockIdx.x == 0 && threadIdx.x == 0 && S.tensor_scale) *S.tensor_scale = nv.s_dec;
  }
  return nv;
}

// hw_e4m3: cvt2_hw rounds NVFP4's group scales (hw_cvt_verified(): equal to the reference encoder
// on every finite input; the value rounded is finite).
template <class T, InDt D, int G, bool NV, bool RHT>
__global__ void __launch_bounds__(256)
    lowbit_1xg_fast_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                           QuantKernelParams P, LowbitParams S, int64_t groups,
                           const uint32_t* __restrict__ tensor_amax_in, uint32_t* __restrict__ tensor_amax_out,
                           bool hw_e4m3) {
  constexpr int NW = G / kWordElems<D>;  // 16-byte words per group
  constexpr int U = kFastUnits<D, G>;
  __shared__ alignas(16) uint8_t lut[kLutEntries<T>];
  load_lut<T>(lut, P.format, P.saturate);
  const Nvfp4TensorScale nv = fast_tensor_scale<NV>(P, S, tensor_amax_in);
  uint32_t tm = 0u;  // the finite tensor amax as a by-product (plain scales)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g0 < groups; g0 += U * stride) {
    uint4 raw[U][NW];
    load_units(x, g0, stride, groups, raw);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t g = g0 + k * stride;
      if (g >= groups) break;
      float v[G];
      const uint32_t m = fast_group_values<D, G, RHT>(raw[k], S, v);
      tm = max(tm, m);
      float mult, stored;
      fast_group_scale<NV>(P, nv, m, hw_e4m3, mult, stored);
#pragma unroll
      for (int s = 0; s < G / 16; ++s) {
        uint32_t q[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) q[j] = encode_lut<T>(mul_rn(v[16 * s + j], mult), lut);
        store_codes(codes, g * G + 16 * s, T::kBits, true, q);
      }
      scales[g] = stored;
    }
  }
  if (tensor_amax_out) warp_atomic_max(tm, tensor_amax_out);
}

// NVFP4's weight layout (16x16 blocks) and power-of-two scales on 16x16 blocks, without rht,
// rounded to nearest: a tile of 16 rows x 16 blocks per iteration of a 256-thread block. Thread t
// holds row t / 16 of block column t % 16 (16 elements, loaded straight into registers), so that a
// half-warp reads 256 consecutive elements of one row and writes their 128 consecutive code
// bytes; the 16 row maxima of each block meet in shared memory (one barrier per iteration, the
// buffer alternating between iterations), and every thread encodes its own row of its block.
// U tiles in flight per block.
constexpr int kTileUnits = 2;
template <class T, InDt D, bool NV>
__global__ void __launch_bounds__(256)
    lowbit_16x16_tile_kernel(const uint4* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                             QuantKernelParams P, LowbitParams S, const uint32_t* __restrict__ tensor_amax_in,
                             uint32_t* __restrict__ tensor_amax_out, bool hw_e4m3) {
  constexpr int NW = 16 / kWordElems<D>;
  constexpr int U = kTileUnits;
  __shared__ alignas(16) uint8_t lut[kLutEntries<T>];
  __shared__ uint32_t row_max[2][U][16 * 17];  // [buffer][unit][column * 17 + row]: no bank conflicts
  load_lut<T>(lut, P.format, P.saturate);
  const Nvfp4TensorScale nv = fast_tensor_scale<NV>(P, S, tensor_amax_in);
  const int r = static_cast<int>(threadIdx.x >> 4), bj = static_cast<int>(threadIdx.x & 15);
  const int64_t tile_cols = (P.grid_cols + 15) / 16, tiles = P.grid_rows * tile_cols;
  uint32_t tm = 0u;
  int buf = 0;
  for (int64_t t0 = blockIdx.x; t0 < tiles; t0 += U * static_cast<int64_t>(gridDim.x), buf ^= 1) {
    uint4 raw[U][NW];
    int64_t flat[U], blk[U];
    bool ok[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t tile = t0 + k * static_cast<int64_t>(gridDim.x);
      int64_t gi = 0, tj = 0;
      divmod(tile, tile_cols, S.narrow, gi, tj);  // tiles <= slots: S.narrow holds for them too
      const int64_t gj = tj * 16 + bj, row = gi * 16 + r;
      ok[k] = tile < tiles && gj < P.grid_cols && row < P.rows;
      flat[k] = row * P.cols + gj * 16;
      blk[k] = gi * P.grid_cols + gj;
#pragma unroll
      for (int w = 0; w < NW; ++w) raw[k][w] = ok[k] ? x[flat[k] / kWordElems<D> + w] : make_uint4(0u, 0u, 0u, 0u);
    }
    float v[U][16];
#pragma unroll
    for (int k = 0; k < U; ++k) row_max[buf][k][bj * 17 + r] = fast_group_values<D, 16, false>(raw[k], S, v[k]);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < U; ++k) {
      uint32_t m = 0u;
#pragma unroll
      for (int i = 0; i < 16; ++i) m = max(m, row_max[buf][k][bj * 17 + i]);
      if (!ok[k]) continue;
      tm = max(tm, m);
      float mult, stored;
      fast_group_scale<NV>(P, nv, m, hw_e4m3, mult, stored);
      uint32_t q[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) q[j] = encode_lut<T>(mul_rn(v[k][j], mult), lut);
      store_codes(codes, flat[k], T::kBits, true, q);
      if (r == 0) scales[blk[k]] = stored;
    }
  }
  if (tensor_amax_out) warp_atomic_max(tm, tensor_amax_out);
}

// Pass 1 of the two-pass modes without rht or with rht=16: max |x| over the finite (transformed)
// elements of the whole tensor (every element belongs to a segment), U 16-element segments in
// flight per thread. The grid walks the tensor from its tail to its head, so that the head, which
// the encode pass reads first, is what stays in L2 (as the FP8 per-tensor stage 1 does; the max
// is the same in any order).
template <InDt D, bool RHT>
__global__ void __launch_bounds__(256)
    amax_segments_kernel(const uint4* __restrict__ x, LowbitParams S, int64_t segments, uint32_t* __restrict__ amax) {
  constexpr int U = 4;
  constexpr int NW = 16 / kWordElems<D>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t span = U * stride, rounds = (segments + span - 1) / span;
  uint32_t m = 0u;
  for (int64_t r = rounds - 1; r >= 0; --r) {
    const int64_t s0 = r * span + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    uint4 raw[U][NW];
    load_units(x, s0, stride, segments, raw);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      float v[16];
      m = max(m, fast_group_values<D, 16, RHT>(raw[k], S, v));  // zero words past the end add 0
    }
  }
  warp_atomic_max(m, amax);
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
      for (int j = 0; j < 16; ++j) v[j] = decode_fp8<T>(static_cast<uint8_t>(packed_code(codes, flat0 + j, S.bits)));
      if (expand) {  // outside the element loop (see encode16)
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = compress_value(v[j], ep);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = mul_rn(v[j], s);
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

// fp32 / bf16 -> one 4- or 6-bit code per byte: the table encoder, or stochastic rounding on
// Philox word (seed, offset + i), as sim/formats/cast.cpp.
template <class T, bool BF16>
__global__ void __launch_bounds__(256)
    small_cast_kernel(const void* __restrict__ in, uint8_t* __restrict__ out, int64_t n, CastParams p) {
  __shared__ alignas(16) uint8_t lut[kLutEntries<T>];
  load_lut<T>(lut, kFmt<T>, true);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = BF16 ? bf16_to_f32(static_cast<const uint16_t*>(in)[i]) : static_cast<const float*>(in)[i];
    out[i] = static_cast<uint8_t>(p.stochastic ? encode_fp8_sr<T>(x, true, philox_word(p.seed, p.offset + i))
                                               : encode_lut<T>(x, lut));
  }
}

}  // namespace

uint64_t lowbit_lut_mismatches(int fmt, bool saturate) {
  ensure_rne_luts();
  unsigned long long* d = nullptr;
  FP8SIM_CUDA_CHECK(cudaMalloc(&d, sizeof(unsigned long long)));
  FP8SIM_CUDA_CHECK(cudaMemset(d, 0, sizeof(unsigned long long)));
  dispatch_lowbit(fmt, InDt::F32,
                  [&]<class T, InDt D>() { lut_check_kernel<T><<<grid_cap(1 << 20, 8), 256>>>(fmt, saturate, d); });
  FP8SIM_CUDA_CHECK_LAUNCH();
  unsigned long long h = 0;
  FP8SIM_CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  FP8SIM_CUDA_CHECK(cudaFree(d));
  return h;
}

}  // namespace fp8sim::gpu::detail

namespace fp8sim::gpu {

void cast_to_small_cuda(const void* d_in, bool bf16, uint8_t* d_out, size_t n, const CastParams& p,
                        cudaStream_t stream) {
  if (n == 0) return;
  detail::ensure_rne_luts();
  const int grid = grid_cap((static_cast<int64_t>(n) + 255) / 256, 8);
  const int64_t nn = static_cast<int64_t>(n);
  detail::dispatch_lowbit(
      p.small_format, bf16 ? detail::InDt::BF16 : detail::InDt::F32, [&]<class T, detail::InDt D>() {
        if constexpr (D == detail::InDt::FP16) return;
        else detail::small_cast_kernel<T, D == detail::InDt::BF16><<<grid, 256, 0, stream>>>(d_in, d_out, nn, p);
      });
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu

namespace fp8sim::gpu::detail {

bool lowbit_fast_applies(const QuantKernelParams& P, const LowbitParams& S, int dtype) {
  const bool small_format = P.format == gpu_format_code(Format::E2M1) || P.format == gpu_format_code(Format::E2M3) ||
                            P.format == gpu_format_code(Format::E3M2);
  const bool row_groups = P.group_rows == 1 && (P.group_cols == 16 || P.group_cols == 32) && P.cols % P.group_cols == 0;
  const bool blocks = P.group_rows == 16 && P.group_cols == 16;  // rows are whole segments (lowbit_plan)
  const bool scales = S.mode == kLowbitNvfp4 ? P.group_cols == 16 : (S.mode == kLowbitPlain && S.pow2_div);
  const bool rht = S.rht == 0 || (S.rht == 16 && S.mode == kLowbitNvfp4 && row_groups);  // TE's NVFP4 recipe
  return small_format && (row_groups || blocks) && scales && rht && dtype != static_cast<int>(InDt::FP16) &&
         !P.stochastic && S.vec && S.codes_aligned;
}

void launch_quantize_lowbit(const QuantLaunch& L, const LowbitParams& S, uint32_t* amax_word, cudaStream_t s) {
  ensure_rne_luts();
  const QuantKernelParams& P = L.params;
  const InDt dt = static_cast<InDt>(L.dtype);
  uint8_t* codes = static_cast<uint8_t*>(L.codes);
  const bool two_pass = S.mode == kLowbitNvfp4 || S.mode == kLowbitTensor;
  const int grid = grid_cap((S.slots + 255) / 256, 16);
  const int64_t numel = P.rows * P.cols;
  if (two_pass && L.producer_maxima) {  // a producer's chunk maxima stand for pass 1
    launch_reduce_maxima(L.producer_maxima, static_cast<int64_t>(L.producer_maxima_count),
                         reinterpret_cast<float*>(amax_word), s);
  } else if (two_pass && (S.rht == 0 || S.rht == 16) && S.vec) {  // every element counts: segment by segment
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(amax_word, 0, sizeof(uint32_t), s));
    const int64_t segments = numel / 16;
    auto go = [&]<InDt D, bool RHT>() {
      static const int r = resident_blocks(amax_segments_kernel<D, RHT>);
      amax_segments_kernel<D, RHT><<<grid_cap((segments + 1023) / 1024, r), 256, 0, s>>>(static_cast<const uint4*>(L.x),
                                                                                         S, segments, amax_word);
    };
    auto with_rht = [&]<InDt D>() { S.rht ? go.template operator()<D, true>() : go.template operator()<D, false>(); };
    if (dt == InDt::F32) with_rht.template operator()<InDt::F32>();
    else if (dt == InDt::BF16) with_rht.template operator()<InDt::BF16>();
    else with_rht.template operator()<InDt::FP16>();
    FP8SIM_CUDA_CHECK_LAUNCH();
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
  if (lowbit_fast_applies(P, S, L.dtype)) {
    const int64_t groups = numel / P.group_cols;
    const bool hw_e4m3 = S.mode == kLowbitNvfp4 && rne_hw_ok(P);
    dispatch_lowbit(P.format, dt, [&]<class T, InDt D>() {
      if constexpr (T::kBits < 8 && D != InDt::FP16) {
        auto go = [&]<int G, bool NV, bool RHT>() {
          static const int resident = resident_blocks(lowbit_1xg_fast_kernel<T, D, G, NV, RHT>);
          const int64_t want = (groups + 256 * kFastUnits<D, G> - 1) / (256 * kFastUnits<D, G>);
          lowbit_1xg_fast_kernel<T, D, G, NV, RHT><<<grid_cap(want, resident), 256, 0, s>>>(
              static_cast<const uint4*>(L.x), codes, L.scales, P, S, groups, amax_word, amax_out, hw_e4m3);
        };
        if (P.group_rows == 16) {
          auto go16 = [&]<bool NV>() {
            static const int resident = resident_blocks(lowbit_16x16_tile_kernel<T, D, NV>);
            const int64_t tiles = P.grid_rows * ((P.grid_cols + 15) / 16);
            lowbit_16x16_tile_kernel<T, D, NV>
                <<<grid_cap((tiles + kTileUnits - 1) / kTileUnits, resident), 256, 0, s>>>(
                    static_cast<const uint4*>(L.x), codes, L.scales, P, S, amax_word, amax_out, hw_e4m3);
          };
          if (S.mode == kLowbitNvfp4) go16.template operator()<true>();
          else go16.template operator()<false>();
        } else if (S.mode == kLowbitNvfp4 && S.rht) go.template operator()<16, true, true>();
        else if (S.mode == kLowbitNvfp4) go.template operator()<16, true, false>();
        else if (P.group_cols == 16) go.template operator()<16, false, false>();
        else go.template operator()<32, false, false>();
      }
    });
  } else {
    dispatch_lowbit(P.format, dt, [&]<class T, InDt D>() {
      // No more blocks than fit at once: each thread then walks several segments, which amortises
      // its prologue (the table copy, the tensor scale) and keeps its next segment's loads in flight.
      static const int resident = resident_blocks(lowbit_quant_kernel<T, D>);
      lowbit_quant_kernel<T, D><<<grid_cap((S.slots + 255) / 256, resident), 256, 0, s>>>(
          L.x, codes, L.scales, L.k, L.c, P, S, amax_word, amax_out, S.tensor_scale);
    });
  }
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
