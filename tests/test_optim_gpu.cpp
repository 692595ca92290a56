// GPU AdamW steps (gpu/optim) against the CPU reference (sim/optim): parameters, moment codes,
// scales, k and c bit for bit after several consecutive steps, for every state recipe, through
// the fused one-pass kernels (per group, elementwise states) and the three-phase path, on awkward
// and real sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/optim/adamw.hpp"
#include "gpu/optim/adamw_launch.hpp"
#include "gpu/optim/drift.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/direction.hpp"
#include "sim/optim/drift.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/optim/replay.hpp"
#include "sim/optim/sharded.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/spec.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

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

// "X+sr": preset X with stochastic rounding (seed 77).
optim::StateRecipe case_recipe(const std::string& name) {
  const auto plus = name.find("+sr");
  if (plus == std::string::npos) return optim::StateRecipe::parse(name);
  return optim::StateRecipe::parse(name.substr(0, plus)).with_rounding(Rounding::Stochastic, 77);
}

// Parameters, and moments spanning many decades as Adam's do, for a step test of n elements.
struct StepData {
  std::vector<float> p, m0, v0;
};
StepData step_data(int64_t n) {
  StepData d{test::lognormal_data(static_cast<size_t>(n), 1, 3.0), test::lognormal_data(static_cast<size_t>(n), 2, 4.0),
             test::lognormal_data(static_cast<size_t>(n), 3, 4.0, false)};
  for (auto& x : d.p) x *= 0.02f;
  for (auto& x : d.m0) x *= 1e-4f;
  for (auto& x : d.v0) x = std::fabs(x) * 1e-8f;
  return d;
}

// `specials`: some gradients NaN or +-Inf (their moments become non-finite: the per-tensor
// scales' amax leaves them out and the encoders store them as the CPU does).
void run_case(const Case& cs, int64_t n, int steps, bool specials = false) {
  const optim::StateRecipe r = case_recipe(cs.recipe);
  if (cs.fused && !optim::grouped_step_supported(r)) GTEST_SKIP() << cs.recipe << " has no fused path";
  const StepData data = step_data(n);
  const std::vector<float>&p = data.p, &m0 = data.m0, &v0 = data.v0;
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
    std::vector<float> g = test::lognormal_data(static_cast<size_t>(n), 100 + s, 3.0);
    if (specials && n > 7) {
      g[static_cast<size_t>(n / 3)] = std::nanf("");
      g[static_cast<size_t>(n / 2)] = s % 2 ? INFINITY : -INFINITY;
      if (n > 15) {  // a negative NaN with a payload: the step stores the one quiet NaN
        uint32_t bits = 0xFFC12345u;
        std::memcpy(&g[static_cast<size_t>(n / 4)], &bits, sizeof bits);
      }
    }
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
    const std::string ctx =
        cs.recipe + (cs.fused ? " fused" : " three-phase") + " n=" + std::to_string(n) + " step " + std::to_string(s);
    EXPECT_EQ(count_diff(pc, pg), 0) << ctx << " parameters";
    expect_same_state(sc, sg, ctx);
    if (::testing::Test::HasFailure()) return;  // later steps would only repeat the first divergence
  }
}

// 128 * 40: every group of 128 whole, so the fused launches take the kernel without element-wise
// paths (checked in CoatFusedShortcutsOffGiveTheSameBits).
const std::vector<int64_t> kSizes = {1, 5, 217, 128 * 3 + 7, 4096 + 100, 128 * 40};

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

// NaN and Inf gradients through the fp32 kernel, the whole-group FP8 kernels (with and without DE,
// whole groups and a ragged tail) and the three phases: the same p, codes and scales as the CPU,
// NaN as 0x7FC00000 (ElementwiseStatesEqualTheCpu covers the elementwise-state kernels).
TEST(AdamwGpu, SpecialGradientsGiveTheCpuBitsOnTheFp32AndWholeGroupKernels) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{4096 + 100}, int64_t{128 * 40}}) {
    run_case({"fp32", optim::UpdateRule::Torch, false}, n, 3, /*specials=*/true);
    run_case({"coat", optim::UpdateRule::Coat, true}, n, 3, /*specials=*/true);
    run_case({"coat", optim::UpdateRule::Coat, false}, n, 2, /*specials=*/true);
    run_case({"coat-noexpand", optim::UpdateRule::Coat, true}, n, 3, /*specials=*/true);
  }
}

