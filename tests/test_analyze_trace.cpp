// sim/analyze: recipes map (role, op) to the specs the papers describe; analysis of the committed
// sample gives finite metrics for every tensor and a GEMM error per linear layer that an
// independent double-precision computation reproduces; NaN/Inf are counted, not fatal.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "sim/analyze/analyze.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/divfull.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::analyze {
namespace {

using trace::Role;
using Recipe = recipe::TrainingRecipe;

const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

std::string spec_of(const Recipe& r, Role role, const std::string& op, const std::string& module = "layers.0.x") {
  const recipe::QuantRule* rule = r.match(role, op, {module});
  if (!rule) return "(no rule)";
  return rule->spec ? rule->spec->to_string() : "none";
}

std::string canon(const char* s) { return QuantSpec::parse(s).to_string(); }

TEST(Recipes, BuiltinsMapRolesAndOpsToThePublishedSpecs) {
  ASSERT_EQ(recipe::names(),
            (std::vector<std::string>{"bf16", "te", "coat", "fp8lm", "deepseek", "mxfp8", "nvfp4", "mxfp4"}));
  // COAT (Xi et al., ICLR 2025, section 5 and its code): per-tensor linear inputs and weights,
  // 1x16 E4M3 with bf16 scales for non-linear inputs (COAT's Triton quantizers: coat-act, coat-w),
  // E5M2 gradients, E4M3 g128 + expansion for both moments (its optimizer kernel: coat-opt).
  const Recipe coat = recipe::get("coat");
  EXPECT_EQ(spec_of(coat, Role::Activation, "linear_input"), canon("e4m3:tensor:eps=1e-10"));
  EXPECT_EQ(spec_of(coat, Role::Activation, "attn_output"), canon("e4m3:tensor:eps=1e-10"));
  for (const char* op : {"norm_input", "silu_input", "mul_input", "residual_add"})
    EXPECT_EQ(spec_of(coat, Role::Activation, op), canon("coat-act")) << op;
  EXPECT_EQ(spec_of(coat, Role::Weight, "linear"), canon("coat-w"));
  EXPECT_EQ(spec_of(coat, Role::ActivationGrad, "linear_output_grad"), canon("e5m2:tensor:eps=1e-10"));
  EXPECT_EQ(spec_of(coat, Role::ExpAvg, "linear"), canon("coat-opt"));
  EXPECT_EQ(spec_of(coat, Role::ExpAvgSq, "linear"), canon("coat-opt"));
  EXPECT_EQ(spec_of(coat, Role::Grad, "linear"), "none");
  EXPECT_EQ(spec_of(coat, Role::Weight, "norm"), "none");
  // The LM head stays in BF16, also when it is the tied embedding.
  EXPECT_EQ(spec_of(coat, Role::Activation, "linear_input", "lm_head"), canon("bf16"));
  EXPECT_EQ(spec_of(coat, Role::Weight, "linear", "lm_head"), canon("bf16"));
  // TransformerEngine HYBRID: E4M3 forward, E5M2 backward, non-linear layers in BF16.
  const Recipe te = recipe::get("te");
  EXPECT_EQ(spec_of(te, Role::Activation, "linear_input"), canon("e4m3:tensor"));
  EXPECT_EQ(spec_of(te, Role::Activation, "norm_input"), canon("bf16"));
  EXPECT_EQ(spec_of(te, Role::ActivationGrad, "linear_output_grad"), canon("e5m2:tensor"));
  // NVFP4 (TE's NVFP4BlockScaling): 16x16 E2M1 weight blocks, 1x16 GEMM inputs, stochastically
  // rounded 1x16 gradients, E4M3 scales under an fp32 tensor scale; BF16 elsewhere (from te).
  const Recipe nv = recipe::get("nvfp4");
  EXPECT_EQ(spec_of(nv, Role::Weight, "linear"), canon("e2m1:b16x16:scale=e4m3"));
  EXPECT_EQ(spec_of(nv, Role::Activation, "linear_input"), canon("e2m1:g16:scale=e4m3"));
  EXPECT_EQ(spec_of(nv, Role::ActivationGrad, "linear_output_grad"), canon("e2m1:g16:scale=e4m3:round=stochastic"));
  EXPECT_EQ(spec_of(nv, Role::Activation, "norm_input"), canon("bf16"));
  EXPECT_EQ(spec_of(nv, Role::Weight, "linear", "lm_head"), canon("bf16"));
  // MXFP4: every GEMM operand in 1x32 E2M1 blocks with E8M0 (floor) scales.
  const Recipe mx4 = recipe::get("mxfp4");
  EXPECT_EQ(spec_of(mx4, Role::Weight, "linear"), canon("e2m1:g32:scale=e8m0:mx=floor"));
  EXPECT_EQ(spec_of(mx4, Role::Activation, "linear_input"), canon("e2m1:g32:scale=e8m0:mx=floor"));
  EXPECT_EQ(spec_of(mx4, Role::ActivationGrad, "linear_output_grad"), canon("e2m1:g32:scale=e8m0:mx=floor"));
  EXPECT_EQ(spec_of(te, Role::ExpAvg, "linear"), "none");
  // DeepSeek-V3: 1x128 activations, 128x128 weights (DeepGEMM's casts), E4M3 gradients, BF16 moments.
  const Recipe ds = recipe::get("deepseek");
  EXPECT_EQ(spec_of(ds, Role::Activation, "linear_input"), canon("deepseek-act"));
  EXPECT_EQ(spec_of(ds, Role::Weight, "linear"), canon("deepseek-w"));
  EXPECT_EQ(spec_of(ds, Role::ActivationGrad, "linear_output_grad"), canon("deepseek-act"));
  EXPECT_EQ(spec_of(ds, Role::ExpAvgSq, "linear"), canon("bf16"));
  // MXFP8: 1x32 blocks with E8M0 scales.
  const Recipe mx = recipe::get("mxfp8");
  EXPECT_EQ(spec_of(mx, Role::Weight, "linear"), canon("e4m3:g32:scale=e8m0:scale_div=rcp"));
  EXPECT_EQ(spec_of(mx, Role::Activation, "attn_output"), canon("e4m3:g32:scale=e8m0:scale_div=rcp"));
  // FP8-LM / MS-AMP O2: FP8 weight gradients and first moment, FP16 second moment.
  const Recipe lm = recipe::get("fp8lm");
  EXPECT_EQ(spec_of(lm, Role::Grad, "linear"), canon("e4m3:tensor:scale=pow2"));
  EXPECT_EQ(spec_of(lm, Role::ExpAvg, "linear"), canon("e4m3:tensor:scale=pow2"));
  EXPECT_EQ(QuantSpec::parse(spec_of(lm, Role::ExpAvgSq, "linear")).format, Format::FP16);
  // BF16 baseline: compute copies in BF16, fp32 master state.
  const Recipe bf = recipe::get("bf16");
  EXPECT_EQ(spec_of(bf, Role::Weight, "linear"), canon("bf16"));
  EXPECT_EQ(spec_of(bf, Role::ExpAvg, "linear"), "none");
  EXPECT_THROW(recipe::get("fp4"), UsageError);
}

TEST(Recipes, JsonFilesLayerRulesOverABaseAndRejectNonsense) {
  const Recipe r = recipe::parse(Json::parse(R"({"name": "mine", "base": "coat", "rules": [
      {"role": "activation", "op": "norm_input", "spec": "e4m3:g32"},
      {"role": "weight", "op": "linear", "module": "down_proj$", "spec": "none", "note": "keep"}]})"),
                                 "mine.json");
  EXPECT_EQ(r.name, "mine");
  EXPECT_EQ(spec_of(r, Role::Activation, "norm_input"), canon("e4m3:g32"));
  EXPECT_EQ(spec_of(r, Role::Weight, "linear", "layers.1.mlp.down_proj"), "none");
  EXPECT_EQ(spec_of(r, Role::Weight, "linear", "layers.1.mlp.up_proj"), canon("coat-w"));  // from coat
  EXPECT_EQ(spec_of(r, Role::Activation, "silu_input"), canon("coat-act"));                // from coat
  // Without a catch-all rule, an unknown op matches nothing.
  const Recipe bare = recipe::parse(
      Json::parse(R"({"rules": [{"role": "weight", "op": "linear", "spec": "e4m3:tensor"}]})"), "bare.json");
  EXPECT_EQ(bare.match(Role::Activation, "norm_input", {"x"}), nullptr);
  auto expect_bad = [](const char* doc, const char* needle) {
    try {
      recipe::parse(Json::parse(doc), "bad.json");
      ADD_FAILURE() << doc;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  expect_bad(R"([1, 2])", "JSON object");
  expect_bad(R"({"name": "x"})", "\"rules\" array");
  expect_bad(R"({"rules": [{"role": "weights", "spec": "none"}]})", "unknown role 'weights'");
  expect_bad(R"({"rules": [{"role": "weight"}]})", "lacks \"spec\"");
  expect_bad(R"({"rules": [{"spec": "e9m9:tensor"}]})", "spec 'e9m9:tensor'");
  expect_bad(R"({"rules": [{"module": "([", "spec": "none"}]})", "not a valid regex");
  expect_bad(R"({"base": "nope", "rules": [{"spec": "none"}]})", "unknown recipe 'nope'");
}

// ---- analysis of the committed sample -----------------------------------------------------------

class SampleAnalysis : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reader_ = new trace::TraceReader(kSample);
    AnalyzeOptions o;
    o.progress = false;
    coat_ = new AnalyzeResult(analyze_trace(*reader_, recipe::get("coat"), o));
  }
  static void TearDownTestSuite() {
    delete coat_;
    delete reader_;
  }
  static trace::TraceReader* reader_;
  static AnalyzeResult* coat_;
};
trace::TraceReader* SampleAnalysis::reader_ = nullptr;
AnalyzeResult* SampleAnalysis::coat_ = nullptr;

TEST_F(SampleAnalysis, EveryTensorHasFiniteMetrics) {
  const AnalyzeResult& a = *coat_;
  const int64_t step = a.step;
  EXPECT_EQ(step, reader_->header().grad_window->first) << "default step: the full snapshot";
  const auto& ts = a.tensors;
  EXPECT_EQ(ts.size(), reader_->find_step(step)->tensors.size());
  int quantized = 0;
  std::set<std::string> roles;
  for (const TensorRecord& t : ts) {
    SCOPED_TRACE(t.name);
    const Json tj = t.to_json();
    for (const char* k : {"name", "role", "op", "shape", "spec"}) EXPECT_TRUE(tj.contains(k)) << k;
    roles.insert(t.role);
    const ErrorStats& s = t.stats;
    for (double v : {s.mse(), s.nmse(), s.max_abs_err, s.cosine(), s.underflow_frac(), s.saturated_frac()})
      EXPECT_TRUE(std::isfinite(v));
    // snr_db is +Inf only for an exact reproduction.
    if (!std::isfinite(s.snr_db())) {
      EXPECT_EQ(s.mse(), 0.0);
    }
    EXPECT_EQ(t.nan_count + t.inf_count, 0);
    if (t.quantized && t.spec.rfind("e", 0) == 0) {
      ++quantized;
      // An 8-bit float keeps 3 (E4M3) or 2 (E5M2) mantissa bits: the relative error of a real
      // tensor is around 2^-5..2^-3, never zero, never order one.
      EXPECT_GT(s.nmse(), 1e-3);
      EXPECT_LT(s.nmse(), 0.2);
      EXPECT_LT(static_cast<double>(t.bytes.total), static_cast<double>(t.stored_bytes) / 3.0);
    }
  }
  EXPECT_GT(quantized, 100);
  EXPECT_EQ(roles, (std::set<std::string>{"weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad"}));
  // Aggregates partition the tensors.
  const std::pair<const char*, const std::vector<Aggregate>*> groupings[] = {
      {"by_role", &a.aggregates.by_role}, {"by_op", &a.aggregates.by_op}, {"by_layer", &a.aggregates.by_layer}};
  for (const auto& [by, groups] : groupings) {
    int64_t n = 0, el = 0;
    for (const Aggregate& g : *groups) {
      n += g.tensors;
      el += g.elements;
    }
    EXPECT_EQ(n, static_cast<int64_t>(ts.size())) << by;
    EXPECT_EQ(el, a.totals.elements) << by;
  }
  EXPECT_TRUE(a.nonfinite_tensors.empty());
  EXPECT_TRUE(a.unmatched_tensors.empty());
  EXPECT_TRUE(a.skipped_gemms.empty());
}

TEST_F(SampleAnalysis, EveryLinearLayerHasAFiniteGemmError) {
  const AnalyzeResult& a = *coat_;
  const int64_t layers = reader_->header().model_config.at("num_hidden_layers").as_int();
  std::map<int64_t, size_t> gemms;
  for (const LayerGemms& l : a.layers) {
    gemms[l.layer] = l.gemms.size();
    EXPECT_TRUE(std::isfinite(l.stats.mse()));
    EXPECT_TRUE(std::isfinite(l.stats.nmse()));
    for (const GemmRecord& g : l.gemms) {
      EXPECT_TRUE(std::isfinite(g.stats.mse())) << g.module;
      EXPECT_GT(g.stats.mse(), 0.0) << g.module;
    }
  }
  for (int64_t l = 0; l < layers; ++l) EXPECT_EQ(gemms[l], 7u) << "q, k, v, o, gate, up, down in layer " << l;
  EXPECT_EQ(gemms[-1], 1u) << "the LM head";
}

// Recomputes one GEMM's error independently: the trace reader's data, the E4M3 codec of
// sim/formats (not the quantizer under sim/quant), per-tensor scale s = (amax + 1e-10) / 448,
// products accumulated in double. fp32 accumulation in the analysis changes the output by
// ~1e-7 relative, so the two nmse agree to 1e-4 relative.
TEST_F(SampleAnalysis, GemmErrorMatchesAnIndependentComputation) {
  const int64_t step = coat_->step;
  const trace::TensorInfo* xt = reader_->find(step, Role::Activation, "layers.2.mlp.down_proj.input");
  const trace::TensorInfo* wt = reader_->find(step, Role::Weight, "layers.2.mlp.down_proj.weight");
  ASSERT_NE(xt, nullptr);
  ASSERT_NE(wt, nullptr);
  auto fake_quant = [](Buffer<float> v) {
    float amax = 0;
    for (float x : v) amax = std::max(amax, std::fabs(x));
    const float s = (amax + 1e-10f) / 448.0f;
    for (float& x : v) x = decode_fp8<E4M3Traits>(encode_fp8_rne<E4M3Traits>(x / s, true)) * s;
    return v;
  };
  const Buffer<float> x = reader_->read_f32(*xt), w = reader_->read_f32(*wt);
  const Buffer<float> xq = fake_quant(x), wq = fake_quant(w);
  const int64_t m = xt->rows(), k = xt->cols(), n = wt->rows();
  ASSERT_EQ(wt->cols(), k);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double yr = 0, yq = 0;
      for (int64_t p = 0; p < k; ++p) {
        yr += static_cast<double>(x[i * k + p]) * w[j * k + p];
        yq += static_cast<double>(xq[i * k + p]) * wq[j * k + p];
      }
      err += (yr - yq) * (yr - yq);
      ref += yr * yr;
    }
  const double nmse = std::sqrt(err / ref);
  const GemmRecord* found = nullptr;
  for (const LayerGemms& l : coat_->layers)
    for (const GemmRecord& g : l.gemms)
      if (g.module == "layers.2.mlp.down_proj") found = &g;
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->m, m);
  EXPECT_EQ(found->n, n);
  EXPECT_EQ(found->k, k);
  EXPECT_NEAR(found->stats.nmse(), nmse, 1e-4 * nmse);
  EXPECT_NEAR(found->stats.mse(), err / static_cast<double>(m * n), 1e-3 * err / static_cast<double>(m * n));
}

