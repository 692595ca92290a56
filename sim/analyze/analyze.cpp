#include "sim/analyze/analyze.hpp"
#include "sim/common/paths.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <map>
#include <set>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/metrics/error_stats.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"

namespace fp8sim::analyze {

namespace {

using trace::Role;
using trace::TensorData;
using trace::TensorInfo;

InputDtype input_dtype(trace::DType d) {
  switch (d) {
    case trace::DType::F32:
      return InputDtype::F32;
    case trace::DType::BF16:
      return InputDtype::BF16;
    case trace::DType::F16:
      return InputDtype::FP16;
  }
  return InputDtype::F32;
}

const void* raw(const TensorData& d) {
  return d.dtype == trace::DType::F32 ? static_cast<const void*>(d.f32.data())
                                      : static_cast<const void*>(d.bits.data());
}

// The module paths a tensor answers to: its module, its consumers and, for a tied parameter,
// the modules of its aliases ("lm_head.weight" -> "lm_head").
std::vector<std::string> modules_of(const TensorInfo& t) {
  std::vector<std::string> m;
  if (!t.module.empty()) m.push_back(t.module);
  for (const auto& x : t.modules) m.push_back(x);
  for (const auto& a : t.aliases) m.push_back(a.substr(0, a.rfind('.')));
  return m;
}

// AdamW moments are quantized as COAT does: the parameter flattened, cut into contiguous groups.
std::vector<int64_t> quant_shape(const TensorInfo& t) {
  if (t.role == Role::ExpAvg || t.role == Role::ExpAvgSq) return {t.numel()};
  return t.shape;
}

// Delayed scaling needs an amax history that one captured step does not have: the history is
// seeded with this tensor's own amax, which makes it equal to current scaling (with the margin).
QuantizeOptions quant_options(const QuantSpec& spec, const float* x, size_t n, std::optional<DelayedScaler>& scaler,
                              int threads) {
  QuantizeOptions o;
  o.threads = threads;
  if (spec.delayed.enabled()) {
    float amax = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    scaler.emplace(spec);
    scaler->update(amax);
    o.delayed = &*scaler;
  }
  return o;
}

std::vector<float> dequantized_operand(const TensorInfo& t, const TensorData& d, const std::vector<float>& x,
                                       const std::optional<QuantSpec>& spec, int threads) {
  if (!spec) return x;
  std::optional<DelayedScaler> scaler;
  const QuantizeOptions o = quant_options(*spec, x.data(), x.size(), scaler, threads);
  const QuantizedTensor q = quantize_any(raw(d), input_dtype(d.dtype), t.shape, *spec, o);
  return dequantize(q, threads);
}

// Appends the ErrorStats keys to `j`. (The Json is held in a local: iterating over a member of a
// temporary returned by to_json() would dangle.)
void copy_stats(Json& j, const ErrorStats& s) {
  const Json sj = s.to_json();
  for (const auto& [k, v] : sj.as_object()) j[k] = v;
}

struct Agg {
  int64_t tensors = 0, quantized = 0, elements = 0;
  uint64_t stored_bytes = 0, recipe_bytes = 0;
  std::set<std::string> specs;
  ErrorStats stats;
  bool any_stats = false;

