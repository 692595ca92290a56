// The random Hadamard transform (sim/quant/hadamard.hpp) and the spec keys rht / rht_seed: the
// matrix against its definition, the butterfly's exactness and error bound against a double
// product, the inverse, and quantize / dequantize with rht against the same quantizer on the
// transformed tensor.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/quant/hadamard.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

// Sylvester's Hadamard matrix, from its closed form.
int hadamard(int i, int j) { return (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1; }

// y = H (D x) / sqrt(n) in double, from the closed form.
std::vector<double> rht_exact(const std::vector<float>& x, const RhtSigns& s) {
  const int n = static_cast<int>(x.size());
  std::vector<double> y(n, 0.0);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) y[j] += hadamard(j, i) * (s.negate(i) ? -1.0 : 1.0) * x[i];
    y[j] /= std::sqrt(static_cast<double>(n));
  }
  return y;
}

TEST(QuantRht, TransformerEngineSignVector) {
  // TE's weight-gradient sign vector, element by element.
  const int te[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  const RhtSigns s = rht_signs(16, false, 0);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(s.negate(i), te[i] < 0) << i;
  // A seed replaces it; different seeds give different vectors, the same seed the same one.
  const RhtSigns a = rht_signs(16, true, 1), b = rht_signs(16, true, 2), c = rht_signs(16, true, 1);
  EXPECT_NE(a.words[0], b.words[0]);
  EXPECT_EQ(a.words[0], c.words[0]);
}

TEST(QuantRht, UnitVectorsGiveTheSignedHadamardColumns) {
  for (int n : {4, 16, 64, 256}) {
    const RhtSigns s = rht_signs(n, n != 16, 7);
    const float k = 1.0f / std::sqrt(static_cast<float>(n));
    for (int i = 0; i < n; ++i) {
      std::vector<float> v(n, 0.0f);
      v[i] = 1.0f;
      rht_forward(v.data(), n, s);
      for (int j = 0; j < n; ++j)
        ASSERT_EQ(v[j], (s.negate(i) ? -1.0f : 1.0f) * hadamard(j, i) * k) << "n " << n << " column " << i;
    }
  }
}

TEST(QuantRht, ExactOnSmallIntegersAndBoundedOtherwise) {
  std::mt19937 rng(3);
  for (int n : {4, 16, 64, 256}) {
    const RhtSigns s = rht_signs(n, false, 0);
    // Integers below 2^16: every partial sum is an integer below 2^24, so every add is exact.
    std::uniform_int_distribution<int> small(-65535, 65535);
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(small(rng));
    std::vector<float> y = x;
    rht_forward(y.data(), n, s);
    const std::vector<double> want = rht_exact(x, s);
    for (int j = 0; j < n; ++j) ASSERT_EQ(static_cast<double>(y[j]), want[j]) << n << " " << j;
    rht_inverse(y.data(), n, s);
    EXPECT_EQ(y, x) << n;

    // Random magnitudes: each of the log2(n) stages rounds once, so the error of an output is at
    // most log2(n) * 2^-24 * (sum |x|) / sqrt(n) (to first order).
    std::normal_distribution<float> normal;
    for (auto& v : x) v = normal(rng) * std::exp2(static_cast<float>(small(rng) % 20));
    y = x;
    rht_forward(y.data(), n, s);
    const std::vector<double> exact = rht_exact(x, s);
    double sum_abs = 0;
    for (float v : x) sum_abs += std::fabs(v);
    const double bound = std::log2(n) * std::ldexp(1.0, -24) * sum_abs / std::sqrt(n) * 1.01;
    for (int j = 0; j < n; ++j) EXPECT_LE(std::fabs(y[j] - exact[j]), bound) << n << " " << j;
    rht_inverse(y.data(), n, s);
    for (int j = 0; j < n; ++j) EXPECT_LE(std::fabs(y[j] - x[j]), 2 * bound) << n << " " << j;
  }
}

TEST(QuantRht, LargeValuesStayFinite) {
  // Halving before every second stage keeps the partial sums within the result's range: a block
  // of 8e37 (whose transform reaches 3.2e38, just below FLT_MAX) stays finite both ways.
  const RhtSigns s = rht_signs(16, false, 0);
  std::vector<float> v(16, 8.0e37f);
  for (int i = 0; i < 16; ++i)
    if (s.negate(i)) v[i] = -v[i];  // D v is constant: all of it lands in one output
  const std::vector<float> x = v;
  rht_forward(v.data(), 16, s);
  for (float y : v) EXPECT_TRUE(std::isfinite(y)) << y;
  rht_inverse(v.data(), 16, s);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(v[i], x[i]) << i;
}

TEST(QuantRht, SpecKeys) {
  EXPECT_EQ(QuantSpec::parse("nvfp4:rht=16").to_string(), "e2m1:g16:scale=e4m3:rht=16");
  EXPECT_EQ(QuantSpec::parse("e4m3:g128:rht=64:rht_seed=9").to_string(), "e4m3:g128:rht=64:rht_seed=9");
  const QuantSpec s = QuantSpec::parse("mxfp4:rht=16:rht_seed=0");
  EXPECT_TRUE(s.rht_seeded);
  EXPECT_EQ(QuantSpec::parse(s.to_string()), s);
  for (const char* bad : {"nvfp4:rht=8", "nvfp4:rht=0", "nvfp4:rht=x", "nvfp4:rht_seed=3", "e4m3:g128:de=coat:rht=16",
                          "e4m3:tensor:delayed=16:rht=16", "bf16:tensor:rht=16", "nvfp4:rht=16:rht=16"})
    EXPECT_THROW(QuantSpec::parse(bad), UsageError) << bad;
}

std::vector<float> heavy_tailed(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t(2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = t(rng);
  return x;
}

TEST(QuantRht, QuantizesTheTransformedTensorAndTransformsBack) {
  const std::vector<int64_t> shape{48, 256};
  const std::vector<float> x = heavy_tailed(48 * 256, 11);
  for (const char* spec : {"nvfp4:rht=16", "mxfp4:rht=16", "e4m3:g128:rht=64:rht_seed=5", "nvfp4-w:rht=256"}) {
    SCOPED_TRACE(spec);
    const QuantSpec with = QuantSpec::parse(spec);
    QuantSpec without = with;
    without.rht = 0;
    without.rht_seeded = false;
    std::vector<float> t = x;
    const RhtSigns signs = rht_signs(with.rht, with.rht_seeded, with.rht_seed);
    for (size_t b = 0; b < t.size(); b += with.rht) rht_forward(t.data() + b, with.rht, signs);

    const QuantizedTensor q = quantize(x.data(), shape, with);
    const QuantizedTensor p = quantize(t.data(), shape, without);
    EXPECT_EQ(q.codes, p.codes);
    EXPECT_EQ(q.scales, p.scales);
    EXPECT_EQ(q.tensor_amax, p.tensor_amax);
    EXPECT_EQ(q.tensor_scale, p.tensor_scale);
    EXPECT_EQ(q.total_bytes(), p.total_bytes());  // the transform costs no storage

    std::vector<float> back = dequantize(p);
    for (size_t b = 0; b < back.size(); b += with.rht) rht_inverse(back.data() + b, with.rht, signs);
    EXPECT_EQ(dequantize(q), back);
  }
}

TEST(QuantRht, Bf16InputIsWidenedFirst) {
  const std::vector<int64_t> shape{8, 64};
  std::vector<float> x = heavy_tailed(8 * 64, 2);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(x[i]) >> 16);
    x[i] = std::bit_cast<float>(static_cast<uint32_t>(bits[i]) << 16);
  }
  const QuantSpec s = QuantSpec::parse("nvfp4:rht=16");
  EXPECT_EQ(quantize(bits.data(), shape, s).codes, quantize(x.data(), shape, s).codes);
}