// The per-tensor metrics are those of the spec the rule names, on the stored values.
TEST_F(SampleAnalysis, PerTensorErrorMatchesAnIndependentFakeQuantization) {
  const int64_t step = coat_->step;
  const trace::TensorInfo* wt = reader_->find(step, Role::Weight, "layers.1.self_attn.k_proj.weight");
  ASSERT_NE(wt, nullptr);
  const Buffer<float> w = reader_->read_f32(*wt);
  float amax = 0;
  for (float x : w) amax = std::max(amax, std::fabs(x));
  // COAT's weight quantizer: (amax + 1e-10) / 448 as PyTorch's CUDA division by a scalar (a
  // product with RN(1/448)), then Triton's division (div.full.f32) of every element.
  const float s = (amax + 1e-10f) * (1.0f / 448.0f);
  double se = 0;
  for (float x : w) {
    const float d = decode_fp8<E4M3Traits>(encode_fp8_rne<E4M3Traits>(div_full(x, s), true)) * s;
    se += (static_cast<double>(x) - d) * (static_cast<double>(x) - d);
  }
  for (const TensorRecord& t : coat_->tensors) {
    if (t.name != wt->name || t.role != "weight") continue;
    EXPECT_NEAR(t.stats.mse(), se / static_cast<double>(w.size()), 1e-9 * se / static_cast<double>(w.size()));
    return;
  }
  ADD_FAILURE() << "tensor not in the analysis";
}

