// `fp8sim quantize` end to end: outputs equal the library's, JSON keys, codes files, input
// dtypes, and bad input -> a one-line error, the right exit status and no output file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/common/npy.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int status;
  std::string output;  // stdout + stderr
  std::string err;     // stderr only
};

class CliQuantize : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fp8sim_cliq_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }

  CmdResult run(const std::string& args) const {
    const std::string err_file = p("stderr.txt");
    const std::string cmd = std::string(FP8SIM_BINARY) + " quantize " + args + " 2>" + err_file;
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    const int st = ::pclose(f);
    CmdResult r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, read_text_file(err_file)};
    r.output += r.err;
    return r;
  }

  // A bad run: exit status, one line on stderr naming the problem, no output written.
  void expect_error(const std::string& args, int status, const std::string& needle) const {
    fs::remove(p("y.npy"));
    const CmdResult r = run(args + " --out " + p("y.npy"));
    EXPECT_EQ(r.status, status) << args << "\n" << r.output;
    EXPECT_EQ(r.err.rfind("fp8sim quantize: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
    EXPECT_FALSE(fs::exists(p("y.npy"))) << args;
  }

  std::vector<float> data(size_t n) const {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) * std::exp(0.02f * static_cast<float>(i % 200) - 2);
    return x;
  }

  fs::path dir_;
};

