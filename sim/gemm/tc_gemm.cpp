#include "sim/gemm/tc_gemm.hpp"

#include <fmt/format.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/avx2_fp8.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_model.hpp"

namespace fp8sim::gemm {

std::string TcGemmConfig::describe() const {
  static const char* kScaling[] = {"bf16", "tensor", "row", "1x128 x 128x128", "1x128 x 1x128"};
  const char* sc = scaling >= 0 && scaling <= 4 ? kScaling[scaling] : "unknown scaling";
  std::string s = fmt::format("{} x {} {}", format_name(x_format), format_name(w_format), sc);
  if (scaling == 1 || scaling == 2) s += fast_accum ? " fast" : fmt::format(" promote {}", promote_interval);
  if (y_format == Format::BF16) s += " -> bf16";
  return s;
}

namespace {

int type_code(Format f) { return f == Format::E4M3 ? 0 : (f == Format::E5M2 ? 1 : 2); }

// An operand split once: signed significand, exponent (subnormals at the minimum) and a flag for
// NaN / Inf codes (steps that meet one take the general path of tc_model.hpp). T = int8_t for FP8,
// int16_t for BF16.
template <class T>
struct Split {
  std::vector<T> sig, exp;
  std::vector<uint8_t> special;
};

template <class T, class Code>
Split<T> split_codes(const Code* codes, int64_t n, int type) {
  Split<T> s;
  s.sig.resize(static_cast<size_t>(n));
  s.exp.resize(static_cast<size_t>(n));
  s.special.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const TcTerm t = tc_split(codes[i], type);
    s.sig[i] = static_cast<T>(t.neg ? -t.sig : t.sig);
    s.exp[i] = static_cast<T>(t.exp);
    s.special[i] = t.kind != 0;
  }
  return s;
}

// A step's C split once: signed-magnitude significand and exponent (subnormals at -126), and the
// largest exponent C contributes to the step's maximum (-133: none, for a zero C).
struct CTerm {
  int64_t sig;
  int exp, e_floor;
  bool neg;
};
[[gnu::always_inline]] inline CTerm c_term(float c) {
  const uint32_t cu = f32_bits(c);
  const uint32_t ce = (cu >> 23) & 0xFFu, cm = cu & 0x7FFFFFu;
  const int64_t sig = ce == 0 ? cm : (cm | 0x800000u);
  const int exp = ce == 0 ? -126 : static_cast<int>(ce) - 127;
  return {sig, exp, sig != 0 ? exp : -133, (cu >> 31) != 0};
}

// The end of a fused step: C aligned to the step's unit beside the products' integer sum, and the
// step's rounding.
[[gnu::always_inline]] inline float step_tail(const TcArith& t, int64_t sum, int32_t e_max, const CTerm& c) {
  const int unit = e_max - t.frac_bits;
  int64_t total = sum;
  if (c.sig != 0) {
    const int sh = c.exp - 23 - unit;
    const int64_t v = sh >= 0 ? (c.sig << sh) : (-sh >= 63 ? 0 : (c.sig >> -sh));
    total += c.neg ? -v : v;
  }
  return tc_round_step(t, total, unit);
}

// The fused step of tc_fdpa_terms for N (0: n) <= 32 finite products and a finite c, written for
// the vectorizer. FP8 (T = int8_t, F = 13): terms stay below 2^16 and their sum below 2^22;
// BF16 (T = int16_t, F = 25, 16 products a step): products below 2^16 move left by at most
// F - 14 = 11 bits, so terms stay below 2^27 and a step's sum below 16 * 2^27 = 2^31. Both fit
// Acc = int32_t, which AVX2 multiplies and shifts lane by lane (it has no 64-bit multiply).
template <int N, class T, class Acc>
[[gnu::always_inline]] inline float step_split(const TcArith& t, const T* sa, const T* ea, const T* sb, const T* eb,
                                               int n, int mant_bits, float c) {
  const int len = N > 0 ? N : n;
  const CTerm ct = c_term(c);
  Acc p[32];
  int32_t e[32];
  int32_t e_max = ct.e_floor;
  for (int i = 0; i < len; ++i) {
    const Acc pi = static_cast<Acc>(sa[i]) * static_cast<Acc>(sb[i]);
    const int32_t zero = -static_cast<int32_t>(pi == 0);  // all ones for a zero product (not in the maximum)
    p[i] = pi;
    e[i] = ((int32_t{ea[i]} + int32_t{eb[i]}) & ~zero) | (-200 & zero);
  }
  for (int i = 0; i < len; ++i) e_max = e[i] > e_max ? e[i] : e_max;
  const int32_t base = mant_bits + e_max - t.frac_bits;  // a term moves by e - base bits
  constexpr int32_t kMaxRight = sizeof(Acc) * 8 - 1;
  Acc sum = 0;
  for (int i = 0; i < len; ++i) {
    const int32_t sh = e[i] - base;  // <= F - mant_bits
    const Acc mag = p[i] < 0 ? -p[i] : p[i];
    const Acc left = sh > 0 ? sh : 0;
    const Acc right = sh < 0 ? (-sh < kMaxRight ? -sh : kMaxRight) : 0;
    const Acc v = (mag << left) >> right;
    sum += p[i] < 0 ? -v : v;
  }
  return step_tail(t, sum, e_max, ct);
}

// The BF16 and FP8 steps of step_split in AVX2 (step_avx2 below), which GCC does not vectorize from
// the loops above: the same int32 operations lane by lane (products, exponents with -200 for a zero
// product, the step's maximum, each term's shifts and sign) and their int32 sum, whose order does
// not matter (the bound above keeps it exact). So the same bits; TensorCoreGemm tests compare it
// with tc_model.hpp's general step on every case family. The 16-bit (BF16) operands widen so:
__attribute__((target("avx2"))) [[gnu::always_inline]] inline __m256i load8_epi32(const int16_t* q) {
  return _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
}
// Eight terms: each product's magnitude moved by its shift (left for sh > 0, right by at most 31),
// with the product's sign (a zero product's term is 0).
__attribute__((target("avx2"))) [[gnu::always_inline]] inline __m256i terms8(__m256i p, __m256i e, __m256i base) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i sh = _mm256_sub_epi32(e, base);
  const __m256i left = _mm256_max_epi32(sh, zero);
  const __m256i right = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(zero, sh), zero), _mm256_set1_epi32(31));
  const __m256i v = _mm256_srlv_epi32(_mm256_sllv_epi32(_mm256_abs_epi32(p), left), right);
  return _mm256_sign_epi32(v, p);
}
// The 8-bit significands and exponents of an FP8 step widen the same way.
__attribute__((target("avx2"))) [[gnu::always_inline]] inline __m256i load8_epi32(const int8_t* q) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
}
// A step of 8 G products in AVX2: step_split<16, int16_t, int32_t> (BF16, G = 2) or
// step_split<32, int8_t, int32_t> (FP8, G = 4), the operands widened to int32 eight at a time.
// Not inlined: its callers are compiled without AVX2 (only the *_row_avx2 functions reach it).
template <int G, class T>
__attribute__((target("avx2"), noinline)) float step_avx2(const TcArith& t, const T* sa, const T* ea, const T* sb,
                                                          const T* eb, int mant_bits, float c) {
  const __m256i zero = _mm256_setzero_si256(), no_term = _mm256_set1_epi32(-200);
  __m256i p[G], e[G];
  for (int g = 0; g < G; ++g) {
    p[g] = _mm256_mullo_epi32(load8_epi32(sa + 8 * g), load8_epi32(sb + 8 * g));
    e[g] = _mm256_blendv_epi8(_mm256_add_epi32(load8_epi32(ea + 8 * g), load8_epi32(eb + 8 * g)), no_term,
                              _mm256_cmpeq_epi32(p[g], zero));
  }
  __m256i m8 = e[0];
  for (int g = 1; g < G; ++g) m8 = _mm256_max_epi32(m8, e[g]);
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1));
  const CTerm ct = c_term(c);
  const int32_t e_max = std::max(_mm_cvtsi128_si32(m), ct.e_floor);
  const __m256i base = _mm256_set1_epi32(mant_bits + e_max - t.frac_bits);
  __m256i s8 = terms8(p[0], e[0], base);
  for (int g = 1; g < G; ++g) s8 = _mm256_add_epi32(s8, terms8(p[g], e[g], base));  // int32: exact in any order
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return step_tail(t, _mm_cvtsi128_si32(s), e_max, ct);
}