TEST(QuantRht, FewerValuesFlushToZeroInHeavyTailedBlocks) {
  // Heavy-tailed rows (Student t, 2 degrees of freedom): a 16-element block's largest value sets
  // its scale, and neighbours below half of the smallest E2M1 step flush to zero. The transform
  // spreads that value over the block, so far fewer elements are lost. (It does not lower the
  // mean squared error: the outlier's energy is spread too, and every element then carries
  // quantization noise of the block's scale.)
  const std::vector<int64_t> shape{256, 512};
  const std::vector<float> x = heavy_tailed(256 * 512, 23);
  auto flushed = [&](const char* spec) {
    return static_cast<double>(quantize(x.data(), shape, QuantSpec::parse(spec)).underflow_count) /
           static_cast<double>(x.size());
  };
  for (const char* base : {"nvfp4", "mxfp4"}) {
    const double plain = flushed(base), with = flushed((std::string(base) + ":rht=16").c_str());
    EXPECT_GT(plain, 0.02) << base;
    EXPECT_LT(with, 0.5 * plain) << base;
  }
}

TEST(QuantRht, RowsMustBeWholeBlocks) {
  const std::vector<int64_t> shape{4, 40};
  const std::vector<float> x(160, 1.0f);
  try {
    quantize(x.data(), shape, QuantSpec::parse("e4m3:g8:rht=16"));
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("last dimension (40) is not a multiple of 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8sim