TEST_F(SampleAnalysis, EveryBuiltinRecipeRunsOnTheSample) {
  for (const auto& name : recipe::names()) {
    SCOPED_TRACE(name);
    AnalyzeOptions o;
    o.progress = false;
    o.gemm = name == "bf16";  // one recipe with GEMMs is enough here; coat has them above
    const AnalyzeResult a = analyze_trace(*reader_, recipe::get(name), o);
    for (const TensorRecord& t : a.tensors) {
      ASSERT_TRUE(std::isfinite(t.stats.mse())) << t.name;
      ASSERT_TRUE(std::isfinite(t.stats.nmse())) << t.name;
    }
    EXPECT_LE(a.totals.recipe_bytes, a.totals.stored_bytes);
  }
}

// ---- synthetic traces: dtype fidelity and NaN/Inf ------------------------------------------------

std::string write_trace(const std::string& dir, const std::vector<float>& act, const std::vector<uint16_t>& bf16) {
  const std::string p = dir + "/t.h5";
  trace::TraceHeader h;
  h.producer = "test_analyze_trace";
  trace::TraceWriter w(p, h);
  trace::TensorInfo t;
  t.step = 1;
  t.role = Role::Activation;
  t.op = "norm_input";
  t.module = "layers.0.input_layernorm";
  t.layer = 0;
  t.name = "x.f32";
  t.shape = {static_cast<int64_t>(act.size() / 16), 16};
  w.write(t, act.data());
  t.name = "x.bf16";
  t.dtype = trace::DType::BF16;
  t.shape = {static_cast<int64_t>(bf16.size())};
  w.write(t, bf16.data());
  w.commit();
  return p;
}

