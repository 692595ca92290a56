// GPU AdamW steps (gpu/optim) against the CPU reference (sim/optim): parameters, moment codes,
// scales, k and c bit for bit after several consecutive steps, for every state recipe, through
// the fused one-pass kernel and the three-phase path, on awkward and real sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/optim/adamw.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/optim/state_recipe.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

template <class T>
int64_t count_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}

void expect_same_state(const optim::ParamOptimState& c, const optim::ParamOptimState& g, const std::string& ctx) {
  for (int which = 0; which < 2; ++which) {
    const optim::MomentState& a = which ? c.v : c.m;
    const optim::MomentState& b = which ? g.v : g.m;
    const char* name = which ? "v" : "m";
    if (a.spec.is_fp32()) {
      EXPECT_EQ(count_diff(a.fp32, b.fp32), 0) << ctx << " " << name << " fp32 values";
      continue;
    }
    EXPECT_EQ(count_diff(a.q.codes, b.q.codes), 0) << ctx << " " << name << " codes";
    EXPECT_EQ(count_diff(a.q.scales, b.q.scales), 0) << ctx << " " << name << " scales";
    EXPECT_EQ(count_diff(a.q.expand_k, b.q.expand_k), 0) << ctx << " " << name << " k";
    EXPECT_EQ(count_diff(a.q.expand_c, b.q.expand_c), 0) << ctx << " " << name << " c";
  }
}

struct Case {
  std::string recipe;
  optim::UpdateRule rule;
  bool fused;
};

void run_case(const Case& cs, int64_t n, int steps) {
  const optim::StateRecipe r = cs.recipe == "coat+sr" ? optim::StateRecipe::parse("coat").with_rounding(Rounding::Stochastic, 77)
                                                      : optim::StateRecipe::parse(cs.recipe);
  if (cs.fused && !optim::grouped_step_supported(r)) GTEST_SKIP() << cs.recipe << " has no fused path";
  std::vector<float> p = test::lognormal_data(static_cast<size_t>(n), 1, 3.0);
  for (auto& x : p) x *= 0.02f;
  std::vector<float> m0 = test::lognormal_data(static_cast<size_t>(n), 2, 4.0);
  std::vector<float> v0 = test::lognormal_data(static_cast<size_t>(n), 3, 4.0, false);
  for (auto& x : m0) x *= 1e-4f;
  for (auto& x : v0) x = std::fabs(x) * 1e-8f;
  optim::AdamwHyper h;
  h.lr = 3e-4;
  h.weight_decay = 0.1;
  const uint64_t param_index = 3;
  const int64_t t0 = 41;  // state belongs to step t0; the steps run t0+1 ...
  optim::ParamOptimState sc = optim::make_param_state(r, m0.data(), v0.data(), n, param_index, t0);
  optim::ParamOptimState sg = sc;
  std::vector<float> pc = p, pg = p;
  optim::LowpScratch scratch;
  for (int s = 1; s <= steps; ++s) {
    const std::vector<float> g = test::lognormal_data(static_cast<size_t>(n), 100 + s, 3.0);
    const uint64_t step = static_cast<uint64_t>(t0 + s);
    const optim::AdamwStepConsts c = optim::make_step_consts(h, static_cast<int64_t>(step), cs.rule);
    if (r.is_fp32()) {
      std::vector<float> mg = sg.m.fp32, vg = sg.v.fp32;
      optim::adamw_step_fp32(pc.data(), g.data(), sc.m.fp32.data(), sc.v.fp32.data(), static_cast<size_t>(n), c);
      gpu::DeviceBuffer<float> dp = gpu::to_device(pg), dg = gpu::to_device(g), dm = gpu::to_device(mg),
                               dv = gpu::to_device(vg);
      gpu::adamw_fp32_cuda(dp.get(), dg.get(), dm.get(), dv.get(), static_cast<size_t>(n), c, nullptr);
      pg = dp.download();
      sg.m.fp32 = dm.download();
      sg.v.fp32 = dv.download();
    } else {
      optim::lowp_adamw_step(pc.data(), g.data(), sc, c, param_index, step, scratch);
      gpu::lowp_adamw_step_on_gpu(pg.data(), g.data(), sg, c, param_index, step, cs.fused);
    }
    const std::string ctx = cs.recipe + (cs.fused ? " fused" : " three-phase") + " n=" + std::to_string(n) +
                            " step " + std::to_string(s);
    EXPECT_EQ(count_diff(pc, pg), 0) << ctx << " parameters";
    expect_same_state(sc, sg, ctx);
    if (::testing::Test::HasFailure()) return;  // later steps would only repeat the first divergence
  }
}

const std::vector<int64_t> kSizes = {1, 5, 217, 128 * 3 + 7, 4096 + 100};

TEST(AdamwGpu, Fp32StatesTorchRule) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (auto n : kSizes) run_case({"fp32", optim::UpdateRule::Torch, false}, n, 3);
}

TEST(AdamwGpu, CoatFusedKernel) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (auto n : kSizes) run_case({"coat", optim::UpdateRule::Coat, true}, n, 3);
  for (auto n : kSizes) run_case({"coat", optim::UpdateRule::Torch, true}, n, 2);
}

TEST(AdamwGpu, CoatStochasticRoundingFused) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (auto n : kSizes) run_case({"coat+sr", optim::UpdateRule::Coat, true}, n, 3);
}

TEST(AdamwGpu, CoatNoExpandFused) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (auto n : kSizes) run_case({"coat-noexpand", optim::UpdateRule::Coat, true}, n, 3);
}

TEST(AdamwGpu, EveryRecipeThreePhase) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* rcp : {"coat", "coat-noexpand", "te-fp8", "fp8lm", "bf16", "m=e5m2:g128:de=coat,v=e4m3:g64:de=robust"})
    for (auto n : kSizes) run_case({rcp, optim::UpdateRule::Coat, false}, n, 2);
}

TEST(AdamwGpu, Llama2MlpWeightSize) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 4096 x 11008 parameters: the size the bench times (the CPU reference runs multi-threaded).
  run_case({"coat", optim::UpdateRule::Coat, true}, int64_t{4096} * 11008, 1);
}

}  // namespace
}  // namespace fp8sim