template <class T>
struct RowArgs {
  const uint8_t* x;
  const uint8_t* w;
  const float* xs;
  const float* ws;
  const Split<T>* sx;
  const Split<T>* sw;
  const uint8_t* fx;
  const uint8_t* fw;
  int64_t N, K, chunks, kb, interval;
  int tx, tw, mant_bits, scaling;
  bool y_bf16;
  TcArith ar;
};

// One step of column j at k0 (n products) after the C value blk: the general path of
// tc_model.hpp where a NaN / Inf code or a non-finite C is involved, else step_split. Inlined
// into the target clones of fp8_row / bf16_row, so that its loops are vectorized for the clone's
// instruction set.
// `chunk`: k0's step index (k0 / step).
template <class T, class Acc, bool kAvx2 = false>
[[gnu::always_inline]] inline float one_step(const RowArgs<T>& a, int64_t i, int64_t j, int64_t k0, int64_t chunk,
                                             int n, float blk) {
  const int64_t K = a.K;
  const float cf = std::fabs(blk);
  if ((a.fx[i * a.chunks + chunk] | a.fw[j * a.chunks + chunk]) || !(cf <= 3.4028235e38f)) {
    if (a.tx == 2) {
      const auto* xb = reinterpret_cast<const uint16_t*>(a.x);
      const auto* wb = reinterpret_cast<const uint16_t*>(a.w);
      return tc_fdpa(a.ar, xb + i * K + k0, 1, 2, wb + j * K + k0, 1, 2, n, blk);
    }
    return tc_fdpa(a.ar, a.x + i * K + k0, 1, a.tx, a.w + j * K + k0, 1, a.tw, n, blk);
  }
  const T* sa = &a.sx->sig[i * K + k0];
  const T* ea = &a.sx->exp[i * K + k0];
  const T* sb = &a.sw->sig[j * K + k0];
  const T* eb = &a.sw->exp[j * K + k0];
  if constexpr (kAvx2) {
    constexpr int kFull = sizeof(T) == 1 ? 32 : 16;  // products in a whole FP8 / BF16 step
    if (n == kFull) return step_avx2<kFull / 8>(a.ar, sa, ea, sb, eb, a.mant_bits, blk);
  }
  if (n == 32) return step_split<32, T, Acc>(a.ar, sa, ea, sb, eb, n, a.mant_bits, blk);
  if (n == 16) return step_split<16, T, Acc>(a.ar, sa, ea, sb, eb, n, a.mant_bits, blk);
  return step_split<0, T, Acc>(a.ar, sa, ea, sb, eb, n, a.mant_bits, blk);
}

