// Low-precision-state AdamW: every recipe against a hand-written reference step on small
// tensors, the fused per-group loop against the three-phase step, stochastic rounding streams,
// exact memory accounting, recipe parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::optim {
namespace {

// Realistic moments: |g| log-uniform over 8 decades, m ~ g, v ~ g^2 (v >= 0), a few exact zeros.
struct Tensors {
  std::vector<float> p, g, m, v;
};
Tensors make_tensors(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> lg(-9.0f, -1.0f), u(0.0f, 1.0f);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  Tensors t;
  for (int64_t i = 0; i < n; ++i) {
    const float mag = std::pow(10.0f, lg(rng));
    const float sgn = u(rng) < 0.5f ? -1.0f : 1.0f;
    t.p.push_back(nd(rng));
    t.g.push_back(u(rng) < 0.03f ? 0.0f : sgn * mag * (0.5f + u(rng)));
    t.m.push_back(u(rng) < 0.03f ? 0.0f : -sgn * mag * 0.3f * u(rng));
    t.v.push_back(u(rng) < 0.03f ? 0.0f : mag * mag * (0.2f + u(rng)));
  }
  return t;
}

AdamwHyper hyper() {
  AdamwHyper h;
  h.lr = 3e-4;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  return h;
}

std::vector<float> deq(const MomentState& ms) {
  std::vector<float> out(static_cast<size_t>(ms.numel));
  load_moment(ms, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // (empty vectors may hold null data(), which memcmp must not receive even for 0 bytes)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// The reference step, written out by hand from COAT's update rule (docs/optimizer.md): dequantize with sim/quant,
// COAT's formula with plain fp32 operators (contraction is off for the whole build), requantize
// the NEW moments with sim/quant under the same spec and rounding key.
struct RefState {
  std::vector<float> m, v;  // dequantized stored moments
  QuantizedTensor qm, qv;
};
void reference_step(const StateRecipe& r, std::vector<float>& p, const std::vector<float>& g, RefState& s,
                    const AdamwHyper& h, int64_t t, uint64_t param_index) {
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  const float lr = static_cast<float>(h.lr), wd = static_cast<float>(h.weight_decay), eps = static_cast<float>(h.eps);
  const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(t)));
  const float bc2s = std::sqrt(1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(t))));
  const size_t n = p.size();
  std::vector<float> m_new(n), v_new(n);
  for (size_t i = 0; i < n; ++i) {
    const float m = b1 * s.m[i] + (1.0f - b1) * g[i];
    const float v = b2 * s.v[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = (std::sqrt(v) / bc2s + eps) * bc1;
    const float update = m / denom + wd * p[i];
    p[i] = p[i] - lr * update;
    m_new[i] = m;
    v_new[i] = v;
  }
  const Shape shape{static_cast<int64_t>(n)};
  auto requant = [&](const MomentSpec& ms, const std::vector<float>& x, int moment, QuantizedTensor& q) {
    if (ms.is_fp32()) return x;
    QuantSpec spec = *ms.spec;
    spec.seed = state_rounding_key(ms.spec->seed, param_index, static_cast<uint64_t>(t), moment);
    q = quantize(x.data(), shape, spec);
    return dequantize(q);
  };
  s.m = requant(r.m, m_new, 0, s.qm);
  s.v = requant(r.v, v_new, 1, s.qv);
}

class RecipeVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(RecipeVsReference, ThreeStepsBitExact) {
  const StateRecipe r = StateRecipe::parse(GetParam());
  for (int64_t n : {1, 5, 127, 128, 129, 700}) {
    Tensors t = make_tensors(n, 17 + static_cast<uint32_t>(n));
    const AdamwHyper h = hyper();
    const int64_t step0 = 40;
    const uint64_t param_index = 3;
    ParamOptimState st = make_param_state(r, t.m.data(), t.v.data(), n, param_index, step0);
    RefState ref;
    ref.m = deq(st.m);
    ref.v = deq(st.v);
    std::vector<float> p = t.p, p_ref = t.p;
    LowpScratch scratch;
    for (int k = 1; k <= 3; ++k) {
      std::vector<float> g = t.g;
      for (auto& x : g) x *= static_cast<float>(k);  // a different grad each step
      const auto c = make_step_consts(h, step0 + k, UpdateRule::Coat);
      lowp_adamw_step(p.data(), g.data(), st, c, param_index, static_cast<uint64_t>(step0 + k), scratch);
      reference_step(r, p_ref, g, ref, h, step0 + k, param_index);
      ASSERT_TRUE(same_bits(p, p_ref)) << r.name << " n=" << n << " step " << k << ": weights differ";
      ASSERT_TRUE(same_bits(deq(st.m), ref.m)) << r.name << " n=" << n << " step " << k << ": m differs";
      ASSERT_TRUE(same_bits(deq(st.v), ref.v)) << r.name << " n=" << n << " step " << k << ": v differs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllRecipes, RecipeVsReference,
    ::testing::Values("fp32", "bf16", "coat", "coat-noexpand", "te-fp8", "fp8lm", "m=e4m3:g128:de=coat,v=e5m2:g128",
                      "m=e5m2:g128:de=coat,v=fp32",
                      "m=e4m3:g32:round=stochastic:seed=9,v=e4m3:g128:de=coat:round=stochastic:seed=9"),
    [](const auto& info) {
      std::string s = "r" + std::to_string(info.index);
      return s;
    });

// The parameter update of a step uses the NEW UNQUANTIZED moments: p after a low-precision step
// equals an fp32 step started from the dequantized stored moments, bit for bit.
TEST(OptimLowp, UpdateUsesUnquantizedNewMoments) {
  const int64_t n = 1000;
  Tensors t = make_tensors(n, 5);
  const StateRecipe r = StateRecipe::parse("coat");
  ParamOptimState st = make_param_state(r, t.m.data(), t.v.data(), n, 0, 10);
  std::vector<float> m = deq(st.m), v = deq(st.v), p_fp32 = t.p, p = t.p;
  const auto c = make_step_consts(hyper(), 11, UpdateRule::Coat);
  adamw_step_fp32(p_fp32.data(), t.g.data(), m.data(), v.data(), static_cast<size_t>(n), c);
  LowpScratch s;
  std::vector<float> m_new(static_cast<size_t>(n)), v_new(static_cast<size_t>(n));
  lowp_adamw_step(p.data(), t.g.data(), st, c, 0, 11, s, 0, m_new.data(), v_new.data());
  EXPECT_TRUE(same_bits(p, p_fp32));
  EXPECT_TRUE(same_bits(m_new, m));
  EXPECT_TRUE(same_bits(v_new, v));
  // ... and the stored moments are the quantized new ones (not equal: FP8 loses bits).
  EXPECT_FALSE(same_bits(deq(st.m), m));
}

// The fused per-group loop (the GPU kernel's structure) equals the three-phase step bit for bit:
// weights, codes and every group parameter, over several steps and awkward lengths.
TEST(OptimLowp, GroupedStepEqualsThreePhase) {
  for (const char* recipe :
       {"coat", "coat-noexpand", "m=e5m2:g128:de=coat,v=e4m3:g128", "m=e4m3:g128:scale=pow2,v=e5m2:g128:scale=bf16",
        "m=e4m3:g64:de=coat:round=stochastic:seed=3,v=e4m3:g64:round=stochastic:seed=4"}) {
    const StateRecipe r = StateRecipe::parse(recipe);
    ASSERT_TRUE(grouped_step_supported(r)) << recipe;
    for (int64_t n : {1, 2, 127, 128, 129, 4097, 20000}) {
      Tensors t = make_tensors(n, 99 + static_cast<uint32_t>(n));
      ParamOptimState a = make_param_state(r, t.m.data(), t.v.data(), n, 7, 100);
      ParamOptimState b = a;
      std::vector<float> pa = t.p, pb = t.p;
      LowpScratch s;
      for (int k = 1; k <= 4; ++k) {
        const auto c = make_step_consts(hyper(), 100 + k, UpdateRule::Coat);
        lowp_adamw_step(pa.data(), t.g.data(), a, c, 7, static_cast<uint64_t>(100 + k), s);
        lowp_adamw_step_grouped(pb.data(), t.g.data(), b, c, 7, static_cast<uint64_t>(100 + k));
        ASSERT_TRUE(same_bits(pa, pb)) << recipe << " n=" << n << " step " << k;
        for (auto [qa, qb] : {std::pair{&a.m.q, &b.m.q}, std::pair{&a.v.q, &b.v.q}}) {
          ASSERT_EQ(qa->codes, qb->codes) << recipe << " n=" << n << " step " << k;
          ASSERT_EQ(qa->nonfinite_count, qb->nonfinite_count);
          ASSERT_TRUE(same_bits(qa->scales, qb->scales));
          ASSERT_TRUE(same_bits(qa->expand_k, qb->expand_k));
          ASSERT_TRUE(same_bits(qa->expand_c, qb->expand_c));
          ASSERT_EQ(f32_bits(qa->tensor_amax), f32_bits(qb->tensor_amax));
          ASSERT_EQ(qa->saturated_count, qb->saturated_count);
          ASSERT_EQ(qa->underflow_count, qb->underflow_count);
        }
      }
    }
  }
  EXPECT_FALSE(grouped_step_supported(StateRecipe::parse("te-fp8")));
  EXPECT_FALSE(grouped_step_supported(StateRecipe::parse("bf16")));
  EXPECT_FALSE(grouped_step_supported(StateRecipe::parse("m=e4m3:g128,v=e4m3:g64")));
  EXPECT_FALSE(grouped_step_supported(StateRecipe::parse("m=e4m3:g128:de=robust,v=e4m3:g128")));
}

// Stochastic rounding: the same seed reproduces every bit; another seed, another step or
// another parameter draws different bits; nearest rounding ignores the seed.
TEST(OptimLowp, StochasticRoundingReproducibleBySeed) {
  const int64_t n = 4096;
  Tensors t = make_tensors(n, 11);
  auto run = [&](uint64_t seed, uint64_t param_index, int64_t step0, Rounding rnd) {
    const StateRecipe r = StateRecipe::parse("coat").with_rounding(rnd, seed);
    ParamOptimState st = make_param_state(r, t.m.data(), t.v.data(), n, param_index, static_cast<uint64_t>(step0));
    std::vector<float> p = t.p;
    LowpScratch s;
    for (int k = 1; k <= 2; ++k) {
      const auto c = make_step_consts(hyper(), step0 + k, UpdateRule::Coat);
      lowp_adamw_step(p.data(), t.g.data(), st, c, param_index, static_cast<uint64_t>(step0 + k), s);
    }
    return st;
  };
  const auto a = run(42, 0, 10, Rounding::Stochastic), b = run(42, 0, 10, Rounding::Stochastic);
  EXPECT_EQ(a.m.q.codes, b.m.q.codes);
  EXPECT_EQ(a.v.q.codes, b.v.q.codes);
  EXPECT_NE(a.m.q.codes, run(43, 0, 10, Rounding::Stochastic).m.q.codes);
  EXPECT_NE(a.m.q.codes, run(42, 1, 10, Rounding::Stochastic).m.q.codes);
  EXPECT_NE(a.m.q.codes, run(42, 0, 11, Rounding::Stochastic).m.q.codes);
  EXPECT_NE(a.m.q.codes, run(42, 0, 10, Rounding::Nearest).m.q.codes);
  EXPECT_EQ(run(1, 0, 10, Rounding::Nearest).m.q.codes, run(2, 0, 10, Rounding::Nearest).m.q.codes);
  // The streams of the two moments and of consecutive steps are distinct keys.
  EXPECT_NE(state_rounding_key(42, 0, 11, 0), state_rounding_key(42, 0, 11, 1));
  EXPECT_NE(state_rounding_key(42, 0, 11, 0), state_rounding_key(42, 0, 12, 0));
}

// Stochastic rounding of a moment is unbiased: averaged over many seeds, the stored value of
// each element converges to the unquantized one (while nearest rounding keeps a fixed bias).
TEST(OptimLowp, StochasticRoundingIsUnbiased) {
  const int64_t n = 256;
  Tensors t = make_tensors(n, 21);
  const int kSeeds = 400;
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  for (int s = 0; s < kSeeds; ++s) {
    const StateRecipe r =
        StateRecipe::parse("m=e4m3:g128,v=fp32").with_rounding(Rounding::Stochastic, static_cast<uint64_t>(s));
    ParamOptimState st = make_param_state(r, t.m.data(), t.v.data(), n, 0, 1);
    const auto m = deq(st.m);
    for (size_t i = 0; i < m.size(); ++i) mean[i] += m[i] / kSeeds;
  }
  // Each draw lies within one FP8 step (<= 2^-3 relative for E4M3 normals, absolute 2^-9 * s
  // for subnormals) of x; the mean of 400 independent draws is within 4 standard deviations
  // (<= 4 * step / (2 sqrt(400)) = step / 10) of x with overwhelming probability.
  const StateRecipe near = StateRecipe::parse("m=e4m3:g128,v=fp32");
  ParamOptimState st = make_param_state(near, t.m.data(), t.v.data(), n, 0, 1);
  double err_sr = 0, err_rn = 0;
  const auto m_rn = deq(st.m);
  for (size_t i = 0; i < mean.size(); ++i) {
    const double x = t.m[i];
    const double step =
        std::max(std::fabs(x) * 0.125, static_cast<double>(st.m.q.scales[i / 128]) * std::ldexp(1.0, -9));
    EXPECT_LE(std::fabs(mean[i] - x), step / 10 + 1e-30) << "element " << i;
    err_sr += std::fabs(mean[i] - x);
    err_rn += std::fabs(m_rn[i] - x);
  }
  EXPECT_LT(err_sr, err_rn);
}

TEST(OptimLowp, PerTensorRecipesScaleFromTheNewMoment) {
  const int64_t n = 333;
  Tensors t = make_tensors(n, 8);
  ParamOptimState st = make_param_state(StateRecipe::parse("te-fp8"), t.m.data(), t.v.data(), n, 0, 5);
  std::vector<float> p = t.p, m_new(static_cast<size_t>(n)), v_new(static_cast<size_t>(n));
  LowpScratch s;
  lowp_adamw_step(p.data(), t.g.data(), st, make_step_consts(hyper(), 6, UpdateRule::Coat), 0, 6, s, 0, m_new.data(),
                  v_new.data());
  float amax = 0;
  for (float x : m_new) amax = std::max(amax, std::fabs(x));
  ASSERT_EQ(st.m.q.scales.size(), 1u);
  EXPECT_EQ(st.m.q.scales[0], amax / 448.0f);  // TransformerEngine: s = amax / 448 of the new m
  // fp8lm: the first moment's per-tensor scale is a power of two.
  ParamOptimState f = make_param_state(StateRecipe::parse("fp8lm"), t.m.data(), t.v.data(), n, 0, 5);
  int e = 0;
  EXPECT_EQ(std::frexp(f.m.q.scales[0], &e), 0.5f);
  EXPECT_EQ(f.v.spec.spec->format, Format::FP16);
  ASSERT_EQ(f.v.q.scales.size(), 1u);
  EXPECT_EQ(std::frexp(f.v.q.scales[0], &e), 0.5f);
  // ... so that small v survive: fp16 without a scale flushes everything below 2^-25.
  float vmax = 0;
  for (float x : t.v) vmax = std::max(vmax, x);
  EXPECT_LE(f.v.q.scales[0], vmax / 65504.0f * 2.0f);
}

TEST(OptimLowp, MemoryAccountingIsExact) {
  for (int64_t n : {1, 128, 129, 4096 * 11008}) {
    const int64_t groups = (n + 127) / 128;
    EXPECT_EQ(state_bytes(StateRecipe::parse("fp32"), n), static_cast<size_t>(8 * n));
    EXPECT_EQ(state_bytes(StateRecipe::parse("bf16"), n), static_cast<size_t>(4 * n));
    // COAT: 1 B codes + fp32 s, k, c per 128-group, both moments (~0.19 B/param).
    EXPECT_EQ(state_bytes(StateRecipe::parse("coat"), n), static_cast<size_t>(2 * (n + 12 * groups)));
    EXPECT_EQ(state_bytes(StateRecipe::parse("coat-noexpand"), n), static_cast<size_t>(2 * (n + 4 * groups)));
    EXPECT_EQ(state_bytes(StateRecipe::parse("te-fp8"), n), static_cast<size_t>(2 * (n + 4)));
    EXPECT_EQ(state_bytes(StateRecipe::parse("fp8lm"), n), static_cast<size_t>(n + 4 + 2 * n + 4));
  }
  // A state object occupies what the accounting says.
  Tensors t = make_tensors(300, 1);
  for (const char* r : {"fp32", "bf16", "coat", "coat-noexpand", "te-fp8", "fp8lm"}) {
    const StateRecipe rc = StateRecipe::parse(r);
    EXPECT_EQ(make_param_state(rc, t.m.data(), t.v.data(), 300, 0, 1).bytes(), state_bytes(rc, 300)) << r;
  }
}

TEST(OptimLowp, RecipeParsing) {
  const StateRecipe a = StateRecipe::parse("m=e4m3:g128:de=coat,v=e5m2:g128");
  EXPECT_EQ(a.m.spec->expand, ExpandMode::Coat);
  EXPECT_EQ(a.v.spec->format, Format::E5M2);
  const StateRecipe b = StateRecipe::parse("v=fp32,m=bf16");
  EXPECT_TRUE(b.v.is_fp32());
  EXPECT_EQ(b.m.spec->format, Format::BF16);
  // A QuantSpec with commas of its own (delayed scaling) is not split.
  const StateRecipe c = StateRecipe::parse("m=e4m3:tensor:delayed=16,max,v=fp32");
  EXPECT_EQ(c.m.spec->delayed.history, 16);
  EXPECT_EQ(StateRecipe::parse(StateRecipe::parse("coat").to_string()).to_string(),
            StateRecipe::parse("coat").to_string());
  for (const char* bad : {"", "nonsense", "m=e4m3:g128", "m=e4m3:g128,v=e9m9:g128", "m=fp32,v=fp32,m=fp32",
                          "x=fp32,v=fp32", "m=,v=fp32"}) {
    EXPECT_THROW(StateRecipe::parse(bad), UsageError) << "'" << bad << "'";
  }
  try {
    StateRecipe::parse("m=e4m3:g128,v=e4m3:q7");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("second moment"), std::string::npos) << e.what();
  }
}

// Which recipes the GPU runs as the elementwise-state step (gpu/optim): both moments one value per
// element with at most one per-tensor scale, no delayed scaling, no expansion.
TEST(OptimLowp, ElementwiseStepSupported) {
  for (const char* yes :
       {"bf16", "te-fp8", "fp8lm", "m=e5m2:tensor,v=bf16:tensor:scale=fp32", "m=fp16,v=e4m3:tensor:sat=none",
        "m=e4m3:tensor:scale=pow2:sat=none,v=fp16:tensor", "m=bf16:tensor:scale=fp32,v=fp16:tensor:scale=pow2",
        "m=fp16:tensor:scale=fp32,v=e4m3:tensor", "m=bf16:tensor:scale=pow2,v=bf16", "m=bf16,v=fp16:tensor:scale=fp32"})
    EXPECT_TRUE(elementwise_step_supported(StateRecipe::parse(yes))) << yes;
  for (const char* no : {"fp32", "coat", "coat-noexpand", "m=fp32,v=e4m3:tensor", "m=e4m3:tensor,v=e4m3:g128",
                         "m=e4m3:tensor:delayed=16,max,v=bf16", "m=bf16,v=e4m3:row"})
    EXPECT_FALSE(elementwise_step_supported(StateRecipe::parse(no))) << no;
  EXPECT_TRUE(elementwise_step_supported(StateRecipe::parse("te-fp8").with_rounding(Rounding::Stochastic, 1)));
}

}  // namespace
}  // namespace fp8sim::optim
