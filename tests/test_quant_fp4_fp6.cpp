// Block-scaled 4- and 6-bit quantization (OCP MX: E2M1, E2M3, E3M2 elements with E8M0 scales):
// the spec language, exact packed storage, and values worked out by hand from the MX v1.0
// definition. (python/tests/test_fp8sim.py compares whole tensors with numpy + ml_dtypes.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

struct Result {
  QuantizedTensor q;
  std::vector<float> dequantized;
};
Result run(const std::vector<float>& x, const char* spec) {
  const std::vector<int64_t> shape{1, static_cast<int64_t>(x.size())};
  Result r{quantize(x.data(), shape, QuantSpec::parse(spec)), {}};
  r.dequantized = dequantize(r.q);
  return r;
}

TEST(QuantFp4Fp6, AliasesAndValidation) {
  EXPECT_EQ(QuantSpec::parse("mxfp4").to_string(), "e2m1:g32:scale=e8m0:mx=floor");
  EXPECT_EQ(QuantSpec::parse("mxfp6-e2m3").to_string(), "e2m3:g32:scale=e8m0:mx=floor");
  EXPECT_EQ(QuantSpec::parse("mxfp6-e3m2").to_string(), "e3m2:g32:scale=e8m0:mx=floor");
  EXPECT_EQ(QuantSpec::parse("fp4:g16").format, Format::E2M1);
  for (const char* bad : {"e2m1:g32:de=robust", "e2m1:tensor:delayed=16", "e2m3:g32:scale=bf16", "e3m2:g32:scale=none",
                          "e2m1:g32:sat=none", "e2m1:g32:de=coat:scale=e8m0", "e2m1:g32:de_target=bf16"})
    EXPECT_THROW(QuantSpec::parse(bad), UsageError) << bad;
  // DE's coat mode takes the 4- and 6-bit formats, its ratio bound from the storage format by default.
  EXPECT_EQ(QuantSpec::parse("e2m1:g128:de=coat").expand_target, Format::E2M1);
  EXPECT_EQ(QuantSpec::parse("e3m2:g32:de=coat:de_target=e4m3").to_string(), "e3m2:g32:de=coat:de_target=e4m3");
}

// COAT's expansion on E2M1 codes: per group k, c and s are COAT's formulas with E2M1's fmax (6) as
// both the storage and the target maximum (ratio bound 6^2 / 2 = 18), the codes are the E2M1
// encoding of sign(x) |x/c|^k / s, and the group's extremes come back within one E2M1 step of
// the expanded value. A group of spread 2^20 that plain absmax scaling flushes to zero keeps every
// element nonzero.
TEST(QuantFp4Fp6, CoatExpansionOnE2M1) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + i / 128.0f, -(i % 21));
  const Result de = run(x, "e2m1:g128:de=coat");
  const Result plain = run(x, "e2m1:g128");
  float amax = 0, amin = INFINITY;
  for (float v : x) {
    amax = std::max(amax, std::fabs(v));
    amin = std::min(amin, std::fabs(v));
  }
  const ExpandParams p = coat_expand_params(amax, amin, 6.0f, 6.0f);
  ASSERT_EQ(de.q.expand_k.size(), 1u);
  EXPECT_EQ(de.q.expand_k[0], p.k);
  EXPECT_EQ(de.q.expand_c[0], p.c);
  EXPECT_EQ(de.q.scales[0], p.s);
  EXPECT_GT(p.k, 0.0f);
  EXPECT_LT(p.k, 1.0f);  // a spread of 2^20 is compressed into the bound 18
  int zeros_de = 0, zeros_plain = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    zeros_de += de.dequantized[i] == 0.0f;
    zeros_plain += plain.dequantized[i] == 0.0f;
    EXPECT_EQ(std::signbit(de.dequantized[i]), std::signbit(x[i])) << i;
  }
  EXPECT_EQ(zeros_de, 0);
  EXPECT_GT(zeros_plain, 40);
  EXPECT_EQ(plain.q.underflow_count, zeros_plain);  // negative flushes count too (the -0 code)
  EXPECT_EQ(de.q.underflow_count, 0);
  // The largest magnitude: expanded to fmax, stored exactly, decoded within fp32 rounding of pow.
  const size_t top = static_cast<size_t>(
      std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }) - x.begin());
  EXPECT_NEAR(std::fabs(de.dequantized[top]) / amax, 1.0, 1e-5);
}

TEST(QuantFp4Fp6, StorageIsPacked) {
  const std::vector<int64_t> shape{64, 96};  // 6144 elements, 192 blocks of 32
  const QuantizedSize f4 = quantized_size(QuantSpec::parse("mxfp4"), shape);
  EXPECT_EQ(f4.code_bytes, 3072);                                                     // two codes per byte
  EXPECT_EQ(f4.scale_bytes, 192);                                                     // one E8M0 byte per block
  EXPECT_EQ(quantized_size(QuantSpec::parse("mxfp6-e3m2"), shape).code_bytes, 4608);  // 6 bits each
  EXPECT_EQ(quantized_size(QuantSpec::parse("mxfp8"), shape).code_bytes, 6144);
  // 4.25 bits per element for MXFP4, as the MX specification counts it.
  EXPECT_DOUBLE_EQ(8.0 * static_cast<double>(f4.total_bytes()) / 6144, 4.25);
  const std::vector<int64_t> odd{3};
  EXPECT_EQ(quantized_size(QuantSpec::parse("e2m1:tensor"), odd).code_bytes, 2);  // 12 bits -> 2 bytes
}