TEST(Analyze, CountsNanAndInfAndKeepsMetricsFinite) {
  const std::string dir = test::temp_dir();
  std::vector<float> act(64 * 16);
  for (size_t i = 0; i < act.size(); ++i) act[i] = std::sin(0.1f * static_cast<float>(i)) * 3.0f;
  act[5] = NAN;
  act[70] = INFINITY;
  act[71] = -INFINITY;
  std::vector<uint16_t> bf(32, 0x3F80);
  const std::string p = write_trace(dir, act, bf);
  const trace::TraceReader r(p);
  AnalyzeOptions o;
  o.progress = false;
  const AnalyzeResult a = analyze_trace(r, recipe::get("coat"), o);
  ASSERT_EQ(a.nonfinite_tensors.size(), 1u);
  EXPECT_EQ(a.nonfinite_tensors[0], "x.f32");
  for (const TensorRecord& t : a.tensors) {
    if (t.name != "x.f32") continue;
    EXPECT_EQ(t.nan_count, 1);
    EXPECT_EQ(t.inf_count, 2);
    EXPECT_EQ(t.stats.nonfinite, 3) << "the quantize metrics skip the 3 non-finite references";
    EXPECT_TRUE(std::isfinite(t.stats.mse()));
    EXPECT_TRUE(std::isfinite(t.stats.nmse()));
  }
  // A bf16 tensor kept as bf16 (the bf16 recipe), all finite (the codes copied, the sums of the
  // tensor with itself, no counting pass) and then with one NaN and two Infs: the counts come
  // from the values either way.
  {
    const std::string p1 = write_trace(test::temp_dir(), std::vector<float>(64, 0.25f), bf);
    const AnalyzeResult c = analyze_trace(trace::TraceReader(p1), recipe::get("bf16"), o);
    EXPECT_TRUE(c.nonfinite_tensors.empty());
    for (const TensorRecord& t : c.tensors) {
      EXPECT_EQ(t.nan_count + t.inf_count, 0) << t.name;
      EXPECT_EQ(t.stats.count, t.name == "x.bf16" ? 32 : 64) << t.name;
      EXPECT_EQ(t.stats.sum_sq_err, 0.0) << t.name;
    }
  }
  bf[3] = 0x7FC1;
  bf[8] = 0xFF80;
  bf[31] = 0x7F80;
  const std::string p2 = write_trace(test::temp_dir(), std::vector<float>(64, 0.25f), bf);
  const AnalyzeResult b = analyze_trace(trace::TraceReader(p2), recipe::get("bf16"), o);
  ASSERT_EQ(b.nonfinite_tensors.size(), 1u);
  EXPECT_EQ(b.nonfinite_tensors[0], "x.bf16");
  for (const TensorRecord& t : b.tensors) {
    EXPECT_EQ(t.nan_count, t.name == "x.bf16" ? 1 : 0) << t.name;
    EXPECT_EQ(t.inf_count, t.name == "x.bf16" ? 2 : 0) << t.name;
    EXPECT_EQ(t.stats.nonfinite, t.name == "x.bf16" ? 3 : 0) << t.name;
  }
}