// Data-parallel ranks stepping FSDP2's dim-0 shards of a weight with the fused DE kernel, shard k on
// GPU k % (GPUs on the host), give the one-GPU step's bits once gathered (sim/optim/sharded.hpp: no
// 1x128 group straddles two shards of a weight whose rows are a multiple of 128). Nearest
// rounding and group scales: the GPU kernels key stochastic rounding on the shard's own index and
// take a per-tensor amax over their own shard, which the CPU's sharded step does not.
TEST(AdamwGpu, ShardsOnEachGpuGatherToTheOneGpuStep) {
  FP8SIM_SKIP_WITHOUT_GPU();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const std::vector<int64_t> shape{36, 1024};
  const int64_t n = shape[0] * shape[1];
  for (const char* rcp : {"coat", "coat-noexpand"})
    for (const int64_t ranks : {2, 4}) {
      const optim::StateRecipe r = optim::StateRecipe::parse(rcp);
      const auto shards = optim::fsdp2_shards(shape, ranks);
      ASSERT_EQ(optim::shard_step_problem(r, shards), "");
      const StepData data = step_data(n);
      const std::vector<float>&p = data.p, &m0 = data.m0, &v0 = data.v0;
      optim::ParamOptimState whole = optim::make_param_state(r, m0.data(), v0.data(), n, 5, 10);
      std::vector<optim::ParamOptimState> parts = optim::make_shard_states(r, m0.data(), v0.data(), n, shards, 5, 10);
      std::vector<float> pw = p, ps = p;
      optim::AdamwHyper h;
      h.lr = 3e-4;
      h.weight_decay = 0.1;
      for (int s = 1; s <= 3; ++s) {
        const std::vector<float> g = test::lognormal_data(static_cast<size_t>(n), 50 + s, 3.0);
        const optim::AdamwStepConsts c = optim::make_step_consts(h, 10 + s, optim::UpdateRule::Coat);
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
        gpu::lowp_adamw_step_on_gpu(pw.data(), g.data(), whole, c, 5, static_cast<uint64_t>(10 + s), true);
        for (size_t k = 0; k < shards.size(); ++k) {
          if (shards[k].size() == 0) continue;
          ASSERT_EQ(cudaSetDevice(static_cast<int>(k) % devices), cudaSuccess);
          gpu::lowp_adamw_step_on_gpu(ps.data() + shards[k].begin, g.data() + shards[k].begin, parts[k], c, 5,
                                      static_cast<uint64_t>(10 + s), true);
        }
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
        const std::string ctx = std::string(rcp) + " over " + std::to_string(ranks) + " ranks on " +
                                std::to_string(std::min<int64_t>(ranks, devices)) + " GPU(s), step " +
                                std::to_string(s);
        EXPECT_EQ(count_diff(pw, ps), 0) << ctx << " parameters";
        // Each shard's codes and scales are the whole state's at the shard's elements and groups.
        for (size_t k = 0; k < shards.size(); ++k)
          for (int which = 0; which < 2; ++which) {
            const optim::MomentState& w = which ? whole.v : whole.m;
            const optim::MomentState& part = which ? parts[k].v : parts[k].m;
            const int64_t b = shards[k].begin, e = shards[k].end, g0 = b / 128;
            EXPECT_EQ(std::memcmp(part.q.codes.data(), w.q.codes.data() + b, static_cast<size_t>(e - b)), 0)
                << ctx << " codes of shard " << k;
            for (size_t j = 0; j < part.q.scales.size(); ++j) {
              EXPECT_EQ(std::memcmp(&part.q.scales[j], &w.q.scales[static_cast<size_t>(g0) + j], 4), 0)
                  << ctx << " scale " << j << " of shard " << k;
              if (!w.q.expand_k.empty()) {
                EXPECT_EQ(std::memcmp(&part.q.expand_k[j], &w.q.expand_k[static_cast<size_t>(g0) + j], 4), 0)
                    << ctx << " k " << j << " of shard " << k;
              }
            }
          }
        if (::testing::Test::HasFailure()) return;
      }
    }
}

// adamw_lowp_cuda with the elementwise-state step switched off: every recipe in three phases.
TEST(AdamwGpu, EveryRecipeThreePhase) {
  FP8SIM_SKIP_WITHOUT_GPU();
  gpu::adamw_elementwise_fused(false);
  for (const char* rcp :
       {"coat", "coat-noexpand", "te-fp8", "fp8lm", "bf16", "m=e5m2:g128:de=coat,v=e4m3:g64:de=robust"})
    for (auto n : kSizes) run_case({rcp, optim::UpdateRule::Coat, false}, n, 2);
  gpu::adamw_elementwise_fused(true);
}

// The elementwise-state step (an amax pass where a moment has a per-tensor scale, then the fused
// step) against the CPU's three phases: every kind of elementwise moment (bf16 / fp16 without a
// scale, fp16 / bf16 with a power-of-two or fp32 per-tensor scale, E4M3 / E5M2 per tensor),
// saturating or not, nearest or stochastic rounding, both update rules, non-finite gradients, and
// sizes from 1 element to a multi-block grid.
TEST(AdamwGpu, ElementwiseStatesEqualTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* rcp : {"te-fp8", "fp8lm", "bf16", "te-fp8+sr", "m=e5m2:tensor,v=bf16:tensor:scale=fp32",
                          "m=fp16,v=e4m3:tensor:sat=none", "m=e4m3:tensor:scale=pow2:sat=none,v=fp16:tensor",
                          // the other four pairs of kinds (scaled 16-bit m; unscaled m with scaled v)
                          "m=bf16:tensor:scale=fp32,v=fp16:tensor:scale=pow2", "m=fp16:tensor:scale=fp32,v=e4m3:tensor",
                          "m=bf16:tensor:scale=pow2,v=bf16", "m=bf16,v=fp16:tensor:scale=fp32"}) {
    const optim::StateRecipe r = case_recipe(rcp);
    ASSERT_TRUE(optim::elementwise_step_supported(r)) << rcp;
    for (auto rule : {optim::UpdateRule::Coat, optim::UpdateRule::Torch})
      for (auto n : kSizes) run_case({rcp, rule, false}, n, 3);
    run_case({rcp, optim::UpdateRule::Coat, false}, 4096 + 100, 3, /*specials=*/true);
  }
  // A recipe with a moment the step does not store falls back to the three phases.
  for (const char* rcp : {"m=fp32,v=e4m3:tensor", "m=e4m3:tensor,v=e4m3:g128"}) {
    ASSERT_FALSE(optim::elementwise_step_supported(case_recipe(rcp))) << rcp;
    run_case({rcp, optim::UpdateRule::Coat, false}, 4096 + 100, 2);
  }
  // A parameter the size of a Llama-2-7B MLP weight (the grid loops many times; the amax reduction
  // spans every block).
  run_case({"te-fp8", optim::UpdateRule::Coat, false}, int64_t{4096} * 11008, 1);
}

