#include "sim/analyze/analyze.hpp"
#include "sim/common/buffer.hpp"
#include "sim/common/paths.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/metrics/error_stats.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"

namespace fp8sim::analyze {

namespace {

// Ends a rank's list of the items it took (dist::exchange's bytes in analyze_trace).
constexpr uint64_t kNoMoreItems = std::numeric_limits<uint64_t>::max();

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

// A GEMM operand under its rule: the quantized tensor (none without a rule) and the values the
// ideal product multiplies (dequantized, or the reference values).
struct Operand {
  std::optional<QuantizedTensor> q;
  std::vector<float> values;
};
Operand quantized_operand(const TensorInfo& t, const TensorData& d, std::span<const float> x,
                          const std::optional<QuantSpec>& spec, int threads) {
  if (!spec) return {std::nullopt, std::vector<float>(x.begin(), x.end())};
  std::optional<DelayedScaler> scaler;
  const QuantizeOptions o = quant_options(*spec, x.data(), x.size(), scaler, threads);
  Operand op;
  op.q = quantize_any(raw(d), input_dtype(d.dtype), t.shape, *spec, o);
  op.values = dequantize(*op.q, threads);
  return op;
}

// The cuBLASLt scaling (tc_gemm.hpp's code) that takes these two operands' scales, or why none does.
int tensor_core_scaling(const std::optional<QuantizedTensor>& x, const std::optional<QuantizedTensor>& w,
                        std::string& why) {  // -1: none
  if (!x || !w) {
    why = "an operand is not quantized";
    return -1;
  }
  if (x->spec.format == Format::BF16 && x->spec.is_passthrough() && w->spec.format == Format::BF16 &&
      w->spec.is_passthrough())
    return 0;  // BF16 tensor cores
  for (const QuantSpec* s : {&x->spec, &w->spec}) {
    if (!is_fp8(s->format) || s->has_expand() || s->rht != 0 || s->scale == ScaleMode::None) {
      why = fmt::format("no tensor-core GEMM takes '{}' operands (FP8 codes with plain scales only)", s->to_string());
      return -1;
    }
  }
  using G = Granularity;
  const G gx = x->spec.granularity, gw = w->spec.granularity;
  const bool x_vec = gx == G::Tensor || gx == G::Row, w_vec = gw == G::Tensor || gw == G::Row;
  if (x_vec && w_vec) return gx == G::Tensor && gw == G::Tensor ? 1 : 2;
  const bool x_g128 = gx == G::Group && x->spec.group_size == 128;
  if (x_g128 && gw == G::Block && w->spec.block_rows == 128 && w->spec.block_cols == 128) return 3;
  if (x_g128 && gw == G::Group && w->spec.group_size == 128) return 4;
  why = fmt::format(
      "no sm_90 GEMM takes '{}' x '{}' scales (cuBLASLt: per-tensor, row-wise, 1x128 x 128x128, "
      "1x128 x 1x128)",
      x->spec.to_string(), w->spec.to_string());
  return -1;
}

// Y's rows `rows` (an evenly spaced sample) as the tensor cores compute them, against the
// reference product Yr (M, N), with the ideal product Yq of the same rows beside.
TensorCoreErrors tensor_core_errors(const QuantizedTensor& x, const QuantizedTensor& w, int scaling, const float* yr,
                                    const float* yq, int64_t m, int64_t n, int64_t k, int64_t rows,
                                    const AnalyzeOptions& opts) {
  const int threads = opts.threads;
  auto run = [&](const uint8_t* a, const uint8_t* b, const float* as, const float* bs, float* out, int64_t mm,
                 int64_t nn, int64_t kk, const gemm::TcGemmConfig& c) {
    if (opts.tensor_core_gemm) opts.tensor_core_gemm(a, b, as, bs, out, mm, nn, kk, c);
    else gemm::tc_gemm(a, b, as, bs, out, mm, nn, kk, c);
  };
  TensorCoreErrors t;
  t.modelled = true;
  t.rows = rows;
  std::vector<int64_t> idx(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) idx[r] = r * m / rows;
  const int64_t kb = (k + 127) / 128;
  // Codes and scales of the sampled rows, in tc_gemm's layouts.
  const int64_t eb = scaling == 0 ? 2 : 1;  // bytes per code
  std::vector<uint8_t> xc(static_cast<size_t>(rows * k * eb));
  std::vector<float> xs, ws = w.scales;
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(&x.codes[static_cast<size_t>(idx[r] * k * eb)], k * eb, &xc[static_cast<size_t>(r * k * eb)]);
  if (scaling == 0) {
    ws.clear();
  } else if (scaling == 1) {
    xs = {x.scales[0]};
  } else if (scaling == 2) {
    for (int64_t r = 0; r < rows; ++r)
      xs.push_back(x.spec.granularity == Granularity::Tensor ? x.scales[0] : x.scales[idx[r]]);
    if (w.spec.granularity == Granularity::Tensor) ws.assign(static_cast<size_t>(n), w.scales[0]);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < kb; ++b) xs.push_back(x.scales[static_cast<size_t>(idx[r] * kb + b)]);
  }
  std::vector<float> ref(static_cast<size_t>(rows * n)), ideal(ref.size()), y(ref.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(yr + idx[r] * n, n, &ref[static_cast<size_t>(r * n)]);
    std::copy_n(yq + idx[r] * n, n, &ideal[static_cast<size_t>(r * n)]);
  }
  gemm::TcGemmConfig cfg;
  cfg.x_format = x.spec.format;
  cfg.w_format = w.spec.format;
  cfg.scaling = scaling;
  t.config = cfg.describe();
  t.ideal = compute_error_stats(ref.data(), ideal.data(), ref.size(), threads);
  run(xc.data(), w.codes.data(), xs.data(), ws.data(), y.data(), rows, n, k, cfg);
  t.promote = compute_error_stats(ref.data(), y.data(), ref.size(), threads);
  t.promote_vs_ideal = compute_error_stats(ideal.data(), y.data(), ref.size(), threads);
  if (scaling == 1 || scaling == 2) {
    cfg.fast_accum = true;
    run(xc.data(), w.codes.data(), xs.data(), ws.data(), y.data(), rows, n, k, cfg);
    t.fast = compute_error_stats(ref.data(), y.data(), ref.size(), threads);
    t.fast_vs_ideal = compute_error_stats(ideal.data(), y.data(), ref.size(), threads);
  }
  return t;
}

// Appends the ErrorStats keys to `j`. (The Json is held in a local: iterating over a member of a
// temporary returned by to_json() would dangle.)
void copy_stats(Json& j, const ErrorStats& s) {
  const Json sj = s.to_json();
  for (const auto& [k, v] : sj.as_object()) j[k] = v;
}

Json string_array(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const auto& x : v) a.push_back(x);
  return a;
}