// bf16-stored data under a bf16 rule are reproduced exactly: the analysis quantizes from the
// stored dtype, it does not widen, round and narrow again.
TEST(Analyze, Bf16DataUnderABf16RuleAreExact) {
  const std::string dir = test::temp_dir();
  std::vector<float> act(16 * 16, 0.5f);
  std::vector<uint16_t> bf(4096);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<uint16_t>(0x3000 + 5 * i);  // finite patterns
  const std::string p = write_trace(dir, act, bf);
  const trace::TraceReader r(p);
  AnalyzeOptions o;
  o.progress = false;
  const AnalyzeResult a = analyze_trace(r, recipe::get("bf16"), o);
  for (const TensorRecord& t : a.tensors) {
    if (t.name != "x.bf16") continue;
    EXPECT_EQ(t.spec, canon("bf16"));
    EXPECT_EQ(t.stats.mse(), 0.0);
    EXPECT_EQ(t.stats.max_abs_err, 0.0);
    return;
  }
  ADD_FAILURE() << "x.bf16 not analyzed";
}

TEST(Analyze, AMissingStepIsAOneLineErrorListingTheSteps) {
  const trace::TraceReader r(kSample);
  AnalyzeOptions o;
  o.step = 12345;
  try {
    analyze_trace(r, recipe::get("coat"), o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no step 12345"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("295"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8sim::analyze