// Row i of Y: every column j, every block and step. A column's steps form one dependent chain (each
// step's C is the previous step's result), so kCols columns advance together, step by step, giving
// the processor independent chains to overlap; each column's operations are unchanged.
template <class T, class Acc, bool kAvx2 = false>
[[gnu::always_inline]] inline void gemm_row(const RowArgs<T>& a, int64_t i, float* y) {
  constexpr int64_t kCols = 4;
  const int64_t step = a.tx == 2 ? 16 : 32;
  for (int64_t j0 = 0; j0 < a.N; j0 += kCols) {
    const int64_t nj = std::min(kCols, a.N - j0);
    float acc[kCols] = {};
    for (int64_t b0 = 0; b0 < a.K; b0 += a.interval) {
      const int64_t b1 = std::min(a.K, b0 + a.interval);
      float blk[kCols] = {};
      for (int64_t k0 = b0, chunk = b0 / step; k0 < b1; k0 += step, ++chunk) {
        const int n = static_cast<int>(std::min<int64_t>(step, b1 - k0));
        for (int64_t q = 0; q < nj; ++q) blk[q] = one_step<T, Acc, kAvx2>(a, i, j0 + q, k0, chunk, n, blk[q]);
      }
      for (int64_t q = 0; q < nj; ++q) acc[q] = tc_promote(a.scaling, acc[q], blk[q], a.xs, a.ws, i, j0 + q, b0, a.kb);
    }
    for (int64_t q = 0; q < nj; ++q) y[j0 + q] = tc_epilogue(a.scaling, acc[q], a.xs, a.ws, i, j0 + q, a.y_bf16);
  }
}

__attribute__((target_clones("avx2", "default"))) void fp8_row(const RowArgs<int8_t>& a, int64_t i, float* y) {
  gemm_row<int8_t, int32_t>(a, i, y);
}
__attribute__((target_clones("avx2", "default"))) void bf16_row(const RowArgs<int16_t>& a, int64_t i, float* y) {
  gemm_row<int16_t, int32_t>(a, i, y);
}
// The rows with step_avx2; called only when tc_gemm_simd().
__attribute__((target("avx2"))) void bf16_row_avx2(const RowArgs<int16_t>& a, int64_t i, float* y) {
  gemm_row<int16_t, int32_t, true>(a, i, y);
}
__attribute__((target("avx2"))) void fp8_row_avx2(const RowArgs<int8_t>& a, int64_t i, float* y) {
  gemm_row<int8_t, int32_t, true>(a, i, y);
}

