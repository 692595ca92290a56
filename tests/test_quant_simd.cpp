// The AVX2 loops of the quantizer (sim/quant/avx2_kernels.hpp) against the scalar FP8SIM_HD
// functions they transcribe: pow_det on special and random inputs, the FP8 encoders on every fp32
// bit pattern, the decoder on every code, and whole quantize / dequantize calls with the SIMD path
// on and off (every spec family, awkward shapes, non-finite and degenerate data): same bits.
// Skipped (reported as skipped) on a CPU without AVX2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sim/formats/fp8.hpp"
#include "sim/quant/avx2_kernels.hpp"
#include "sim/quant/dmath.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/quantize.hpp"

namespace {

using namespace fp8sim;

#define SKIP_WITHOUT_AVX2() \
  if (!avx2::available()) GTEST_SKIP() << "CPU without AVX2: the SIMD path is never used here"

// Lane-wise pow_det over arrays (n a multiple of 8).
__attribute__((target("avx2"))) void pow_lanes(const float* x, const float* y, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(out + i, avx2::pow_det(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
}

template <class T>
__attribute__((target("avx2"))) void encode_lanes(const uint32_t* bits, uint8_t* out, size_t n, bool sat) {
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i)));
    avx2::store8(out + i, avx2::encode_rne<T>(v, sat));
  }
}

template <class T>
__attribute__((target("avx2"))) void encode_finite_lanes(const uint32_t* bits, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i)));
    avx2::store8(out + i, avx2::encode_rne_finite<T>(v));
  }
}

// avx512::encode16 over arrays (n a multiple of 16); returns the sum of its +-0 counts.
template <class T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) int64_t encode_finite16_lanes(const uint32_t* bits,
                                                                                            uint8_t* out, size_t n) {
  int64_t zeros = 0;
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 z;
    const __m512 v = _mm512_castsi512_ps(_mm512_loadu_si512(bits + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), avx512::encode16<T>(v, z));
    zeros += __builtin_popcount(static_cast<unsigned>(z));
  }
  return zeros;
}

// encode_store_finite32 over arrays (n a multiple of 32); returns the sum of its +-0 counts.
template <class T>
__attribute__((target("avx2"))) int64_t encode_finite32_lanes(const uint32_t* bits, uint8_t* out, size_t n) {
  int64_t zeros = 0;
  for (size_t i = 0; i < n; i += 32) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i + 8 * j)));
    zeros += avx2::encode_store_finite32<T>(out + i, v[0], v[1], v[2], v[3]);
  }
  return zeros;
}

template <class T>
__attribute__((target("avx2"))) void decode_all(float* out) {
  uint8_t codes[256];
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  for (int c = 0; c < 256; c += 8) _mm256_storeu_ps(out + c, avx2::decode8<T>(codes + c));
}

uint32_t bits_of(float f) { return f32_bits(f); }

TEST(QuantSimd, PowDetSpecialGridMatchesScalar) {
  SKIP_WITHOUT_AVX2();
  const float inf = INFINITY, nan = NAN;
  std::vector<float> xs = {0.0f,      -0.0f,     1.0f,   -1.0f,  2.0f,   0.5f,           inf,
                           -inf,      nan,       -nan,   1e-45f, 1e-40f, 1.1754942e-38f, 3.4028235e38f,
                           0.999999f, 1.000001f, 448.0f, 1e-30f, 7.0f,   -3.0f,          65504.0f};
  std::vector<float> ys = {0.0f,    -0.0f,  1.0f, -1.0f,  0.5f, -0.5f,    2.0f,     0.0625f,          1.0625f,
                           16.0f,   -16.0f, inf,  -inf,   nan,  16384.0f, 16385.0f, 1099511627776.0f, -1099511627776.0f,
                           3.0e38f, 1e-20f, 0.7f, 9.9375f};
  std::vector<float> x, y;
  for (float a : xs)
    for (float b : ys) {
      x.push_back(a);
      y.push_back(b);
    }
  while (x.size() % 8) {
    x.push_back(1.0f);
    y.push_back(1.0f);
  }
  std::vector<float> out(x.size());
  pow_lanes(x.data(), y.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float ref = dmath::pow_det(x[i], y[i]);
    ASSERT_EQ(bits_of(out[i]), bits_of(ref)) << "pow_det(" << x[i] << ", " << y[i] << ")";
  }
}

