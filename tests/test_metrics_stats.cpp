// Error statistics and log2 histograms: hand-computed values, non-finite handling, streaming and
// thread-count invariance, JSON keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sim/formats/fp8.hpp"
#include "sim/metrics/error_stats.hpp"
#include "sim/metrics/histogram.hpp"

namespace fp8sim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(ErrorStats, HandComputed) {
  // x = 1 2 3 4, y = 1 2 3 5: err = 0 0 0 -1.
  const std::vector<float> x = {1, 2, 3, 4}, y = {1, 2, 3, 5};
  const ErrorStats s = compute_error_stats(x.data(), y.data(), 4);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mse(), 0.25);
  EXPECT_DOUBLE_EQ(s.nmse(), std::sqrt(1.0 / 30.0));  // sum x^2 = 30
  EXPECT_DOUBLE_EQ(s.snr_db(), 10.0 * std::log10(30.0));
  EXPECT_DOUBLE_EQ(s.max_abs_err, 1.0);
  EXPECT_DOUBLE_EQ(s.max_rel_err, 0.25);
  EXPECT_DOUBLE_EQ(s.cosine(), 34.0 / std::sqrt(30.0 * 39.0));  // x.y = 1+4+9+20, sum y^2 = 39
  EXPECT_DOUBLE_EQ(s.underflow_frac(), 0.0);
  EXPECT_DOUBLE_EQ(s.saturated_frac(), 0.0);
}

TEST(ErrorStats, UnderflowSaturationAndExactCases) {
  // Two of the three nonzeros flushed to zero; the zero reference does not count.
  const std::vector<float> x = {0.001f, -0.002f, 0.0f, 5.0f}, y = {0, 0, 0, 5};
  ErrorAccumulator acc;
  acc.add(x.data(), y.data(), 4);
  const std::vector<float> scaled = {0.5f, 449.0f, 0.0f, 500.0f};
  acc.add_scaled(scaled.data(), 4, 448.0);
  const ErrorStats& s = acc.stats();
  EXPECT_EQ(s.nonzero, 3);
  EXPECT_EQ(s.underflow, 2);
  EXPECT_DOUBLE_EQ(s.underflow_frac(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.saturated_frac(), 0.5);
  EXPECT_DOUBLE_EQ(s.max_rel_err, 1.0);
  // Exact reconstruction: nmse 0, snr +Inf (JSON: null), cosine 1.
  const ErrorStats e = compute_error_stats(x.data(), x.data(), 4);
  EXPECT_EQ(e.nmse(), 0.0);
  EXPECT_TRUE(std::isinf(e.snr_db()));
  EXPECT_DOUBLE_EQ(e.cosine(), 1.0);
  EXPECT_TRUE(e.to_json().at("snr_db").is_number());
  EXPECT_NE(e.to_json().dump(-1).find("\"snr_db\":null"), std::string::npos);
  // All-zero reference and approximation.
  const std::vector<float> z(3, 0.0f);
  const ErrorStats zz = compute_error_stats(z.data(), z.data(), 3);
  EXPECT_EQ(zz.mse(), 0.0);
  EXPECT_EQ(zz.nmse(), 0.0);
  EXPECT_DOUBLE_EQ(zz.cosine(), 1.0);
}

TEST(ErrorStats, NonFiniteReferenceIsSkippedNonFiniteOutputIsInf) {
  const std::vector<float> x = {1, kNaN, kInf, 2}, y = {1, 0, 0, 2};
  const ErrorStats s = compute_error_stats(x.data(), y.data(), 4);
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_EQ(s.mse(), 0.0);
  const std::vector<float> y2 = {1, 0, 0, kNaN};
  const ErrorStats t = compute_error_stats(x.data(), y2.data(), 4);
  EXPECT_EQ(t.nonfinite_out, 1);
  EXPECT_TRUE(std::isinf(t.mse()));
  EXPECT_TRUE(std::isinf(t.max_abs_err));
}

// Every field, bit for bit.
void expect_same_stats(const ErrorStats& a, const ErrorStats& b) {
  for (auto [p, q] : {std::pair{a.count, b.count}, std::pair{a.nonzero, b.nonzero}, std::pair{a.nonfinite, b.nonfinite},
                      std::pair{a.nonfinite_out, b.nonfinite_out}, std::pair{a.underflow, b.underflow}})
    EXPECT_EQ(p, q);
  for (auto [p, q] : {std::pair{a.sum_sq_ref, b.sum_sq_ref}, std::pair{a.sum_sq_approx, b.sum_sq_approx},
                      std::pair{a.sum_sq_err, b.sum_sq_err}, std::pair{a.sum_dot, b.sum_dot},
                      std::pair{a.max_abs_err, b.max_abs_err}, std::pair{a.max_rel_err, b.max_rel_err}})
    EXPECT_EQ(std::memcmp(&p, &q, sizeof p), 0) << p << " vs " << q;
}

TEST(ErrorStats, AvxLanesGiveThePortableLoopsSums) {
  // Chunks summed four at a time in AVX2 lanes against the portable loop: 2 groups of four whole
  // chunks, one whole chunk alone and a partial one; values over the float range with zeros,
  // subnormals, NaN and Inf in both operands, approximations that flush to zero, flip sign or
  // lose bits. Then inputs where the relative error's maximum is set early (Inf) or never (zeros).
  const bool was = error_sums_simd();
  const size_t n = 9 * 65536 + 777;
  std::vector<float> x(n), y(n);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f), e(-40.0f, 40.0f);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < n; ++i) {
    const float r = u(g);
    x[i] = r < 0.01f   ? 0.0f
           : r < 0.02f ? (u(g) < 0.5f ? kNaN : -kInf)
           : r < 0.03f ? 1e-40f * nd(g)
                       : nd(g) * std::exp2(e(g));
    const float q = u(g);
    y[i] = q < 0.02f   ? 0.0f
           : q < 0.03f ? (u(g) < 0.5f ? kInf : kNaN)
           : q < 0.05f ? -x[i]
           : q < 0.30f ? x[i]
                       : static_cast<float>(static_cast<double>(x[i]) * (1.0 + 0.01 * nd(g)));
  }
  std::vector<float> zeros(4 * 65536, 0.0f), early(4 * 65536, 1.0f), early_y(4 * 65536, 1.5f);
  early_y[3] = kInf;
  for (auto [xs, ys] : {std::pair{&x, &y}, std::pair{&zeros, &zeros}, std::pair{&early, &early_y}})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(testing::Message() << xs->size() << " elements, " << threads << " threads");
      set_error_sums_simd(true);
      const ErrorStats wide = compute_error_stats(xs->data(), ys->data(), xs->size(), threads);
      set_error_sums_simd(false);
      const ErrorStats portable = compute_error_stats(xs->data(), ys->data(), xs->size(), threads);
      expect_same_stats(wide, portable);
    }
  set_error_sums_simd(was);
}