// One block of 32: amax 5.0 gives the floor scale 2^(floor(log2 5) - 2) = 1, so elements are
// encoded as themselves: E2M1 holds 0, 0.5, 1, 1.5, 2, 3, 4, 6; 2.5 ties to 2 (even), 5 ties
// to 4 (even) and -0.75 ties to -1 (odd 0.5 -> even 1.0 mantissa).
TEST(QuantFp4Fp6, E2M1BlockByHand) {
  std::vector<float> x(32, 0.0f);
  x[0] = 5.0f;
  x[1] = 2.5f;
  x[2] = -0.75f;
  x[3] = 0.2f;  // below half the smallest subnormal 0.5: flushes to zero (an underflow)
  x[4] = 1.5f;
  const Result r = run(x, "mxfp4");
  ASSERT_EQ(r.q.scales.size(), 1u);
  EXPECT_EQ(r.q.scales[0], 1.0f);
  EXPECT_EQ(r.dequantized[0], 4.0f);
  EXPECT_EQ(r.dequantized[1], 2.0f);
  EXPECT_EQ(r.dequantized[2], -1.0f);
  EXPECT_EQ(r.dequantized[3], 0.0f);
  EXPECT_EQ(r.dequantized[4], 1.5f);
  EXPECT_EQ(r.q.codes[0], 0x6);  // 0 11 0: 2^(3-1) x 1.0 = 4
  EXPECT_EQ(r.q.codes[2], 0xA);  // 1 01 0: -1
  EXPECT_EQ(r.q.underflow_count, 1);
  EXPECT_EQ(r.q.saturated_count, 0);
}

// rceil: amax / fmax rounded up to a power of two. amax 13 on E2M1 (fmax 6): 13/6 = 2.17 -> 4, so
// 13 -> 3.25 -> 3 (ties below: 3.25 is between 3 and 4, nearer 3) -> 12. floor: 2^(3-2) = 2:
// 13 / 2 = 6.5 saturates to 6 -> 12 (6.5 is above 6 but below the tie 7: not counted saturated).
TEST(QuantFp4Fp6, E8M0ModesAndSaturation) {
  std::vector<float> x(32, 0.0f);
  x[0] = 13.0f;
  const Result rc = run(x, "e2m1:g32:scale=e8m0");
  EXPECT_EQ(rc.q.scales[0], 4.0f);
  EXPECT_EQ(rc.dequantized[0], 12.0f);
  const Result fl = run(x, "mxfp4");
  EXPECT_EQ(fl.q.scales[0], 2.0f);
  EXPECT_EQ(fl.dequantized[0], 12.0f);
  EXPECT_EQ(fl.q.saturated_count, 0);
  x[0] = 15.0f;  // floor scale 2: 7.5 is past the tie 7, so it saturates to 6
  const Result sat = run(x, "mxfp4");
  EXPECT_EQ(sat.dequantized[0], 12.0f);
  EXPECT_EQ(sat.q.saturated_count, 1);
}

// NVFP4, one tensor of two 16-element groups: tensor amax 12 gives S_enc = 2688 / 12 = 224 and
// S_dec = RN(1/224). Group 0 (amax 12): d = 12/6 * 224 = 448 -> E4M3 448, decoded scale 448/224 = 2
// (within one fp32 rounding); 12 / 2 = 6 -> E2M1 6. Group 1 (amax 3): d = 112 -> 112, scale 0.5,
// 3 / 0.5 = 6, and 1.3 / 0.5 = 2.6 -> 3 (nearer than 2), dequantized 1.5.
TEST(QuantFp4Fp6, Nvfp4TwoLevelByHand) {
  std::vector<float> x(32, 0.0f);
  x[0] = 12.0f;
  x[16] = 3.0f;
  x[17] = 1.3f;
  const Result r = run(x, "nvfp4");
  const float s_dec = 1.0f / 224.0f;
  EXPECT_EQ(r.q.tensor_scale, s_dec);
  ASSERT_EQ(r.q.scales.size(), 2u);
  EXPECT_EQ(r.q.scales[0], 448.0f * s_dec);
  EXPECT_EQ(r.q.scales[1], 112.0f * s_dec);
  EXPECT_NEAR(r.dequantized[0], 12.0f, 1e-5);
  EXPECT_NEAR(r.dequantized[16], 3.0f, 1e-6);
  EXPECT_NEAR(r.dequantized[17], 1.5f, 1e-6);
  // Stored: one E4M3 byte per group (448 = 0x7E, 112 = 0x6E), then the fp32 tensor scale.
  const std::vector<uint8_t> b = r.q.stored_scale_bytes();
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b[0], 0x7E);
  EXPECT_EQ(b[1], 0x6E);
  EXPECT_EQ(quantized_size(QuantSpec::parse("nvfp4"), std::vector<int64_t>{1, 32}).total_bytes(), 16 + 2 + 4);
}

}  // namespace
}  // namespace fp8sim
