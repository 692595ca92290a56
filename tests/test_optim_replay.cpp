// optim_replay on traces: COAT's Table 1 on the committed sample, drift, the fp32 replay through
// the trace plumbing (a trace written from the real-torch fixture), determinism, bad traces.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/optim/replay.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::optim {
namespace {

const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

// The steps of a drift run (empty when there is no such run).
const std::vector<DriftStep>& drift_steps(const OptimResult& doc, const std::string& name) {
  static const std::vector<DriftStep> none;
  if (!doc.drift) return none;
  for (const DriftRun& run : *doc.drift)
    if (run.name == name) return run.steps;
  return none;
}

OptimOptions opts_with(std::initializer_list<const char*> recipes, bool table1, bool drift) {
  OptimOptions o;
  for (const char* r : recipes) o.recipes.push_back(StateRecipe::parse(r));
  o.table1 = table1;
  o.drift = drift;
  o.threads = 1;
  return o;
}

// ---- Table 1 on the committed sample (a real training run) ----------------------------------------
TEST(OptimReplaySample, Table1IsFiniteAndExpansionHelps) {
  const OptimResult doc = optim_replay(kSample, opts_with({"coat"}, true, false));
  const auto& f = table1_formats();
  ASSERT_TRUE(doc.table1.has_value());
  // Indices into table1_formats().
  constexpr size_t kE4M3 = 0, kE4M3Expand = 1, kE5M2 = 2;
  ASSERT_EQ(std::string(f[kE4M3].label), "E4M3");
  ASSERT_EQ(std::string(f[kE4M3Expand].label), "E4M3+Expand");
  ASSERT_EQ(std::string(f[kE5M2].label), "E5M2");
  const Table1Matrix& t = doc.table1->mse;
  const Table1Details& det = doc.table1->details;
  const Table1Matrix& nf = det.mse_without_flushed_v;
  for (size_t a = 0; a < f.size(); ++a)
    for (size_t b = 0; b < f.size(); ++b) {
      EXPECT_TRUE(std::isfinite(t[a][b])) << f[a].label << "/" << f[b].label;
      EXPECT_GE(t[a][b], 0.0);
      EXPECT_TRUE(std::isfinite(nf[a][b])) << f[a].label << "/" << f[b].label;
    }
  // The paper's headline: E4M3+Expand for both moments is not worse than plain E4M3.
  EXPECT_LE(t[kE4M3Expand][kE4M3Expand], t[kE4M3][kE4M3]);
  // Without the elements whose v flushed to 0, expanding the first moment helps in every column.
  for (size_t b = 0; b < f.size(); ++b) EXPECT_LT(nf[kE4M3Expand][b], nf[kE4M3][b]) << f[b].label;
  // Expansion never flushes a nonzero moment to zero on this trace; plain E4M3 does.
  EXPECT_EQ(det.v_flushed_frac[kE4M3Expand], 0.0);
  EXPECT_GT(det.v_flushed_frac[kE4M3], 0.0);
  // Table 1 covers every parameter of the model (the "full" step), not only the window.
  EXPECT_GT(doc.moments.elements, doc.window.elements);
  // The paper's matrix travels with the result (Xi et al., ICLR 2025, Table 1).
  EXPECT_DOUBLE_EQ(doc.table1->paper[kE4M3Expand][kE4M3Expand], 12.31);
  EXPECT_DOUBLE_EQ(doc.table1->paper[kE5M2][kE5M2], 40.30);
}

// The 4- and 6-bit moments in Table 1's measure: the FP8 Table 1 is unchanged by it; a second
// moment stored without expansion flushes (a nonzero v decoded as 0 divides m by eps), so every
// column without DE is far worse than its DE column on this trace; the ratios are to Table 1's
// E4M3/E4M3 cell.
TEST(OptimReplaySample, Table1LowBitMomentsNeedExpansionForV) {
  OptimOptions o = opts_with({"coat"}, true, false);
  const OptimResult base = optim_replay(kSample, o);
  o.table1_lowbit = true;
  const OptimResult doc = optim_replay(kSample, o);
  ASSERT_TRUE(doc.table1 && doc.table1_lowbit && base.table1);
  EXPECT_EQ(doc.table1->mse, base.table1->mse);
  EXPECT_FALSE(base.table1_lowbit.has_value());
  const auto& f = table1_lowbit_formats();
  const Table1LowBit& lb = *doc.table1_lowbit;
  ASSERT_EQ(lb.mse.size(), f.size());
  for (size_t a = 0; a < f.size(); ++a)
    for (size_t b = 0; b + 1 < f.size(); b += 2) {  // columns: plain, then +Expand
      EXPECT_GT(lb.mse[a][b], 100 * lb.mse[a][b + 1]) << f[a].label << " / " << f[b].label;
      EXPECT_DOUBLE_EQ(lb.ratio_to_e4m3[a][b], lb.mse[a][b] / doc.table1->mse[0][0]);
    }
  for (size_t b = 0; b < f.size(); b += 2) {
    EXPECT_GT(lb.v_flushed_frac[b], 0.0) << f[b].label;
    EXPECT_EQ(lb.v_flushed_frac[b + 1], 0.0) << f[b + 1].label;
  }
  const Json j = doc.to_json();
  EXPECT_EQ(j.at("table1_lowbit").at("specs").at("E2M1+Expand").as_string(), "e2m1:g128:de=coat");
}

// Memory: exactly sim/quant's accounting summed over every parameter with moments.
TEST(OptimReplaySample, MemoryIsTheQuantizersAccounting) {
  const OptimResult doc = optim_replay(kSample, opts_with({"coat", "te-fp8"}, false, false));
  const trace::TraceReader r(kSample);
  ASSERT_TRUE(doc.moments.adamw_step.has_value());
  const int64_t step = *doc.moments.adamw_step + 1;  // state entering update step
  trace::Filter f;
  f.step = step;
  f.role = trace::Role::ExpAvg;
  double coat = 0, te = 0, n = 0;
  const QuantSpec c = QuantSpec::parse("e4m3:g128:de=coat"), t = QuantSpec::parse("e4m3:tensor");
  for (const auto* ti : r.select(f)) {
    const Shape flat{ti->numel()};
    coat += 2.0 * static_cast<double>(quantized_bytes(c, flat));
    te += 2.0 * static_cast<double>(quantized_bytes(t, flat));
    n += static_cast<double>(ti->numel());
  }
  ASSERT_GT(n, 0);
  for (const StateMemory& e : doc.memory) {
    if (e.recipe == "fp32") {
      EXPECT_DOUBLE_EQ(e.bytes_per_param, 8.0);
    } else if (e.recipe == "coat") {
      EXPECT_DOUBLE_EQ(e.state_bytes, coat);
    } else if (e.recipe == "te-fp8") {
      EXPECT_DOUBLE_EQ(e.state_bytes, te);
    }
  }
}

// ---- drift ----------------------------------------------------------------------------------------
TEST(OptimReplaySample, DriftFp32IsExactAndCoatTracksIt) {
  const OptimResult doc = optim_replay(kSample, opts_with({"fp32", "coat", "coat-noexpand"}, false, true));
  ASSERT_TRUE(doc.drift.has_value());
  const std::vector<DriftStep>& fp32 = drift_steps(doc, "fp32");
  ASSERT_EQ(static_cast<int64_t>(fp32.size()), doc.window.steps);
  for (const DriftStep& s : fp32) {  // the same code path with fp32 moments: zero drift, by construction
    EXPECT_EQ(s.param_rel_l2, 0.0);
    EXPECT_EQ(s.m_nmse, 0.0);
    EXPECT_DOUBLE_EQ(s.update_cosine, 1.0);
  }
  const std::vector<DriftStep>& coat = drift_steps(doc, "coat");
  const std::vector<DriftStep>& noexp = drift_steps(doc, "coat-noexpand");
  for (size_t k = 0; k < coat.size(); ++k) {
    EXPECT_GT(coat[k].update_cosine, 0.99) << "step " << k;  // COAT's claim: FP8 states track fp32
    EXPECT_GT(coat[k].param_rel_l2, 0.0);
    EXPECT_LT(coat[k].m_quant_nmse, noexp[k].m_quant_nmse);
  }
  EXPECT_LT(coat.back().displacement_rel_err, noexp.back().displacement_rel_err);
}

// ---- the fp32 replay against the sample's captured end weights -------------------------------------
TEST(OptimReplaySample, Fp32ReplayWithinTheSqrtBound) {
  const OptimResult doc = optim_replay(kSample, opts_with({"coat"}, false, false));
  ASSERT_TRUE(doc.fp32_replay.has_value());
  const Fp32Replay& rp = *doc.fp32_replay;
  const trace::TraceReader r(kSample);
  const auto [first, last] = *r.header().grad_window;
  double pmax = 0;
  trace::Filter f;
  f.step = last + 1;
  f.role = trace::Role::Weight;
  for (const auto* t : r.select(f))
    for (float x : r.read_f32(*t)) pmax = std::max(pmax, static_cast<double>(std::fabs(x)));
  // Per step at most ulp(p) + 3 ulp(u) (tests/test_optim_adamw.cpp), |u| << |p|: K steps of
  // at most 2 ulp of the largest weight.
  const double K = static_cast<double>(last - first + 1);
  const float pm = static_cast<float>(pmax);
  const double ulp = std::nextafter(pm, INFINITY) - pm;
  EXPECT_LE(rp.max_abs_err, 2.0 * K * ulp);
  EXPECT_LT(rp.mismatch_frac, 0.05);
  EXPECT_TRUE(std::isfinite(rp.max_rel_err));
  EXPECT_LE(rp.max_rel_err, 1e-4);
}

// ---- a trace written from the real-torch fixture: the trace plumbing (per-step lr, step count,
// hyper-parameters, end weights) gives the same replay as driving the fixture directly ------------
struct FixtureTraceOptions {
  std::function<void(trace::StepInfo&)> step_hook;
  std::function<void(const std::string& what, int64_t step, std::vector<float>&)> data_hook;
  bool write_end = true;
};

// Writes the fixture's "window" scenario (parameters with weight decay 0.1) as a trace.
double write_fixture_trace(const std::string& path, const FixtureTraceOptions& fo = {}) {
  const std::string dir = FP8SIM_TEST_DATA;
  const Json doc = Json::parse(read_text_file(dir + "/optim_adamw_fixture.json"));
  std::vector<float> blob(static_cast<size_t>(doc.at("total_floats").as_int()));
  std::ifstream in(dir + "/optim_adamw_fixture.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(blob.data()), static_cast<std::streamsize>(blob.size() * 4));
  auto get = [&](const Json& e) {
    const size_t off = static_cast<size_t>(e.at("offset").as_int()), cnt = static_cast<size_t>(e.at("count").as_int());
    return std::vector<float>(blob.begin() + static_cast<long>(off), blob.begin() + static_cast<long>(off + cnt));
  };
  const Json& sc = doc.at("scenarios").at("window");
  const int64_t step0 = sc.at("step0").as_int(), K = sc.at("steps").as_int();
  const int64_t first = step0 + 1, last = step0 + K;  // trace step S = AdamW update S
  trace::TraceHeader h;
  h.producer = "test_optim_replay (from scripts/make_adamw_fixture.py's torch.optim.AdamW run)";
  h.model_kind = "generic";
  h.optimizer.name = "torch.optim.AdamW";
  h.optimizer.beta1 = doc.at("betas").as_array()[0].as_number();
  h.optimizer.beta2 = doc.at("betas").as_array()[1].as_number();
  h.optimizer.eps = doc.at("eps").as_number();
  h.optimizer.weight_decay = 0.1;
  h.optimizer.options = Json::parse(R"J({"implementation": "single-tensor (foreach=False, fused=False)"})J");
  h.grad_window = std::make_pair(first, last);
  trace::TraceWriter w(path, h);
  for (int64_t s = first; s <= last + 1; ++s) {
    trace::StepInfo si;
    si.step = s;
    si.adamw_step = s - 1;
    si.contents = s == first ? "full" : (s <= last ? "window" : "state");
    if (s <= last) si.lr = sc.at("lr").as_array()[static_cast<size_t>(s - first)].as_number();
    if (fo.step_hook) fo.step_hook(si);
    w.set_step(si);
  }
  double max_err = 0;
  for (const Json& pj : sc.at("params").as_array()) {
    if (pj.at("weight_decay").as_number() != 0.1) continue;
    const std::string name = pj.at("name").as_string();
    std::vector<int64_t> shape;
    for (const Json& d : pj.at("shape").as_array()) shape.push_back(d.as_int());
    auto put = [&](int64_t step, trace::Role role, std::vector<float> x, const char* what) {
      if (fo.data_hook) fo.data_hook(what, step, x);
      trace::TensorInfo t;
      t.step = step;
      t.role = role;
      t.name = name;
      t.param = name;
      t.op = "linear";
      t.dtype = trace::DType::F32;
      t.shape = shape;
      w.write(t, x.data());
    };
    put(first, trace::Role::Weight, get(pj.at("p0")), "weight");
    put(first, trace::Role::ExpAvg, get(pj.at("m0")), "exp_avg");
    put(first, trace::Role::ExpAvgSq, get(pj.at("v0")), "exp_avg_sq");
    for (int64_t k = 0; k < K; ++k)
      put(first + k, trace::Role::Grad, get(pj.at("grads").as_array()[static_cast<size_t>(k)]), "grad");
    if (fo.write_end) put(last + 1, trace::Role::Weight, get(pj.at("p_after").as_array().back()), "weight_end");
    // The direct replay of the same data, driven by the fixture's own numbers.
    std::vector<float> p = get(pj.at("p0")), m = get(pj.at("m0")), v = get(pj.at("v0"));
    AdamwHyper hy;
    hy.beta1 = *h.optimizer.beta1;
    hy.beta2 = *h.optimizer.beta2;
    hy.eps = *h.optimizer.eps;
    hy.weight_decay = 0.1;
    for (int64_t k = 0; k < K; ++k) {
      hy.lr = sc.at("lr").as_array()[static_cast<size_t>(k)].as_number();
      const auto g = get(pj.at("grads").as_array()[static_cast<size_t>(k)]);
      adamw_step_fp32(p.data(), g.data(), m.data(), v.data(), p.size(),
                      make_step_consts(hy, step0 + k + 1, UpdateRule::Torch));
    }
    const auto want = get(pj.at("p_after").as_array().back());
    for (size_t i = 0; i < p.size(); ++i) max_err = std::max(max_err, std::fabs(static_cast<double>(p[i]) - want[i]));
  }
  w.commit();
  return max_err;
}

TEST(OptimReplayFixtureTrace, TracePlumbingReproducesTheDirectReplay) {
  const std::string path = test::temp_dir() + "/fixture.h5";
  const double direct_max_err = write_fixture_trace(path);
  const OptimResult doc = optim_replay(path, opts_with({"fp32", "coat"}, true, true));
  EXPECT_EQ(doc.window.step0, 10);
  EXPECT_EQ(doc.window.steps, 6);
  ASSERT_TRUE(doc.fp32_replay.has_value());
  EXPECT_EQ(doc.fp32_replay->max_abs_err, direct_max_err);
  EXPECT_GT(direct_max_err, 0.0);  // torch's MKL sqrt does differ somewhere in this window
  EXPECT_LE(doc.fp32_replay->max_rel_err, 1e-5);
  for (const DriftStep& s : drift_steps(doc, "fp32")) EXPECT_EQ(s.param_rel_l2, 0.0);
}

TEST(OptimReplayFixtureTrace, BadTracesGiveOneLineErrors) {
  const std::string dir = test::temp_dir();
  auto expect_error = [&](const std::string& name, const FixtureTraceOptions& fo, const OptimOptions& o,
                          const std::string& needle) {
    const std::string path = dir + "/" + name + ".h5";
    write_fixture_trace(path, fo);
    try {
      optim_replay(path, o);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << name << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << name << ": " << msg;
    }
  };
  const OptimOptions o = opts_with({"coat"}, true, true);
  FixtureTraceOptions nan_grad;
  nan_grad.data_hook = [](const std::string& what, int64_t step, std::vector<float>& x) {
    if (what == "grad" && step == 13) x[3] = std::numeric_limits<float>::quiet_NaN();
  };
  expect_error("nan_grad", nan_grad, o, "non-finite");
  FixtureTraceOptions neg_v;
  neg_v.data_hook = [](const std::string& what, int64_t, std::vector<float>& x) {
    if (what == "exp_avg_sq") x[0] = -1.0f;
  };
  expect_error("neg_v", neg_v, o, "exp_avg_sq is negative");
  FixtureTraceOptions no_lr;
  no_lr.step_hook = [](trace::StepInfo& s) {
    if (s.step == 12) s.lr.reset();
  };
  expect_error("no_lr", no_lr, o, "lacks the attribute lr");
  OptimOptions too_many = o;
  too_many.steps = 7;
  expect_error("steps", {}, too_many, "exceeds the 6 steps");
  // Without end weights the replay is skipped, not failed.
  FixtureTraceOptions no_end;
  no_end.write_end = false;
  const std::string path = dir + "/no_end.h5";
  write_fixture_trace(path, no_end);
  const OptimResult doc = optim_replay(path, o);
  EXPECT_FALSE(doc.fp32_replay.has_value());
  EXPECT_TRUE(doc.drift.has_value());
}

// ---- determinism ----------------------------------------------------------------------------------
TEST(OptimReplaySample, SameBitsForAnyThreadCountAndSeed) {
  OptimOptions a = opts_with({"coat", "te-fp8"}, true, true);
  a.steps = 2;
  a.rounding = Rounding::Stochastic;
  a.seed = 5;
  OptimOptions b = a;
  b.threads = 2;
  const OptimResult da = optim_replay(kSample, a);
  const std::string ja = da.to_json().dump(), jb = optim_replay(kSample, b).to_json().dump();
  EXPECT_EQ(ja, jb);
  OptimOptions c = a;
  c.seed = 6;
  const OptimResult dc = optim_replay(kSample, c);
  EXPECT_NE(drift_steps(da, "coat")[1].param_rel_l2, drift_steps(dc, "coat")[1].param_rel_l2);
}

// OptimOptions::drift_device: a device that takes every parameter gets each one's whole request
// (here the CPU's own drift_cpu stands in for the GPU) and gives the same document; one that hands
// parameters back (UsageError) leaves them to the CPU, again the same document.
TEST(OptimReplaySample, DriftDeviceHookTakesParametersOrHandsThemBack) {
  OptimOptions o = opts_with({"coat", "te-fp8", "m=fp32,v=e5m2:g64"}, false, true);
  o.rounding = Rounding::Stochastic;
  o.seed = 3;
  const std::string want = optim_replay(kSample, o).to_json().dump();
  int64_t taken = 0, elements = 0;
  OptimOptions dev = o;
  dev.drift_device = [&](const DriftRequest& rq) {
    EXPECT_EQ(rq.recipes.size(), 3u);
    EXPECT_EQ(rq.grads.size(), static_cast<size_t>(rq.steps));
    EXPECT_GE(rq.lr.size(), static_cast<size_t>(rq.steps));
    EXPECT_EQ(rq.index, static_cast<uint64_t>(taken)) << "the window's parameters in order";
    ++taken;
    elements += rq.n;
    return drift_cpu(rq);
  };
  const OptimResult got = optim_replay(kSample, dev);
  EXPECT_EQ(got.to_json().dump(), want);
  EXPECT_EQ(taken, got.window.params);
  EXPECT_EQ(elements, got.window.elements);
  int64_t refused = 0;
  OptimOptions back = o;
  back.drift_device = [&](const DriftRequest&) -> DriftResult {
    ++refused;
    throw UsageError("not on this device");
  };
  EXPECT_EQ(optim_replay(kSample, back).to_json().dump(), want);
  EXPECT_EQ(refused, got.window.params);
}

// OptimOptions::direction_device likewise for Table 1's sums (both format lists).
TEST(OptimReplaySample, DirectionDeviceHookTakesMomentPairsOrHandsThemBack) {
  OptimOptions o = opts_with({"coat"}, true, false);
  o.table1_lowbit = true;
  const std::string want = optim_replay(kSample, o).to_json().dump();
  int64_t fp8 = 0, lowbit = 0;
  OptimOptions dev = o;
  dev.direction_device = [&](const DirectionRequest& rq) {
    (rq.specs.size() == 4 ? fp8 : lowbit) += 1;
    EXPECT_GT(rq.bc1, 0.0);
    EXPECT_GT(rq.bc2, 0.0);
    return direction_cpu(rq);
  };
  const OptimResult got = optim_replay(kSample, dev);
  EXPECT_EQ(got.to_json().dump(), want);
  EXPECT_EQ(fp8, got.moments.params);
  EXPECT_EQ(lowbit, got.moments.params);
  OptimOptions back = o;
  back.direction_device = [](const DirectionRequest&) -> std::vector<double> { throw UsageError("not here"); };
  EXPECT_EQ(optim_replay(kSample, back).to_json().dump(), want);
}

// Table 1's sums, four chunks at a time in AVX2 lanes (where the CPU has AVX2) against the portable
// loop: a parameter of 9 whole chunks of 4096 and a partial one, moments over 12 decades with exact
// zeros (the nonzero and flush counts), in the 4 FP8 formats and the 4- and 6-bit ones.
TEST(OptimReplaySynthetic, Table1SumsOfTheVectorLoopAreThePortableOnes) {
  const int64_t n = 9 * 4096 + 1234;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> lg(-12.0f, 0.0f), u(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float g = (u(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, lg(rng));
    m[i] = i % 97 == 0 ? 0.0f : 0.3f * g;
    v[i] = i % 89 == 0 ? 0.0f : g * g;
  }
  AdamwHyper h;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  WindowMeta meta;
  meta.steps = 0;
  auto run = [&](bool simd) {
    set_quant_simd(simd);
    OptimOptions o = opts_with({"coat"}, true, false);
    o.table1_lowbit = true;
    o.threads = 2;
    OptimReplay r(meta, o);
    const std::string sums = r.state_part("p", m, v, h, 50);  // the raw sums, bit for bit
    r.add_state("p", m, v, h, 50);
    set_quant_simd(true);
    return std::pair{sums, r.finish().to_json().dump()};
  };
  const auto [wide_sums, wide] = run(true);
  const auto [portable_sums, portable] = run(false);
  EXPECT_TRUE(wide_sums == portable_sums);
  EXPECT_EQ(wide, portable);
  EXPECT_NE(wide.find("table1"), std::string::npos);
}

// A parameter large enough (>= 2^18 elements) that the replay runs multi-threaded inside: the
// document must not depend on the thread count (fixed-order sums).
TEST(OptimReplaySynthetic, LargeParameterSameBitsForAnyThreadCount) {
  const int64_t n = (int64_t{1} << 18) + 333;
  ParamWindow w;
  w.name = "big";
  w.shape = {n};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> lg(-8.0f, -2.0f), u(0.0f, 1.0f);
  auto rnd = [&] { return (u(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, lg(rng)); };
  for (int64_t i = 0; i < n; ++i) {
    w.p0.push_back(0.02f * rnd() * 1e3f);
    const float g = rnd();
    w.m0.push_back(0.5f * g);
    w.v0.push_back(g * g);
  }
  for (int k = 0; k < 2; ++k) {
    Buffer<float> g(static_cast<size_t>(n));
    for (auto& x : g) x = rnd();
    w.grads.push_back(g);
    w.lr.push_back(1e-3);
  }
  w.hyper.beta1 = 0.9;
  w.hyper.beta2 = 0.95;
  WindowMeta meta;
  meta.step0 = 100;
  meta.steps = 2;
  auto run = [&](int threads) {
    OptimOptions o = opts_with({"coat", "te-fp8", "bf16"}, true, true);
    o.threads = threads;
    o.rounding = Rounding::Stochastic;
    o.seed = 1;
    OptimReplay r(meta, o);
    r.add_state("big", w.m0, w.v0, w.hyper, 100);
    r.add_param(w);
    return r.finish().to_json().dump();
  };
  const std::string one = run(1), two = run(2), three = run(3);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
  // Inconsistent inputs are refused with the parameter's name.
  ParamWindow bad = w;
  bad.grads[1].pop_back();
  OptimReplay r(meta, opts_with({"coat"}, false, true));
  try {
    r.add_param(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'big'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8sim::optim
