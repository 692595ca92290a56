// scripts/capture_trace.py end to end: a few steps of real PyTorch training in both modes, read
// back by the C++ reader. Needs a Python with torch and h5py: $FP8SIM_TORCH_PYTHON, else the
// project's .venv (scripts/setup.sh puts PyTorch there under FP8SIM_WITH_TORCH=1, as CI does),
// else python3; without one the tests skip and say why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "sim/common/check.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::trace {
namespace {

namespace fs = std::filesystem;

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The first interpreter that imports torch and h5py, or "" (the reason goes to `why`).
std::string torch_python(std::string& why) {
  std::vector<std::string> cands;
  if (const char* e = std::getenv("FP8SIM_TORCH_PYTHON")) cands.push_back(e);
  cands.push_back(std::string(FP8SIM_SOURCE_DIR) + "/.venv/bin/python");
  cands.push_back("python3");
  for (const auto& c : cands) {
    const auto r = test::run_shell(quote(c) + " -c 'import torch, h5py, numpy'");
    if (r.exit_code == 0) return c;
  }
  why = "no Python with torch + h5py (set FP8SIM_TORCH_PYTHON, or FP8SIM_WITH_TORCH=1 bash scripts/setup.sh)";
  return "";
}

const std::string kScript = std::string(FP8SIM_SOURCE_DIR) + "/scripts/capture_trace.py";

TEST(TraceCapture, LlamaModeWritesEveryRoleAndACompleteWindow) {
  std::string why;
  const std::string py = torch_python(why);
  if (py.empty()) GTEST_SKIP() << why;
  const std::string dir = test::temp_dir();
  {
    std::ofstream(dir + "/m.json") << R"({"name": "t", "hidden_size": 32, "intermediate_size": 96,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
      "norm": "rmsnorm", "activation": "swiglu", "tie_word_embeddings": false})";
  }
  const std::string out = dir + "/t.h5";
  const auto r = test::run_shell(quote(py) + " " + quote(kScript) + " llama --model " + quote(dir + "/m.json") +
                                 " --steps 6 --batch 4 --seq 32 --warmup 2 --capture-steps 4 --window 3:3"
                                 " --eval-every 3 --eval-batches 1 --corpus-bytes 200000 --threads 1 --device cpu"
                                 " --out " +
                                 quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TraceReader t(out);
  EXPECT_EQ(t.header().model_kind, "llama");
  EXPECT_EQ(t.header().model_config.at("num_key_value_heads").as_int(), 2);
  ASSERT_TRUE(t.header().grad_window.has_value());
  EXPECT_EQ(t.header().grad_window->first, 3);
  EXPECT_EQ(t.header().grad_window->second, 5);
  // Steps 3..5 (window), 4 (also the full dump), 6 (state after the window).
  std::vector<int64_t> steps;
  for (const auto& s : t.steps()) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 5, 6}));
  std::set<Role> roles;
  for (size_t i : t.find_step(4)->tensors) roles.insert(t.tensors()[i].role);
  EXPECT_EQ(roles.size(), 6u) << "the full dump holds all six roles";
  // Untied: 2 blocks x 9 + embedding + norm + lm_head.
  EXPECT_EQ(t.select({.step = 4, .role = Role::Weight}).size(), 21u);
  EXPECT_EQ(t.select({.step = 6, .role = Role::Weight}).size(), 21u);
  EXPECT_EQ(*t.find_step(3)->adamw_step, 2);
  EXPECT_EQ(*t.find_step(6)->adamw_step, 5);
  // GQA: k_proj is (kv_heads * head_dim, hidden) = (16, 32).
  EXPECT_EQ(t.find(4, Role::Weight, "layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{16, 32}));
  const TensorInfo* qkv = t.find(4, Role::Activation, "layers.0.self_attn.q_proj.input");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->modules.size(), 3u);
  EXPECT_EQ(qkv->op, "linear_input");
  for (const auto& x : t.tensors()) EXPECT_EQ(count_nonfinite(t.read(x)).total(), 0u) << x.path;
}

TEST(TraceCapture, GenericModeHooksAnyModule) {
  std::string why;
  const std::string py = torch_python(why);
  if (py.empty()) GTEST_SKIP() << why;
  const std::string dir = test::temp_dir();
  {
    std::ofstream(dir + "/factory.py") << R"(
import torch, torch.nn as nn
def make():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=False)
    g = torch.Generator().manual_seed(0)
    def loss_fn(model, step):
        x = torch.randn(32, 8, generator=g)
        return (model(x) - x[:, :4]).pow(2).mean()
    return m, opt, loss_fn
)";
  }
  const std::string out = dir + "/g.h5";
  const auto r =
      test::run_shell(quote(py) + " " + quote(kScript) + " generic --factory " + quote(dir + "/factory.py:make") +
                      " --steps 5 --capture-steps 3 --window 2:3 --out " + quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TraceReader t(out);
  EXPECT_EQ(t.header().model_kind, "generic");
  // Two linears and a ReLU: their inputs; the linears' output grads, weights and biases.
  EXPECT_EQ(t.select({.step = 3, .role = Role::Activation}).size(), 3u);
  const TensorInfo* relu = t.find(3, Role::Activation, "1.input");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->op, "act_input");
  EXPECT_EQ(t.find(3, Role::Activation, "0.input")->op, "linear_input");
  EXPECT_EQ(t.select({.step = 3, .role = Role::ActivationGrad}).size(), 2u);
  EXPECT_EQ(t.select({.step = 3, .role = Role::ExpAvgSq}).size(), 4u);
  const TensorInfo* w = t.find(3, Role::Weight, "2.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->op, "linear");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 16}));
  EXPECT_NE(t.find(4, Role::Grad, "0.bias"), nullptr) << "last step of the window 2..4";
  EXPECT_NE(t.find(5, Role::Weight, "0.bias"), nullptr) << "state after the window";
  EXPECT_EQ(t.find_step(5)->contents, "state");
}

TEST(TraceCapture, RefusesABadWindowWithoutLeavingAFile) {
  std::string why;
  const std::string py = torch_python(why);
  if (py.empty()) GTEST_SKIP() << why;
  const std::string dir = test::temp_dir();
  const auto r =
      test::run_shell(quote(py) + " " + quote(kScript) + " generic --factory " + quote(kScript + ":demo_mlp") +
                      " --steps 3 --window 1:2 --out " + quote(dir + "/x.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("must start after step 1"), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
}  // namespace fp8sim::trace