TEST(ErrorStats, SelfStatsEqualTheTensorComparedWithItself) {
  // self_error_stats from stored fp32, bf16 and fp16 values against compute_error_stats(x, x) of
  // the widened values, every field bit for bit: values with signed zeros, subnormals, NaN and
  // Inf, lengths around the chunk and the four-chunk group, AVX2 lanes and the portable loop.
  const bool was = error_sums_simd();
  const size_t big = 9 * 65536 + 777;
  std::mt19937 g(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f), e(-40.0f, 40.0f);
  std::normal_distribution<float> nd;
  std::vector<float> f32(big);
  for (float& v : f32) {
    const float r = u(g);
    v = r < 0.01f   ? (u(g) < 0.5f ? 0.0f : -0.0f)
        : r < 0.02f ? (u(g) < 0.5f ? kNaN : (u(g) < 0.5f ? kInf : -kInf))
        : r < 0.03f ? 1e-40f * nd(g)
                    : nd(g) * std::exp2(e(g));
  }
  std::vector<uint16_t> bits(big);  // every 16-bit pattern is a value (or NaN) of both formats
  std::uniform_int_distribution<int> pattern(0, 0xFFFF);
  for (uint16_t& b : bits) b = static_cast<uint16_t>(pattern(g));
  for (const InputDtype type : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16})
    for (const size_t n :
         {size_t{0}, size_t{1}, size_t{65535}, size_t{65536}, size_t{4 * 65536}, size_t{5 * 65536 + 3}, big})
      for (const int threads : {1, 2})
        for (const bool simd : {true, false}) {
          SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(type) << ", " << n << " elements, " << threads
                                          << " threads, simd " << simd);
          std::vector<float> x(n);
          for (size_t i = 0; i < n; ++i)
            x[i] = type == InputDtype::F32    ? f32[i]
                   : type == InputDtype::BF16 ? bf16_to_f32(bits[i])
                                              : fp16_to_f32(bits[i]);
          const void* stored = type == InputDtype::F32 ? static_cast<const void*>(f32.data()) : bits.data();
          set_error_sums_simd(simd);
          const ErrorStats got = self_error_stats(stored, type, n, threads);
          const ErrorStats want = compute_error_stats(x.data(), x.data(), n, threads);
          expect_same_stats(got, want);
          EXPECT_EQ(got.saturated, want.saturated);
          EXPECT_EQ(got.scaled_count, want.scaled_count);
          EXPECT_EQ(got.count + got.nonfinite, static_cast<int64_t>(n));
        }
  set_error_sums_simd(was);
}

