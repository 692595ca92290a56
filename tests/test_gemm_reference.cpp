// The CPU reference GEMM (sim/gemm): Eigen's fp32 product against a double-precision loop, the
// absolute-value product, the tolerance model's structure, and check_gemm's verdicts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/gemm/gemm_ref.hpp"

namespace fp8sim {
namespace {

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(r);
  return v;
}

TEST(GemmRef, MatchesDoubleLoopWithinFp32Rounding) {
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {5, 217, 100}, {64, 33, 513}}) {
    const auto x = randn(static_cast<size_t>(M * K), 1), w = randn(static_cast<size_t>(N * K), 2);
    std::vector<float> y(static_cast<size_t>(M * N)), s(static_cast<size_t>(M * N));
    gemm::gemm_ref_f32(x.data(), w.data(), y.data(), M, N, K);
    gemm::gemm_abs_f32(x.data(), w.data(), s.data(), M, N, K);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double exact = 0, sabs = 0;
        for (int64_t k = 0; k < K; ++k) {
          exact += static_cast<double>(x[i * K + k]) * w[j * K + k];
          sabs += std::fabs(static_cast<double>(x[i * K + k]) * w[j * K + k]);
        }
        // fp32 summation: |err| <= (K + 1) u sum|x w| (first order).
        const double bound = (K + 1) * 0x1p-24 * sabs;
        ASSERT_LE(std::fabs(y[i * N + j] - exact), bound) << i << "," << j;
        ASSERT_NEAR(s[i * N + j], sabs, (K + 1) * 0x1p-24 * sabs) << i << "," << j;
      }
  }
}

TEST(GemmRef, RejectsBadShapes) {
  std::vector<float> a(4), b(4), c(4);
  EXPECT_THROW(gemm::gemm_ref_f32(a.data(), b.data(), c.data(), 0, 2, 2), Error);
  EXPECT_THROW(gemm::gemm_tolerance(0, gemm::GemmNumerics{}), Error);
}

TEST(GemmTolerance, GrowsWithKAndIsLooserForFastAccumulationAndBf16Output) {
  gemm::GemmNumerics split;
  gemm::GemmNumerics fast = split;
  fast.fast_accum = true;
  gemm::GemmNumerics bf16out = split;
  bf16out.y_format = Format::BF16;
  gemm::GemmNumerics block = fast;
  block.block_scaled = true;  // block scaling promotes every 128 regardless of FAST_ACCUM
  gemm::GemmNumerics bf16;
  bf16.fp8 = false;
  bf16.x_format = bf16.w_format = Format::BF16;
  EXPECT_LT(gemm::gemm_tolerance(256, split).rel_sum_abs, gemm::gemm_tolerance(4096, split).rel_sum_abs);
  EXPECT_LT(gemm::gemm_tolerance(4096, split).rel_sum_abs, gemm::gemm_tolerance(4096, fast).rel_sum_abs);
  EXPECT_EQ(gemm::gemm_tolerance(4096, block).promote_interval, 128);
  EXPECT_EQ(gemm::gemm_tolerance(4096, fast).promote_interval, 4096);
  EXPECT_GT(gemm::gemm_tolerance(64, bf16out).rel_y, gemm::gemm_tolerance(64, split).rel_y);
  // BF16 tensor cores accumulate in fp32: far tighter than FP8's ~14-bit accumulator.
  EXPECT_LT(gemm::gemm_tolerance(4096, bf16).rel_sum_abs, gemm::gemm_tolerance(4096, split).rel_sum_abs / 10);
  EXPECT_NE(gemm::gemm_tolerance(4096, split).derivation.find("K=4096"), std::string::npos);
}

TEST(GemmCheck, PassesTheReferenceAndCatchesErrors) {
  const int64_t M = 8, N = 16, K = 64;
  const auto x = randn(M * K, 3), w = randn(N * K, 4);
  std::vector<float> y(M * N), s(M * N);
  gemm::gemm_ref_f32(x.data(), w.data(), y.data(), M, N, K);
  gemm::gemm_abs_f32(x.data(), w.data(), s.data(), M, N, K);
  gemm::GemmNumerics num;
  num.fp8 = false;
  const auto tol = gemm::gemm_tolerance(K, num);
  const auto ok = gemm::check_gemm(y.data(), y.data(), s.data(), M, N, tol);
  EXPECT_TRUE(ok.passed());
  EXPECT_EQ(ok.max_abs_err, 0.0);

  auto bad = y;
  bad[37] += 1e-2f * s[37];  // far outside (K + ...) u
  const auto c1 = gemm::check_gemm(bad.data(), y.data(), s.data(), M, N, tol);
  EXPECT_FALSE(c1.passed());
  EXPECT_EQ(c1.over_tolerance, 1);
  EXPECT_EQ(c1.worst_row, 37 / N);
  EXPECT_EQ(c1.worst_col, 37 % N);
  EXPECT_GT(c1.max_err_over_tol, 1.0);

  auto nan = y;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  const auto c2 = gemm::check_gemm(nan.data(), y.data(), s.data(), M, N, tol);
  EXPECT_FALSE(c2.passed());
  EXPECT_EQ(c2.nonfinite_mismatch, 1);
  EXPECT_EQ(c2.worst_row, 0);
  EXPECT_EQ(c2.worst_col, 5);
  // Two NaNs at the same place agree.
  const auto c3 = gemm::check_gemm(nan.data(), nan.data(), s.data(), M, N, tol);
  EXPECT_EQ(c3.nonfinite_mismatch, 0);
}

}  // namespace
}  // namespace fp8sim
