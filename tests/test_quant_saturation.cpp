// The saturated count a quantizer gathers while encoding equals the number of scaled magnitudes
// (scaled_magnitudes with the expansion applied: the values handed to the encoder) above the
// format's saturation bound. analyze --device cuda (gpu/analyze) counts saturation that way, from
// the quantized tensor's scales, so this is the contract it relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

// Wide-range values with outliers, zeros and non-finite elements: every scale saturates somewhere.
std::vector<float> awkward_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-30.0f, 12.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = nd(rng) * std::exp2(ex(rng) * (i % 7 == 0 ? 1.0f : 0.2f));
    if (i % 97 == 0) x[i] = 0.0f;
    if (i % 211 == 0) x[i] *= 1e4f;
  }
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[77] = -std::numeric_limits<float>::infinity();
  return x;
}

int64_t count_above(const std::vector<float>& x, const QuantizedTensor& q) {
  std::vector<float> mags(x.size());
  scaled_magnitudes(x.data(), q, mags.data(), true);
  const double bound = saturation_bound(q.spec.format);
  int64_t n = 0;
  for (float m : mags) n += !std::isnan(m) && m > bound ? 1 : 0;
  return n;
}

TEST(SaturatedCount, EqualsScaledMagnitudesAboveTheBound) {
  const std::vector<std::string> specs = {
      "e4m3:tensor",
      "e5m2:tensor:eps=1e-10",
      "e4m3:tensor:scale=pow2",
      "e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv",
      "e4m3:row",
      "e4m3:col",
      "e4m3:tensor:delayed=16",
      "e4m3:g128:amax_floor=0.0001:scale_div=rcp:apply=rcp",
      "e4m3:b128x128:amax_floor=0.0001:scale_div=rcp:apply=rcp",
      "e4m3:g32:scale=e8m0:scale_div=rcp",
      "e4m3:g32:scale=e8m0:mx=floor",
      "e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv",
      "e4m3:g128:de=coat:de_min=kernel",
      "e4m3:g128:de=robust",
      "e5m2:g128:de=coat",
      "e2m1:g16:scale=e4m3",
      "e2m1:g32:scale=e8m0:mx=floor",
      "e2m1:b16x16:scale=e4m3",
      "e2m3:g32:scale=e8m0",
      "e3m2:g32:scale=e8m0:mx=floor",
      "e4m3:g128:round=stochastic",
      "e2m1:g16:scale=e4m3:round=stochastic",
      "e2m1:g16:scale=e4m3:rht=16",
  };
  const std::vector<int64_t> shape = {96, 256};
  const std::vector<float> x = awkward_values(96 * 256, 7);
  int64_t saturated = 0;
  for (const std::string& s : specs) {
    SCOPED_TRACE(s);
    const QuantSpec spec = QuantSpec::parse(s);
    QuantizeOptions o;
    std::optional<DelayedScaler> scaler;
    if (spec.delayed.enabled()) {
      scaler.emplace(spec);
      scaler->update(1.0f);  // a stale amax far below the tensor's: many values saturate
      o.delayed = &*scaler;
    }
    const QuantizedTensor q = quantize(x.data(), shape, spec, o);
    if (spec.delayed.enabled()) {
      EXPECT_GT(q.saturated_count, 0) << "no saturation exercised";
    }
    EXPECT_EQ(q.saturated_count, count_above(x, q));
    saturated += q.saturated_count;
  }
  EXPECT_GT(saturated, 1000);
}

}  // namespace
}  // namespace fp8sim
