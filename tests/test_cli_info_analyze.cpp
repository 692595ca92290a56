// fp8sim info / fp8sim analyze through the real binary: the sample trace, JSON and Markdown
// outputs, and every kind of bad input giving one error line and a non-zero exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;
using test::run_fp8sim;

const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";
const std::string kData = FP8SIM_TEST_DATA;

void expect_one_line_error(const test::CommandResult& r, const std::string& needle, int code) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(CliInfo, ShowsTheTreeOfTheSample) {
  const auto r = run_fp8sim({"info", kSample});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"fp8sim-trace v1", "tiny-llama: hidden 64", "torch.optim.AdamW", "betas (0.9, 0.95)",
                           "grad window steps 295..300 (6 steps)", "step 295 [full]", "step 301 [state]",
                           "layers.0.mlp.down_proj.weight", "(176, 64)", "linear_output_grad", "[-> 3 linears]"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want;
  const auto s = run_fp8sim({"info", kSample, "--summary", "--step", "295"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("exp_avg_sq"), std::string::npos);
  EXPECT_EQ(s.out.find("step 296"), std::string::npos);
  EXPECT_EQ(s.out.find("layers.0.mlp.down_proj.weight"), std::string::npos) << "--summary lists no tensors";
  const auto h = run_fp8sim({"info", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("Examples"), std::string::npos);
}

TEST(CliInfo, JsonCountsWhatTheReaderSees) {
  const std::string out = test::temp_dir() + "/info.json";
  const auto r = run_fp8sim({"info", kSample, "--role", "activation", "--json", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(read_text_file(out));
  const trace::TraceReader reader(kSample);
  const auto acts = reader.select({.role = trace::Role::Activation});
  EXPECT_EQ(j.at("totals").at("tensors").as_int(), static_cast<int64_t>(acts.size()));
  ASSERT_EQ(j.at("steps").size(), 1u) << "only the step holding activations";
  EXPECT_EQ(j.at("grad_window").as_array()[1].as_int(), 300);
  EXPECT_EQ(j.at("model_config").at("num_hidden_layers").as_int(), 4);
}

TEST(CliInfoAnalyze, FourBitRecipesAnalyzeTheSampleBesideFp8) {
  // nvfp4 and mxfp4 quantize the linear weights to packed 4-bit codes with one byte of scale per
  // block (16x16 E4M3 under a 4-byte fp32 tensor scale; 1x32 E8M0) and lose more than TE's
  // per-tensor FP8 on the same weights.
  auto linear_weights = [](const std::string& recipe) {
    const auto r = run_fp8sim({"analyze", kSample, "--recipe", recipe, "--json", "-", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const Json doc = Json::parse(r.out);
    std::vector<Json> out;
    for (const Json& t : doc.at("tensors").as_array())
      if (t.at("role").as_string() == "weight" && t.at("op").as_string() == "linear" &&
          t.at("module").as_string().find("lm_head") == std::string::npos)
        out.push_back(t);
    return out;
  };
  const std::vector<Json> te = linear_weights("te");
  ASSERT_FALSE(te.empty());
  for (const auto& [recipe, tensor_scale_bytes] : {std::pair{"nvfp4", 4}, std::pair{"mxfp4", 0}}) {
    SCOPED_TRACE(recipe);
    const std::vector<Json> w = linear_weights(recipe);
    ASSERT_EQ(w.size(), te.size());
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i].at("spec").as_string().rfind("e2m1:", 0), 0u) << w[i].at("name").as_string();
      const double n = w[i].at("numel").as_number(), groups = w[i].at("groups").as_number();
      EXPECT_EQ(w[i].at("bytes").at("total").as_number(), n / 2 + groups + tensor_scale_bytes);
      EXPECT_GT(w[i].at("nmse").as_number(), 4 * te[i].at("nmse").as_number()) << w[i].at("name").as_string();
    }
  }
}

TEST(CliInfoAnalyze, BadInputsGiveOneLineAndNonZeroExit) {
  const std::string dir = test::temp_dir();
  { std::ofstream(dir + "/text.h5") << "not hdf5\n"; }
  const auto bytes = test::read_file_bytes(kSample);
  {
    std::ofstream o(dir + "/cut.h5", std::ios::binary);
    o.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() / 2));
  }
  for (const char* cmd : {"info", "analyze"}) {
    SCOPED_TRACE(cmd);
    expect_one_line_error(run_fp8sim({cmd, dir + "/missing.h5"}), "no such file", 1);
    expect_one_line_error(run_fp8sim({cmd, dir + "/text.h5"}), "not an HDF5 file", 1);
    expect_one_line_error(run_fp8sim({cmd, dir + "/cut.h5"}), "truncated", 1);
    expect_one_line_error(run_fp8sim({cmd, kData + "/trace_bad_no_attrs.h5"}), "missing root attribute 'format'", 1);
    expect_one_line_error(run_fp8sim({cmd, kData + "/trace_bad_int32.h5"}), "unsupported dtype int32", 1);
    expect_one_line_error(run_fp8sim({cmd, kData + "/trace_bad_zero_size.h5"}), "zero-size shape", 1);
    expect_one_line_error(run_fp8sim({cmd}), "no trace given", 2);
    expect_one_line_error(run_fp8sim({cmd, kSample, "--bogus-flag"}), "bogus-flag", 2);
  }
  expect_one_line_error(run_fp8sim({"info", kSample, "--role", "weights"}), "unknown --role 'weights'", 2);
  expect_one_line_error(run_fp8sim({"analyze", kSample, "--recipe", "fp4"}), "unknown recipe 'fp4'", 2);
  expect_one_line_error(run_fp8sim({"analyze", kSample, "--step", "7"}), "no step 7", 1);
  { std::ofstream(dir + "/bad-recipe.json") << "{\"rules\": [{\"role\": \"weight\", \"spec\": \"e4m3:g0\"}]}"; }
  expect_one_line_error(run_fp8sim({"analyze", kSample, "--recipe", dir + "/bad-recipe.json"}), "bad-recipe.json", 1);
  // A failed run writes no output file.
  const auto r = run_fp8sim({"analyze", dir + "/missing.h5", "--json", dir + "/never.json"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(dir + "/never.json"));
}

TEST(CliAnalyze, ListsRecipes) {
  const auto r = run_fp8sim({"analyze", "--list-recipes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"bf16:", "te:", "coat:", "fp8lm:", "deepseek:", "mxfp8:", "e4m3:g16:scale=bf16"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

TEST(CliAnalyze, WritesJsonWithTensorsAndLayersAndMarkdown) {
  const std::string dir = test::temp_dir();
  const auto r =
      run_fp8sim({"analyze", kSample, "--recipe", "mxfp8", "--json", dir + "/a.json", "--md", dir + "/a.md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("activation:norm_input"), std::string::npos);
  EXPECT_NE(r.out.find("forward GEMM output error per layer"), std::string::npos);
  const Json j = Json::parse(read_text_file(dir + "/a.json"));
  ASSERT_GT(j.at("tensors").size(), 100u);
  for (const Json& t : j.at("tensors").as_array())
    for (const char* k : {"name", "role", "op", "shape", "spec", "mse", "nmse", "snr_db", "max_abs_err", "cosine",
                          "underflow_frac", "saturated_frac", "bytes"})
      ASSERT_TRUE(t.contains(k)) << k;
  EXPECT_EQ(j.at("layers").size(), 5u);  // 4 blocks + the LM head
  const std::string md = read_text_file(dir + "/a.md");
  EXPECT_NE(md.find("Figure 4(a)"), std::string::npos);
  EXPECT_NE(md.find("| layers.0.mlp.down_proj.weight |"), std::string::npos);
}

TEST(CliAnalyze, NanAndInfAreReportedAndStrictFails) {
  const std::string dir = test::temp_dir();
  const std::string p = dir + "/nan.h5";
  {
    trace::TraceHeader h;
    trace::TraceWriter w(p, h);
    std::vector<float> v(256, 1.5f);
    v[3] = NAN;
    v[9] = INFINITY;
    trace::TensorInfo t;
    t.step = 3;
    t.role = trace::Role::Grad;
    t.op = "linear";
    t.name = "w";
    t.shape = {16, 16};
    w.write(t, v.data());
    w.commit();
  }
  const auto r = run_fp8sim({"analyze", p, "--recipe", "fp8lm", "--json", dir + "/n.json", "--tensors"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 tensor(s) hold NaN/Inf"), std::string::npos) << r.err;
  const Json j = Json::parse(read_text_file(dir + "/n.json"));
  EXPECT_EQ(j.at("tensors").as_array()[0].at("nan_count").as_int(), 1);
  EXPECT_EQ(j.at("tensors").as_array()[0].at("inf_count").as_int(), 1);
  const auto s = run_fp8sim({"analyze", p, "--recipe", "fp8lm", "--strict"});
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.err.find("--strict"), std::string::npos) << s.err;
}

}  // namespace
}  // namespace fp8sim