template <class T>
Json json_array(const std::vector<T>& v) {
  Json a = Json::array();
  for (const auto& x : v) a.push_back(x.to_json());
  return a;
}

std::string spec_text(const std::optional<QuantSpec>& spec) { return spec ? spec->to_string() : std::string("none"); }

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

// One tensor under its rule: its record and what the aggregates take from it.
struct TensorResult {
  TensorRecord record;  // record.quantized: false when kept in its stored precision
  uint64_t recipe_bytes = 0;
  bool nonfinite = false;  // NaN or Inf among its values
  bool unmatched = false;  // no rule of the recipe matched it
};

// Whether cpu_metrics needs the widened tensor: a delayed scale's amax is taken from it, and an rht
// spec's error is measured against whole dequantized rows. Otherwise the error sums widen and
// dequantize a few chunks at a time from the stored values (no tensor-sized buffers to fill and
// read back), and a tensor without a spec is compared with itself from its stored values.
bool cpu_metrics_widen(const std::optional<QuantSpec>& spec) {
  return spec && (spec->rht != 0 || spec->delayed.enabled());
}

// The CPU's numbers for one tensor (run_quantize's, without its document); x is the tensor widened
// where cpu_metrics_widen(spec) says so, else empty.
TensorMetrics cpu_metrics(const TensorData& d, std::span<const float> x, std::span<const int64_t> shape,
                          const std::optional<QuantSpec>& spec, int threads) {
  TensorMetrics m;
  if (!spec) {
    m.stats = self_error_stats(raw(d), input_dtype(d.dtype), d.size(), threads);
  } else {
    std::optional<DelayedScaler> scaler;
    const QuantizeOptions o = quant_options(*spec, x.data(), x.size(), scaler, threads);
    m.q = quantize_any(raw(d), input_dtype(d.dtype), shape, *spec, o);
    if (x.empty()) {
      m.stats = quantization_error_stats(raw(d), input_dtype(d.dtype), *m.q, threads);
    } else {
      Buffer<float> deq(x.size());  // written whole by dequantize: no zero-fill
      dequantize(*m.q, deq.data(), threads);
      m.stats = quantization_error_stats(x.data(), *m.q, deq.data(), threads);
    }
    m.q->codes = {};
  }
  // The error sums saw every element and counted the NaN / Inf ones: only a tensor that has some
  // needs another pass to tell the two apart.
  const bool all_finite = m.stats.nonfinite == 0 && m.stats.count == static_cast<int64_t>(d.size());
  if (!all_finite) {
    const trace::NonFinite nf = trace::count_nonfinite(d);
    m.nan = nf.nan;
    m.inf = nf.inf;
  }
  return m;
}

// ---- slabs: a tensor larger than the memory budget, read and measured a band of rows at a time --
// Every quantity equals the one-piece run's: the slabs hold whole scale groups (and for a
// flattened moment whole 1xG groups), the error sums' chunks of kErrorChunk elements never straddle
// two slabs, per-tensor scales take the whole tensor's amax from a first pass, stochastic rounding
// is keyed on the element's index in the tensor, and the per-group results are concatenated in
// group order.

// Stored bytes plus what quantizing holds per element on the path that holds the most (a slab, a
// delayed scale, rht, --histograms: an fp32 copy, the dequantized values, a code); the chunked
// error sums of the other tensors hold only the code.
double bytes_per_element(const TensorInfo& t) { return static_cast<double>(trace::dtype_bytes(t.dtype)) + 9.0; }

bool needs_tensor_amax(const QuantSpec& s) {
  return s.granularity == Granularity::Tensor || s.delayed.enabled() || s.scale == ScaleMode::E4M3;
}