TEST(ErrorStats, StreamingAndThreadsAgree) {
  const size_t n = 1000003;
  std::vector<float> x(n), y(n);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < n; ++i) {
    x[i] = nd(g);
    y[i] = x[i] + 0.01f * nd(g);
  }
  const ErrorStats one = compute_error_stats(x.data(), y.data(), n, 1);
  for (int t : {2, 3, 8}) {
    const ErrorStats m = compute_error_stats(x.data(), y.data(), n, t);
    // Chunks merge in a fixed order: bit-identical whatever the thread count.
    EXPECT_EQ(m.sum_sq_err, one.sum_sq_err);
    EXPECT_EQ(m.sum_dot, one.sum_dot);
    EXPECT_EQ(m.max_rel_err, one.max_rel_err);
  }
  // Streaming in pieces of other sizes regroups the double sums: equal to a few ulp of the total
  // (each partial sum of <= 2^16 terms is exact to ~2^16 * 2^-53 relative; merges add 2^-53 each).
  ErrorAccumulator acc(2);
  for (size_t b = 0; b < n; b += 300007) acc.add(x.data() + b, y.data() + b, std::min<size_t>(300007, n - b));
  EXPECT_EQ(acc.stats().count, one.count);
  EXPECT_NEAR(acc.stats().sum_sq_err, one.sum_sq_err, one.sum_sq_err * 0x1p-30);
  EXPECT_EQ(acc.stats().max_abs_err, one.max_abs_err);
}

// The statistics' definition, element by element, written out here as the oracle: a non-finite
// reference is counted and skipped; a non-finite output sets the error sum and maxima to +Inf and
// adds nothing else.
void reference_add(ErrorSums& s, float x, float y) {
  if (!std::isfinite(x)) {
    ++s.nonfinite;
    return;
  }
  ++s.count;
  const double xv = x, yv = y;
  if (xv != 0.0) ++s.nonzero;
  if (!std::isfinite(y)) {
    ++s.nonfinite_out;
    s.sum_sq_err = s.max_abs_err = std::numeric_limits<double>::infinity();
    if (xv != 0.0) s.max_rel_err = std::numeric_limits<double>::infinity();
    return;
  }
  const double d = std::fabs(xv - yv);
  s.sum_sq_ref += xv * xv;
  s.sum_sq_approx += yv * yv;
  s.sum_sq_err += d * d;
  s.sum_dot += xv * yv;
  s.max_abs_err = std::max(s.max_abs_err, d);
  if (xv != 0.0) {
    s.max_rel_err = std::max(s.max_rel_err, d / std::fabs(xv));
    if (yv == 0.0) ++s.underflow;
  }
}