// The fused BF16-moment step (DeepSeek-V3's optimizer in the speed replay) against the CPU's
// three phases with the bf16 recipe, over consecutive steps, both update rules; `offset` elements
// into the buffers so that the kernel's element-wise path (unaligned pointers) runs too.
void run_bf16_moments(int64_t n, optim::UpdateRule rule, int64_t offset) {
  const optim::StateRecipe r = optim::StateRecipe::parse("bf16");
  std::vector<float> p = test::lognormal_data(static_cast<size_t>(n), 1, 3.0);
  for (auto& x : p) x *= 0.02f;
  std::vector<float> m0 = test::lognormal_data(static_cast<size_t>(n), 2, 4.0);
  std::vector<float> v0 = test::lognormal_data(static_cast<size_t>(n), 3, 4.0, false);
  for (auto& x : m0) x *= 1e-4f;
  for (auto& x : v0) x = std::fabs(x) * 1e-8f;
  optim::AdamwHyper h;
  h.lr = 3e-4;
  h.weight_decay = 0.1;
  const int64_t t0 = 41;
  optim::ParamOptimState sc = optim::make_param_state(r, m0.data(), v0.data(), n, 3, t0);
  ASSERT_EQ(sc.m.q.codes.size(), static_cast<size_t>(2 * n));
  std::vector<float> pc = p;
  // Device copies at `offset` elements into each buffer.
  auto upload16 = [&](const std::vector<uint8_t>& bytes) {
    std::vector<uint16_t> h16(static_cast<size_t>(n + offset), 0);
    std::memcpy(h16.data() + offset, bytes.data(), bytes.size());
    return gpu::to_device(h16);
  };
  std::vector<float> ph(static_cast<size_t>(n + offset), 0.0f);
  std::copy(p.begin(), p.end(), ph.begin() + offset);
  gpu::DeviceBuffer<float> dp = gpu::to_device(ph);
  gpu::DeviceBuffer<uint16_t> dm = upload16(sc.m.q.codes), dv = upload16(sc.v.q.codes);
  optim::LowpScratch scratch;
  for (int s = 1; s <= 3; ++s) {
    const std::vector<float> g = test::lognormal_data(static_cast<size_t>(n), 100 + s, 3.0);
    std::vector<float> gh(static_cast<size_t>(n + offset), 0.0f);
    std::copy(g.begin(), g.end(), gh.begin() + offset);
    const gpu::DeviceBuffer<float> dg = gpu::to_device(gh);
    const uint64_t step = static_cast<uint64_t>(t0 + s);
    const optim::AdamwStepConsts c = optim::make_step_consts(h, static_cast<int64_t>(step), rule);
    optim::lowp_adamw_step(pc.data(), g.data(), sc, c, 3, step, scratch);
    gpu::adamw_bf16_moments_cuda(dp.get() + offset, dg.get() + offset, dm.get() + offset, dv.get() + offset,
                                 static_cast<size_t>(n), c, r, nullptr);
    const std::vector<float> pg = dp.download();
    const std::vector<uint16_t> mg = dm.download(), vg = dv.download();
    const std::string ctx = "n=" + std::to_string(n) + " offset " + std::to_string(offset) + " rule " +
                            std::string(optim::update_rule_name(rule)) + " step " + std::to_string(s);
    EXPECT_EQ(count_diff(pc, std::vector<float>(pg.begin() + offset, pg.end())), 0) << ctx << " parameters";
    std::vector<uint8_t> mb(static_cast<size_t>(2 * n)), vb(static_cast<size_t>(2 * n));
    std::memcpy(mb.data(), mg.data() + offset, mb.size());
    std::memcpy(vb.data(), vg.data() + offset, vb.size());
    EXPECT_EQ(count_diff(sc.m.q.codes, mb), 0) << ctx << " m";
    EXPECT_EQ(count_diff(sc.v.q.codes, vb), 0) << ctx << " v";
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(AdamwGpu, Bf16MomentsFusedKernelEqualsTheThreePhases) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (auto n : kSizes)
    for (auto rule : {optim::UpdateRule::Torch, optim::UpdateRule::Coat}) run_bf16_moments(n, rule, 0);
  run_bf16_moments(4096 + 100, optim::UpdateRule::Torch, 1);
  // Another recipe is refused, not run.
  gpu::DeviceBuffer<float> d(16);
  gpu::DeviceBuffer<uint16_t> h(16);
  EXPECT_THROW(gpu::adamw_bf16_moments_cuda(d.get(), d.get(), h.get(), h.get(), 16, optim::AdamwStepConsts{},
                                            optim::StateRecipe::parse("fp8lm"), nullptr),
               UsageError);
}

TEST(AdamwGpu, Llama2MlpWeightSize) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 4096 x 11008 parameters: the size the bench times (the CPU reference runs multi-threaded).
  run_case({"coat", optim::UpdateRule::Coat, true}, int64_t{4096} * 11008, 1);
}

