// The tensor-core model (sim/gemm/tc_model.hpp) feature by feature, on hand-made vectors whose
// H200 results are fixed by tests/test_gemm_tc_gpu.cpp's families (the same rules): products
// exact and aligned to ea + eb, one fused step of 32 products plus C, 13 bits kept below the
// largest term (truncated toward zero), the step's result truncated to 13 fraction bits, +0 for
// an exact zero, the canonical NaN, and exact integer sums wherever nothing is dropped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/gemm/tc_model.hpp"

namespace fp8sim::gemm {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint8_t e4m3(float v) { return encode_fp8(v, 0, true); }

// One FP8 step: sum of a_i * b_i (E4M3 values, zero-padded to 32) plus c.
float step(const std::vector<float>& a, const std::vector<float>& b, float c) {
  uint8_t ca[32] = {}, cb[32] = {};
  for (size_t i = 0; i < a.size(); ++i) {
    ca[i] = e4m3(a[i]);
    cb[i] = e4m3(b[i]);
    EXPECT_EQ(decode_fp8(ca[i], 0), a[i]) << "not an E4M3 value: " << a[i];
    EXPECT_EQ(decode_fp8(cb[i], 0), b[i]) << "not an E4M3 value: " << b[i];
  }
  return tc_fdpa(tc_arith_sm90(0), ca, 1, 0, cb, 1, 0, 32, c);
}

TEST(TensorCoreModelRules, SmallIntegerSumsAreExact) {
  const TcCases t = make_tc_cases(TcFamily::Exact, Format::E4M3, Format::E4M3, 2, 4, 1);
  for (int64_t cs = 0; cs < t.cases; ++cs)
    for (int r = 0; r < 64; ++r)
      for (int col = 0; col < 8; ++col) {
        double s = t.c[cs * 512 + r * 8 + col];
        float d = t.c[cs * 512 + r * 8 + col];
        const uint8_t* a = &t.a[(cs * 64 + r) * t.k()];
        const uint8_t* b = &t.bt[(cs * 8 + col) * t.k()];
        for (int64_t k = 0; k < t.k(); ++k) s += static_cast<double>(decode_fp8(a[k], 0)) * decode_fp8(b[k], 0);
        d = tc_dot_chain(tc_arith_sm90(0), a, 0, b, 0, t.k(), d);
        ASSERT_EQ(d, s);
      }
}

TEST(TensorCoreModelRules, ThirteenBitsBelowTheLargestTermTruncated) {
  // 2^14 and -2^14 cancel; C survives while it is at least 2^(14 - 13) = 2.
  const float U = 128.0f;  // U * U = 2^14
  EXPECT_EQ(step({U, -U}, {U, U}, 2.0f), 2.0f);
  EXPECT_EQ(step({U, -U}, {U, U}, 1.0f), 0.0f);
  EXPECT_EQ(step({U, -U}, {U, U}, 3.0f), 2.0f);    // 1.5 ulp truncates to 1 ulp
  EXPECT_EQ(step({U, -U}, {U, U}, -3.0f), -2.0f);  // toward zero for negative terms too
  EXPECT_EQ(step({U, -U}, {U, U}, -1.5f), 0.0f);
  EXPECT_EQ(bits(step({U, -U}, {U, U}, -1.0f)), 0u);  // an exact zero is +0
}

TEST(TensorCoreModelRules, ResultTruncatedToThirteenFractionBits) {
  // 2^14 + 2^14 + 2: each term survives alignment (2 is one unit of 2^(14-13)), but the sum
  // 2^15 + 2 needs 14 fraction bits: truncated to 2^15. 2^14 + 2^14 + 4 keeps its 4.
  const float U = 128.0f;
  EXPECT_EQ(step({U, U}, {U, U}, 2.0f), 32768.0f);
  EXPECT_EQ(step({U, U}, {U, U}, 4.0f), 32772.0f);
  // C alone passes with its low 10 mantissa bits cleared.
  EXPECT_EQ(bits(step({}, {}, 1.0f + 0x1.0p-20f)), bits(1.0f));
  EXPECT_EQ(bits(step({}, {}, 1.0f + 0x1.0p-13f)), bits(1.0f + 0x1.0p-13f));
}

TEST(TensorCoreModelRules, ProductsAlignToTheSumOfTheirExponents) {
  // 1.5 * 1.5 = 2.25 has exponent 1 but aligns at ea + eb = 0: a C of 2^-13 survives next to
  // it (13 bits below 2^0), where alignment to the normalized product (2^1) would drop it; the
  // second product cancels most of the sum so that the result's own truncation keeps it.
  EXPECT_EQ(step({1.5f, -1.0f}, {1.5f, 1.75f}, 0x1.0p-13f), 0.5f + 0x1.0p-13f);
  EXPECT_EQ(step({1.0f}, {1.0f}, 0x1.0p-14f), 1.0f);
}

TEST(TensorCoreModelRules, ThirtyTwoProductsAndCInOneStep) {
  // A large product anywhere among the 32 truncates every small one of the same step.
  for (int p = 0; p < 32; ++p) {
    std::vector<float> a(32, 0.015625f), b(32, 0.015625f);  // 2^-12 each
    a[p] = 128.0f;
    b[p] = 128.0f;
    EXPECT_EQ(step(a, b, 0.0f), 16384.0f) << p;
  }
  // Without it they add exactly: 32 * 2^-12 = 2^-7.
  EXPECT_EQ(step(std::vector<float>(32, 0.015625f), std::vector<float>(32, 0.015625f), 0.0f), 0x1.0p-7f);
}

TEST(TensorCoreModelRules, Specials) {
  uint8_t a[32] = {}, b[32] = {};
  a[0] = 0x7F;  // E4M3 NaN
  b[0] = e4m3(1.0f);
  EXPECT_EQ(bits(tc_fdpa(tc_arith_sm90(0), a, 1, 0, b, 1, 0, 32, 0.0f)), 0x7FFFFFFFu);
  a[0] = 0x7C;  // E5M2 +Inf
  EXPECT_EQ(bits(tc_fdpa(tc_arith_sm90(1), a, 1, 1, b, 1, 0, 32, 1.0f)), 0x7F800000u);
  EXPECT_EQ(bits(tc_fdpa(tc_arith_sm90(1), a, 1, 1, b, 1, 0, 32, -INFINITY)), 0x7FFFFFFFu);
  b[0] = 0;  // Inf x 0
  EXPECT_EQ(bits(tc_fdpa(tc_arith_sm90(1), a, 1, 1, b, 1, 0, 32, 0.0f)), 0x7FFFFFFFu);
  // Subnormal C keeps 13 bits below 2^-126.
  const float sub = 0x1.0p-140f;
  a[0] = 0;
  EXPECT_EQ(bits(tc_fdpa(tc_arith_sm90(0), a, 1, 0, b, 1, 0, 32, sub)), 0u);
  EXPECT_EQ(tc_fdpa(tc_arith_sm90(0), a, 1, 0, b, 1, 0, 32, 0x1.0p-139f), 0x1.0p-139f);
}

TEST(TensorCoreModelRules, Bf16KeepsTwentyFiveBitsAndFullPrecisionResult) {
  // BF16: one step of 16 products; 25 bits below the largest term; the result truncated to fp32.
  uint16_t a[16] = {}, b[16] = {};
  a[0] = 0x3F80;  // 1
  b[0] = 0x3F80;
  EXPECT_EQ(tc_fdpa(tc_arith_sm90(2), a, 1, 2, b, 1, 2, 16, 0x1.0p-25f), 1.0f);  // truncated below 2^-23
  EXPECT_EQ(tc_fdpa(tc_arith_sm90(2), a, 1, 2, b, 1, 2, 16, 0x1.0p-23f), 1.0f + 0x1.0p-23f);
  EXPECT_EQ(tc_fdpa(tc_arith_sm90(2), a, 1, 2, b, 1, 2, 16, 0x1.8p-23f), 1.0f + 0x1.0p-23f);  // toward zero
}

}  // namespace
}  // namespace fp8sim::gemm