// The CPU's sequential loop (error_sums_add) and the GPU's split (gpu/analyze/tensor_metrics.cu:
// error_terms_split on 32 lanes, the lanes' counts and maxima merged, the terms added in element
// order) both equal the definition bit for bit on every kind of element: non-finite references
// and outputs, zeros of both signs, outputs flushed to zero, huge and tiny magnitudes, negative
// products.
TEST(ErrorStats, SplitTermsAddedInOrderEqualTheSequentialLoop) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 3e38f, -3e38f, 1e-45f, -1e-45f, 1e-30f, inf, -inf, nan, 0.5f};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 40);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3000);
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      const int a = pick(rng), b = pick(rng);
      x[i] = a < 13 ? special[a] : nd(rng);
      y[i] = b < 13 ? special[b] : (b < 20 ? x[i] : (b < 26 ? -x[i] : x[i] * (1.0f + nd(rng) * 1e-3f)));
      if (trial < 10 && b >= 13) y[i] = std::isfinite(y[i]) ? y[i] : 0.0f;  // half the trials: finite outputs
    }
    ErrorSums seq, cpu;
    for (int i = 0; i < n; ++i) reference_add(seq, x[i], y[i]);
    for (int i = 0; i < n; ++i) error_sums_add(cpu, x[i], y[i]);
    ErrorSums lanes[32], merged;
    double sums[4] = {0, 0, 0, 0};
    for (int i0 = 0; i0 < n; i0 += 32) {
      double t[32][4] = {};
      for (int l = 0; l < 32 && i0 + l < n; ++l) error_terms_split(lanes[l], x[i0 + l], y[i0 + l], t[l]);
      for (int l = 0; l < 32 && i0 + l < n; ++l)
        for (int k = 0; k < 4; ++k) sums[k] += t[l][k];
    }
    for (const ErrorSums& l : lanes) {
      merged.count += l.count;
      merged.nonzero += l.nonzero;
      merged.nonfinite += l.nonfinite;
      merged.nonfinite_out += l.nonfinite_out;
      merged.underflow += l.underflow;
      merged.max_abs_err = std::max(merged.max_abs_err, l.max_abs_err);
      merged.max_rel_err = std::max(merged.max_rel_err, l.max_rel_err);
    }
    merged.sum_sq_ref = sums[0];
    merged.sum_sq_approx = sums[1];
    merged.sum_sq_err = sums[2];
    merged.sum_dot = sums[3];
    auto bits = [](double v) {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    };
    for (const auto& [got, who] : {std::pair{&cpu, "error_sums_add"}, std::pair{&merged, "split on 32 lanes"}}) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << who);
      EXPECT_EQ(got->count, seq.count);
      EXPECT_EQ(got->nonzero, seq.nonzero);
      EXPECT_EQ(got->nonfinite, seq.nonfinite);
      EXPECT_EQ(got->nonfinite_out, seq.nonfinite_out);
      EXPECT_EQ(got->underflow, seq.underflow);
      EXPECT_EQ(bits(got->max_abs_err), bits(seq.max_abs_err));
      EXPECT_EQ(bits(got->max_rel_err), bits(seq.max_rel_err));
      EXPECT_EQ(bits(got->sum_sq_ref), bits(seq.sum_sq_ref));
      EXPECT_EQ(bits(got->sum_sq_approx), bits(seq.sum_sq_approx));
      EXPECT_EQ(bits(got->sum_sq_err), bits(seq.sum_sq_err));
      EXPECT_EQ(bits(got->sum_dot), bits(seq.sum_dot));
    }
  }
}

TEST(ErrorStats, JsonKeys) {
  const std::vector<float> x = {1, 2}, y = {1, 2.5f};
  const Json j = compute_error_stats(x.data(), y.data(), 2).to_json();
  for (const char* k : {"mse", "nmse", "snr_db", "max_abs_err", "max_rel_err", "cosine", "underflow_frac",
                        "saturated_frac", "count", "nonfinite"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j.at("mse").as_number(), 0.125);
}

TEST(Log2Histogram, BinsAreExact) {
  Log2Histogram h(-3, 3);  // bins [2^-3,2^-2) ... [2^2,2^3)
  const std::vector<float> v = {0.125f, 0.2499999f, 0.25f, 1.0f, 7.999f, 8.0f, 0.0f, -2.0f, 0.1f, kInf, kNaN, 1e-45f};
  h.add(v.data(), v.size());
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{2, 1, 0, 1, 1, 1}));  // -2 counts by magnitude
  EXPECT_EQ(h.below(), 2);                                          // 0.1 and the subnormal
  EXPECT_EQ(h.above(), 2);                                          // 8 and Inf
  EXPECT_EQ(h.zeros(), 1);
  EXPECT_EQ(h.nan(), 1);
  EXPECT_EQ(h.total(), static_cast<int64_t>(v.size()));
  const Log2Histogram e4 = Log2Histogram::for_format(Format::E4M3);
  EXPECT_EQ(e4.lo(), -10);  // min subnormal 2^-9, one bin below for values that flush
  EXPECT_EQ(e4.hi(), 10);   // 448 lives in [2^8, 2^9); one more bin for saturated values
  const Log2Histogram e5 = Log2Histogram::for_format(Format::E5M2);
  EXPECT_EQ(e5.lo(), -17);
  EXPECT_EQ(e5.hi(), 17);
  // Parallel and serial counting agree.
  std::vector<float> big(1 << 20);
  std::mt19937 g(4);
  std::lognormal_distribution<float> ln(0, 4);
  for (auto& x : big) x = ln(g);
  Log2Histogram a = Log2Histogram::for_format(Format::E4M3), b = a;
  a.add(big.data(), big.size(), 1);
  b.add(big.data(), big.size(), 4);
  EXPECT_EQ(a.counts(), b.counts());
  EXPECT_EQ(a.below(), b.below());
  Log2Histogram m = Log2Histogram::for_format(Format::E4M3);
  m.merge(a);
  EXPECT_EQ(m.total(), a.total());
  EXPECT_EQ(a.to_json().at("counts").size(), 20u);
}

}  // namespace
}  // namespace fp8sim