// ---- The fused kernel's exact shortcuts for DE moments (gpu/optim/adamw.cu) ----

// The requantization guard's error bound assumes lg2.approx within 2^-21 (absolute, on [1, 2))
// and ex2.approx within 2^-21 (relative, on [-21, 16]); checked over every float there.
TEST(AdamwGpu, ApproxLog2Exp2WithinTheGuardsAssumedBounds) {
  FP8SIM_SKIP_WITHOUT_GPU();
  double worst[2];
  gpu::detail::mufu_max_errors(worst);
  std::printf("lg2.approx max abs error on [1,2): 2^%.2f; ex2.approx max rel error on [-21,16]: 2^%.2f\n",
              std::log2(worst[0]), std::log2(worst[1]));
  EXPECT_GT(worst[0], 0.0);  // the check ran
  EXPECT_LE(worst[0], std::ldexp(1.0, -21));
  EXPECT_LE(worst[1], std::ldexp(1.0, -21));
}

// Dequantization through the per-group mantissa table equals compress_value for every code and
// many (s, k, c), both formats: the claim RN(q*s) = 2^e_q RN(mq*s) and its consequences, tested
// exhaustively over the codes.
TEST(AdamwGpu, MantissaTableDequantizeEqualsReferenceForEveryCode) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(123);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<ExpandParams> prm;
  const float edge_s[] = {0x1p-100f,      0x1p100f,  1.0f,     1.0f / 448.0f, 1.0f / 57344.0f, 0.70710677f,
                          0x1.fffffep-1f, 0x1p-101f, 0x1p101f, 0.0f,          INFINITY,        NAN};
  const float edge_k[] = {0.0625f, 1.0f, 2.0f, 16.0f, 1.5f, 0.3f, INFINITY, 100.0f, 4096.0f, -1.0f};
  for (float s : edge_s)
    for (float k : edge_k) prm.push_back(ExpandParams{k, 1.0f, s});
  for (int i = 0; i < 40000; ++i) {
    ExpandParams e;
    e.s = static_cast<float>(std::exp2(-110.0 + 220.0 * u01(rng)));  // some beyond the table's range
    e.k = i % 3 == 0 ? static_cast<float>(std::floor(1.0 + 255.0 * u01(rng)) / 16.0)
                     : static_cast<float>(std::exp2(-6.0 + 12.0 * u01(rng)));
    e.c = static_cast<float>(std::exp2(-80.0 + 100.0 * u01(rng)));
    prm.push_back(e);
  }
  for (int fmt = 0; fmt < 2; ++fmt) {
    unsigned long long out[2];
    gpu::detail::check_decode_table(prm.data(), static_cast<int>(prm.size()), fmt, out);
    EXPECT_EQ(out[0], 0u) << "format " << fmt << ": table decode differs from compress_value";
    EXPECT_GT(out[1], 0.9 * 256.0 * static_cast<double>(prm.size()) * (200.0 / 220.0)) << "too few eligible pairs";
    EXPECT_LT(out[1], 256u * prm.size()) << "out-of-range scales must be excluded";
  }
}

// Values placed on and around the FP8 rounding midpoints of a group's expanded scale: x with
// |x'/s| = (q_j + q_j+1) / 2 exactly in real arithmetic, then nudged by 0..3 ulp either way.
float midpoint_value(const ExpandParams& e, int fmt, std::mt19937_64& rng) {
  const int max_code = fmt == 0 ? 0x7E : 0x7B;
  const int c1 = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_code - 1));
  const double mid = 0.5 * (static_cast<double>(decode_fp8(static_cast<uint8_t>(c1), fmt)) +
                            static_cast<double>(decode_fp8(static_cast<uint8_t>(c1 + 1), fmt)));
  const double x = static_cast<double>(e.c) * std::pow(mid * static_cast<double>(e.s), 1.0 / static_cast<double>(e.k));
  uint32_t b = f32_bits(static_cast<float>(x));
  b = static_cast<uint32_t>(static_cast<int64_t>(b) + static_cast<int64_t>(rng() % 7) - 3);
  float r = f32_from_bits(b);
  return (rng() & 1) ? -r : r;
}