TEST(QuantSimd, PowDetRandomMatchesScalar) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 g(7);
  const size_t n = size_t{1} << 21;
  std::vector<float> x(n), y(n), out(n);
  std::uniform_real_distribution<float> ky(-20.0f, 20.0f);
  for (size_t i = 0; i < n; ++i) {
    // x: any positive finite pattern (subnormals included) or, 1 in 16, any pattern at all; y: DE-like
    // exponents (multiples of 1/16 and their reciprocals) or uniform in [-20, 20].
    const uint32_t r = static_cast<uint32_t>(g());
    x[i] = (i % 16 == 0) ? f32_from_bits(r) : f32_from_bits(r % 0x7F800000u);
    const float k = static_cast<float>(1 + g() % 256) / 16.0f;
    y[i] = (i % 3 == 0) ? k : (i % 3 == 1 ? div_rn(1.0f, k) : ky(g));
  }
  pow_lanes(x.data(), y.data(), out.data(), n);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += bits_of(out[i]) != bits_of(dmath::pow_det(x[i], y[i]));
  EXPECT_EQ(bad, 0u);
}

__attribute__((target("avx2"))) void pow_narrow_lanes(const float* x, float k, float* out, size_t n) {
  const avx2::PowConstY ky(k);
  for (size_t i = 0; i < n; i += 64) {
    __m256 a[8], r[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(x + i + 8 * j);
    avx2::pow_det_pos_const_y_n<8, true>(a, r, ky);
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + i + 8 * j, r[j]);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void pow_narrow16_lanes(const float* x, float k,
                                                                                      float* out, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    __m512 a[8], r[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm512_loadu_ps(x + i + 16 * j);
    avx512::pow_narrow<8>(a, r, k);
    for (int j = 0; j < 8; ++j) _mm512_storeu_ps(out + i + 16 * j, r[j]);
  }
}

// kNarrow's shortcuts (no subnormal normalization, one product for 2^n) give pow_det's bits where
// its conditions hold: x = +0 or normal, k |log2 x| + 1 <= 126. Exponents from DE-like multiples
// of 1/16 to 16384, x spread over the whole allowed exponent range, results down into subnormals.
TEST(QuantSimd, PowDetNarrowMatchesScalarWithinItsConditions) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 g(11);
  const size_t n = size_t{1} << 14;
  std::vector<float> x(n), out(n), out16(n);
  size_t bad = 0, bad16 = 0, subnormal_results = 0;
  for (int trial = 0; trial < 96; ++trial) {
    const float k = trial < 64 ? static_cast<float>(1 + g() % 400) / 16.0f
                               : std::ldexp(1.0f + static_cast<float>(g() % 8) / 8.0f, trial % 14);
    std::uniform_real_distribution<double> log2x(-126.4 / k, 125.0 / k);  // n = rint(k log2 x) in [-126, 125]
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(std::exp2(std::max(-125.9, std::min(125.9, log2x(g)))));
      x[i] = i % 61 == 0 ? 0.0f : v;
    }
    pow_narrow_lanes(x.data(), k, out.data(), n);
    if (avx512::available()) pow_narrow16_lanes(x.data(), k, out16.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t want = bits_of(dmath::pow_det(x[i], k));
      bad += bits_of(out[i]) != want;
      bad16 += avx512::available() && bits_of(out16[i]) != want;
      subnormal_results += out[i] != 0.0f && out[i] < 1.17549435e-38f;
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(bad16, 0u) << "AVX-512";
  EXPECT_GT(subnormal_results, 0u) << "the single product's rounding into subnormals is exercised";
}

// expand_encode_store_n against the scalar expand_value + encode_fp8_rne, with vectors whose |v|
// pass the saturation bound (the encode_rne branch) and vectors within it (the packed-sign branch).
template <class T, bool kNarrow>
__attribute__((target("avx2"))) int64_t expand_store_lanes(const float* x, const ExpandParams& p, bool sat, float bound,
                                                           uint8_t* out, size_t n, int64_t& nsat) {
  const avx2::PowConstY ky(p.k);
  __m256i satc = _mm256_setzero_si256();
  int64_t zeros = 0;
  for (size_t i = 0; i < n; i += 64) {
    __m256 v[8];
    for (int j = 0; j < 8; ++j) v[j] = _mm256_loadu_ps(x + i + 8 * j);
    zeros += avx2::expand_encode_store_n<T, 8, kNarrow>(v, _mm256_set1_ps(p.c), _mm256_set1_ps(p.s), ky, p.k == 1.0f,
                                                        sat, _mm256_set1_ps(bound), satc, out + i);
  }
  nsat = avx2::hsum(satc);
  return zeros;
}

// avx512::coat_codes128 per block of 128: false (nothing stored) or the scalar codes.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void coat128_lanes(const float* x, const ExpandParams& p,
                                                                                 float bound, uint8_t* out, size_t n,
                                                                                 std::vector<bool>& done,
                                                                                 int64_t& zeros) {
  for (size_t i = 0; i < n; i += 128)
    done.push_back(avx512::coat_codes128<E4M3Traits>(x + i, p.c, p.s, p.k, bound, out + i, zeros));
}

TEST(QuantSimd, ExpandEncodeStoreMatchesScalar) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 g(5);
  const size_t n = 4096;
  std::vector<float> x(n);
  std::vector<uint8_t> got(n);
  const float bound = saturation_bound(Format::E4M3);
  for (float k : {1.0f, 0.5f, 1.25f})
    for (float s : {1.0f, 0.25f, 2.0f})
      for (bool sat : {true, false}) {
        for (size_t i = 0; i < n; ++i) {
          // blocks of 128 alternate between magnitudes below 1 and large ones (some |v| past the bound)
          const float m = ((i / 128) % 2) ? (k < 1.0f ? 2e6f : 2000.0f) : 1.0f;
          x[i] = std::uniform_real_distribution<float>(-m, m)(g);
          if (i % 29 == 0) x[i] = (i % 2) ? -0.0f : 0.0f;
        }
        const ExpandParams p{k, 1.0f, s};
        int64_t nsat = 0;
        const int64_t zeros = k == 0.5f
                                  ? expand_store_lanes<E4M3Traits, false>(x.data(), p, sat, bound, got.data(), n, nsat)
                                  : expand_store_lanes<E4M3Traits, true>(x.data(), p, sat, bound, got.data(), n, nsat);
        size_t bad = 0;
        int64_t want_sat = 0, want_zeros = 0;
        for (size_t i = 0; i < n; ++i) {
          const float v = expand_value(x[i], p);
          const uint8_t want = encode_fp8_rne<E4M3Traits>(v, sat);
          bad += got[i] != want;
          want_sat += dmath::abs_bits(v) > bound;
          want_zeros += (want & 0x7Fu) == 0u;
        }
        EXPECT_EQ(bad, 0u) << "k " << k << " s " << s << " sat " << sat;
        EXPECT_EQ(nsat, want_sat);
        EXPECT_GT(want_sat, 0) << "some vectors take the encode_rne branch";
        EXPECT_EQ(zeros, want_zeros);
        if (avx512::available() && k != 1.0f) {
          std::vector<uint8_t> got16(n, 0xAA);
          std::vector<bool> done;
          int64_t zeros16 = 0, want_zeros16 = 0;
          size_t bad16 = 0, taken = 0;
          coat128_lanes(x.data(), p, bound, got16.data(), n, done, zeros16);
          for (size_t b = 0; b < done.size(); ++b)
            for (size_t i = 128 * b; i < 128 * (b + 1); ++i) {
              const uint8_t want = encode_fp8_rne<E4M3Traits>(expand_value(x[i], p), sat);
              bad16 += done[b] ? got16[i] != want : got16[i] != 0xAA;  // refused blocks: nothing stored
              want_zeros16 += done[b] && (want & 0x7Fu) == 0u;
              taken += done[b];
            }
          EXPECT_EQ(bad16, 0u) << "AVX-512 k " << k << " s " << s << " sat " << sat;
          EXPECT_EQ(zeros16, want_zeros16);
          EXPECT_GT(taken, 0u);
          EXPECT_LT(taken, n) << "some blocks pass the bound and are refused";
        }
      }
}

