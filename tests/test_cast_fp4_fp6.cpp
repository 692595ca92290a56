// The OCP MX 4- and 6-bit element formats E2M1, E2M3 and E3M2: every code's value from the
// specification's tables, round trips, the rounding and saturation rules at their edges, stochastic
// rounding's two neighbours, and (where CUDA's headers are present) every fp32 bit pattern against
// the host path of cuda_fp4.h / cuda_fp6.h, an independent software conversion in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"

#if defined(FP8SIM_HAVE_CUDA_FP8_ORACLE)
#include <omp.h>

#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <atomic>
#endif

namespace fp8sim {
namespace {

constexpr Format kFormats[] = {Format::E2M1, Format::E2M3, Format::E3M2};

// The value of every non-negative code, written out from the OCP Microscaling Formats (MX) v1.0
// specification's element format tables (section 5.3): exponent bias, subnormals, no Inf/NaN.
std::vector<double> spec_values(Format f) {
  std::vector<double> v;
  if (f == Format::E2M1) return {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const int mbits = f == Format::E2M3 ? 3 : 2, bias = f == Format::E2M3 ? 1 : 3;
  const int ebits = 5 - mbits;
  for (int e = 0; e < (1 << ebits); ++e)
    for (int m = 0; m < (1 << mbits); ++m)
      v.push_back(e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp((1 << mbits) + m, e - bias - mbits));
  return v;
}

std::vector<uint8_t> encode(Format f, const std::vector<float>& xs, Rounding r = Rounding::Nearest, uint64_t seed = 0) {
  CastOptions o;
  o.format = f;
  o.rounding = r;
  o.seed = seed;
  std::vector<uint8_t> out(xs.size());
  cast_f32_to_fp8(xs.data(), out.data(), xs.size(), o);
  return out;
}

float decode(Format f, uint8_t c) {
  float v = 0;
  cast_fp8_to_f32(&c, &v, 1, f);
  return v;
}

TEST(Fp4Fp6, EveryCodeDecodesToTheSpecificationsValue) {
  for (Format f : kFormats) {
    SCOPED_TRACE(format_name(f));
    const FormatInfo& info = format_info(f);
    const std::vector<double> vals = spec_values(f);
    ASSERT_EQ(vals.size(), size_t{1} << (info.bits - 1));
    const uint8_t sign = static_cast<uint8_t>(1u << (info.bits - 1));
    for (size_t c = 0; c < vals.size(); ++c) {
      EXPECT_EQ(decode(f, static_cast<uint8_t>(c)), static_cast<float>(vals[c])) << c;
      EXPECT_EQ(decode(f, static_cast<uint8_t>(c | sign)), -static_cast<float>(vals[c])) << c;
      // Bits above the width are ignored.
      EXPECT_EQ(decode(f, static_cast<uint8_t>(c | 0x80u)),
                decode(f, static_cast<uint8_t>((c | 0x80u) & (2 * sign - 1))));
    }
    EXPECT_EQ(vals.back(), info.max);
    EXPECT_EQ(vals[1], info.min_subnormal);
    EXPECT_EQ(vals[size_t{1} << info.mantissa_bits], info.min_normal);
  }
}

TEST(Fp4Fp6, EveryValueEncodesToItsOwnCode) {
  for (Format f : kFormats) {
    SCOPED_TRACE(format_name(f));
    const uint8_t sign = static_cast<uint8_t>(1u << (format_info(f).bits - 1));
    const std::vector<double> vals = spec_values(f);
    std::vector<float> xs;
    for (double v : vals) xs.push_back(static_cast<float>(v));
    for (double v : vals) xs.push_back(-static_cast<float>(v));
    const std::vector<uint8_t> codes = encode(f, xs);
    for (size_t c = 0; c < vals.size(); ++c) {
      EXPECT_EQ(codes[c], c);
      EXPECT_EQ(codes[vals.size() + c], c | sign) << "-" << vals[c];
    }
  }
}

// Ties go to the even code, overflow and Inf saturate with their sign, NaN gives +max (no NaN
// code exists), and -0 keeps its sign.
TEST(Fp4Fp6, RoundingAndSaturationEdges) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // E2M1: 0.25 is halfway between 0 and 0.5 -> 0; 0.75 between 0.5 (code 1) and 1 (code 2) -> 2;
  // 5 between 4 (6) and 6 (7) -> 6; 2.5 between 2 (4) and 3 (5) -> 4; just above a tie goes up.
  EXPECT_EQ(encode(Format::E2M1, {0.25f, 0.75f, 5.0f, 2.5f, std::nextafter(0.25f, 1.0f), 1.25f, 1.75f}),
            (std::vector<uint8_t>{0, 2, 6, 4, 1, 2, 4}));
  EXPECT_EQ(encode(Format::E2M1, {6.5f, 1e30f, inf, -inf, nan, -nan, -0.0f, -0.1f}),
            (std::vector<uint8_t>{0x7, 0x7, 0x7, 0xF, 0x7, 0x7, 0x8, 0x8}));
  // E2M3 max 7.5, E3M2 max 28, both saturating; their halfway points between the two largest.
  EXPECT_EQ(encode(Format::E2M3, {7.25f, 7.75f, 100.0f, -inf, nan}),
            (std::vector<uint8_t>{0x1E, 0x1F, 0x1F, 0x3F, 0x1F}));
  EXPECT_EQ(encode(Format::E3M2, {26.0f, 30.0f, 1e9f, -inf, nan}),
            (std::vector<uint8_t>{0x1E, 0x1F, 0x1F, 0x3F, 0x1F}));
  // Smallest subnormals: half of the smallest rounds to zero (tie to even), just above it rounds up.
  EXPECT_EQ(encode(Format::E2M3, {0.0625f, std::nextafter(0.0625f, 1.0f)}), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(encode(Format::E3M2, {0.03125f, std::nextafter(0.03125f, 1.0f)}), (std::vector<uint8_t>{0, 1}));
}

TEST(Fp4Fp6, NoSaturationIsAUsageError) {
  CastOptions o;
  o.format = Format::E2M1;
  o.saturation = Saturation::None;
  EXPECT_THROW(validate_cast_options(o), UsageError);
  o.format = Format::E8M0;
  o.saturation = Saturation::Finite;
  EXPECT_THROW(validate_cast_options(o), UsageError);
}

// Stochastic rounding lands on one of the two neighbours, and its mean is the input (unbiased)
// within the sampling error of 20000 draws.
TEST(Fp4Fp6, StochasticRoundingPicksANeighbourWithoutBias) {
  const std::vector<float> xs(20000, 2.6f);  // E2M1 neighbours 2 and 3
  const std::vector<uint8_t> codes = encode(Format::E2M1, xs, Rounding::Stochastic, 42);
  double sum = 0;
  for (uint8_t c : codes) {
    ASSERT_TRUE(c == 4 || c == 5) << int(c);
    sum += decode(Format::E2M1, c);
  }
  EXPECT_NEAR(sum / xs.size(), 2.6, 4 * std::sqrt(0.6 * 0.4 / xs.size()));
  // The scalar reference loop draws the same stream.
  CastOptions o;
  o.format = Format::E2M1;
  o.rounding = Rounding::Stochastic;
  o.seed = 42;
  std::vector<uint8_t> scalar(xs.size());
  cast_f32_to_fp8_scalar(xs.data(), scalar.data(), xs.size(), o);
  EXPECT_EQ(scalar, codes);
}

#if defined(FP8SIM_HAVE_CUDA_FP8_ORACLE)
uint8_t oracle(Format f, float x) {
  if (f == Format::E2M1) return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
  return __nv_cvt_float_to_fp6(x, f == Format::E2M3 ? __NV_E2M3 : __NV_E3M2, cudaRoundNearest);
}

// Every fp32 bit pattern, the bulk path against cuda_fp4.h / cuda_fp6.h (slow: label "slow").
TEST(Fp4Fp6Exhaustive, AllFp32PatternsMatchCudaHostPath) {
  for (Format f : kFormats) {
    std::atomic<uint64_t> bad{0};
    std::atomic<uint32_t> first{0xFFFFFFFFu};
#pragma omp parallel
    {
      constexpr uint32_t kChunk = 1u << 20;
      std::vector<float> in(kChunk);
      std::vector<uint8_t> out(kChunk);
      CastOptions o;
      o.format = f;
      o.threads = 1;
#pragma omp for schedule(dynamic, 16)
      for (uint64_t c = 0; c < (uint64_t{1} << 32) / kChunk; ++c) {
        const uint32_t base = static_cast<uint32_t>(c * kChunk);
        for (uint32_t i = 0; i < kChunk; ++i) in[i] = f32_from_bits(base + i);
        cast_f32_to_fp8(in.data(), out.data(), kChunk, o);
        for (uint32_t i = 0; i < kChunk; ++i)
          if (out[i] != oracle(f, in[i])) {
            ++bad;
            uint32_t prev = first.load();
            while (base + i < prev && !first.compare_exchange_weak(prev, base + i)) {
            }
          }
      }
    }
    EXPECT_EQ(bad.load(), 0u) << format_name(f) << ": first mismatch at input bits 0x" << std::hex << first.load();
  }
}

// A fast sample of the same comparison (every 65521st pattern plus the neighbourhood of every
// code's value and midpoint), in the default test run.
TEST(Fp4Fp6, SampledFp32PatternsMatchCudaHostPath) {
  for (Format f : kFormats) {
    SCOPED_TRACE(format_name(f));
    std::vector<float> xs;
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) xs.push_back(f32_from_bits(static_cast<uint32_t>(u)));
    const std::vector<double> vals = spec_values(f);
    for (size_t i = 0; i < vals.size(); ++i) {
      const double points[] = {vals[i], i + 1 < vals.size() ? (vals[i] + vals[i + 1]) / 2 : vals[i] * 1.5};
      for (double p : points)
        for (float s : {1.0f, -1.0f}) {
          const float x = static_cast<float>(p) * s;
          xs.insert(xs.end(), {std::nextafter(x, -1e30f), x, std::nextafter(x, 1e30f)});
        }
    }
    const std::vector<uint8_t> codes = encode(f, xs);
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(codes[i], oracle(f, xs[i])) << "input bits 0x" << std::hex << f32_bits(xs[i]) << " (" << xs[i] << ")";
  }
}
#endif

}  // namespace
}  // namespace fp8sim