  Json to_json(const std::string& key) const {
    Json j = Json::object();
    j["key"] = key;
    j["tensors"] = tensors;
    j["quantized_tensors"] = quantized;
    j["elements"] = elements;
    j["stored_bytes"] = stored_bytes;
    j["recipe_bytes"] = recipe_bytes;
    Json s = Json::array();
    for (const auto& x : specs) s.push_back(x);
    j["specs"] = std::move(s);
    if (any_stats) copy_stats(j, stats);
    return j;
  }
};

int64_t default_step(const trace::TraceReader& r) {
  FP8SIM_REQUIRE(!r.steps().empty(), "trace '{}' has no captured steps", r.path().string());
  const trace::StepInfo* best = &r.steps().front();
  for (const auto& s : r.steps())
    if (s.tensors.size() > best->tensors.size()) best = &s;
  return best->step;
}

// The step to analyze (opts.step, else default_step); it must exist and hold tensors.
const trace::StepInfo& resolve_step(const trace::TraceReader& r, const AnalyzeOptions& opts) {
  const int64_t step = opts.step ? *opts.step : default_step(r);
  const trace::StepInfo* si = r.find_step(step);
  if (!si) {
    std::string have;
    for (const auto& s : r.steps()) have += fmt::format("{}{}", have.empty() ? "" : ", ", s.step);
    throw Error(fmt::format("trace '{}' has no step {} (captured steps: {})", r.path().string(), step, have));
  }
  FP8SIM_REQUIRE(!si->tensors.empty(), "step {} of '{}' holds no tensors", step, r.path().string());
  return *si;
}

// One tensor under its rule: the document's entry and what the aggregates take from it.
struct TensorResult {
  Json entry;
  std::optional<QuantSpec> spec;  // none: kept in its stored precision
  ErrorStats stats;
  uint64_t recipe_bytes = 0;
  bool nonfinite = false;  // NaN or Inf among its values
  bool unmatched = false;  // no rule of the recipe matched it
};

// The entry's keys of a quantized tensor: those of `fp8sim quantize --json` but the spec and shape
// (already there), the histogram unless asked for, and DE's per-group k and c arrays.
void add_quantize_keys(Json& e, Json& quantize_json, const AnalyzeOptions& opts) {
  for (auto& [k, v] : quantize_json.as_object()) {
    if (k == "spec" || k == "shape") continue;
    if (k == "histogram" && !opts.histograms) continue;
    if (k == "expand" && v.is_object()) {
      Json ex = Json::object();
      for (auto& [ek, ev] : v.as_object())
        if (ek != "k" && ek != "c") ex[ek] = std::move(ev);
      e[k] = std::move(ex);
      continue;
    }
    e[k] = std::move(v);
  }
}

TensorResult analyze_tensor(const trace::TraceReader& r, const TensorInfo& t, const recipe::TrainingRecipe& rec,
                            const AnalyzeOptions& opts) {
  const TensorData d = r.read(t);
  const trace::NonFinite nf = trace::count_nonfinite(d);
  const recipe::QuantRule* rule = rec.match(t.role, t.op, modules_of(t));
  TensorResult res;
  res.spec = rule ? rule->spec : std::nullopt;
  res.nonfinite = nf.total() != 0;
  res.unmatched = !rule;
  const std::optional<QuantSpec>& spec = res.spec;

  Json& e = res.entry;
  e = Json::object();
  e["name"] = t.name;
  e["role"] = std::string(trace::role_name(t.role));
  e["op"] = t.op;
  e["module"] = t.module;
  e["layer"] = t.layer;
  e["dtype"] = std::string(trace::dtype_name(t.dtype));
  Json shape = Json::array();
  for (int64_t x : t.shape) shape.push_back(x);
  e["shape"] = std::move(shape);
  e["spec"] = spec ? spec->to_string() : std::string("none");
  e["rule"] = rule ? (rule->note.empty() ? rule->role + "/" + rule->op : rule->note) : std::string("no rule");
  e["quantized"] = spec.has_value();
  // Not "nonfinite": that key of the quantize metrics counts the skipped reference elements.
  e["nan_count"] = nf.nan;
  e["inf_count"] = nf.inf;
  e["stored_bytes"] = t.bytes();

  res.recipe_bytes = t.bytes();
  if (spec) {
    const std::vector<int64_t> qshape = quant_shape(t);
    std::optional<DelayedScaler> scaler;
    std::vector<float> xs;
    if (spec->delayed.enabled()) xs = d.widened();
    const QuantizeOptions o = quant_options(*spec, xs.data(), xs.size(), scaler, opts.threads);
    QuantizeResult qr = run_quantize(raw(d), input_dtype(d.dtype), qshape, *spec, o);
    res.stats = qr.stats;
    res.recipe_bytes = qr.q.total_bytes();
    add_quantize_keys(e, qr.json, opts);
  } else {
    // Kept in its stored precision: exact, but still counted (NaN/Inf included).
    const std::vector<float> x = d.widened();
    res.stats = compute_error_stats(x.data(), x.data(), x.size(), opts.threads);
    e["numel"] = t.numel();
    e["groups"] = 0;
    Json bytes = Json::object();
    bytes["codes"] = t.bytes();
    bytes["metadata"] = 0;
    bytes["total"] = t.bytes();
    bytes["bits_per_element"] = 8.0 * static_cast<double>(trace::dtype_bytes(t.dtype));
    e["bytes"] = std::move(bytes);
    copy_stats(e, res.stats);
  }
  return res;
}

// The aggregates per role, per role:op, per layer and over the whole step.
struct Aggregates {
  std::map<std::string, Agg> by_role, by_op, by_layer;
  Agg total;