__attribute__((target("avx2"))) void params_lanes(const avx2::CoatConsts& cc, const float* mx, const float* mn,
                                                  float* k, float* c, float* s, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    __m256 vk, vc, vs;
    avx2::coat_params8(cc, _mm256_loadu_ps(mx + i), _mm256_loadu_ps(mn + i), vk, vc, vs);
    _mm256_storeu_ps(k + i, vk);
    _mm256_storeu_ps(c + i, vc);
    _mm256_storeu_ps(s + i, vs);
  }
}

__attribute__((target("avx2"))) void log2_floor_lanes(const float* x, float* l, float* f, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    _mm256_storeu_ps(l + i, avx2::log2_det(_mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(f + i, avx2::floor_det(_mm256_loadu_ps(x + i)));
  }
}

TEST(QuantSimd, Log2AndFloorMatchScalar) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 g(11);
  std::vector<float> x = {0.0f,       -0.0f,       1.0f, -1.0f, INFINITY,  -INFINITY,   NAN,   1e-45f,
                          8388608.0f, -8388607.5f, 2.5f, -2.5f, 0.999999f, 16777216.0f, -0.5f, 3.4e38f};
  while (x.size() < (size_t{1} << 20)) x.push_back(f32_from_bits(static_cast<uint32_t>(g())));
  std::vector<float> l(x.size()), f(x.size());
  log2_floor_lanes(x.data(), l.data(), f.data(), x.size());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    bad += bits_of(l[i]) != bits_of(dmath::log2_det(x[i]));
    bad += bits_of(f[i]) != bits_of(dmath::floor_det(x[i]));
  }
  EXPECT_EQ(bad, 0u);
}