// The smallest number of rows (along trace::slab_dim) a slab of t may hold under spec (0: t cannot
// be cut).
int64_t slab_unit(const TensorInfo& t, const std::optional<QuantSpec>& spec) {
  if (t.shape.empty() || t.numel() == 0) return 0;
  const size_t dim = trace::slab_dim(t.shape);
  const int64_t per_row = t.numel() / t.shape[dim];
  const int64_t unit = kErrorChunk / std::gcd(per_row, kErrorChunk);  // whole error-sum chunks
  if (!spec) return unit;
  const QuantSpec& s = *spec;
  if (s.rht != 0) return 0;
  // Flat: the slab's rows are runs of the flattened tensor (a moment, or a cut along the last dim).
  const bool flat = quant_shape(t).size() == 1 || dim + 1 == t.shape.size();
  const int64_t inner = flat ? 1 : per_row / t.shape.back();  // rows of the 2-D view per slab row
  using G = Granularity;
  int64_t group_unit = 0;
  if (s.granularity == G::Tensor) group_unit = s.has_expand() ? 0 : 1;
  else if (s.granularity == G::Group) group_unit = flat ? s.group_size / std::gcd(per_row, s.group_size) : 1;
  else if (s.granularity == G::Row && !flat) group_unit = 1;
  else if (s.granularity == G::Block && !flat) group_unit = s.block_rows / std::gcd(inner, s.block_rows);
  return group_unit == 0 ? 0 : std::lcm(unit, group_unit);
}

// Rows per slab for t within `budget` bytes (0: read whole: it fits, or it cannot be cut).
int64_t slab_rows(const TensorInfo& t, const std::optional<QuantSpec>& spec, double budget) {
  if (budget <= 0 || static_cast<double>(t.numel()) * bytes_per_element(t) <= budget) return 0;
  const int64_t unit = slab_unit(t, spec);
  const int64_t all_rows = t.shape[trace::slab_dim(t.shape)];
  if (unit == 0 || unit >= all_rows) return 0;
  const double row_bytes = static_cast<double>(t.numel() / all_rows) * bytes_per_element(t);
  const int64_t fit = static_cast<int64_t>(budget / row_bytes) / unit * unit;
  return std::max(unit, fit);
}

// The numbers of t measured slab by slab (rows rows at a time); `hist` gets the histograms when asked.
TensorMetrics slab_metrics(const trace::TraceReader& r, const TensorInfo& t, const std::optional<QuantSpec>& spec,
                           int64_t rows, bool histograms, int threads, std::optional<ScaledHistograms>& hist) {
  const size_t dim = trace::slab_dim(t.shape);
  const int64_t all_rows = t.shape[dim], per_row = t.numel() / all_rows;
  const bool flat = quant_shape(t).size() == 1;  // a moment: quantized flattened
  auto each_slab = [&](const auto& fn) {
    for (int64_t r0 = 0; r0 < all_rows; r0 += rows) {
      const int64_t n = std::min(rows, all_rows - r0);
      fn(r0, n, r.read_rows(t, r0, n));
    }
  };
  std::optional<float> amax;  // the whole tensor's, for per-tensor scales
  if (spec && needs_tensor_amax(*spec)) {
    float a = 0;
    each_slab([&](int64_t, int64_t, const TensorData& d) {
      for (size_t i = 0; i < d.size(); ++i)
        if (const float v = d.value(i); std::isfinite(v)) a = std::max(a, std::fabs(v));
    });
    amax = a;
  }
  std::optional<DelayedScaler> seeded;  // each slab quantizes with the same scale
  if (spec && spec->delayed.enabled()) {
    seeded.emplace(*spec);
    seeded->update(*amax);
  }
  TensorMetrics m;
  ErrorAccumulator acc(threads);
  QuantizedTensor whole;
  int64_t saturated = 0;
  if (spec) {
    whole.spec = *spec;
    whole.shape = quant_shape(t);
    whole.geometry = group_geometry(*spec, whole.shape);
  }
  each_slab([&](int64_t r0, int64_t n, const TensorData& d) {
    const trace::NonFinite nf = trace::count_nonfinite(d);
    m.nan += nf.nan;
    m.inf += nf.inf;
    const Buffer<float> x = d.widened();
    if (!spec) {
      acc.add(x.data(), x.data(), x.size());
      return;
    }
    std::vector<int64_t> shape = t.shape;
    shape[dim] = n;
    if (flat) shape = {n * per_row};
    QuantizeOptions o;
    o.threads = threads;
    o.index_offset = static_cast<uint64_t>(r0 * per_row);
    std::optional<DelayedScaler> scaler = seeded;
    if (scaler) o.delayed = &*scaler;
    else if (amax && !spec->has_expand()) o.tensor_amax = amax;
    const QuantizedTensor q = quantize_any(raw(d), input_dtype(d.dtype), shape, *spec, o);
    const std::vector<float> deq = dequantize(q, threads);
    acc.add(x.data(), deq.data(), x.size());
    saturated += q.saturated_count;
    if (r0 == 0 || spec->granularity != Granularity::Tensor)  // per-tensor: one scale, the same in every slab
      whole.scales.insert(whole.scales.end(), q.scales.begin(), q.scales.end());
    whole.expand_k.insert(whole.expand_k.end(), q.expand_k.begin(), q.expand_k.end());
    whole.expand_c.insert(whole.expand_c.end(), q.expand_c.begin(), q.expand_c.end());
    whole.tensor_amax = std::max(whole.tensor_amax, q.tensor_amax);
    whole.tensor_scale = q.tensor_scale;
    whole.delayed_scale = q.delayed_scale;
    if (histograms && !spec->is_passthrough()) {
      const ScaledHistograms h = scaled_histograms(x.data(), q, threads);
      if (!hist) {
        hist = h;
      } else {
        hist->before.merge(h.before);
        hist->after.merge(h.after);
      }
    }
  });
  m.stats = acc.stats();
  if (spec) {  // as quantization_error_stats
    m.stats.saturated = saturated;
    m.stats.scaled_count = m.stats.count;
    whole.saturated_count = saturated;
    m.q = std::move(whole);
  }
  return m;
}

