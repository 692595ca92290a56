// Format facts, the format edge vectors (docs/numerics.md), Philox, stochastic rounding, and the
// 16-bit and E8M0 helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/cast.hpp"
#include "sim/formats/format.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"

namespace fp8sim {
namespace {

uint8_t e4m3(float x, bool sat = true) { return encode_fp8(x, 0, sat); }
uint8_t e5m2(float x, bool sat = true) { return encode_fp8(x, 1, sat); }

TEST(Formats, LimitsAreTheOcpValues) {
  const auto& a = format_info(Format::E4M3);
  EXPECT_EQ(a.max, 448.0);
  EXPECT_EQ(a.min_normal, std::ldexp(1.0, -6));
  EXPECT_EQ(a.min_subnormal, std::ldexp(1.0, -9));
  EXPECT_FALSE(a.has_inf);
  // The limits agree with what the codec produces.
  EXPECT_EQ(decode_fp8(0x7E, 0), a.max);
  EXPECT_EQ(decode_fp8(0x08, 0), a.min_normal);
  EXPECT_EQ(decode_fp8(0x01, 0), a.min_subnormal);
  const auto& b = format_info(Format::E5M2);
  EXPECT_EQ(decode_fp8(0x7B, 1), b.max);
  EXPECT_EQ(decode_fp8(0x04, 1), b.min_normal);
  EXPECT_EQ(decode_fp8(0x01, 1), b.min_subnormal);
  EXPECT_TRUE(std::isinf(decode_fp8(0x7C, 1)));
  EXPECT_NEAR(a.dynamic_range_binades(), std::log2(448.0 * 512.0), 1e-12);
  EXPECT_EQ(format_info(Format::FP16).max, 65504.0);
  EXPECT_EQ(decode_e8m0(127), 1.0f);
  EXPECT_TRUE(std::isnan(decode_e8m0(0xFF)));
  EXPECT_EQ(decode_e8m0(0), std::ldexp(1.0f, -127));
}

TEST(Formats, ParseNamesAndErrors) {
  EXPECT_EQ(parse_format("e4m3"), Format::E4M3);
  EXPECT_EQ(parse_format("e4m3fn"), Format::E4M3);
  EXPECT_EQ(parse_format("e5m2"), Format::E5M2);
  EXPECT_THROW(parse_format("e3m4"), UsageError);
  EXPECT_THROW(parse_saturation("maybe"), UsageError);
  EXPECT_THROW(parse_rounding("up"), UsageError);
  try {
    parse_format("int8");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("valid: e4m3, e5m2"), std::string::npos);
  }
}

// The format edge vectors (docs/numerics.md, "Formats"), one by one.
TEST(Formats, ReferenceEdgeVectors) {
  EXPECT_EQ(e4m3(464.0f), 0x7E);         // tie between 448 and (480): even -> 448
  EXPECT_EQ(e4m3(465.0f, true), 0x7E);   // SATFINITE
  EXPECT_EQ(e4m3(465.0f, false), 0x7F);  // NOSAT -> NaN
  EXPECT_EQ(e5m2(61439.0f), 0x7B);
  EXPECT_EQ(e5m2(61440.0f, false), 0x7C);  // overflow -> Inf
  EXPECT_EQ(e5m2(61440.0f, true), 0x7B);
  EXPECT_EQ(e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie to even (zero)
  EXPECT_EQ(e4m3(1.5f * std::ldexp(1.0f, -10)), 0x01);
  EXPECT_EQ(e4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3(-std::ldexp(1.0f, -11)), 0x80);  // tiny negatives keep the sign
  EXPECT_EQ(e4m3(INFINITY, true), 0x7E);
  EXPECT_EQ(e4m3(-INFINITY, true), 0xFE);
  EXPECT_EQ(e4m3(-INFINITY, false), 0xFF);
  EXPECT_EQ(e5m2(-INFINITY, false), 0xFC);
  EXPECT_EQ(e4m3(NAN), 0x7F);
  EXPECT_EQ(e4m3(-NAN), 0x7F);  // sign dropped, as cuda_fp8.h
  EXPECT_EQ(e5m2(-NAN), 0x7F);
}

// Double rounding: 0x3F97E000 -> 0x39 directly; via bf16 it would be 0x3A.
TEST(Formats, NoDoubleRoundingFromBf16OrFp32) {
  const float x = f32_from_bits(0x3F97E000u);
  EXPECT_EQ(e4m3(x), 0x39);
  const uint16_t via_bf16 = f32_to_bf16_rne(x);
  EXPECT_EQ(e4m3(bf16_to_f32(via_bf16)), 0x3A);  // what rounding twice gives
  // A tensor stored in bf16 is widened exactly: one rounding from the stored value.
  uint8_t code;
  CastOptions o;
  cast_bf16_to_fp8(&via_bf16, &code, 1, o);
  EXPECT_EQ(code, e4m3(bf16_to_f32(via_bf16)));
}

// Random123's published known-answer vectors for Philox4x32-10.
// The bulk casts' explicit AVX2 loop (32 codes per iteration) against the compiler's clone of the
// scalar loop and the scalar reference: every length from 0 to 130 at every alignment of the
// input and output within 32 bytes, random bit patterns (NaN, Inf, subnormals and all), fp32 and
// bf16 input, both formats and both saturation modes.
TEST(Cast, SimdLoopMatchesTheScalarLoopAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<float> f32(256);
  std::vector<uint16_t> b16(256);
  for (size_t i = 0; i < f32.size(); ++i) {
    const uint32_t r = rng();
    f32[i] = f32_from_bits(i % 7 == 0 ? (r & 0x807FFFFFu) : r);  // some fp32 subnormals
    b16[i] = static_cast<uint16_t>(r >> 16);
  }
  const bool was = cast_simd();
  for (Format f : {Format::E4M3, Format::E5M2})
    for (Saturation sat : {Saturation::Finite, Saturation::None}) {
      CastOptions o;
      o.format = f;
      o.saturation = sat;
      o.threads = 1;
      for (size_t shift = 0; shift < 8; ++shift)
        for (size_t n = 0; n <= 130; ++n) {
          // simd's output starts 32-byte aligned at shift 0 (the streaming-store path), unaligned otherwise.
          std::vector<uint8_t> simd_buf(n + 96, 0xAB), plain(n + 32, 0xAB), ref(n), from_bf16(n + 32), ref_bf16(n);
          uint8_t* simd = simd_buf.data() + ((32 - reinterpret_cast<uintptr_t>(simd_buf.data()) % 32) % 32);
          set_cast_simd(true);
          cast_f32_to_fp8(f32.data() + shift, simd + shift, n, o);
          cast_bf16_to_fp8(b16.data() + shift, from_bf16.data() + shift, n, o);
          set_cast_simd(false);
          cast_f32_to_fp8(f32.data() + shift, plain.data() + shift, n, o);
          cast_bf16_to_fp8(b16.data() + shift, ref_bf16.data(), n, o);
          cast_f32_to_fp8_scalar(f32.data() + shift, ref.data(), n, o);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(simd[shift + i], ref[i]) << format_name(f) << " n " << n << " shift " << shift << " i " << i;
            ASSERT_EQ(plain[shift + i], ref[i]);
            ASSERT_EQ(from_bf16[shift + i], ref_bf16[i]) << "bf16 n " << n << " i " << i;
          }
          for (size_t i = shift + n; i < n + 32; ++i) ASSERT_EQ(simd[i], 0xAB) << "wrote past the end, n " << n;
          for (uint8_t* p = simd_buf.data(); p < simd; ++p) ASSERT_EQ(*p, 0xAB) << "wrote before the start";
        }
    }
  set_cast_simd(was);
}

TEST(Philox, KnownAnswers) {
  const Philox4 z = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(z.v[0], 0x6627e8d5u);
  EXPECT_EQ(z.v[1], 0xe169c58du);
  EXPECT_EQ(z.v[2], 0xbc57ac4cu);
  EXPECT_EQ(z.v[3], 0x9b00dbd8u);
  const Philox4 f = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(f.v[0], 0x408f276du);
  EXPECT_EQ(f.v[1], 0x41c83b0eu);
  EXPECT_EQ(f.v[2], 0xa20bc7c6u);
  EXPECT_EQ(f.v[3], 0x6d5451fdu);
  const Philox4 p = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(p.v[0], 0xd16cfe09u);
  EXPECT_EQ(p.v[1], 0x94fdccebu);
  EXPECT_EQ(p.v[2], 0x5001e420u);
  EXPECT_EQ(p.v[3], 0x24126ea1u);
}

// Stochastic rounding: only the two neighbours come out, and the frequency of rounding up
// matches the fractional position. With N draws, the count of ups is Binomial(N, p); we accept
// |freq - p| <= 6 sigma = 6 sqrt(p (1 - p) / N) plus the 2^-32 truncation of F (see fp8.hpp).
// With fixed seeds the test is deterministic; 6 sigma makes a false failure for a correct
// implementation (on a fresh seed) about 2e-9 per case.
TEST(Stochastic, OnlyNeighboursWithTheRightFrequency) {
  struct Case {
    int fmt;
    float x;
  };
  const std::vector<Case> cases = {
      {0, 1.1f},   {0, 1.0625f}, {0, -3.3f},   {0, 0.0013f}, {0, std::ldexp(1.3f, -8)},
      {0, 300.0f}, {1, 1.1f},    {1, 5000.0f}, {1, -0.7f},   {1, std::ldexp(0.3f, -16)},
      {0, 1e-4f},  {1, 1e-6f},
  };
  const int kN = 200000;
  for (const auto& c : cases) {
    // The two neighbours, from RNE's truncation toward zero and the next code away from zero.
    const float ax = std::fabs(c.x);
    uint8_t lo = 0;
    for (int code = 0; code < 0x7F; ++code) {
      const float v = decode_fp8(static_cast<uint8_t>(code), c.fmt);
      if (std::isfinite(v) && v <= ax) lo = static_cast<uint8_t>(code);
    }
    const uint8_t hi = static_cast<uint8_t>(lo + 1);
    const double vlo = decode_fp8(lo, c.fmt), vhi = decode_fp8(hi, c.fmt);
    const double p = (ax - vlo) / (vhi - vlo);
    const uint8_t sign = c.x < 0 ? 0x80 : 0;
    int ups = 0;
    for (int i = 0; i < kN; ++i) {
      const uint8_t code = encode_fp8_stochastic(c.x, c.fmt, true, philox_word(42, static_cast<uint64_t>(i)));
      ASSERT_TRUE(code == (lo | sign) || code == (hi | sign)) << "x=" << c.x << " code " << int(code);
      ups += code == (hi | sign);
    }
    const double freq = static_cast<double>(ups) / kN;
    const double bound = 6.0 * std::sqrt(p * (1 - p) / kN) + std::ldexp(1.0, -32);
    EXPECT_NEAR(freq, p, bound) << "x=" << c.x << " fmt " << c.fmt;
  }
}

TEST(Stochastic, ExactValuesNeverMoveAndSeedFixesBits) {
  for (int code = 0; code < 0x7E; ++code) {
    const float v = decode_fp8(static_cast<uint8_t>(code), 0);
    for (uint32_t r : {0u, 1u, 0x80000000u, ~0u}) EXPECT_EQ(encode_fp8_stochastic(v, 0, true, r), code);
  }
  std::vector<float> x(10007);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 100.0f;
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  o.seed = 1234;
  std::vector<uint8_t> a(x.size()), b(x.size()), c(x.size());
  cast_f32_to_fp8(x.data(), a.data(), x.size(), o);
  cast_f32_to_fp8(x.data(), b.data(), x.size(), o);
  EXPECT_EQ(a, b);
  // Chunked processing with index_offset gives the same stream as one call.
  CastOptions o2 = o;
  cast_f32_to_fp8(x.data(), c.data(), 5000, o2);
  o2.index_offset = 5000;
  cast_f32_to_fp8(x.data() + 5000, c.data() + 5000, x.size() - 5000, o2);
  EXPECT_EQ(a, c);
  o.seed = 1235;
  cast_f32_to_fp8(x.data(), b.data(), x.size(), o);
  EXPECT_NE(a, b);
}

TEST(Stochastic, OverflowFollowsSaturation) {
  // 470 lies between 448 and the virtual 480: rounding up overflows.
  int sat_max = 0, nan = 0;
  for (uint32_t i = 0; i < 1000; ++i) {
    const uint32_t r = philox_word(9, i);
    sat_max += encode_fp8_stochastic(470.0f, 0, true, r) == 0x7E;
    nan += encode_fp8_stochastic(470.0f, 0, false, r) == 0x7F;
  }
  EXPECT_EQ(sat_max, 1000);
  EXPECT_GT(nan, 0);
  EXPECT_EQ(encode_fp8_stochastic(INFINITY, 1, false, 0), 0x7C);
  EXPECT_EQ(encode_fp8_stochastic(NAN, 1, true, 0), 0x7F);
}

TEST(Bulk, AllPathsAgreeWithScalarOnAwkwardSizes) {
  for (size_t n : {0ul, 1ul, 5ul, 217ul, 65537ul, 200003ul}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = f32_from_bits(static_cast<uint32_t>(i * 2654435761u));
    for (Format f : {Format::E4M3, Format::E5M2}) {
      for (Rounding r : {Rounding::Nearest, Rounding::Stochastic}) {
        CastOptions o;
        o.format = f;
        o.rounding = r;
        o.seed = 77;
        std::vector<uint8_t> a(n), b(n);
        cast_f32_to_fp8(x.data(), a.data(), n, o);
        cast_f32_to_fp8_scalar(x.data(), b.data(), n, o);
        EXPECT_EQ(a, b) << "n=" << n;
        std::vector<float> back(n);
        cast_fp8_to_f32(a.data(), back.data(), n, f);
        for (size_t i = 0; i < n; ++i) {
          const float d = decode_fp8(a[i], f == Format::E4M3 ? 0 : 1);
          ASSERT_TRUE(f32_bits(back[i]) == f32_bits(d) || (std::isnan(back[i]) && std::isnan(d)));
        }
      }
    }
  }
  CastOptions bad;
  bad.format = Format::BF16;
  float x = 1;
  uint8_t c;
  EXPECT_THROW(cast_f32_to_fp8(&x, &c, 1, bad), UsageError);
}

TEST(Sixteen, Fp16RoundTripAndE8M0) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    EXPECT_EQ(f32_to_fp16_rne(v), h);
    const float b = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(b)) {
      EXPECT_EQ(f32_to_bf16_rne(b), h);
    }
  }
  EXPECT_EQ(f32_to_fp16_rne(65520.0f), 0x7C00);        // tie above max -> Inf
  EXPECT_EQ(f32_to_fp16_rne(65520.0f, true), 0x7BFF);  // saturating
  for (int e = -127; e <= 127; ++e) EXPECT_EQ(decode_e8m0(e8m0_from_exponent(e)), std::ldexp(1.0f, e));
  EXPECT_EQ(floor_log2_f32(1.0f), 0);
  EXPECT_EQ(floor_log2_f32(0.75f), -1);
  EXPECT_EQ(floor_log2_f32(448.0f), 8);
  EXPECT_EQ(floor_log2_f32(std::ldexp(1.0f, -149)), -149);
  EXPECT_EQ(floor_log2_f32(std::ldexp(3.0f, -140)), -139);
}

}  // namespace
}  // namespace fp8sim
