// analyze --memory-budget: a tensor over the budget is read (TraceReader::read_rows, a hyperslab)
// and measured in slabs of rows, and every number equals the one-piece run's: the JSON is the same
// byte for byte with and without slabs, for every recipe of the registry and for a recipe that
// takes every path a slab must get right (delayed and per-tensor scales from a first pass over
// the amax, NVFP4's two-level scales, stochastic rounding keyed on the element index, 128x128
// blocks, DE on flattened moments, histograms).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A one-layer Llama wide enough that weights, moments and activations span several slabs.
std::string synth_trace(const std::string& dir) {
  const std::string cfg = dir + "/wide.json", trace = dir + "/wide.h5";
  spit(cfg, R"({"name": "wide-test", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "norm": "rmsnorm",
    "activation": "swiglu", "tie_word_embeddings": false})");
  const test::CommandResult r =
      test::run_fp8sim({"synth", "--model", cfg, "--tokens", "1024", "--seed", "3", "--out", trace});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return trace;
}

const char* kEveryPath = R"({"name": "slab-paths", "rules": [
  {"role": "activation", "op": "linear_input", "spec": "e4m3:tensor:delayed=16,recent"},
  {"role": "activation", "op": "norm_input", "spec": "e2m1:g16:scale=e4m3"},
  {"role": "activation", "op": "silu_input", "spec": "e4m3:g128:round=stochastic"},
  {"role": "activation", "op": "*", "spec": "e4m3:row"},
  {"role": "activation_grad", "op": "*", "spec": "e5m2:tensor:scale=pow2"},
  {"role": "weight", "op": "linear", "spec": "e4m3:b128x128"},
  {"role": "weight", "op": "embedding", "spec": "e2m1:g32:scale=e8m0:mx=floor:round=stochastic"},
  {"role": "grad", "op": "*", "spec": "e4m3:tensor"},
  {"role": "exp_avg", "op": "*", "spec": "e4m3:g128:de=coat"},
  {"role": "exp_avg_sq", "op": "*", "spec": "e4m3:g128:de=robust"},
  {"role": "*", "op": "*", "spec": "none"}]})";

// Runs analyze with the budget (GiB) and returns the JSON; `slabbed` gets the tensors cut.
std::string analyze(const std::string& trace, const std::string& recipe, const std::string& budget,
                    const std::string& out, int& slabbed, bool histograms = true) {
  std::vector<std::string> args = {"analyze", trace, "--recipe",        recipe, "--no-gemm", "--timing",
                                   "--json",  out,   "--memory-budget", budget};
  if (histograms) args.emplace_back("--histograms");
  const test::CommandResult r = test::run_fp8sim(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.err.find(" tensor(s) read in slabs");
  EXPECT_NE(at, std::string::npos) << r.err;
  const size_t from = r.err.rfind(' ', at - 1);
  slabbed = at == std::string::npos ? -1 : std::stoi(r.err.substr(from + 1, at - from - 1));
  return slurp(out);
}

TEST(AnalyzeSlabs, SameJsonAsWholeTensors) {
  const std::string dir = test::temp_dir(), trace = synth_trace(dir), paths = dir + "/paths.json";
  spit(paths, kEveryPath);
  std::vector<std::string> recipes = recipe::names();
  recipes.push_back(paths);
  // Without --histograms a whole tensor's error sums are made a few chunks at a time from its
  // stored values, while a slab widens and dequantizes whole: two independent paths.
  for (const std::string& rec : recipes)
    for (const bool histograms : {true, false}) {
      SCOPED_TRACE(rec + (histograms ? " --histograms" : ""));
      int whole_cut = 0, slab_cut = 0;
      const std::string whole = analyze(trace, rec, "0", dir + "/whole.json", whole_cut, histograms);
      const std::string slabs = analyze(trace, rec, "0.0002", dir + "/slabs.json", slab_cut, histograms);
      EXPECT_EQ(whole_cut, 0);
      EXPECT_GE(slab_cut, 10) << "too few tensors were cut to test anything";
      EXPECT_TRUE(whole == slabs) << "the JSON differs with slabs";
    }
}

TEST(AnalyzeSlabs, ReadRowsIsASliceOfTheWholeTensor) {
  const std::string dir = test::temp_dir(), trace = synth_trace(dir);
  const trace::TraceReader r(trace);
  int checked = 0;
  for (const trace::TensorInfo& t : r.tensors()) {
    const size_t dim = trace::slab_dim(t.shape);
    if (t.shape.empty() || t.shape[dim] < 3) continue;
    const trace::TensorData whole = r.read(t), part = r.read_rows(t, 1, t.shape[dim] - 2);
    const size_t per_row = whole.size() / static_cast<size_t>(t.shape[dim]);
    ASSERT_EQ(part.size(), per_row * static_cast<size_t>(t.shape[dim] - 2)) << t.name;
    EXPECT_EQ(part.shape[dim], t.shape[dim] - 2);
    for (size_t i = 0; i < part.size(); ++i)
      ASSERT_EQ(part.value(i), whole.value(i + per_row)) << t.name << " element " << i;
    ++checked;
  }
  EXPECT_GT(checked, 10);
  const trace::TensorInfo& t0 = r.tensors().front();
  EXPECT_THROW(r.read_rows(t0, 0, t0.shape[trace::slab_dim(t0.shape)] + 1), Error);
}

TEST(AnalyzeSlabs, BadBudgetIsAUsageError) {
  for (const char* bad : {"-1", "lots", "", "1e9"}) {
    const test::CommandResult r =
        test::run_fp8sim({"analyze", test::sample_trace(), "--no-gemm", "--memory-budget", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--memory-budget"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace fp8sim