// The coat parameters of 8 groups at once against coat_expand_params (both epsilon modes, both
// target formats) on random and degenerate (absmax, absmin) pairs.
TEST(QuantSimd, CoatParamsMatchScalar) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 g(13);
  std::vector<float> mx, mn;
  const float specials[] = {0.0f, 1e-45f, 1e-38f, 1e-30f, 1.0f, 448.0f, 3.4e38f, INFINITY};
  for (float a : specials)
    for (float b : specials) {
      mx.push_back(std::max(a, b));
      mn.push_back(std::min(a, b));
    }
  while (mx.size() < 200000) {
    const float a = f32_from_bits(static_cast<uint32_t>(g() % 0x7F800000u));
    const float b = (g() % 4 == 0) ? a : f32_from_bits(static_cast<uint32_t>(g() % 0x7F800000u));
    mx.push_back(std::max(a, b));
    mn.push_back(std::min(a, b));
  }
  while (mx.size() % 8) {
    mx.push_back(1.0f);
    mn.push_back(1.0f);
  }
  std::vector<float> k(mx.size()), c(mx.size()), s(mx.size());
  for (bool fp64 : {true, false})
    for (float target : {448.0f, 57344.0f}) {
      avx2::CoatConsts cc;
      cc.eps_fp64 = fp64;
      cc.eps = fp64 ? 1e-30 : 1e-12;
      cc.fmax_store = 448.0f;
      cc.fmax_target = target;
      params_lanes(cc, mx.data(), mn.data(), k.data(), c.data(), s.data(), mx.size());
      size_t bad = 0;
      for (size_t i = 0; i < mx.size(); ++i) {
        const ExpandParams p = fp64
                                   ? coat_expand_params(mx[i], mn[i], 448.0f, target, cc.eps)
                                   : coat_expand_params(add_rn(mx[i], static_cast<float>(cc.eps)),
                                                        add_rn(mn[i], static_cast<float>(cc.eps)), 448.0f, target, 0.0);
        bad += bits_of(k[i]) != bits_of(p.k) || bits_of(c[i]) != bits_of(p.c) || bits_of(s[i]) != bits_of(p.s);
      }
      EXPECT_EQ(bad, 0u) << "fp64 eps " << fp64 << " target " << target;
    }
}