TEST_F(CliQuantize, OutputEqualsTheLibrary) {
  const std::vector<float> x = data(5 * 300);
  write_npy(p("x.npy"), NpyDtype::F32, {5, 300}, x.data(), x.size() * 4);
  for (const char* spec : {"e4m3:g128", "coat-opt", "mxfp8", "e5m2:tensor", "e4m3:g128:de=robust"}) {
    const CmdResult r =
        run(std::string("--spec ") + spec + " --in " + p("x.npy") + " --out " + p("y.npy") + " --json " + p("s.json"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("nmse"), std::string::npos);
    const NpyArray y = read_npy(p("y.npy"));
    EXPECT_EQ(y.dtype, NpyDtype::F32);
    EXPECT_EQ(y.shape, (std::vector<int64_t>{5, 300}));
    const std::vector<float> want = dequantize(quantize(x.data(), Shape{5, 300}, QuantSpec::parse(spec)));
    EXPECT_EQ(std::memcmp(y.f32(), want.data(), 4 * want.size()), 0) << spec;
    const Json j = Json::parse(read_text_file(p("s.json")));
    for (const char* k : {"mse", "nmse", "snr_db", "max_abs_err", "max_rel_err", "cosine", "underflow_frac",
                          "saturated_frac", "spec", "shape", "bytes", "histogram"})
      EXPECT_TRUE(j.contains(k)) << spec << " " << k;
    EXPECT_EQ(j.at("spec").as_string(), QuantSpec::parse(spec).to_string());
    if (QuantSpec::parse(spec).has_expand()) {
      const Json& ex = j.at("expand");
      EXPECT_EQ(static_cast<int64_t>(ex.at("k").size()), j.at("groups").as_int()) << spec;
      EXPECT_TRUE(j.at("histogram").contains("before"));
      EXPECT_TRUE(j.at("histogram").contains("after"));
    }
  }
}

TEST_F(CliQuantize, CodesFiles) {
  const std::vector<float> x = data(1000);
  write_npy(p("x.npy"), NpyDtype::F32, {1000}, x.data(), x.size() * 4);
  const CmdResult r = run("--spec coat-opt --in " + p("x.npy") + " --out " + p("y.npy") + " --codes " + p("c"));
  ASSERT_EQ(r.status, 0) << r.output;
  const QuantizedTensor q = quantize(x.data(), Shape{1000}, QuantSpec::parse("coat-opt"));
  const NpyArray codes = read_npy(p("c.codes.npy")), scales = read_npy(p("c.scales.npy"));
  const NpyArray k = read_npy(p("c.k.npy")), c = read_npy(p("c.c.npy"));
  EXPECT_EQ(codes.dtype, NpyDtype::U8);
  EXPECT_EQ(codes.data, q.codes);
  EXPECT_EQ(scales.shape, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(std::memcmp(scales.f32(), q.scales.data(), 32), 0);
  EXPECT_EQ(std::memcmp(k.f32(), q.expand_k.data(), 32), 0);
  EXPECT_EQ(std::memcmp(c.f32(), q.expand_c.data(), 32), 0);
}

// Scaled 16-bit specs store 16-bit codes: --codes writes them as uint16 with the tensor's shape.
TEST_F(CliQuantize, CodesFilesOfScaledSixteenBitSpecs) {
  const std::vector<float> x = data(128 * 128);
  write_npy(p("x.npy"), NpyDtype::F32, {128, 128}, x.data(), x.size() * 4);
  for (const char* spec : {"fp16:tensor:scale=fp32", "bf16:g128:scale=pow2", "fp16:tensor"}) {
    fs::remove(p("c.codes.npy"));
    const CmdResult r =
        run(std::string("--spec ") + spec + " --in " + p("x.npy") + " --out " + p("y.npy") + " --codes " + p("c"));
    ASSERT_EQ(r.status, 0) << spec << ": " << r.output;
    const NpyArray codes = read_npy(p("c.codes.npy"));
    EXPECT_EQ(codes.dtype, NpyDtype::U16) << spec;
    EXPECT_EQ(codes.shape, (std::vector<int64_t>{128, 128})) << spec;
    const QuantizedTensor q = quantize(x.data(), std::vector<int64_t>{128, 128}, QuantSpec::parse(spec));
    EXPECT_EQ(codes.data, q.codes) << spec;
  }
}

TEST_F(CliQuantize, SixteenBitInputs) {
  std::vector<uint16_t> xb(256);
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = f32_to_bf16_rne(std::cos(0.1f * i) * 3);
  const std::vector<float> want = dequantize(quantize(xb.data(), Shape{256}, QuantSpec::parse("e4m3:g32")));
  // Raw uint16 needs --dtype; ml_dtypes' bfloat16 ('<V2') is read as bf16 by default.
  write_npy(p("u2.npy"), NpyDtype::U16, {256}, xb.data(), 512);
  expect_error("--spec e4m3:g32 --in " + p("u2.npy"), 1, "--dtype bf16");
  CmdResult r = run("--spec e4m3:g32 --dtype bf16 --in " + p("u2.npy") + " --out " + p("y.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(std::memcmp(read_npy(p("y.npy")).f32(), want.data(), 1024), 0);
  write_npy(p("v2.npy"), NpyDtype::V2, {256}, xb.data(), 512);
  r = run("--spec e4m3:g32 --in " + p("v2.npy") + " --out " + p("y2.npy") + " --json " + p("j.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(std::memcmp(read_npy(p("y2.npy")).f32(), want.data(), 1024), 0);
  EXPECT_EQ(Json::parse(read_text_file(p("j.json"))).at("input_dtype").as_string(), "bfloat16");
  // float16 input.
  std::vector<uint16_t> xh(64);
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = f32_to_fp16_rne(0.5f * static_cast<float>(i) - 7);
  write_npy(p("h.npy"), NpyDtype::F16, {8, 8}, xh.data(), 128);
  r = run("--spec e4m3:row --in " + p("h.npy") + " --out " + p("yh.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<float> wh = dequantize(quantize_fp16(xh.data(), Shape{8, 8}, QuantSpec::parse("e4m3:row")));
  EXPECT_EQ(std::memcmp(read_npy(p("yh.npy")).f32(), wh.data(), 256), 0);
}

TEST_F(CliQuantize, NonFiniteInputIsReported) {
  std::vector<float> x = data(64);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[9] = std::numeric_limits<float>::infinity();
  write_npy(p("x.npy"), NpyDtype::F32, {64}, x.data(), 256);
  const CmdResult r = run("--spec e4m3:g16 --in " + p("x.npy") + " --out " + p("y.npy") + " --json " + p("s.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("nonfinite inputs"), std::string::npos) << r.output;
  EXPECT_EQ(Json::parse(read_text_file(p("s.json"))).at("nonfinite").as_int(), 2);
  EXPECT_TRUE(std::isnan(read_npy(p("y.npy")).f32()[3]));
}

TEST_F(CliQuantize, BadInputs) {
  const std::vector<float> x = data(16);
  write_npy(p("x.npy"), NpyDtype::F32, {16}, x.data(), 64);
  const std::string in = " --in " + p("x.npy");
  expect_error("--spec e4m3:g128 --in " + p("nope.npy"), 1, "no such file");
  std::ofstream(p("zip.npy"), std::ios::binary) << "PK\x03\x04garbage";
  expect_error("--spec e4m3:g128 --in " + p("zip.npy"), 1, "wrong magic");
  // Fortran order, truncated data, unsupported dtype: take a good file and edit it.
  std::string good = read_text_file(p("x.npy"));
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  std::ofstream(p("fortran.npy"), std::ios::binary) << fortran;
  expect_error("--spec e4m3:g128 --in " + p("fortran.npy"), 1, "Fortran");
  std::ofstream(p("trunc.npy"), std::ios::binary) << good.substr(0, good.size() - 5);
  expect_error("--spec e4m3:g128 --in " + p("trunc.npy"), 1, "truncated");
  std::string f8 = good;
  f8.replace(f8.find("<f4"), 3, "<f8");
  std::ofstream(p("f8.npy"), std::ios::binary) << f8;
  expect_error("--spec e4m3:g128 --in " + p("f8.npy"), 1, "unsupported dtype '<f8'");
  const uint8_t u8[4] = {1, 2, 3, 4};
  write_npy(p("u8.npy"), NpyDtype::U8, {4}, u8, 4);
  expect_error("--spec e4m3:g128 --in " + p("u8.npy"), 1, "uint8");
  write_npy(p("empty.npy"), NpyDtype::F32, {0, 4}, nullptr, 0);
  expect_error("--spec e4m3:g128 --in " + p("empty.npy"), 1, "empty");
  // Usage errors: exit 2.
  expect_error("--spec e4m3:g12x" + in, 2, "'g12x'");
  expect_error("--spec e4m3:tensor:scale=fp8" + in, 2, "fp32, pow2, e8m0, bf16");
  expect_error(in, 2, "--spec is required");
  expect_error("--spec e4m3:g128 --in " + p("x.npy") + " --bogus", 2, "bogus");
  expect_error("--spec e4m3:g128 --dtype int8" + in, 2, "--dtype 'int8'");
  expect_error("--spec e4m3:g128 --dtype fp16" + in, 1, "float32 data");
  // Without --out the metrics are computed and printed, and nothing is written.
  const CmdResult r = run("--spec e4m3:g128" + in);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.output.find("nmse"), std::string::npos) << r.output;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(CliQuantize, HelpTeaches) {
  const CmdResult r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("Examples:"), std::string::npos);
  EXPECT_NE(r.output.find("de=coat"), std::string::npos);
  EXPECT_NE(r.output.find("mxfp8"), std::string::npos);
}

}  // namespace
}  // namespace fp8sim