std::atomic<bool>& simd_flag() {
  static std::atomic<bool> on{avx2::env_allows_simd()};
  return on;
}

}  // namespace

int64_t tc_scale_count(int scaling, bool is_w, int64_t rows, int64_t k) {
  const int64_t kb = (k + 127) / 128;
  switch (scaling) {
    case 1:
      return 1;
    case 2:
      return rows;
    case 3:
      return is_w ? ((rows + 127) / 128) * kb : rows * kb;
    case 4:
      return rows * kb;
    default:
      return 0;
  }
}

void set_tc_gemm_simd(bool enabled) { simd_flag().store(enabled); }
bool tc_gemm_simd() { return simd_flag().load() && avx2::available(); }

void tc_gemm_check(const TcGemmConfig& cfg) {
  const bool bf16 = cfg.x_format == Format::BF16;
  FP8SIM_REQUIRE(bf16 == (cfg.w_format == Format::BF16) && (bf16 || (is_fp8(cfg.x_format) && is_fp8(cfg.w_format))),
                 "tensor-core GEMM: formats must be E4M3/E5M2 each or both BF16");
  FP8SIM_REQUIRE(bf16 == (cfg.scaling == 0) && cfg.scaling >= 0 && cfg.scaling <= 4,
                 "tensor-core GEMM: scaling {} does not fit {}", cfg.scaling, cfg.describe());
  FP8SIM_REQUIRE(cfg.promote_interval >= 32 && cfg.promote_interval % 32 == 0,
                 "tensor-core GEMM: the promotion interval must be a positive multiple of 32, got {}",
                 cfg.promote_interval);
  FP8SIM_REQUIRE(cfg.y_format == Format::FP32 || cfg.y_format == Format::BF16,
                 "tensor-core GEMM: the output must be fp32 or bf16");
}

void tc_gemm(const uint8_t* x, const uint8_t* w, const float* xs, const float* ws, float* y, int64_t M, int64_t N,
             int64_t K, const TcGemmConfig& cfg) {
  tc_gemm_check(cfg);
  const bool bf16 = cfg.x_format == Format::BF16;
  const bool y_bf16 = cfg.y_format == Format::BF16;
  const int tx = type_code(cfg.x_format), tw = type_code(cfg.w_format);
  const TcArith ar = tc_arith_sm90(tx);
  const int64_t kb = (K + 127) / 128;
  const int64_t interval = cfg.scaling >= 3 ? 128 : ((cfg.fast_accum || bf16) ? K : cfg.promote_interval);

  const int64_t step = bf16 ? 16 : 32, chunks = (K + step - 1) / step;
  // Per row and step: does it hold a NaN / Inf code?
  auto chunk_flags = [&](const std::vector<uint8_t>& special, int64_t rows) {
    std::vector<uint8_t> f(static_cast<size_t>(rows * chunks), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) f[r * chunks + k / step] |= special[r * K + k];
    return f;
  };
  const int mant_bits = tc_mantissa_bits(tx) + tc_mantissa_bits(tw);
  if (bf16) {
    const auto sx = split_codes<int16_t>(reinterpret_cast<const uint16_t*>(x), M * K, 2);
    const auto sw = split_codes<int16_t>(reinterpret_cast<const uint16_t*>(w), N * K, 2);
    const std::vector<uint8_t> fx = chunk_flags(sx.special, M), fw = chunk_flags(sw.special, N);
    const RowArgs<int16_t> args{x,      w,  xs,       ws, &sx, &sw,       fx.data(),   fw.data(), N, K,
                                chunks, kb, interval, tx, tw,  mant_bits, cfg.scaling, y_bf16,    ar};
    const bool simd = tc_gemm_simd();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < M; ++i) {
      if (simd) bf16_row_avx2(args, i, y + i * N);
      else bf16_row(args, i, y + i * N);
    }
    return;
  }
  const auto sx = split_codes<int8_t>(x, M * K, tx), sw = split_codes<int8_t>(w, N * K, tw);
  const std::vector<uint8_t> fx = chunk_flags(sx.special, M), fw = chunk_flags(sw.special, N);
  const RowArgs<int8_t> args{x,      w,  xs,       ws, &sx, &sw,       fx.data(),   fw.data(), N, K,
                             chunks, kb, interval, tx, tw,  mant_bits, cfg.scaling, y_bf16,    ar};
  const bool simd = tc_gemm_simd();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < M; ++i) {
    if (simd) fp8_row_avx2(args, i, y + i * N);
    else fp8_row(args, i, y + i * N);
  }
}

}  // namespace fp8sim::gemm