// The guarded requantization against encode_fp8(expand_value(x)) on random groups (COAT
// parameters from random max / min), with random, midpoint, extreme and special values:
// every element it does not flag has the reference code; both outcomes occur.
TEST(AdamwGpu, GuardedRequantizeEqualsReference) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* spec_text : {"e4m3:g128:de=coat", "e5m2:g128:de=coat", "e4m3:g128:de=coat:sat=none"}) {
    QuantSpec spec;
    try {
      spec = QuantSpec::parse(spec_text);
    } catch (const std::exception&) {
      continue;  // a spelling this build does not accept (the saturation option)
    }
    const optim::GroupMomentConsts mc = optim::group_moment_consts(spec, 0);
    const int fmt = mc.format;
    std::mt19937_64 rng(7 + fmt);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    constexpr int kPer = 512;
    const int groups = 6000;
    std::vector<ExpandParams> prm(groups);
    std::vector<float> x(static_cast<size_t>(groups) * kPer);
    for (int gi = 0; gi < groups; ++gi) {
      // log10 max in [-30, 3], ratio 10^[0.1, 40] (k from ~34 down to 1/16); every 10th group r < 2.
      const double lmax = -30.0 + 33.0 * u01(rng);
      const double lratio = gi % 10 == 0 ? 0.3 * u01(rng) : 0.1 + 40.0 * u01(rng);
      const float amax = static_cast<float>(std::pow(10.0, lmax));
      float amin = static_cast<float>(std::pow(10.0, lmax - lratio));
      if (amin == 0.0f) amin = f32_from_bits(1u);
      GroupStatBits st;
      group_stat_add(st, amax);
      group_stat_add(st, amin);
      prm[gi] = optim::group_params_from_stats(st, mc).e;
      float* xs = &x[static_cast<size_t>(gi) * kPer];
      for (int i = 0; i < kPer; ++i) {
        const int kind = i % 8;
        float v;
        if (kind < 4) {
          v = midpoint_value(prm[gi], fmt, rng);
        } else if (kind < 7) {
          v = static_cast<float>(std::pow(10.0, lmax - lratio * u01(rng)));
          if (rng() & 1) v = -v;
        } else {
          const float special[] = {amax,         -amax,
                                   amin,         0.0f,
                                   -0.0f,        f32_from_bits(5u),
                                   1e-39f,       INFINITY,
                                   NAN,          std::nextafter(amax, INFINITY),
                                   amax * 1.01f, 3.0e38f};
          v = special[rng() % (sizeof(special) / sizeof(special[0]))];
        }
        xs[i] = v;
      }
    }
    unsigned long long out[3];
    gpu::detail::check_encode_guarded(x.data(), prm.data(), static_cast<int64_t>(x.size()), kPer, mc, out);
    std::printf("%s: %llu guarded, %llu flagged for the reference path (%.2f%%), %llu mismatches\n", spec_text, out[1],
                out[2], 100.0 * static_cast<double>(out[2]) / static_cast<double>(x.size()), out[0]);
    EXPECT_EQ(out[0], 0u) << spec_text << ": guarded code differs from the reference";
    EXPECT_GT(out[1], x.size() / 4) << spec_text;
    EXPECT_GT(out[2], 0u) << spec_text;
  }
}

// End to end through the fused kernel: groups built to hit every path (midpoint values of the
// new m via beta1 = 0, so new m = g exactly; zeros; subnormals; constant groups, whose k = Inf
// makes s leave the table's range; near-constant groups with k > 16), compared with the CPU bit
// for bit, with the path counters proving both paths of both shortcuts ran.
// tail = 77: a short last group (the general kernel); tail = 0: whole groups (the FULL kernel).
void shortcut_paths_case(int64_t tail) {
  const optim::StateRecipe r = optim::StateRecipe::parse("coat");
  const QuantSpec& spec = *r.m.spec;
  const optim::GroupMomentConsts mc = optim::group_moment_consts(spec, 0);
  constexpr int G = 128;
  const int groups = 300;
  const int64_t n = int64_t{G} * groups + tail;
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<float> m0 = test::lognormal_data(static_cast<size_t>(n), 2, 4.0);
  std::vector<float> v0 = test::lognormal_data(static_cast<size_t>(n), 3, 4.0, false);
  for (auto& q : m0) q *= 1e-4f;
  for (auto& q : v0) q = std::fabs(q) * 1e-8f;
  std::vector<float> g(static_cast<size_t>(n));
  for (int gi = 0; gi * G < n; ++gi) {
    const int64_t i0 = int64_t{gi} * G;
    const int len = static_cast<int>(std::min<int64_t>(G, n - i0));
    float* gg = &g[static_cast<size_t>(i0)];
    float* mm = &m0[static_cast<size_t>(i0)];
    const int kind = gi % 6;
    if (kind == 0) {  // constant old m and v: k = Inf at the first decode
      const float a = 1e-4f * static_cast<float>(1.0 + gi / 7.0);
      for (int i = 0; i < len; ++i) mm[i] = (i & 1) ? a : -a;
      for (int i = 0; i < len; ++i) v0[static_cast<size_t>(i0 + i)] = 3e-9f * static_cast<float>(1.0 + gi / 5.0);
    }
    if (kind == 1) {  // near-constant new m: ratio < 2, k > 16
      for (int i = 0; i < len; ++i) gg[i] = static_cast<float>((1.0 + 0.9 * u01(rng)) * 1e-3);
      continue;
    }
    // new m = g: the group's max and min first, then midpoint values between them.
    const double lmax = -6.0 + 3.0 * u01(rng), lratio = 0.5 + 6.0 * u01(rng);
    const float amax = static_cast<float>(std::pow(10.0, lmax));
    const float amin = kind == 2 ? f32_from_bits(3u) : static_cast<float>(std::pow(10.0, lmax - lratio));
    GroupStatBits st;
    group_stat_add(st, amax);
    group_stat_add(st, amin);
    const ExpandParams e = optim::group_params_from_stats(st, mc).e;
    gg[0] = amax;
    if (len > 1) gg[1] = -amin;
    for (int i = 2; i < len; ++i) {
      float v = midpoint_value(e, mc.format, rng);
      if (!(std::fabs(v) <= amax && std::fabs(v) >= amin))
        v = static_cast<float>(std::pow(10.0, lmax - lratio * u01(rng)));
      if (i % 17 == 0) v = 0.0f;
      if (kind == 2 && i % 13 == 0) v = f32_from_bits(7u + static_cast<uint32_t>(i));
      gg[i] = v;
    }
  }
  optim::AdamwHyper h;
  h.lr = 3e-4;
  h.beta1 = 0.0;  // new m = g exactly (coat rule: 0*m + 1*g)
  h.weight_decay = 0.1;
  const uint64_t param_index = 5;
  const int64_t t0 = 10;
  optim::ParamOptimState sc = optim::make_param_state(r, m0.data(), v0.data(), n, param_index, t0);
  // The initial state must hold groups whose scale is outside the mantissa table's range.
  int out_of_range = 0;
  for (float s : sc.m.q.scales) out_of_range += !(s >= 0x1p-100f && s <= 0x1p100f);
  for (float s : sc.v.q.scales) out_of_range += !(s >= 0x1p-100f && s <= 0x1p100f);
  EXPECT_GT(out_of_range, 0) << "the test data no longer reaches the reference dequantization";
  optim::ParamOptimState sg = sc;
  std::vector<float> p = test::lognormal_data(static_cast<size_t>(n), 1, 3.0);
  std::vector<float> pc = p, pg = p;
  optim::LowpScratch scratch;
  gpu::detail::adamw_path_counting(true);
  // Counting ends with this scope whatever ends it: its counters live on the device that enabled
  // it, and a later kernel on another GPU must not count into them.
  struct StopCounting {
    ~StopCounting() { gpu::detail::adamw_path_counting(false); }
  } stop_counting;
  unsigned long long total[4] = {0, 0, 0, 0};
  for (int s = 1; s <= 2; ++s) {
    const uint64_t step = static_cast<uint64_t>(t0 + s);
    const optim::AdamwStepConsts c = optim::make_step_consts(h, static_cast<int64_t>(step), optim::UpdateRule::Coat);
    optim::lowp_adamw_step(pc.data(), g.data(), sc, c, param_index, step, scratch);
    gpu::lowp_adamw_step_on_gpu(pg.data(), g.data(), sg, c, param_index, step, true);
    EXPECT_EQ(gpu::detail::adamw_last_launch_full(), tail == 0) << "n = " << n;
    unsigned long long cnt[4];
    gpu::detail::adamw_path_counts(cnt);
    for (int i = 0; i < 4; ++i) total[i] += cnt[i];
    const std::string ctx = "shortcut data step " + std::to_string(s);
    EXPECT_EQ(count_diff(pc, pg), 0) << ctx << " parameters";
    expect_same_state(sc, sg, ctx);
    if (::testing::Test::HasFailure()) break;
  }
  gpu::detail::adamw_path_counting(false);
  std::printf("paths: decode table %llu, decode reference %llu, encode guarded %llu, encode reference %llu\n", total[0],
              total[1], total[2], total[3]);
  EXPECT_GT(total[0], 0u);
  EXPECT_GT(total[1], 0u);
  EXPECT_GT(total[2], 0u);
  EXPECT_GT(total[3], 0u);
  EXPECT_EQ(total[0] + total[1], 2u * 2u * static_cast<unsigned long long>(n));
  EXPECT_EQ(total[2] + total[3], 2u * 2u * static_cast<unsigned long long>(n));
}