// One tensor under its rule: its numbers from its stored values d on the device when
// opts.tensor_metrics takes it, else on the CPU; with slab > 0 read and measured slab rows at a
// time on the CPU (d is not read).
TensorResult analyze_tensor(const trace::TraceReader& r, const TensorInfo& t, const TensorData& d, int64_t slab,
                            const recipe::TrainingRecipe& rec, const AnalyzeOptions& opts) {
  const recipe::QuantRule* rule = rec.match(t.role, t.op, modules_of(t));
  const std::optional<QuantSpec> spec = rule ? rule->spec : std::nullopt;
  const std::vector<int64_t> shape = spec ? quant_shape(t) : t.shape;
  const bool histograms = opts.histograms && spec && !spec->is_passthrough() && t.numel() > 0;
  std::optional<TensorMetrics> done;  // from the slabs or the device
  std::optional<ScaledHistograms> hist;
  Buffer<float> x;  // the widened values, where the CPU needs them
  if (slab > 0) {
    done = slab_metrics(r, t, spec, slab, histograms, opts.threads, hist);
  } else {
    if (opts.tensor_metrics) done = opts.tensor_metrics(raw(d), input_dtype(d.dtype), shape, spec ? &*spec : nullptr);
    if ((!done && cpu_metrics_widen(spec)) || histograms) x = d.widened();
  }
  const TensorMetrics m = done ? std::move(*done) : cpu_metrics(d, x, shape, spec, opts.threads);
  if (histograms && !hist) hist = scaled_histograms(x.data(), *m.q, opts.threads);

  TensorResult res;
  res.nonfinite = m.nan + m.inf != 0;
  res.unmatched = !rule;
  TensorRecord& e = res.record;
  e.name = t.name;
  e.role = std::string(trace::role_name(t.role));
  e.op = t.op;
  e.module = t.module;
  e.layer = t.layer;
  e.dtype = std::string(trace::dtype_name(t.dtype));
  e.shape = t.shape;
  e.spec = spec_text(spec);
  e.rule = rule ? (rule->note.empty() ? rule->role + "/" + rule->op : rule->note) : std::string("no rule");
  e.quantized = spec.has_value();
  e.nan_count = static_cast<int64_t>(m.nan);
  e.inf_count = static_cast<int64_t>(m.inf);
  e.stored_bytes = t.bytes();
  e.numel = t.numel();
  e.stats = m.stats;
  res.recipe_bytes = t.bytes();
  if (!spec) {  // kept in its stored precision: exact, but still counted (NaN/Inf included)
    e.groups = 0;
    e.bytes = {.codes = t.bytes(),
               .metadata = 0,
               .total = t.bytes(),
               .bits_per_element = 8.0 * static_cast<double>(trace::dtype_bytes(t.dtype))};
    return res;
  }
  const QuantizedTensor& q = *m.q;
  res.recipe_bytes = q.total_bytes();
  e.groups = spec->is_passthrough() ? 0 : q.num_groups();
  e.bytes = {.codes = q.code_bytes(),
             .metadata = q.metadata_bytes(),
             .total = q.total_bytes(),
             .bits_per_element =
                 q.numel() ? 8.0 * static_cast<double>(q.total_bytes()) / static_cast<double>(q.numel()) : 0.0};
  e.tensor_amax = q.tensor_amax;
  if (hist) e.histogram = histogram_document(*hist);
  if (spec->has_expand()) {  // DE's summary, without the per-group k and c
    Json doc = expand_document(q), ex = Json::object();
    for (auto& [k, v] : doc.as_object())
      if (k != "k" && k != "c") ex[k] = std::move(v);
    e.expand = std::move(ex);
  }
  return res;
}

void add_to(Aggregate& a, const TensorInfo& t, const TensorResult& res) {
  a.tensors++;
  a.elements += t.numel();
  a.stored_bytes += t.bytes();
  a.recipe_bytes += res.recipe_bytes;
  const auto at = std::lower_bound(a.specs.begin(), a.specs.end(), res.record.spec);
  if (at == a.specs.end() || *at != res.record.spec) a.specs.insert(at, res.record.spec);
  if (!res.record.quantized) return;
  a.quantized_tensors++;
  if (a.stats) a.stats->merge(res.record.stats);
  else a.stats = res.record.stats;
}

// The aggregates per role, per role:op, per layer and over the whole step.
struct AggregateSums {
  std::map<std::string, Aggregate> by_role, by_op;
  std::map<int64_t, Aggregate> by_layer;  // numeric order (-1 = outside the blocks)
  Aggregate total;

  void add(const TensorInfo& t, const TensorResult& res) {
    const std::string role(trace::role_name(t.role));
    add_to(by_role[role], t, res);
    add_to(by_op[role + ":" + (t.op.empty() ? "?" : t.op)], t, res);
    add_to(by_layer[t.layer], t, res);
    add_to(total, t, res);
  }

  Aggregates aggregates() const {
    Aggregates a;
    auto take = [](const auto& m, std::vector<Aggregate>& out) {
      for (const auto& [k, v] : m) {
        out.push_back(v);
        out.back().key = fmt::format("{}", k);
      }
    };
    take(by_role, a.by_role);
    take(by_op, a.by_op);
    take(by_layer, a.by_layer);
    return a;
  }