// Every fp32 bit pattern through both encoders, both formats, SAT and NOSAT: 2^32 x 4 checks in
// blocks (a few seconds with the vector path on both sides of the comparison's reference).
template <class T>
void check_encoder_exhaustive(bool sat) {
  constexpr size_t kBlock = size_t{1} << 16;
  std::vector<uint32_t> bits(kBlock);
  std::vector<uint8_t> got(kBlock);
  uint64_t bad = 0;
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kBlock) {
    for (size_t i = 0; i < kBlock; ++i) bits[i] = static_cast<uint32_t>(start + i);
    encode_lanes<T>(bits.data(), got.data(), kBlock, sat);
    for (size_t i = 0; i < kBlock; ++i) bad += got[i] != encode_fp8_rne<T>(f32_from_bits(bits[i]), sat);
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantSimd, EncoderE4M3AllPatterns) {
  SKIP_WITHOUT_AVX2();
  check_encoder_exhaustive<E4M3Traits>(true);
  check_encoder_exhaustive<E4M3Traits>(false);
}
TEST(QuantSimd, EncoderE5M2AllPatterns) {
  SKIP_WITHOUT_AVX2();
  check_encoder_exhaustive<E5M2Traits>(true);
  check_encoder_exhaustive<E5M2Traits>(false);
}

// The fast encoder is only used on finite values with |v| <= saturation_bound: all of them.
template <class T>
void check_finite_encoder(Format f) {
  const uint32_t bound_bits = f32_bits(saturation_bound(f));
  constexpr size_t kBlock = size_t{1} << 16;
  std::vector<uint32_t> bits;
  bits.reserve(kBlock);
  std::vector<uint8_t> got(kBlock);
  uint64_t bad = 0, checked = 0;
  std::vector<uint8_t> got32(kBlock), got16(kBlock);
  uint64_t bad32 = 0, bad16 = 0, bad_zeros = 0;
  auto flush = [&] {
    while (bits.size() % 32) bits.push_back(bits.size() % 2 ? 0x80000000u : 0u);
    encode_finite_lanes<T>(bits.data(), got.data(), bits.size());
    const int64_t zeros = encode_finite32_lanes<T>(bits.data(), got32.data(), bits.size());
    int64_t zeros16 = 0;
    if (avx512::available()) zeros16 = encode_finite16_lanes<T>(bits.data(), got16.data(), bits.size());
    int64_t want_zeros = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint8_t want = encode_fp8_rne<T>(f32_from_bits(bits[i]), true);
      bad += got[i] != want;
      bad32 += got32[i] != want;
      bad16 += avx512::available() && got16[i] != want;
      want_zeros += (want & 0x7Fu) == 0u;
    }
    bad_zeros += zeros != want_zeros || (avx512::available() && zeros16 != want_zeros);
    checked += bits.size();
    bits.clear();
  };
  for (uint32_t mag = 0; mag <= bound_bits; ++mag) {
    bits.push_back(mag);
    bits.push_back(mag | 0x80000000u);
    if (bits.size() >= kBlock - 8) flush();
  }
  flush();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(bad32, 0u) << "32 at a time, signs through the packs";
  EXPECT_EQ(bad16, 0u) << "AVX-512";
  EXPECT_EQ(bad_zeros, 0u) << "counts of +-0 codes";
  EXPECT_GT(checked, 2ull * bound_bits);
}

TEST(QuantSimd, FiniteEncoderAllInRangePatterns) {
  SKIP_WITHOUT_AVX2();
  check_finite_encoder<E4M3Traits>(Format::E4M3);
  check_finite_encoder<E5M2Traits>(Format::E5M2);
}

TEST(QuantSimd, DecoderAllCodes) {
  SKIP_WITHOUT_AVX2();
  float out[256];
  decode_all<E4M3Traits>(out);
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(bits_of(out[c]), bits_of(decode_fp8<E4M3Traits>(static_cast<uint8_t>(c)))) << c;
  decode_all<E5M2Traits>(out);
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(bits_of(out[c]), bits_of(decode_fp8<E5M2Traits>(static_cast<uint8_t>(c)))) << c;
}

// ---- whole calls, SIMD on vs off -------------------------------------------------------------------

enum class Data { LogNormal, WithZeros, NonFinite, Tiny, Degenerate, Huge, KOne, Wide };