TEST(AdamwGpu, CoatFusedShortcutsHitFastAndReferencePaths) {
  FP8SIM_SKIP_WITHOUT_GPU();
  shortcut_paths_case(77);
  shortcut_paths_case(0);
}

// The shortcuts off (reference paths only) and on, and every kernel shape, give the same state;
// the kernel without element-wise paths runs exactly where it should.
TEST(AdamwGpu, CoatFusedShortcutsOffGiveTheSameBits) {
  FP8SIM_SKIP_WITHOUT_GPU();
  struct Variant {
    int mask, min_blocks;
    bool wide, full;
  };
  // 128 * 40: every group whole, so the default launch takes the kernel without element-wise
  // paths (full); {3, 2, true, false} runs the same data through the general kernel.
  for (const Variant& vr : std::vector<Variant>{{0, 3, false, true},
                                                {1, 3, false, true},
                                                {2, 3, false, true},
                                                {3, 3, false, true},
                                                {0, 2, true, true},
                                                {1, 2, true, true},
                                                {2, 2, true, true},
                                                {3, 3, true, true},
                                                {3, 2, true, true},
                                                {3, 2, true, false},
                                                {3, 3, false, false}}) {
    gpu::detail::adamw_fast_paths(vr.mask, vr.min_blocks, vr.wide, vr.full);
    for (auto nn : {int64_t{217}, int64_t{128 * 3 + 7}, int64_t{4096 + 100}, int64_t{128 * 40}}) {
      run_case({"coat", optim::UpdateRule::Coat, true}, nn, 2);
      const bool expect_full = vr.full && (!vr.wide || vr.min_blocks == 2) && nn % 128 == 0;
      EXPECT_EQ(gpu::detail::adamw_last_launch_full(), expect_full)
          << "n=" << nn << " wide=" << vr.wide << " min_blocks=" << vr.min_blocks << " full=" << vr.full;
    }
  }
  gpu::detail::adamw_fast_paths(3, 2, true, true);
}

// ---- optim --device cuda: the drift runs (gpu/optim/drift.hpp) -------------------------------------

// One parameter's window: weights, moments and grads of real-looking spreads.
struct DriftWindow {
  std::vector<float> p0, m0, v0;
  std::vector<std::vector<float>> grads;
  std::vector<double> lr;
};

