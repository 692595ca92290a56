// fp8sim cast through the real binary: edge vectors, bulk streaming, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

using test::run_fp8sim;

void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Error output is exactly one line naming the problem.
void expect_one_line_error(const test::CommandResult& r, const std::string& needle, int code = -1) {
  EXPECT_NE(r.exit_code, 0);
  if (code >= 0) {
    EXPECT_EQ(r.exit_code, code);
  }
  EXPECT_EQ(static_cast<int>(std::count(r.err.begin(), r.err.end(), '\n')), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
}

TEST(CliCast, EdgeVectorsPrintCodesAndValues) {
  const auto r = run_fp8sim({"cast", "--format", "e4m3", "448", "464", "465", "-0.0", "0x1p-10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Order is preserved, negative numbers are values, not options.
  const char* expect[] = {"448      0x43E00000  0x7E", "464      0x43E80000  0x7E", "465      0x43E88000  0x7E",
                          "-0.0     0x80000000  0x80", "0x1p-10  0x3A800000  0x00"};
  size_t pos = 0;
  for (const char* e : expect) {
    const size_t at = r.out.find(e, pos);
    EXPECT_NE(at, std::string::npos) << e << "\n" << r.out;
    pos = at == std::string::npos ? pos : at;
  }
  const auto n = run_fp8sim({"cast", "--format", "e4m3", "--no-saturate", "465"});
  EXPECT_NE(n.out.find("0x7F"), std::string::npos);
  const auto e = run_fp8sim({"cast", "-f", "e5m2", "--no-saturate", "61439", "61440"});
  EXPECT_NE(e.out.find("0x7B"), std::string::npos);
  EXPECT_NE(e.out.find("0x7C"), std::string::npos);
  const auto d = run_fp8sim({"cast", "--decode", "0x7e", "1"});
  ASSERT_EQ(d.exit_code, 0);
  EXPECT_NE(d.out.find("448"), std::string::npos);
  EXPECT_NE(d.out.find("0.001953125"), std::string::npos);
  const auto h = run_fp8sim({"cast", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--no-saturate"), std::string::npos);
  EXPECT_NE(h.out.find("Examples"), std::string::npos);
}

TEST(CliCast, BulkStreamsInChunksAndMatchesLibrary) {
  const std::string dir = test::temp_dir();
  const size_t n = 100003;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = std::sin(0.01f * static_cast<float>(i)) * std::exp(0.0002f * static_cast<float>(i));
  write_bytes(dir + "/x.f32", x.data(), n * 4);
  // Small chunks force many iterations; stochastic rounding must still follow the global index.
  auto r = run_fp8sim({"cast", "--format", "e5m2", "--rounding", "stochastic", "--seed", "5", "--in", dir + "/x.f32",
                       "--out", dir + "/y.u8", "--chunk-elements", "4099"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = test::read_file_bytes(dir + "/y.u8");
  std::vector<uint8_t> want(n);
  CastOptions o;
  o.format = Format::E5M2;
  o.rounding = Rounding::Stochastic;
  o.seed = 5;
  cast_f32_to_fp8(x.data(), want.data(), n, o);
  EXPECT_EQ(got, want);
  // Decode back.
  r = run_fp8sim({"cast", "--format", "e5m2", "--decode", "--in", dir + "/y.u8", "--out", dir + "/z.f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto back = test::read_file_bytes(dir + "/z.f32");
  ASSERT_EQ(back.size(), n * 4);
  for (size_t i = 0; i < n; i += 997) {
    float v;
    std::memcpy(&v, back.data() + 4 * i, 4);
    EXPECT_EQ(v, decode_fp8(want[i], 1));
  }
}

// The 4-bit format in bulk: codes equal the library's, decode gives their values back, and a file
// holding a byte that is not an e2m1 code is bad data (exit 1) that leaves no output behind.
TEST(CliCast, Fp4BulkRoundTripsAndRefusesWideCodes) {
  const std::string dir = test::temp_dir();
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 7.0f * std::sin(0.37f * static_cast<float>(i));
  write_bytes(dir + "/x.f32", x.data(), x.size() * 4);
  auto r = run_fp8sim({"cast", "--format", "e2m1", "--in", dir + "/x.f32", "--out", dir + "/y.u8", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = test::read_file_bytes(dir + "/y.u8");
  std::vector<uint8_t> want(x.size());
  CastOptions o;
  o.format = Format::E2M1;
  cast_f32_to_fp8(x.data(), want.data(), x.size(), o);
  EXPECT_EQ(got, want);
  for (uint8_t c : want) EXPECT_LT(c, 16);
  r = run_fp8sim({"cast", "--format", "e2m1", "--decode", "--in", dir + "/y.u8", "--out", dir + "/z.f32", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto back = test::read_file_bytes(dir + "/z.f32");
  ASSERT_EQ(back.size(), x.size() * 4);
  for (size_t i = 0; i < x.size(); i += 97) {
    float v;
    std::memcpy(&v, back.data() + 4 * i, 4);
    EXPECT_EQ(v, decode_fp8<E2M1Traits>(want[i]));
    EXPECT_LE(std::fabs(v - x[i]), 1.0f);  // within half the widest gap (4 -> 6)
  }
  const uint8_t wide[] = {0x03, 0x1F};
  write_bytes(dir + "/w.u8", wide, sizeof wide);
  expect_one_line_error(
      run_fp8sim({"cast", "--format", "e2m1", "--decode", "--in", dir + "/w.u8", "--out", dir + "/w.f32"}),
      "byte 1 is 0x1F, not an e2m1 code", 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.f32"));
}

TEST(CliCast, BadInputGivesOneLineErrors) {
  const std::string dir = test::temp_dir();
  expect_one_line_error(run_fp8sim({"cast", "--format", "e3m4", "1"}), "unknown format 'e3m4'", 2);
  expect_one_line_error(run_fp8sim({"cast", "--format", "bf16", "1"}), "must be e4m3, e5m2, e2m1, e2m3 or e3m2", 2);
  expect_one_line_error(run_fp8sim({"cast", "1.5x"}), "'1.5x' is not a number", 2);
  expect_one_line_error(run_fp8sim({"cast", "--rounding", "up", "1"}), "unknown rounding", 2);
  expect_one_line_error(run_fp8sim({"cast", "--bogus"}), "unrecognised option", 2);
  expect_one_line_error(run_fp8sim({"cast"}), "no values given", 2);
  expect_one_line_error(run_fp8sim({"cast", "--decode", "300"}), "not an e4m3 code (0..255", 2);
  // The 4- and 6-bit formats: codes beyond their width, and asking them not to saturate.
  expect_one_line_error(run_fp8sim({"cast", "--format", "e2m1", "--decode", "16"}), "not an e2m1 code (0..15", 2);
  expect_one_line_error(run_fp8sim({"cast", "--format", "e3m2", "--decode", "0x40"}), "not an e3m2 code (0..63", 2);
  expect_one_line_error(run_fp8sim({"cast", "--format", "e2m3", "--no-saturate", "1"}), "always saturate", 2);
  // Seeds follow the spec's rule (seed=N): a negative number is refused, never wrapped to 2^64 - 1.
  expect_one_line_error(run_fp8sim({"cast", "--rounding", "stochastic", "--seed", "-1", "1"}), "bad --seed '-1'", 2);
  expect_one_line_error(run_fp8sim({"cast", "--seed", "18446744073709551616", "1"}), "2^64", 2);
  expect_one_line_error(run_fp8sim({"cast", "--in", dir + "/missing.f32", "--out", dir + "/o"}), "no such file", 1);
  const char junk[7] = {1, 2, 3, 4, 5, 6, 7};
  write_bytes(dir + "/seven.f32", junk, 7);
  expect_one_line_error(run_fp8sim({"cast", "--in", dir + "/seven.f32", "--out", dir + "/o"}), "not a whole number", 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/o")) << "no partial output";
  // A directory is not readable as a file.
  expect_one_line_error(run_fp8sim({"cast", "--in", dir, "--out", dir + "/o"}), "not a regular file", 1);
  // Unwritable output.
  write_bytes(dir + "/ok.f32", junk, 4);
  expect_one_line_error(run_fp8sim({"cast", "--in", dir + "/ok.f32", "--out", "/proc/nope/out"}), "cannot write", 1);
  expect_one_line_error(run_fp8sim({"nonsense"}), "unknown command", 2);
}

}  // namespace
}  // namespace fp8sim
