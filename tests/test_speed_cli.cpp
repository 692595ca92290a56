// `fp8sim speed` as a user runs it: modelled output from a calibration file, the JSON and
// Markdown it writes, and one-line errors with the right exit code for bad input.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/speed/calibrate.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/kernel_versions.hpp"
#include "sim/speed/plan.hpp"
#include "sim/speed/speed.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::speed {
namespace {

using test::run_fp8sim;
using test::run_shell;

// A calibration measured on a synthetic device for llama2-7b, batch 2, seq 2048 (every recipe)
// and Figure 4(b)'s kernels: GEMMs at 700 / 1300 TFLOP/s, attention 400, memory kernels 3 TB/s;
// each kernel at the version version_of gives its family (default: this build's).
std::string calibration_file(
    const std::function<int(const KernelFamily&)>& version_of = [](const KernelFamily& f) { return f.version; },
    const std::string& name = "cal.json") {
  Calibration c;
  c.device["name"] = "Synthetic GPU";
  c.created = "2025-11-30T00:00:00Z";
  auto add = [&](const KernelOp& op) {
    Measurement m;
    m.key = op.key();
    m.kind = op.kind;
    m.variant = op.variant;
    m.dims = op.dims;
    m.flops = op.flops;
    m.bytes = op.bytes;
    m.median_ms = m.min_ms = m.max_ms = op.kind == Kind::Gemm
                                            ? op.flops / ((op.variant.rfind("bf16", 0) == 0 ? 700.0 : 1300.0) * 1e9)
                                        : op.kind == Kind::Attention ? op.flops / 400e9
                                                                     : 0.004 + op.bytes / 3e9;
    m.reps = 1;
    if (const KernelFamily* f = kernel_family(op.kind, op.variant)) m.version = version_of(*f);
    c.add(m);
  };
  const ModelShape m = load_model_shape("llama2-7b");
  PlanOptions o;
  o.batch = 2;
  o.seq = 2048;
  for (Plan r : all_plans())
    for (const KernelOp& op : build_plan(m, r, o)) add(op);
  for (const Fig4bPaperRow& p : fig4b_paper()) {
    const Fig4bOps f = fig4b_ops(p.rows, p.cols);
    for (const KernelOp* op : {&f.jit_amax, &f.stage2_reduce, &f.producer_plain, &f.producer_with_gmax}) add(*op);
  }
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << c.to_json().dump();
  return path;
}

void expect_one_line_error(const test::CommandResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("fp8sim speed: error: "), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(SpeedCli, ModelledRunWritesJsonAndMarkdown) {
  const std::string cal = calibration_file();
  const std::string dir = test::temp_dir();
  const auto r = run_fp8sim({"speed", "--model", "llama2-7b", "--batch", "2", "--seq", "2048", "--gpus", "4",
                             "--calibration", cal, "--json", dir + "/s.json", "--markdown", dir + "/s.md", "--ops"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("MODELLED"), 0u) << r.out;  // the first thing a reader sees
  EXPECT_NE(r.out.find("Synthetic GPU"), std::string::npos);
  EXPECT_NE(r.out.find("q_proj.fprop"), std::string::npos);  // --ops lists kernels
  EXPECT_NE(r.out.find("Figure 4(b)"), std::string::npos);
  std::ifstream jf(dir + "/s.json");
  std::stringstream ss;
  ss << jf.rdbuf();
  const Json doc = Json::parse(ss.str());
  ASSERT_EQ(doc.at("recipes").size(), recipe::speed_names().size());  // every recipe with a plan
  EXPECT_FALSE(doc.contains("skipped_recipes"));
  for (const Json& rj : doc.at("recipes").as_array()) {
    EXPECT_GT(rj.at("step_ms").as_number(), 0);
    EXPECT_GT(rj.at("tokens_per_s_per_gpu").as_number(), 0);
    EXPECT_TRUE(rj.at("speedup_vs_bf16").is_number());
  }
  EXPECT_DOUBLE_EQ(doc.at("recipes").as_array()[0].at("speedup_vs_bf16").as_number(), 1.0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/s.md"));
}

TEST(SpeedCli, PerRecipeBatchAndSubsetOfRecipes) {
  const std::string cal = calibration_file();
  const std::string dir = test::temp_dir();
  const auto r = run_fp8sim({"speed", "--recipes", "coat", "--batch", "coat=4", "--calibration", cal, "--no-fig4b",
                             "--json", dir + "/c.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream jf(dir + "/c.json");
  std::stringstream ss;
  ss << jf.rdbuf();
  const Json doc = Json::parse(ss.str());
  ASSERT_EQ(doc.at("recipes").size(), 1u);
  const Json& coat = doc.at("recipes").as_array()[0];
  EXPECT_EQ(coat.at("batch").as_int(), 4);
  // Batch 4 was not measured: its kernels are fitted, and the output says so.
  EXPECT_LT(coat.at("measured_fraction").as_number(), 0.5);
  EXPECT_FALSE(doc.contains("fig4b"));
}

TEST(SpeedCli, NoCalibrationIsAClearError) {
  const auto r =
      run_shell("FP8SIM_CALIBRATION=/nonexistent/cal.json CUDA_VISIBLE_DEVICES= " + std::string(FP8SIM_BINARY) +
                " speed --model llama2-7b");
  expect_one_line_error(r, 1, "no calibration exists");
}

TEST(SpeedCli, BadInputGivesOneLineErrorsAndNoOutputFile) {
  const std::string cal = calibration_file();
  const std::string dir = test::temp_dir();
  expect_one_line_error(run_fp8sim({"speed", "--recipes", "bf16,fp4", "--calibration", cal}), 2, "fp4");
  expect_one_line_error(run_fp8sim({"speed", "--recipes", "bf16,bf16", "--calibration", cal}), 2, "twice");
  expect_one_line_error(run_fp8sim({"speed", "--batch", "0", "--calibration", cal}), 2, "--batch");
  expect_one_line_error(run_fp8sim({"speed", "--batch", "bf16=two", "--calibration", cal}), 2, "--batch");
  expect_one_line_error(run_fp8sim({"speed", "--seq", "-5", "--calibration", cal}), 2, "--seq");
  // The communication's details need the communication model; a fit is a bench_allgather.py document.
  expect_one_line_error(run_fp8sim({"speed", "--fp8-allgather", "--calibration", cal}), 2, "add --fsdp-comm");
  expect_one_line_error(run_fp8sim({"speed", "--fsdp-comm", "serial", "--reduce-dtype", "fp16", "--calibration", cal}),
                        2, "--reduce-dtype must be bf16 or fp32");
  expect_one_line_error(run_fp8sim({"speed", "--fsdp-comm", "serial", "--comm-fit", cal, "--calibration", cal}), 1,
                        "not a scripts/bench_allgather.py document");
  expect_one_line_error(run_fp8sim({"speed", "--fsdp-comm", "maybe", "--calibration", cal}), 2, "--fsdp-comm");
  expect_one_line_error(run_fp8sim({"speed", "--gpus", "x", "--calibration", cal}), 2, "gpus");
  expect_one_line_error(run_fp8sim({"speed", "--calibration", cal, "--torch-times", "t.json"}), 2, "--torch-times");
  expect_one_line_error(run_fp8sim({"speed", "--model", "no-such-model", "--calibration", cal}), 2, "no-such-model");
  expect_one_line_error(run_fp8sim({"speed", "--seq", "1000", "--batch", "1", "--calibration", cal}), 2, "16");
  // A corrupt calibration: error names the file, and --json is not written.
  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << "{\"schema\": \"fp8sim-speed-calibration/1\", \"measurements\": [{\"kind\": \"gemm\"}]}";
  expect_one_line_error(run_fp8sim({"speed", "--calibration", bad, "--json", dir + "/out.json"}), 1, "bad.json");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.json"));
  expect_one_line_error(run_fp8sim({"speed", "--calibration", dir + "/nope.json"}), 1, "nope.json");
}

TEST(SpeedCli, WarnsOnceForEachKernelFamilyTheCalibrationTimesAtAnotherVersion) {
  const std::string dir = test::temp_dir();
  // Current: no warning, and the document names nothing stale.
  auto r = run_fp8sim({"speed", "--calibration", calibration_file(), "--json", dir + "/fresh.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_FALSE(Json::parse(read_text_file(dir + "/fresh.json")).at("timing").contains("stale_kernels"));
  // rmsnorm measured before versions were recorded, add at a later version than this build's.
  const std::string stale = calibration_file(
      [](const KernelFamily& f) {
        return std::string(f.name) == "rmsnorm" ? 0 : std::string(f.name) == "add" ? f.version + 1 : f.version;
      },
      "stale.json");
  r = run_fp8sim({"speed", "--calibration", stale, "--json", dir + "/stale.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  const auto rms = r.err.find("fp8sim speed: warning: "), add = r.err.find("fp8sim speed: warning: ", rms + 1);
  ASSERT_NE(add, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rmsnorm kernel time(s) of the calibration"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("before kernel versions were recorded"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("add kernel time(s) of the calibration '{}' were measured at version {}", stale,
                                   kAddKernelVersion + 1)),
            std::string::npos)
      << r.err;
  const Json doc = Json::parse(read_text_file(dir + "/stale.json"));
  const Json& st = doc.at("timing").at("stale_kernels");
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st.as_array()[0].at("family").as_string(), "rmsnorm");
  EXPECT_EQ(st.as_array()[1].at("family").as_string(), "add");
  EXPECT_EQ(st.as_array()[1].at("build_version").as_int(), kAddKernelVersion);
}

TEST(CalibrateCli, ListsTheSetWithoutAGpuAndRefusesBadInput) {
  auto r = run_fp8sim({"calibrate", "--list", "--model", "llama2-7b", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> notes;
  const auto ops = calibration_kernels({{"llama2-7b", 2, 2048}}, notes);
  EXPECT_NE(r.out.find(fmt::format("{} kernels\n", ops.size())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rmsnorm_fwd bf16>bf16"), std::string::npos) << r.out;
  r = run_fp8sim({"calibrate", "--list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" kernels\n"), std::string::npos) << r.out;

  auto one_line = [](const test::CommandResult& res, int code, const std::string& needle) {
    EXPECT_EQ(res.exit_code, code) << res.err;
    EXPECT_NE(res.err.find(needle), std::string::npos) << res.err;
    EXPECT_EQ(res.err.find("fp8sim calibrate: error: "), 0u) << res.err;
    EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1) << res.err;
  };
  one_line(run_fp8sim({"calibrate"}), 2, "--out");
  one_line(run_fp8sim({"calibrate", "--batch", "2", "--out", "x.json"}), 2, "--model");
  one_line(run_fp8sim({"calibrate", "--model", "llama2-7b", "--batch", "0", "--list"}), 2, "--batch");
  one_line(run_fp8sim({"calibrate", "--model", "llama2-7b,", "--list"}), 2, "empty");
  one_line(run_fp8sim({"calibrate", "--model", "no-such-model", "--list"}), 2, "no-such-model");
  one_line(run_fp8sim({"calibrate", "--reps", "0", "--out", "x.json"}), 2, "--reps");
}

// Update mode: only the named families are re-timed, the file's other measurements, PyTorch's
// times and provenance stay, and the update is recorded; names and combinations are checked
// before any GPU is asked for.
TEST(CalibrateCli, UpdateReplacesOnlyTheNamedFamilies) {
  std::vector<std::string> notes;
  const std::vector<KernelOp> all = calibration_kernels({{"llama2-7b", 2, 2048}}, notes);
  const std::vector<KernelOp> opt = kernels_of_families(all, {"adamw_fp8lm", "adamw_bf16m"});
  ASSERT_EQ(opt.size(), 2u);
  for (const KernelOp& op : opt) EXPECT_EQ(op.kind, Kind::Optimizer) << op.key();
  EXPECT_THROW(kernels_of_families(all, {"adamw_fp8lm", "nope"}), UsageError);

  // Every measurement a step behind in version; the update re-times the optimizers at this build's.
  const Calibration old = Calibration::load(calibration_file([](const KernelFamily& f) { return f.version - 1; }));
  Calibration fresh;
  fresh.device["name"] = "NVIDIA H200";
  for (const KernelOp& op : opt) {
    Measurement m = *old.find(op.key());
    m.median_ms *= 0.5;
    m.min_ms = m.max_ms = m.median_ms;
    m.version = kernel_family(op.kind, op.variant)->version;
    fresh.add(m);
  }
  const Calibration u =
      updated_calibration(old, fresh, {"adamw_fp8lm", "adamw_bf16m"}, "2026-01-01T00:00:00Z", "abc", "fp8sim x");
  EXPECT_EQ(u.measurements().size(), old.measurements().size());
  for (const auto& [key, m] : u.measurements()) {
    const Measurement* f = fresh.find(key);
    EXPECT_EQ(m.median_ms, f ? f->median_ms : old.find(key)->median_ms) << key;
  }
  EXPECT_EQ(u.created, old.created);
  ASSERT_EQ(u.updates.size(), 1u);
  EXPECT_EQ(u.updates.as_array()[0].at("commit").as_string(), "abc");
  EXPECT_EQ(u.updates.as_array()[0].at("kernels").as_int(), 2);
  EXPECT_EQ(u.updates.as_array()[0].at("device").as_string(), "NVIDIA H200");
  // The stale families are now every one but the two re-timed, and the record survives a round trip.
  std::set<std::string> stale;
  for (const StaleFamily& sf : u.stale_families(all)) stale.insert(sf.family);
  EXPECT_FALSE(stale.count("adamw_fp8lm"));
  EXPECT_FALSE(stale.count("adamw_bf16m"));
  EXPECT_TRUE(stale.count("rmsnorm"));
  const Calibration back = Calibration::from_json(Json::parse(u.to_json().dump()), "round trip");
  EXPECT_EQ(back.updates.dump(), u.updates.dump());

  auto one_line = [](const test::CommandResult& res, int code, const std::string& needle) {
    EXPECT_EQ(res.exit_code, code) << res.err;
    EXPECT_NE(res.err.find(needle), std::string::npos) << res.err;
    EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1) << res.err;
  };
  const std::string cal = calibration_file(), dir = test::temp_dir();
  one_line(run_fp8sim({"calibrate", "--update", cal, "--out", dir + "/a.json"}), 2, "--families");
  one_line(run_fp8sim({"calibrate", "--families", "rmsnorm", "--out", dir + "/a.json"}), 2, "--update");
  one_line(run_fp8sim({"calibrate", "--update", cal, "--families", "rmsnorm,nope", "--out", dir + "/a.json"}), 2,
           "unknown kernel family 'nope'");
  one_line(run_fp8sim(
               {"calibrate", "--update", cal, "--families", "rmsnorm", "--torch-times", cal, "--out", dir + "/a.json"}),
           2, "PyTorch");
  one_line(
      run_fp8sim({"calibrate", "--update", dir + "/missing.json", "--families", "rmsnorm", "--out", dir + "/a.json"}),
      1, "missing.json");
  one_line(run_fp8sim({"calibrate", "--update", cal, "--families", "rmsnorm", "--out", cal}), 2, cal);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.json"));
}

TEST(CalibrateCli, WithoutAGpuSaysSoAndWritesNothing) {
  const std::string dir = test::temp_dir();
  const auto r = run_shell("FP8SIM_GPU_MODULE=/nonexistent/libfp8sim_gpu.so " + std::string(FP8SIM_BINARY) +
                           " calibrate --model llama2-7b --batch 2 --out " + dir + "/cal.json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("GPU"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/cal.json"));
}

TEST(SpeedCli, HelpTeachesWithExamples) {
  const auto r = run_fp8sim({"speed", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
  EXPECT_NE(r.out.find("MODELLED"), std::string::npos);
  EXPECT_NE(r.out.find("--calibration"), std::string::npos);
}

}  // namespace
}  // namespace fp8sim::speed
