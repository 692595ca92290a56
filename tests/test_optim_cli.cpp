// `fp8sim optim` end to end: the sample trace, --help, --list-recipes, and bad input (one-line
// errors, non-zero exits, no partial JSON).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;
using test::run_fp8sim;

const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

TEST(OptimCli, HelpTeaches) {
  const auto r = run_fp8sim({"optim", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* needle : {"Table 1", "Examples:", "--recipe", "m=e4m3:g128:de=coat,v=e5m2:g128", "--steps"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle;
}

TEST(OptimCli, ListRecipes) {
  const auto r = run_fp8sim({"optim", "--list-recipes"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* needle : {"fp32", "bf16", "coat", "coat-noexpand", "te-fp8", "fp8lm", "e4m3:g128:de=coat"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle;
}

TEST(OptimCli, SampleTraceTablesAndJson) {
  const std::string json = test::temp_dir() + "/out/optim.json";
  const auto r = run_fp8sim({"optim", kSample, "--recipe", "coat", "--recipe", "m=e4m3:g128:de=coat,v=e5m2:g128",
                             "--steps", "3", "--json", json, "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"Table 1", "COAT paper", "E4M3+Expand", "fp32 replay", "B/param", "Drift"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle;
  const Json doc = Json::parse(read_text_file(json));
  EXPECT_TRUE(doc.at("table1").at("E4M3").at("E5M2+Expand").is_number());
  EXPECT_TRUE(doc.at("fp32_replay_max_rel_err").is_number());
  EXPECT_EQ(doc.at("drift").at("coat").at("steps").size(), 3u);
  EXPECT_TRUE(doc.at("drift").contains("m=e4m3:g128:de=coat,v=e5m2:g128"));
  EXPECT_EQ(doc.at("memory").size(), 3u);  // fp32 + the two recipes
}

struct BadCase {
  std::vector<std::string> args;
  int exit_code;
  std::string needle;
};

TEST(OptimCli, BadInputOneLineErrorNoPartialOutput) {
  const std::string dir = test::temp_dir();
  const std::string json = dir + "/never.json";
  write_file_atomic(dir + "/not_hdf5.h5", "this is not an HDF5 file\n");
  const std::string no_window = std::string(FP8SIM_TEST_DATA) + "/trace_h5py_dtypes.h5";
  const std::vector<BadCase> cases = {
      {{"optim"}, 2, "no TRACE"},
      {{"optim", dir + "/missing.h5", "--json", json}, 1, "missing.h5"},
      {{"optim", dir + "/not_hdf5.h5", "--json", json}, 1, "not an HDF5 file"},
      {{"optim", no_window, "--json", json}, 1, "no grad window"},
      {{"optim", kSample, "--recipe", "nonsense", "--json", json}, 2, "nonsense"},
      {{"optim", kSample, "--recipe", "m=e4m3:g128,v=e9m9:g128", "--json", json}, 2, "second moment"},
      {{"optim", kSample, "--recipe", "coat", "--recipe", "coat", "--json", json}, 2, "given twice"},
      {{"optim", kSample, "--steps", "-1", "--json", json}, 2, "--steps"},
      {{"optim", kSample, "--steps", "99", "--json", json}, 1, "exceeds"},
      {{"optim", kSample, "--steps", "two", "--json", json}, 2, "steps"},
      {{"optim", kSample, "--update", "sgd", "--json", json}, 2, "sgd"},
      {{"optim", kSample, "--rounding", "up", "--json", json}, 2, "up"},
      {{"optim", kSample, "--rounding", "stochastic", "--seed", "-1", "--json", json}, 2, "bad --seed '-1'"},
      {{"optim", kSample, "--table1-step", "7", "--json", json}, 1, "step 7"},
      {{"optim", kSample, "--table1-lowbit", "--no-table1", "--json", json}, 2, "--table1-lowbit"},
      {{"optim", kSample, "--recipe", "m=e2m1:g32:de=robust,v=fp32", "--json", json}, 2, "de=robust"},
      {{"optim", kSample, "--frobnicate"}, 2, "frobnicate"},
      {{"optim", kSample, "--device", "gpu", "--json", json}, 2, "--device must be cpu or cuda"},
      {{"optim", kSample, "--json", dir}, 1, dir},  // the output path is a directory
  };
  for (const auto& c : cases) {
    const auto r = run_fp8sim(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, c.exit_code) << joined << "\n" << r.err;
    EXPECT_TRUE(one_line(r.err)) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("fp8sim optim: error:"), std::string::npos) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << joined << "\n" << r.err;
    EXPECT_FALSE(fs::exists(json)) << joined;
  }
  // A trace with neither moments nor a window has nothing to replay.
  const auto none = run_fp8sim({"optim", no_window, "--no-drift"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(one_line(none.err)) << none.err;
  EXPECT_NE(none.err.find("neither"), std::string::npos) << none.err;
}

// --device cuda: the GPU's JSON where there is one (test_optim_gpu.cpp compares it with the CPU's);
// elsewhere one line saying why, exit 1, no output.
TEST(OptimCli, DeviceCudaWithoutAGpuIsOneLine) {
  const std::string json = test::temp_dir() + "/o.json";
  const auto r = run_fp8sim({"optim", kSample, "--device", "cuda", "--steps", "1", "--json", json});
  if (r.exit_code == 0) {
    EXPECT_TRUE(fs::exists(json));
    EXPECT_NE(r.err.find("on the GPU ("), std::string::npos) << r.err;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(json));
}

// synth --window N: a grad window of N steps from the full step, every parameter's grad at each;
// optim replays it (no end-of-window weights: the fp32 replay says why it is skipped).
TEST(OptimCli, SynthWindowGivesADriftOfItsSteps) {
  const std::string dir = test::temp_dir(), trace = dir + "/win.h5", json = dir + "/o.json";
  const auto w = run_fp8sim(
      {"synth", "--model", "tiny-llama", "--layers", "1", "--tokens", "64", "--window", "3", "--out", trace});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const auto dry =
      run_fp8sim({"synth", "--model", "tiny-llama", "--layers", "1", "--tokens", "64", "--window", "3", "--dry-run"});
  const auto one = run_fp8sim({"synth", "--model", "tiny-llama", "--layers", "1", "--tokens", "64", "--dry-run"});
  EXPECT_NE(dry.out, one.out) << "the window's grads are counted";
  const auto r = run_fp8sim({"optim", trace, "--recipe", "coat", "--no-table1", "--json", json, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json doc = Json::parse(read_text_file(json));
  EXPECT_EQ(doc["window"]["steps"].as_int(), 3);
  EXPECT_EQ(doc["window"]["step0"].as_int(), 99);
  EXPECT_EQ(doc["drift"]["coat"]["steps"].size(), 3u);
  EXPECT_TRUE(doc["fp32_replay_max_rel_err"].is_null());
  EXPECT_NE(doc["fp32_replay"]["skipped"].as_string().find("end-of-window weights"), std::string::npos);
  for (const char* bad : {"-1", "1001"}) {
    const auto b = run_fp8sim({"synth", "--window", bad, "--out", dir + "/never.h5"});
    EXPECT_EQ(b.exit_code, 2) << bad;
    EXPECT_TRUE(one_line(b.err)) << b.err;
    EXPECT_NE(b.err.find("--window"), std::string::npos) << b.err;
    EXPECT_FALSE(fs::exists(dir + "/never.h5"));
  }
}

// Moments but no grad window: Table 1 and memory run with --no-drift; drift needs the window.
TEST(OptimCli, MomentsWithoutWindow) {
  const std::string path = test::temp_dir() + "/moments.h5";
  {
    trace::TraceHeader h;
    h.producer = "test_optim_cli";
    h.model_kind = "generic";
    h.optimizer.name = "torch.optim.AdamW";
    h.optimizer.beta1 = 0.9;
    h.optimizer.beta2 = 0.999;
    h.optimizer.eps = 1e-8;
    h.optimizer.weight_decay = 0.0;
    trace::TraceWriter w(path, h);
    trace::StepInfo si;
    si.step = 6;
    si.adamw_step = 5;
    si.contents = "full";
    w.set_step(si);
    std::vector<float> m(300), v(300);
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = (i % 2 ? 1.0f : -1.0f) * 1e-4f * static_cast<float>(i % 37 + 1);
      v[i] = 1e-9f * static_cast<float>((i % 91) * (i % 91) + 1);
    }
    trace::TensorInfo t;
    t.step = 6;
    t.name = "w";
    t.shape = {3, 100};
    t.role = trace::Role::ExpAvg;
    w.write(t, m.data());
    t.role = trace::Role::ExpAvgSq;
    w.write(t, v.data());
    w.commit();
  }
  const auto r = run_fp8sim({"optim", path, "--no-drift"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Table 1"), std::string::npos);
  EXPECT_NE(r.out.find("fp32 replay skipped"), std::string::npos);
  const auto d = run_fp8sim({"optim", path});
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.err.find("--no-drift"), std::string::npos) << d.err;
}

}  // namespace
}  // namespace fp8sim