DriftWindow drift_window(int64_t n, int steps, uint64_t seed) {
  DriftWindow w;
  const size_t un = static_cast<size_t>(n);
  w.p0 = test::lognormal_data(un, seed, 3.0);
  for (auto& x : w.p0) x *= 0.02f;
  w.m0 = test::lognormal_data(un, seed + 1, 6.0);
  for (auto& x : w.m0) x *= 1e-5f;
  w.v0 = test::lognormal_data(un, seed + 2, 10.0);
  for (auto& x : w.v0) x = std::fabs(x) * 1e-9f;
  for (int k = 0; k < steps; ++k) {
    std::vector<float> g = test::lognormal_data(un, seed + 10 + static_cast<uint64_t>(k), 6.0);
    for (auto& x : g) x *= 1e-4f;
    w.grads.push_back(std::move(g));
    w.lr.push_back(3e-4 * (1.0 - 0.1 * k));
  }
  return w;
}

optim::DriftRequest drift_request(const DriftWindow& w, std::span<const optim::StateRecipe> recipes,
                                  optim::UpdateRule rule) {
  optim::DriftRequest rq;
  rq.n = static_cast<int64_t>(w.p0.size());
  rq.p0 = w.p0.data();
  rq.m0 = w.m0.data();
  rq.v0 = w.v0.data();
  for (const auto& g : w.grads) rq.grads.push_back(g.data());
  rq.lr = w.lr;
  rq.hyper = optim::AdamwHyper{.lr = 0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  rq.recipes = recipes;
  rq.steps = static_cast<int>(w.grads.size());
  rq.step0 = 41;
  rq.rule = rule;
  rq.index = 7;
  return rq;
}

// Every state recipe, nearest and stochastic, both update rules, fp32 moments beside quantized
// ones, on sizes below one chunk, across chunk and group boundaries: the GPU's fourteen sums per
// recipe and step are the CPU's, bit for bit.
TEST(OptimDriftGpu, SumsEqualTheCpuForEveryRecipe) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::vector<optim::StateRecipe> recipes;
  for (const auto& p : optim::state_recipe_presets()) recipes.push_back(optim::StateRecipe::parse(p.name));
  for (const char* r :
       {"m=fp32,v=e5m2:g64", "m=e4m3:g128:de=coat,v=fp32", "m=e5m2:g32:de=coat,v=e4m3:tensor", "m=bf16,v=fp16"})
    recipes.push_back(optim::StateRecipe::parse(r));
  const size_t plain = recipes.size();
  for (size_t i = 0; i < plain; ++i) recipes.push_back(recipes[i].with_rounding(Rounding::Stochastic, 11));
  gpu::DriftScratch scratch;
  gpu::Stream stream;
  for (const int64_t n : {int64_t{100}, int64_t{4096}, int64_t{3 * 4096 + 1000 + 37}}) {
    const DriftWindow w = drift_window(n, 3, static_cast<uint64_t>(n));
    for (const auto rule : {optim::UpdateRule::Coat, optim::UpdateRule::Torch}) {
      const optim::DriftRequest rq = drift_request(w, recipes, rule);
      const optim::DriftResult cpu = optim::drift_cpu(rq);
      const optim::DriftResult gpu = gpu::drift_on_gpu(rq, scratch, stream.get());
      ASSERT_EQ(cpu.size(), gpu.size());
      for (size_t r = 0; r < recipes.size(); ++r)
        for (int k = 0; k < rq.steps; ++k) {
          const auto& a = cpu[r * static_cast<size_t>(rq.steps) + static_cast<size_t>(k)];
          const auto& b = gpu[r * static_cast<size_t>(rq.steps) + static_cast<size_t>(k)];
          EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof a), 0)
              << recipes[r].to_string() << " n=" << n << " step " << k << " rule " << optim::update_rule_name(rule)
              << ": first sum cpu " << a[0] << " gpu " << b[0];
        }
      // Not trivially zero: coat's weights move away from the fp32 run's (the sums of recipe r at
      // step k are at r * steps + k; the presets begin fp32, bf16, coat).
      ASSERT_EQ(recipes[2].name, "coat");
      EXPECT_GT(cpu[2 * static_cast<size_t>(rq.steps) + static_cast<size_t>(rq.steps) - 1][optim::kDiff2], 0.0);
    }
  }
}

TEST(OptimDriftGpu, RefusesWhatItDoesNotRun) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const DriftWindow w = drift_window(1000, 1, 5);
  gpu::DriftScratch scratch;
  gpu::Stream stream;
  for (const char* r : {"m=e2m1:g32,v=fp32", "m=e4m3:tensor:delayed=16,v=fp32", "m=fp32,v=bf16:g128:scale=fp32"}) {
    const std::vector<optim::StateRecipe> one{optim::StateRecipe::parse(r)};
    EXPECT_THROW(gpu::drift_on_gpu(drift_request(w, one, optim::UpdateRule::Coat), scratch, stream.get()), UsageError)
        << r;
  }
}