std::vector<float> make_data(int64_t n, int64_t cols, Data kind, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(-6.0, 3.0);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<float>(std::exp(nd(g)) * ((g() & 1) ? 1.0 : -1.0));
  switch (kind) {
    case Data::LogNormal:
      break;
    case Data::WithZeros:
      for (size_t i = 0; i < v.size(); ++i)
        if (g() % 5 == 0) v[i] = (g() & 1) ? 0.0f : -0.0f;
      break;
    case Data::NonFinite: {
      const float specials[] = {INFINITY, -INFINITY, NAN};
      for (size_t i = 0; i < v.size(); ++i)
        if (g() % 97 == 0) v[i] = specials[g() % 3];
      break;
    }
    case Data::Tiny:  // subnormal magnitudes: amax / fmax underflows, s = 2^-149 paths
      for (auto& e : v) e = f32_from_bits(static_cast<uint32_t>(g() % 64) | ((g() & 1) ? 0x80000000u : 0u));
      break;
    case Data::Degenerate:  // all-zero rows, constant rows, single nonzero rows
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = i / cols;
        if (row % 4 == 0) v[static_cast<size_t>(i)] = 0.0f;
        if (row % 4 == 1) v[static_cast<size_t>(i)] = 0.375f;
        if (row % 4 == 2) v[static_cast<size_t>(i)] = (i % cols == 3) ? -2.5f : 0.0f;
      }
      break;
    case Data::Huge:  // near fp32's max: amax / fmax and x / s near overflow
      for (auto& e : v) e = e * 1e36f;
      break;
    case Data::KOne:  // magnitudes 2^0 .. 2^-16: DE groups with max/min = 2^16 get k == 1 exactly
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = std::ldexp((g() & 1) ? 1.0f : -1.0f, -static_cast<int>((i * 7919) % 17));
      break;
    case Data::Wide:  // subnormals among normal values: with a large eps (c near sqrt(amax eps)),
                      // DE's |x| / c is subnormal but not 0
      for (size_t i = 0; i < v.size(); ++i)
        if (i % 41 == 5) v[i] = f32_from_bits(1u + static_cast<uint32_t>(g() % 1000000));
      break;
  }
  return v;
}

void expect_same(const QuantizedTensor& a, const QuantizedTensor& b, const std::string& what) {
  ASSERT_EQ(a.codes.size(), b.codes.size()) << what;
  size_t bad = 0, first = a.codes.size();
  for (size_t i = 0; i < a.codes.size(); ++i)
    if (a.codes[i] != b.codes[i]) {
      ++bad;
      first = std::min(first, i);
    }
  EXPECT_EQ(bad, 0u) << what << ": first differing code at " << first;
  auto same_bits = [&](const std::vector<float>& x, const std::vector<float>& y, const char* name) {
    ASSERT_EQ(x.size(), y.size()) << what << " " << name;
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(bits_of(x[i]), bits_of(y[i])) << what << " " << name << "[" << i << "]";
  };
  same_bits(a.scales, b.scales, "scales");
  same_bits(a.expand_k, b.expand_k, "k");
  same_bits(a.expand_c, b.expand_c, "c");
  EXPECT_EQ(bits_of(a.tensor_amax), bits_of(b.tensor_amax)) << what;
  EXPECT_EQ(a.nonfinite_count, b.nonfinite_count) << what;
  EXPECT_EQ(a.saturated_count, b.saturated_count) << what;
  EXPECT_EQ(a.underflow_count, b.underflow_count) << what;
}

struct SimdOff {
  SimdOff() { set_quant_simd(false); }
  ~SimdOff() { set_quant_simd(true); }
};