  Totals totals() const {
    return {.tensors = total.tensors,
            .quantized_tensors = total.quantized_tensors,
            .elements = total.elements,
            .stored_bytes = total.stored_bytes,
            .recipe_bytes = total.recipe_bytes};
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

// The forward GEMMs of one linear layer's input: one record per consuming module whose weight
// the step holds; the ones that cannot be formed go to `skipped`.
struct InputGemms {
  std::vector<GemmRecord> gemms;
  std::vector<SkippedGemm> skipped;
};
InputGemms gemms_of_input(const trace::TraceReader& r, const TensorInfo& xt,
                          const std::map<std::string, const TensorInfo*>& weight_of, const recipe::TrainingRecipe& rec,
                          const AnalyzeOptions& opts) {
  InputGemms out;
  const TensorData xd = r.read(xt);
  const Buffer<float> x_ref = xd.widened();
  const recipe::QuantRule* xrule = rec.match(xt.role, xt.op, modules_of(xt));
  const std::optional<QuantSpec> xspec = xrule ? xrule->spec : std::nullopt;
  const Operand xop = quantized_operand(xt, xd, x_ref, xspec, opts.threads);
  const std::vector<float>& x_q = xop.values;
  const int64_t m = xt.rows(), k = xt.cols();
  for (const std::string& mod : xt.modules) {
    auto it = weight_of.find(mod);
    if (it == weight_of.end()) {
      out.skipped.push_back({xt.name, mod, "no weight for this module in the step"});
      continue;
    }
    const TensorInfo& wt = *it->second;
    if (wt.cols() != k) {
      out.skipped.push_back(
          {xt.name, mod, fmt::format("input has {} features, weight {} is {}", k, wt.name, wt.shape_str())});
      continue;
    }
    const TensorData wd = r.read(wt);
    const Buffer<float> w_ref = wd.widened();
    // The weight takes the rule of a linear weight of this module (a tied embedding used as
    // the LM head is quantized as the LM head's weight).
    const recipe::QuantRule* wrule = rec.match(Role::Weight, "linear", {mod});
    const std::optional<QuantSpec> wspec = wrule ? wrule->spec : std::nullopt;
    const Operand wop = quantized_operand(wt, wd, w_ref, wspec, opts.threads);
    const std::vector<float>& w_q = wop.values;
    const int64_t n = wt.rows();
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const RowMat> Xr(x_ref.data(), m, k), Xq(x_q.data(), m, k);  // (M, K)
    const Eigen::Map<const RowMat> Wr(w_ref.data(), n, k), Wq(w_q.data(), n, k);  // (N, K)
    const RowMat Yr = Xr * Wr.transpose();                                        // (M, N)
    const RowMat Yq = Xq * Wq.transpose();
    const ErrorStats ys = compute_error_stats(Yr.data(), Yq.data(), static_cast<size_t>(m * n), opts.threads);
    TensorCoreErrors tc;
    if (opts.tensor_core_rows >= 0) {
      const int scaling = tensor_core_scaling(xop.q, wop.q, tc.why);
      const int64_t rows = opts.tensor_core_rows == 0 ? m : std::min(m, opts.tensor_core_rows);
      if (scaling >= 0) tc = tensor_core_errors(*xop.q, *wop.q, scaling, Yr.data(), Yq.data(), m, n, k, rows, opts);
    } else {
      tc.why = "not asked for";
    }
    out.gemms.push_back({.module = mod,
                         .input = xt.name,
                         .weight = wt.name,
                         .m = m,
                         .n = n,
                         .k = k,
                         .spec_input = spec_text(xspec),
                         .spec_weight = spec_text(wspec),
                         .stats = ys,
                         .tensor_core = std::move(tc)});
  }
  return out;
}

// A layer's GEMM, merged into the layer's totals.
void add_gemm(LayerGemms& l, GemmRecord g) {
  if (l.gemms.empty()) l.stats = g.stats;
  else l.stats.merge(g.stats);
  const TensorCoreErrors& tc = g.tensor_core;
  if (tc.modelled) {
    auto merge = [](ErrorStats& into, const ErrorStats& s, bool first) {
      if (first) into = s;
      else into.merge(s);
    };
    merge(l.tc_ideal, tc.ideal, l.tc_gemms == 0);
    merge(l.tc_promote, tc.promote, l.tc_gemms == 0);
    merge(l.tc_promote_vs_ideal, tc.promote_vs_ideal, l.tc_gemms == 0);
    ++l.tc_gemms;
    if (tc.fast) {
      merge(l.tc_fast, *tc.fast, l.tc_fast_gemms == 0);
      merge(l.tc_fast_vs_ideal, *tc.fast_vs_ideal, l.tc_fast_gemms == 0);
      ++l.tc_fast_gemms;
    }
  }
  l.gemms.push_back(std::move(g));
}

// ---- results between ranks (sim/common/dist.hpp) ----------------------------------------------
void put(dist::ByteWriter& w, const std::optional<Json>& j) {
  w.pod(j.has_value());
  if (j) w.str(j->dump());
}
std::optional<Json> get_json(dist::ByteReader& r) {
  if (!r.pod<bool>()) return std::nullopt;
  return Json::parse(r.str());
}
template <class T>
void put(dist::ByteWriter& w, const std::optional<T>& v) {
  w.pod(v.has_value());
  if (v) w.pod(*v);
}
template <class T>
std::optional<T> get_opt(dist::ByteReader& r) {
  if (!r.pod<bool>()) return std::nullopt;
  return r.pod<T>();
}

void put(dist::ByteWriter& w, const TensorResult& t) {
  const TensorRecord& e = t.record;
  for (const std::string* s : {&e.name, &e.role, &e.op, &e.module, &e.dtype, &e.spec, &e.rule}) w.str(*s);
  w.pod(e.layer);
  w.pods(e.shape);
  w.pod(e.quantized);
  w.pod(e.nan_count);
  w.pod(e.inf_count);
  w.pod(e.stored_bytes);
  w.pod(e.numel);
  w.pod(e.groups);
  w.pod(e.bytes);
  w.pod(e.stats);
  put(w, e.tensor_amax);
  put(w, e.histogram);
  put(w, e.expand);
  w.pod(t.recipe_bytes);
  w.pod(t.nonfinite);
  w.pod(t.unmatched);
}
TensorResult get_tensor(dist::ByteReader& r) {
  TensorResult t;
  TensorRecord& e = t.record;
  for (std::string* s : {&e.name, &e.role, &e.op, &e.module, &e.dtype, &e.spec, &e.rule}) *s = r.str();
  e.layer = r.pod<int64_t>();
  e.shape = r.pods<int64_t>();
  e.quantized = r.pod<bool>();
  e.nan_count = r.pod<int64_t>();
  e.inf_count = r.pod<int64_t>();
  e.stored_bytes = r.pod<uint64_t>();
  e.numel = r.pod<int64_t>();
  e.groups = r.pod<int64_t>();
  e.bytes = r.pod<TensorBytes>();
  e.stats = r.pod<ErrorStats>();
  e.tensor_amax = get_opt<double>(r);
  e.histogram = get_json(r);
  e.expand = get_json(r);
  t.recipe_bytes = r.pod<uint64_t>();
  t.nonfinite = r.pod<bool>();
  t.unmatched = r.pod<bool>();
  return t;
}

void put(dist::ByteWriter& w, const InputGemms& in) {
  w.pod(static_cast<uint64_t>(in.gemms.size()));
  for (const GemmRecord& g : in.gemms) {
    for (const std::string* s : {&g.module, &g.input, &g.weight, &g.spec_input, &g.spec_weight}) w.str(*s);
    w.pod(g.m);
    w.pod(g.n);
    w.pod(g.k);
    w.pod(g.stats);
    const TensorCoreErrors& t = g.tensor_core;
    w.pod(t.modelled);
    w.str(t.why);
    w.str(t.config);
    w.pod(t.rows);
    w.pod(t.ideal);
    w.pod(t.promote);
    put(w, t.fast);
    w.pod(t.promote_vs_ideal);
    put(w, t.fast_vs_ideal);
  }
  w.pod(static_cast<uint64_t>(in.skipped.size()));
  for (const SkippedGemm& k : in.skipped)
    for (const std::string* s : {&k.input, &k.module, &k.why}) w.str(*s);
}
InputGemms get_gemms(dist::ByteReader& r) {
  InputGemms in;
  in.gemms.resize(r.pod<uint64_t>());
  for (GemmRecord& g : in.gemms) {
    for (std::string* s : {&g.module, &g.input, &g.weight, &g.spec_input, &g.spec_weight}) *s = r.str();
    g.m = r.pod<int64_t>();
    g.n = r.pod<int64_t>();
    g.k = r.pod<int64_t>();
    g.stats = r.pod<ErrorStats>();
    TensorCoreErrors& t = g.tensor_core;
    t.modelled = r.pod<bool>();
    t.why = r.str();
    t.config = r.str();
    t.rows = r.pod<int64_t>();
    t.ideal = r.pod<ErrorStats>();
    t.promote = r.pod<ErrorStats>();
    t.fast = get_opt<ErrorStats>(r);
    t.promote_vs_ideal = r.pod<ErrorStats>();
    t.fast_vs_ideal = get_opt<ErrorStats>(r);
  }
  in.skipped.resize(r.pod<uint64_t>());
  for (SkippedGemm& k : in.skipped)
    for (std::string* s : {&k.input, &k.module, &k.why}) *s = r.str();
  return in;
}

}  // namespace

Json TensorBytes::to_json() const {
  Json j = Json::object();
  j["codes"] = codes;
  j["metadata"] = metadata;
  j["total"] = total;
  j["bits_per_element"] = bits_per_element;
  return j;
}

Json TensorRecord::to_json() const {
  Json e = Json::object();
  e["name"] = name;
  e["role"] = role;
  e["op"] = op;
  e["module"] = module;
  e["layer"] = layer;
  e["dtype"] = dtype;
  Json s = Json::array();
  for (int64_t x : shape) s.push_back(x);
  e["shape"] = std::move(s);
  e["spec"] = spec;
  e["rule"] = rule;
  e["quantized"] = quantized;
  // Not "nonfinite": that key of the quantize metrics counts the skipped reference elements.
  e["nan_count"] = nan_count;
  e["inf_count"] = inf_count;
  e["stored_bytes"] = stored_bytes;
  e["numel"] = numel;
  e["groups"] = groups;
  e["bytes"] = bytes.to_json();
  copy_stats(e, stats);
  if (tensor_amax) e["tensor_amax"] = *tensor_amax;
  if (histogram) e["histogram"] = *histogram;
  if (expand) e["expand"] = *expand;
  return e;
}

Json Aggregate::to_json() const {
  Json j = Json::object();
  j["key"] = key;
  j["tensors"] = tensors;
  j["quantized_tensors"] = quantized_tensors;
  j["elements"] = elements;
  j["stored_bytes"] = stored_bytes;
  j["recipe_bytes"] = recipe_bytes;
  j["specs"] = string_array(specs);
  if (stats) copy_stats(j, *stats);
  return j;
}

Json Aggregates::to_json() const {
  Json j = Json::object();
  j["by_role"] = json_array(by_role);
  j["by_op"] = json_array(by_op);
  j["by_layer"] = json_array(by_layer);
  return j;
}

Json GemmRecord::to_json() const {
  Json g = Json::object();
  g["module"] = module;
  g["input"] = input;
  g["weight"] = weight;
  g["m"] = m;
  g["n"] = n;
  g["k"] = k;
  g["spec_input"] = spec_input;
  g["spec_weight"] = spec_weight;
  copy_stats(g, stats);
  g["tensor_core"] = tensor_core.to_json();
  return g;
}

Json TensorCoreErrors::to_json() const {
  Json j = Json::object();
  j["modelled"] = modelled;
  if (!modelled) {
    j["why"] = why;
    return j;
  }
  j["config"] = config;
  j["rows"] = rows;
  j["ideal"] = ideal.to_json();
  j["promote"] = promote.to_json();
  j["promote_vs_ideal"] = promote_vs_ideal.to_json();
  if (fast) {
    j["fast"] = fast->to_json();
    j["fast_vs_ideal"] = fast_vs_ideal->to_json();
  }
  return j;
}

Json LayerGemms::to_json() const {
  Json l = Json::object();
  l["layer"] = layer;
  copy_stats(l, stats);
  l["gemms"] = json_array(gemms);
  if (tc_gemms > 0) {
    Json tc = Json::object();
    tc["gemms"] = tc_gemms;
    tc["ideal"] = tc_ideal.to_json();
    tc["promote"] = tc_promote.to_json();
    tc["promote_vs_ideal"] = tc_promote_vs_ideal.to_json();
    if (tc_fast_gemms > 0) {
      tc["fast_gemms"] = tc_fast_gemms;
      tc["fast"] = tc_fast.to_json();
      tc["fast_vs_ideal"] = tc_fast_vs_ideal.to_json();
    }
    l["tensor_core"] = tc;
  }
  return l;
}

Json SkippedGemm::to_json() const {
  Json s = Json::object();
  s["input"] = input;
  s["module"] = module;
  s["why"] = why;
  return s;
}

Json Totals::to_json() const {
  Json t = Json::object();
  t["tensors"] = tensors;
  t["quantized_tensors"] = quantized_tensors;
  t["elements"] = elements;
  t["stored_bytes"] = stored_bytes;
  t["recipe_bytes"] = recipe_bytes;
  return t;
}

Json AnalyzeResult::to_json() const {
  Json out = Json::object();
  out["trace"] = trace;
  out["step"] = step;
  out["recipe"] = recipe.rules_json();
  out["model"] = model;
  out["tensors"] = json_array(tensors);
  out["aggregates"] = aggregates.to_json();
  out["layers"] = json_array(layers);
  out["nonfinite_tensors"] = string_array(nonfinite_tensors);
  out["unmatched_tensors"] = string_array(unmatched_tensors);
  out["skipped_gemms"] = json_array(skipped_gemms);
  out["totals"] = totals.to_json();
  return out;
}

AnalyzeResult analyze_trace(const trace::TraceReader& r, const recipe::TrainingRecipe& rec,
                            const AnalyzeOptions& opts) {
  const buffer_pool::ReleaseAtExit release_buffers;  // the tensors' large buffers, pooled meanwhile
  const trace::StepInfo& si = resolve_step(r, opts);
  AnalyzeResult out;
  out.trace = source_relative(r.path());
  out.step = si.step;
  out.recipe = rec;
  out.model = r.header().model_config;

  // The work items: every tensor of the step (cost: its elements), and with opts.gemm every linear
  // layer's input with its GEMMs (cost: their multiply-adds). Ranks take them from a job-wide
  // queue, tensors first, each kind largest first, whichever rank is free taking the next (a
  // tensor's cost per element depends on its spec, so no split fixed in advance balances the
  // ranks); every rank then assembles all results in item order.
  const std::vector<TensorInfo>& all = r.tensors();
  const std::map<std::string, const TensorInfo*> weight_of =
      opts.gemm ? weights_by_module(r, si) : std::map<std::string, const TensorInfo*>{};
  std::vector<size_t> inputs;  // indices into `all`
  std::vector<uint64_t> tensor_cost, gemm_cost;
  for (size_t ti : si.tensors) {
    const TensorInfo& t = all[ti];
    tensor_cost.push_back(static_cast<uint64_t>(t.numel()));
    if (!opts.gemm || t.role != Role::Activation || t.modules.empty()) continue;
    uint64_t c = static_cast<uint64_t>(t.numel());
    for (const std::string& mod : t.modules)
      if (auto it = weight_of.find(mod); it != weight_of.end())
        c += static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(it->second->rows());
    inputs.push_back(ti);
    gemm_cost.push_back(c);
  }
  // queue[q]: the item taken q-th; item i < T is tensor i, item T + j is input j's GEMMs.
  const size_t T = tensor_cost.size();
  std::vector<size_t> queue(T + gemm_cost.size());
  std::iota(queue.begin(), queue.end(), size_t{0});
  auto item_cost = [&](size_t i) { return i < T ? tensor_cost[i] : gemm_cost[i - T]; };
  std::stable_sort(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(T),
                   [&](size_t a, size_t b) { return item_cost(a) > item_cost(b); });
  std::stable_sort(queue.begin() + static_cast<std::ptrdiff_t>(T), queue.end(),
                   [&](size_t a, size_t b) { return item_cost(a) > item_cost(b); });
  const int ranks = dist::size();
  const std::unique_ptr<dist::Counter> next_item = dist::make_counter();  // collective

  const std::vector<std::string> parts = dist::exchange([&] {
    using Clock = std::chrono::steady_clock;
    auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    const auto started = Clock::now();
    AnalyzeResult::RankTime time;
    time.began = dist::process_age_seconds();
    time.startup = dist::startup_seconds();
    // The counter counts the items the whole job has taken: rank 0's bar shows the job's progress.
    Progress progress(ranks > 1 ? fmt::format("analyze ({} ranks, items taken)", ranks) : std::string("analyze"),
                      static_cast<double>(queue.size()));
    dist::ByteWriter w;
    auto take = [&]() -> std::optional<size_t> {
      const uint64_t q = next_item->fetch_add(1);
      progress.update(static_cast<double>(std::min<uint64_t>(q + 1, queue.size())));
      return q < queue.size() ? std::optional<size_t>(queue[q]) : std::nullopt;
    };
    // Rows per slab of tensor item i (0: read whole), decided once per item: the read ahead and the
    // work both ask.
    std::vector<int64_t> slabs(T, -1);
    auto slab_of = [&](size_t i) -> int64_t {
      if (opts.tensor_metrics) return 0;
      if (slabs[i] < 0) {
        const TensorInfo& t = all[si.tensors[i]];
        const recipe::QuantRule* rule = rec.match(t.role, t.op, modules_of(t));
        slabs[i] = slab_rows(t, rule ? rule->spec : std::nullopt, opts.memory_budget);
      }
      return slabs[i];
    };
    // Reads run one tensor ahead of the work, on another thread; only that thread calls the reader
    // meanwhile (the work takes the values it is given), so reads never overlap each other. A
    // tensor over the memory budget is read in slabs by the work itself, with no read ahead of it.
    std::future<TensorData> next;
    auto read_ahead = [&](std::optional<size_t> item) {
      if (!item || *item >= T || slab_of(*item) > 0) return;
      next = std::async(std::launch::async, [&r, &time, &secs, t = &all[si.tensors[*item]]] {
        const auto t0 = Clock::now();
        TensorData d = r.read(*t);
        time.read += secs(t0, Clock::now());  // this thread alone adds to it, one read at a time
        return d;
      });
    };
    std::optional<size_t> cur = take();
    read_ahead(cur);
    while (cur) {
      const std::optional<size_t> following = take();
      w.pod(static_cast<uint64_t>(*cur));
      if (*cur < T) {
        const TensorInfo& t = all[si.tensors[*cur]];
        const int64_t slab = slab_of(*cur);
        TensorData d;
        if (slab == 0) {
          const auto w0 = Clock::now();
          d = next.get();
          time.wait += secs(w0, Clock::now());
          read_ahead(following);
        }
        time.slabbed += slab > 0 ? 1 : 0;
        put(w, analyze_tensor(r, t, d, slab, rec, opts));
        if (slab > 0) read_ahead(following);
      } else {  // the GEMM items come after every tensor item: no read ahead is pending while it reads
        put(w, gemms_of_input(r, all[inputs[*cur - T]], weight_of, rec, opts));
      }
      cur = following;
    }
    progress.finish();
    w.pod(kNoMoreItems);
    time.work = secs(started, Clock::now());
    w.pod(time);
    return w.take();
  });

  // Each rank's bytes hold the items it took, each after its number, then kNoMoreItems.
  std::vector<TensorResult> tensors(T);
  std::vector<InputGemms> gemms(inputs.size());
  std::vector<char> seen(queue.size(), 0);
  for (int rk = 0; rk < ranks; ++rk) {
    dist::ByteReader rd(parts[static_cast<size_t>(rk)]);
    for (uint64_t i = rd.pod<uint64_t>(); i != kNoMoreItems; i = rd.pod<uint64_t>()) {
      FP8SIM_CHECK(i < queue.size() && !seen[i], "rank {} sent item {} twice or out of range", rk, i);
      seen[i] = 1;
      if (i < T) tensors[i] = get_tensor(rd);
      else gemms[i - T] = get_gemms(rd);
    }
    out.rank_times.push_back(rd.pod<AnalyzeResult::RankTime>());
    FP8SIM_CHECK(rd.done(), "rank {} sent more than its items", rk);
  }
  FP8SIM_CHECK(std::find(seen.begin(), seen.end(), 0) == seen.end(), "an item was taken by no rank");

  AggregateSums sums;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = all[si.tensors[i]];
    TensorResult& res = tensors[i];
    if (res.nonfinite) out.nonfinite_tensors.push_back(t.name);
    if (res.unmatched) out.unmatched_tensors.push_back(t.name);
    sums.add(t, res);
    out.tensors.push_back(std::move(res.record));
  }
  out.aggregates = sums.aggregates();
  if (opts.gemm) {
    std::map<int64_t, LayerGemms> per_layer;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t layer = all[inputs[i]].layer;
      for (GemmRecord& g : gemms[i].gemms) {
        LayerGemms& l = per_layer[layer];
        l.layer = layer;
        add_gemm(l, std::move(g));
      }
      for (SkippedGemm& k : gemms[i].skipped) out.skipped_gemms.push_back(std::move(k));
    }
    for (auto& [_, l] : per_layer) out.layers.push_back(std::move(l));
  }
  out.totals = sums.totals();
  return out;
}

AnalyzeResult analyze_trace(const std::string& trace_path, const std::string& recipe_name, const AnalyzeOptions& opts) {
  const recipe::TrainingRecipe& rec = recipe::get(recipe_name);
  const trace::TraceReader r(trace_path);
  return analyze_trace(r, rec, opts);
}

}  // namespace fp8sim::analyze
