// Golden vectors from ml_dtypes (scripts/gen_golden.py), a second independent oracle. No Python
// is needed to run this test: the vectors are committed under tests/data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

bool is_nan_code(uint8_t c, Format f) { return f == Format::E4M3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C; }

// Column order in the golden files.
struct Col {
  Format f;
  Saturation s;
};
constexpr Col kCols[4] = {{Format::E4M3, Saturation::Finite},
                          {Format::E4M3, Saturation::None},
                          {Format::E5M2, Saturation::Finite},
                          {Format::E5M2, Saturation::None}};

// Compares one code with ml_dtypes'. The only documented difference is the NaN code for NaN
// inputs: fp8sim, like cuda_fp8.h and the hardware, always returns +NaN 0x7F; ml_dtypes keeps
// the sign (0xFF for -NaN in E4M3) and in E5M2 keeps the top payload bits (0x7E / 0xFE for a
// quiet fp32 NaN). Both are NaN codes.
void expect_code(float x, uint8_t ours, uint8_t golden, const Col& c, int* nan_sign_diffs) {
  if (std::isnan(x)) {
    ASSERT_TRUE(is_nan_code(golden, c.f));
    EXPECT_EQ(ours, 0x7F) << "NaN input must give +NaN 0x7F";
    if (golden != ours) ++*nan_sign_diffs;
    return;
  }
  // E5M2 NaN codes other than the canonical one never come out of a conversion.
  ASSERT_EQ(ours, golden) << format_name(c.f) << (c.s == Saturation::Finite ? " sat" : " nosat") << " input 0x"
                          << std::hex << f32_bits(x) << " (" << x << ")";
}

TEST(Golden, EdgeVectorsMatchMlDtypes) {
  std::ifstream in(std::string(FP8SIM_TEST_DATA) + "/golden_fp8_edges.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int n = 0, nan_sign_diffs = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    unsigned bits, g[4];
    ASSERT_EQ(std::sscanf(line.c_str(), "%x %x %x %x %x", &bits, &g[0], &g[1], &g[2], &g[3]), 5) << line;
    const float x = f32_from_bits(bits);
    for (int k = 0; k < 4; ++k) {
      CastOptions o;
      o.format = kCols[k].f;
      o.saturation = kCols[k].s;
      uint8_t ours;
      cast_f32_to_fp8(&x, &ours, 1, o);
      expect_code(x, ours, static_cast<uint8_t>(g[k]), kCols[k], &nan_sign_diffs);
    }
    ++n;
  }
  EXPECT_GT(n, 2000);  // every code, its neighbours and midpoints, for both formats
  EXPECT_GT(nan_sign_diffs, 0) << "the NaN-code difference with ml_dtypes should be exercised";
  // Pin the documented difference on the two canonical cases.
  const float neg_nan = f32_from_bits(0xFFC00000u);
  CastOptions o;
  uint8_t c;
  cast_f32_to_fp8(&neg_nan, &c, 1, o);
  EXPECT_EQ(c, 0x7F);  // fp8sim / cuda: +NaN; ml_dtypes gives 0xFF (golden file row ffc00000)
}

TEST(Golden, RandomVectorsMatchMlDtypes) {
  const auto bytes = test::read_file_bytes(std::string(FP8SIM_TEST_DATA) + "/golden_fp8_random.bin.gz");
  ASSERT_GE(bytes.size(), 16u);
  uint64_t count, seed;
  std::memcpy(&count, bytes.data(), 8);
  std::memcpy(&seed, bytes.data() + 8, 8);
  ASSERT_GE(count, 1000000u);
  ASSERT_EQ(bytes.size(), 16 + 4 * count);
  // Regenerate the inputs exactly as the script does.
  std::vector<float> x(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t r = test::splitmix64(seed + i);
    const uint32_t sign = static_cast<uint32_t>(r >> 63);
    const int exp = static_cast<int>((r >> 32) % 43) - 24;
    const uint32_t mant = static_cast<uint32_t>(r & 0x7FFFFF);
    x[i] = f32_from_bits((sign << 31) | (static_cast<uint32_t>(exp + 127) << 23) | mant);
  }
  std::vector<uint8_t> out(count);
  for (int k = 0; k < 4; ++k) {
    CastOptions o;
    o.format = kCols[k].f;
    o.saturation = kCols[k].s;
    cast_f32_to_fp8(x.data(), out.data(), count, o);
    uint64_t bad = 0, first = count;
    for (uint64_t i = 0; i < count; ++i) {
      if (out[i] != bytes[16 + 4 * i + k]) {
        if (!bad) first = i;
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0u) << "column " << k << " first mismatch at " << first << " input 0x" << std::hex
                       << (first < count ? f32_bits(x[first]) : 0u);
  }
}

}  // namespace
}  // namespace fp8sim