TEST(QuantSimd, QuantizeAndDequantizeMatchScalarPath) {
  SKIP_WITHOUT_AVX2();
  const char* specs[] = {"e4m3:g128",
                         "e5m2:g128",
                         "e4m3:g32:scale=e8m0",
                         "e4m3:g16:scale=bf16",
                         "e4m3:g128:scale=pow2",
                         "e4m3:g100",
                         "e4m3:row",
                         "e5m2:row",
                         "e4m3:tensor",
                         "e4m3:col",
                         "e4m3:b128x128",
                         "e4m3:g128:de=coat",
                         "e5m2:g128:de=coat",
                         "e4m3:g128:de=robust",
                         "e4m3:g40:de=coat",
                         "e4m3:g128:de=coat:eps=1e-3",
                         "e4m3:g128:sat=none",
                         "e4m3:g128:eps=1e-12",
                         "e4m3:g128:eps=1e-30:eps_add=fp64",
                         "e4m3:g128:amax_floor=1e-4:scale_div=rcp",
                         "e5m2:g64:scale=bf16:eps=1e-38",
                         "e4m3:g8",
                         "e4m3:g128:round=stochastic:seed=3",
                         "e4m3:g128:de=robust:sat=none",
                         "e5m2:g64:de=robust",
                         "e4m3:g128:apply=mul",
                         "e4m3:g128:apply=rcp",
                         "e4m3:g128:scale_div=fdiv:apply=fdiv",
                         "e5m2:row:apply=fdiv",
                         "e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv",
                         "e4m3:tensor:apply=mul"};
  const std::vector<std::vector<int64_t>> shapes = {{1, 5},    {5, 217},  {217, 300}, {3, 1000},
                                                    {64, 128}, {1, 4096}, {37}};
  const Data kinds[] = {Data::LogNormal,  Data::WithZeros, Data::NonFinite, Data::Tiny,
                        Data::Degenerate, Data::Huge,      Data::KOne,      Data::Wide};
  uint64_t seed = 1;
  for (const char* st : specs) {
    const QuantSpec spec = QuantSpec::parse(st);
    for (const auto& shape : shapes) {
      const int64_t n = shape_numel(shape);
      for (Data kind : kinds) {
        const std::vector<float> x = make_data(n, shape.back(), kind, seed++);
        std::vector<uint16_t> xb(x.size());
        for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16_rne(x[i]);
        const std::string what = std::string(st) + " shape " + std::to_string(shape.front()) + "x" +
                                 std::to_string(shape.back()) + " data " + std::to_string(static_cast<int>(kind));
        for (int threads : {1, 2}) {
          QuantizeOptions o;
          o.threads = threads;
          // the AVX-512 loops where the CPU has them (threads 1), the AVX2 loops (threads 2)
          set_quant_avx512(threads == 1);
          const QuantizedTensor fast = quantize(x.data(), shape, spec, o);
          const QuantizedTensor fast_bf = quantize(xb.data(), shape, spec, o);
          set_quant_avx512(true);
          QuantizedTensor ref, ref_bf;
          std::vector<float> y_ref(x.size()), y_fast(x.size());
          {
            SimdOff off;
            ref = quantize(x.data(), shape, spec, o);
            ref_bf = quantize(xb.data(), shape, spec, o);
            dequantize(ref, y_ref.data(), threads);
          }
          expect_same(fast, ref, what + " f32");
          expect_same(fast_bf, ref_bf, what + " bf16");
          dequantize(fast, y_fast.data(), threads);
          size_t bad = 0;
          for (size_t i = 0; i < x.size(); ++i) bad += bits_of(y_fast[i]) != bits_of(y_ref[i]);
          EXPECT_EQ(bad, 0u) << what << " dequantize";
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The coat fast path's k == 1 branch (pow_det(a, 1) == a) is taken on real groups.
TEST(QuantSimd, CoatGroupsWithUnitExponentAreCovered) {
  SKIP_WITHOUT_AVX2();
  const std::vector<int64_t> shape = {16, 1024};
  const std::vector<float> x = make_data(shape_numel(shape), 1024, Data::KOne, 5);
  const QuantizedTensor q = quantize(x.data(), shape, QuantSpec::parse("e4m3:g128:de=coat"));
  int64_t unit = 0;
  for (float k : q.expand_k) unit += k == 1.0f ? 1 : 0;
  EXPECT_GT(unit, q.num_groups() / 2);
  QuantizedTensor ref;
  {
    SimdOff off;
    ref = quantize(x.data(), shape, QuantSpec::parse("e4m3:g128:de=coat"));
  }
  expect_same(q, ref, "k == 1 groups");
}

}  // namespace
