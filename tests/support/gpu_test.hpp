#pragma once
// Shared by the tests/test_*_gpu.cpp executables (header-only: fp8sim_test_support does not link
// CUDA). Every GPU test starts with FP8SIM_SKIP_WITHOUT_GPU() so a machine without a device
// reports it as skipped, with the reason, instead of failing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/common/device.hpp"

#define FP8SIM_SKIP_WITHOUT_GPU()                                                          \
  do {                                                                                     \
    const auto& fp8sim_dev_ = ::fp8sim::gpu::device_info();                                \
    if (!fp8sim_dev_.available) GTEST_SKIP() << "no CUDA device: " << fp8sim_dev_.why_not; \
  } while (0)

namespace fp8sim::test {

// Real-looking data: signs random, magnitudes log-normal over `decades` decades around 1, plus a
// sprinkling of exact zeros (1 in 64) so zero handling is exercised. Never all zeros.
inline std::vector<float> lognormal_data(size_t n, uint64_t seed, double decades = 6.0, bool with_zeros = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, decades / 4.0);
  std::uniform_int_distribution<int> coin(0, 63);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double mag = std::pow(10.0, nd(rng));
    x = static_cast<float>(coin(rng) < 32 ? mag : -mag);
    if (with_zeros && coin(rng) == 0) x = 0.0f;
  }
  return v;
}

}  // namespace fp8sim::test