namespace fp8sim::gemm {
namespace {

// tc_gemm's vectorized steps against the general step of tc_model.hpp, output by output, on every
// case family (NaN / Inf codes and C near the top of fp32 included), for each schedule, with the
// BF16 and FP8 steps' AVX2 code on (where the CPU has AVX2) and off.
TEST(TensorCoreGemm, FastStepEqualsTheGeneralStep) {
  for (const bool simd : {true, false})
    for (const TcFamily fam : kTcFamilies)
      for (const auto& [xf, wf] : {std::pair{Format::E4M3, Format::E4M3}, std::pair{Format::E5M2, Format::E4M3},
                                   std::pair{Format::BF16, Format::BF16}}) {
        const TcCases t = make_tc_cases(fam, xf, wf, 8, 1, 3);  // A: 64 x 256 (BF16 128), Bt: 8 x 256
        const int64_t M = 64, N = 8, K = t.k();
        const bool bf16 = xf == Format::BF16;
        const int tx = xf == Format::E4M3 ? 0 : (bf16 ? 2 : 1);
        for (const bool fast : {false, true}) {
          if (bf16 && !fast) continue;  // BF16 has no promotion
          TcGemmConfig cfg;
          cfg.x_format = xf;
          cfg.w_format = wf;
          cfg.scaling = bf16 ? 0 : 1;
          cfg.fast_accum = fast;
          const float one = 1.0f;
          std::vector<float> y(static_cast<size_t>(M * N));
          set_tc_gemm_simd(simd);
          tc_gemm(t.a.data(), t.bt.data(), &one, &one, y.data(), M, N, K, cfg);
          set_tc_gemm_simd(true);
          const TcArith ar = tc_arith_sm90(tx);
          const auto* a16 = reinterpret_cast<const uint16_t*>(t.a.data());
          const auto* b16 = reinterpret_cast<const uint16_t*>(t.bt.data());
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              const int64_t interval = fast ? K : 128;
              float acc = 0.0f;
              for (int64_t b0 = 0; b0 < K; b0 += interval) {
                const float blk = bf16 ? tc_dot_chain(ar, a16 + i * K + b0, 2, b16 + j * K + b0, 2, interval, 0.0f)
                                       : tc_dot_chain(ar, &t.a[i * K + b0], tx, &t.bt[j * K + b0], 0, interval, 0.0f);
                acc = b0 == 0 ? blk : acc + blk;
              }
              ASSERT_EQ(bits(y[i * N + j]), bits(acc))
                  << tc_family_name(fam) << " " << i << "," << j << " simd " << simd;
            }
        }
      }
}

}  // namespace
}  // namespace fp8sim::gemm