  void add(const TensorInfo& t, const TensorResult& res) {
    const std::string spec_text = res.spec ? res.spec->to_string() : std::string("none");
    auto add_to = [&](Agg& a) {
      a.tensors++;
      a.elements += t.numel();
      a.stored_bytes += t.bytes();
      a.recipe_bytes += res.recipe_bytes;
      a.specs.insert(spec_text);
      if (res.spec) {
        a.quantized++;
        if (a.any_stats) a.stats.merge(res.stats);
        else a.stats = res.stats;
        a.any_stats = true;
      }
    };
    add_to(by_role[std::string(trace::role_name(t.role))]);
    add_to(by_op[std::string(trace::role_name(t.role)) + ":" + (t.op.empty() ? "?" : t.op)]);
    add_to(by_layer[fmt::format("{}", t.layer)]);
    add_to(total);
  }

  // {"by_role", "by_op", "by_layer"}; layers in numeric order (-1 = outside the blocks), not
  // string order.
  Json to_json() const {
    Json aggs = Json::object();
    auto dump = [](const std::map<std::string, Agg>& m) {
      Json a = Json::array();
      for (const auto& [k, v] : m) a.push_back(v.to_json(k));
      return a;
    };
    aggs["by_role"] = dump(by_role);
    aggs["by_op"] = dump(by_op);
    std::vector<std::pair<int, const Agg*>> ls;
    for (const auto& [k, v] : by_layer) ls.push_back({std::stoi(k), &v});
    std::sort(ls.begin(), ls.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Json a = Json::array();
    for (const auto& [l, v] : ls) a.push_back(v->to_json(fmt::format("{}", l)));
    aggs["by_layer"] = std::move(a);
    return aggs;
  }

  Json totals_json() const {
    Json tot = Json::object();
    tot["tensors"] = total.tensors;
    tot["quantized_tensors"] = total.quantized;
    tot["elements"] = total.elements;
    tot["stored_bytes"] = total.stored_bytes;
    tot["recipe_bytes"] = total.recipe_bytes;
    return tot;
  }
};

// The step's 2-D weights by module path (aliases included: the tied LM head).
std::map<std::string, const TensorInfo*> weights_by_module(const trace::TraceReader& r, const trace::StepInfo& si) {
  std::map<std::string, const TensorInfo*> weight_of;
  for (size_t ti : si.tensors) {
    const TensorInfo& t = r.tensors()[ti];
    if (t.role != Role::Weight || t.shape.size() != 2) continue;
    if (!t.module.empty()) weight_of.emplace(t.module, &t);
    for (const auto& a : t.aliases) weight_of.emplace(a.substr(0, a.rfind('.')), &t);
  }
  return weight_of;
}

// The forward GEMM error of every linear layer of the step (see the header): the "layers" array;
// the GEMMs that cannot be formed are appended to `skipped`.
Json gemm_errors(const trace::TraceReader& r, const trace::StepInfo& si, const recipe::TrainingRecipe& rec,
                 const AnalyzeOptions& opts, Json& skipped) {
  const std::map<std::string, const TensorInfo*> weight_of = weights_by_module(r, si);
  std::map<int, std::pair<Json, ErrorStats>> per_layer;
  auto skip = [&](const std::string& input, const std::string& module, const std::string& why) {
    Json s = Json::object();
    s["input"] = input;
    s["module"] = module;
    s["why"] = why;
    skipped.push_back(std::move(s));
  };
  for (size_t ti : si.tensors) {
    const TensorInfo& xt = r.tensors()[ti];
    if (xt.role != Role::Activation || xt.modules.empty()) continue;
    const TensorData xd = r.read(xt);
    const std::vector<float> x_ref = xd.widened();
    const recipe::QuantRule* xrule = rec.match(xt.role, xt.op, modules_of(xt));
    const std::optional<QuantSpec> xspec = xrule ? xrule->spec : std::nullopt;
    const std::vector<float> x_q = dequantized_operand(xt, xd, x_ref, xspec, opts.threads);
    const int64_t m = xt.rows(), k = xt.cols();
    for (const std::string& mod : xt.modules) {
      auto it = weight_of.find(mod);
      if (it == weight_of.end()) {
        skip(xt.name, mod, "no weight for this module in the step");
        continue;
      }
      const TensorInfo& wt = *it->second;
      if (wt.cols() != k) {
        skip(xt.name, mod, fmt::format("input has {} features, weight {} is {}", k, wt.name, wt.shape_str()));
        continue;
      }
      const TensorData wd = r.read(wt);
      const std::vector<float> w_ref = wd.widened();
      // The weight takes the rule of a linear weight of this module (a tied embedding used as
      // the LM head is quantized as the LM head's weight).
      const recipe::QuantRule* wrule = rec.match(Role::Weight, "linear", {mod});
      const std::optional<QuantSpec> wspec = wrule ? wrule->spec : std::nullopt;
      const std::vector<float> w_q = dequantized_operand(wt, wd, w_ref, wspec, opts.threads);
      const int64_t n = wt.rows();
      using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
      const Eigen::Map<const RowMat> Xr(x_ref.data(), m, k), Xq(x_q.data(), m, k);  // (M, K)
      const Eigen::Map<const RowMat> Wr(w_ref.data(), n, k), Wq(w_q.data(), n, k);  // (N, K)
      const RowMat Yr = Xr * Wr.transpose();                                        // (M, N)
      const RowMat Yq = Xq * Wq.transpose();
      const ErrorStats ys = compute_error_stats(Yr.data(), Yq.data(), static_cast<size_t>(m * n), opts.threads);
      Json g = Json::object();
      g["module"] = mod;
      g["input"] = xt.name;
      g["weight"] = wt.name;
      g["m"] = m;
      g["n"] = n;
      g["k"] = k;
      g["spec_input"] = xspec ? xspec->to_string() : std::string("none");
      g["spec_weight"] = wspec ? wspec->to_string() : std::string("none");
      copy_stats(g, ys);
      auto& [gemms, agg] = per_layer[xt.layer];
      if (gemms.is_null()) {
        gemms = Json::array();
        agg = ys;
      } else {
        agg.merge(ys);
      }
      gemms.push_back(std::move(g));
    }
  }
  Json layers = Json::array();
  for (auto& [layer, v] : per_layer) {
    Json l = Json::object();
    l["layer"] = layer;
    copy_stats(l, v.second);
    l["gemms"] = std::move(v.first);
    layers.push_back(std::move(l));
  }
  return layers;
}

}  // namespace

Json analyze_trace(const trace::TraceReader& r, const recipe::TrainingRecipe& rec, const AnalyzeOptions& opts) {
  const trace::StepInfo& si = resolve_step(r, opts);
  Json out = Json::object();
  out["trace"] = source_relative(r.path());
  out["step"] = si.step;
  out["recipe"] = rec.rules_json();
  out["model"] = r.header().model_config;

  Aggregates aggs;
  Json tensors = Json::array();
  Json nonfinite_names = Json::array();
  Json unmatched = Json::array();
  Progress progress("analyze", static_cast<double>(si.tensors.size()));
  size_t done = 0;
  for (size_t ti : si.tensors) {
    const TensorInfo& t = r.tensors()[ti];
    TensorResult res = analyze_tensor(r, t, rec, opts);
    if (res.nonfinite) nonfinite_names.push_back(t.name);
    if (res.unmatched) unmatched.push_back(t.name);
    aggs.add(t, res);
    tensors.push_back(std::move(res.entry));
    progress.update(static_cast<double>(++done));
  }
  progress.finish();
  out["tensors"] = std::move(tensors);
  out["aggregates"] = aggs.to_json();

  Json skipped = Json::array();
  out["layers"] = opts.gemm ? gemm_errors(r, si, rec, opts, skipped) : Json::array();
  out["nonfinite_tensors"] = std::move(nonfinite_names);
  out["unmatched_tensors"] = std::move(unmatched);
  out["skipped_gemms"] = std::move(skipped);
  out["totals"] = aggs.totals_json();
  return out;
}

Json analyze_trace(const std::string& trace_path, const std::string& recipe_name, const AnalyzeOptions& opts) {
  const recipe::TrainingRecipe& rec = recipe::get(recipe_name);
  const trace::TraceReader r(trace_path);
  return analyze_trace(r, rec, opts);
}

}  // namespace fp8sim::analyze