// Same double, or both NaN (the JSON writes every NaN alike; a NaN's payload differs between the
// CPU's and the GPU's division).
bool same_or_both_nan(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

// Table 1's sums on the GPU against the CPU's, bit for bit: Table 1's four FP8 formats and the
// 4- and 6-bit list, moments with exact zeros and second moments small enough to flush, below
// one chunk and across chunk and group boundaries, eps > 0 and eps = 0 (r infinite or NaN where
// v is 0).
TEST(OptimDirectionGpu, SumsEqualTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::vector<QuantSpec> fp8, lowbit;
  for (const auto& f : optim::table1_formats()) fp8.push_back(QuantSpec::parse(f.spec));
  for (const auto& f : optim::table1_lowbit_formats()) lowbit.push_back(QuantSpec::parse(f.spec));
  gpu::DriftScratch scratch;
  gpu::Stream stream;
  // 4 * 4096 + 1008: four whole chunks, which the CPU sums in its AVX2 lanes where it has them.
  for (const int64_t n : {int64_t{96}, int64_t{4096}, int64_t{3 * 4096 + 1008}, int64_t{4 * 4096 + 1008}}) {
    std::vector<float> m = test::lognormal_data(static_cast<size_t>(n), static_cast<uint64_t>(n), 8.0);
    std::vector<float> v = test::lognormal_data(static_cast<size_t>(n), static_cast<uint64_t>(n) + 1, 24.0);
    for (auto& x : m) x *= 1e-6f;
    for (auto& x : v) x = std::fabs(x) * 1e-12f;
    for (const double eps : {1e-8, 0.0}) {
      for (const auto* specs : {&fp8, &lowbit}) {
        optim::DirectionRequest rq;
        rq.n = n;
        rq.m = m.data();
        rq.v = v.data();
        rq.specs = *specs;
        rq.bc1 = 1.0 - std::pow(0.9, 7.0);
        rq.bc2 = 1.0 - std::pow(0.95, 7.0);
        rq.eps = eps;
        const std::vector<double> cpu = optim::direction_cpu(rq);
        const std::vector<double> gpu = gpu::direction_on_gpu(rq, scratch, stream.get());
        ASSERT_EQ(cpu.size(), gpu.size());
        const optim::DirectionLayout L(specs->size());
        for (size_t q = 0; q < cpu.size(); ++q)
          EXPECT_TRUE(same_or_both_nan(cpu[q], gpu[q]))
              << "n=" << n << " eps=" << eps << " " << specs->size() << " formats, sum " << q << ": cpu " << cpu[q]
              << " gpu " << gpu[q];
        // Not trivially zero: some v flushes in E4M3 without DE, and the cell errors are positive.
        if (specs == &fp8) {
          EXPECT_GT(cpu[L.fmt + 3 * 4], 0.0) << "n=" << n;
        }
        // eps > 0: a positive sum; eps = 0: infinite or NaN, since some quantized v flush to 0
        // and their terms divide by 0.
        if (eps > 0) {
          EXPECT_GT(cpu[0], 0.0) << "n=" << n;
        } else {
          EXPECT_FALSE(std::isfinite(cpu[0])) << "n=" << n << ": " << cpu[0];
        }
      }
    }
  }
}

// The 4- and 6-bit kernels take whole 16-element segments: a moment of another length is refused
// before any work (the caller runs the CPU), as is a format the GPU's Table 1 does not run.
TEST(OptimDirectionGpu, RefusesWhatItDoesNotRun) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::vector<QuantSpec> lowbit;
  for (const auto& f : optim::table1_lowbit_formats()) lowbit.push_back(QuantSpec::parse(f.spec));
  std::vector<QuantSpec> robust{QuantSpec::parse("e4m3:g128:de=robust")};
  const std::vector<float> m(100, 1e-5f), v(100, 1e-9f);
  gpu::DriftScratch scratch;
  gpu::Stream stream;
  for (const auto* specs : {&lowbit, &robust}) {
    optim::DirectionRequest rq;
    rq.n = 100;
    rq.m = m.data();
    rq.v = v.data();
    rq.specs = *specs;
    rq.bc1 = rq.bc2 = 0.5;
    rq.eps = 1e-8;
    EXPECT_THROW(gpu::direction_on_gpu(rq, scratch, stream.get()), UsageError) << specs->front().to_string();
  }
}

// The whole command: optim --device cuda writes the CPU's JSON, Table 1's 4- and 6-bit list and a
// 4-bit state recipe included (the drift of its parameters runs on the CPU).
TEST(OptimDriftGpu, SameJsonAsTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::string dir = test::temp_dir();
  struct Variant {
    std::vector<std::string> extra;
    bool some_on_cpu;  // a recipe the GPU drift does not run
  };
  const std::vector<Variant> variants = {
      {{}, false},
      {{"--rounding", "stochastic", "--seed", "9", "--update", "torch", "--table1-lowbit"}, false},
      {{"--recipe", "coat", "--recipe", "m=e2m1:g32:de=coat,v=e4m3:g128", "--no-table1"}, true},
      {{"--recipe", "m=fp32,v=bf16:g128:scale=fp32", "--no-table1"}, true},
  };
  for (const auto& [extra, some_on_cpu] : variants) {
    std::vector<std::string> a{"optim", test::sample_trace(), "--json", dir + "/cpu.json"};
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::string> b = a;
    b[3] = dir + "/gpu.json";
    b.push_back("--device");
    b.push_back("cuda");
    const test::CommandResult rc = test::run_fp8sim(a), rg = test::run_fp8sim(b);
    ASSERT_EQ(rc.exit_code, 0) << rc.err;
    ASSERT_EQ(rg.exit_code, 0) << rg.err;
    EXPECT_TRUE(test::file_content(dir + "/cpu.json") == test::file_content(dir + "/gpu.json")) << "the JSON differs";
    EXPECT_NE(rg.err.find("on the GPU ("), std::string::npos) << rg.err;
    EXPECT_EQ(rg.err.find("on the CPU") != std::string::npos, some_on_cpu) << rg.err;
  }
}

}  // namespace
}  // namespace fp8sim