#include "sim/common/json.hpp"
#include "sim/gemm/tc_study.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::gemm {
namespace {

// The study's conclusions that the model implies and the H200 confirmed (tests/test_gemm_tc_gpu.cpp):
// with same-sign products, fast accumulation's truncation bias grows with K while promotion every
// 128 keeps the error flat; every tensor-core series stays far above an fp32 FMA chain.
TEST(AccumStudy, FastAccumulationBiasGrowsWithKAndPromotionStopsIt) {
  AccumStudyOptions o;
  o.ks = {256, 4096};
  o.intervals = {128, 0};
  o.data = {"positive"};
  o.m = o.n = 16;
  const AccumStudy st = run_accum_study(o);
  ASSERT_EQ(st.results.size(), 1u);
  const auto& s = st.results[0].second;  // promote 128, fast, fp32 fma, bf16 tc
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].config, "tc promote 128");
  EXPECT_EQ(s[1].config, "tc fast");
  EXPECT_GT(s[1].rel_l2[1], 0.01);                       // > 1 % at K = 4096
  EXPECT_GT(s[1].rel_l2[1], 8 * s[1].rel_l2[0]);         // grows with K
  EXPECT_LT(s[0].rel_l2[1], 2 * s[0].rel_l2[0] + 1e-9);  // flat with promotion
  EXPECT_LT(s[0].rel_l2[1], 0.002);
  EXPECT_LT(s[2].rel_l2[1], 1e-5);  // fp32 fma
  EXPECT_GT(s[0].rel_l2[1], 10 * s[2].rel_l2[1]);
}

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = test::read_file_bytes(path);
  return std::string(b.begin(), b.end());
}

TEST(AccumCli, BadInputIsAUsageError) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"accum", "--data", "uniform"},
                                               {"accum", "--promote", "33"},
                                               {"accum", "--k", "0"},
                                               {"accum", "--k", "12x"},
                                               {"accum", "--m", "0"}}) {
    const test::CommandResult r = test::run_fp8sim(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << " " << args[2] << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(AnalyzeCli, TensorCoreOptionsRefuseBadValues) {
  const std::string trace = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"analyze", trace, "--tensor-core-device", "tpu"},
        {"analyze", trace, "--tensor-core-rows", "-2"}}) {
    const test::CommandResult r = test::run_fp8sim(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // Without a GPU the CUDA model is refused in one line, exit 1, no output.
  const test::CommandResult r = test::run_fp8sim({"analyze", trace, "--tensor-core-device", "cuda"});
  if (r.exit_code != 0) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(AccumCli, WritesTheStudyAndItsPlotData) {
  const std::string dir = test::temp_dir();
  const test::CommandResult r =
      test::run_fp8sim({"accum", "--k", "64,128", "--promote", "32,never", "--data", "normal", "--m", "8", "--n", "8",
                        "--json", dir + "/a.json", "--md", dir + "/a.md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(read_text(dir + "/a.json"));
  EXPECT_EQ(j.at("ks").size(), 2u);
  const Json& series = j.at("data").at("normal");
  ASSERT_EQ(series.size(), 4u);  // promote 32, fast, fp32 fma, bf16 tc
  EXPECT_EQ(series.as_array()[1].at("config").as_string(), "tc fast");
  EXPECT_EQ(j.at("plot_data").at("accum").at("file").as_string(), "accum.png");
  EXPECT_NE(read_text(dir + "/a.md").find("| 128 |"), std::string::npos);
}

}  // namespace
}  // namespace fp8sim::gemm
