// Optimizer-state section: fp8sim optim's Table 1 beside the paper's, the multi-step drift per
// state recipe, and COAT Figure 3: histograms of |x/s| of the trace's real AdamW moments before
// and after Dynamic Range Expansion (E4M3, 1x128 groups of each flattened parameter).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/metrics/histogram.hpp"
#include "sim/optim/replay.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"
#include "sim/report/sections.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::report {

namespace {

// The spec of Figure 3: COAT's optimizer-state quantizer.
constexpr const char* kFig3Spec = "e4m3:g128:de=coat";

struct MomentHist {
  std::string name;
  Log2Histogram before = Log2Histogram::for_format(Format::E4M3);
  Log2Histogram after = Log2Histogram::for_format(Format::E4M3);
  std::vector<float> k;  // DE exponent of every group with a finite k
  int64_t tensors = 0, elements = 0;
};

// Of the nonzero elements, the share that plain absmax scaling flushes to 0 (|x/s| below E4M3's
// smallest subnormal): what expansion exists to rescue, so the "worst" tensor is the largest.
double flushed_before(const MomentHist& h) {
  const int64_t nonzero = h.before.total() - h.before.zeros();
  return nonzero > 0 ? static_cast<double>(h.before.below()) / static_cast<double>(nonzero) : 0.0;
}
constexpr size_t kWorstTensors = 2;  // per moment, drawn beside the whole-trace histograms

double median(std::vector<float> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (double(v[n / 2 - 1]) + double(v[n / 2]));
}

// The step whose moments Figure 3 shows: the grad window's first step (the states Table 1 uses),
// else the last step that stored exp_avg.
std::optional<int64_t> moments_step(const trace::TraceReader& r) {
  if (const auto& w = r.header().grad_window) {
    trace::Filter f;
    f.step = w->first;
    f.role = trace::Role::ExpAvg;
    if (!r.select(f).empty()) return w->first;
  }
  std::optional<int64_t> last;
  for (const auto* t : r.select(trace::Filter{.role = trace::Role::ExpAvg})) last = t->step;
  return last;
}

Json histogram_json(const MomentHist& h) {
  Json j;
  j["tensors"] = h.tensors;
  j["elements"] = h.elements;
  j["before"] = h.before.to_json();
  j["after"] = h.after.to_json();
  j["k_median"] = median(h.k);
  if (!h.k.empty()) {
    j["k_min"] = *std::min_element(h.k.begin(), h.k.end());
    j["k_max"] = *std::max_element(h.k.begin(), h.k.end());
  }
  j["groups_with_k"] = static_cast<int64_t>(h.k.size());
  return j;
}

Json plot_moment(const MomentHist& h) {
  Json j;
  j["name"] = h.name;
  Json before = Json::array(), after = Json::array();
  for (auto c : h.before.counts()) before.push_back(c);
  for (auto c : h.after.counts()) after.push_back(c);
  j["before"] = std::move(before);
  j["after"] = std::move(after);
  j["underflow_before"] = h.before.below();
  j["underflow_after"] = h.after.below();
  j["k_median"] = median(h.k);
  return j;
}

void optim_part(Context& ctx, Section& s, const trace::TraceReader& reader);

// Where Table 1's numbers come from.
std::string table1_note(const optim::Table1Details& det) {
  std::string note = fmt::format("{} elements of {} parameters", det.elements, det.params);
  if (det.adamw_step) note += fmt::format(" at AdamW step {}", *det.adamw_step);
  note += fmt::format("; mean (m/sqrt(v))^2 = {}", fmt_num(det.mean_r2, 4));
  return note + ". Details (flush fractions, per-moment NMSE) in `data.optim.table1_details`.";
}
void fig3_part(Context& ctx, Section& s, const trace::TraceReader& reader);

}  // namespace

Json section_optimizer(Context& ctx) {
  const char* id = "optimizer";
  const char* title = "Optimizer states in FP8";
  return guarded(id, title, [&] {
    Section s(id, title);
    // Both parts need AdamW's moments, and the replay its hyper-parameters: a trace without them
    // (a checkpoint's weights, a folder of .npy files) leaves the section unavailable, not failed.
    const trace::TraceReader reader(ctx.opts.trace);
    const auto& opt = reader.header().optimizer;
    const bool moments = !reader.select(trace::Filter{.role = trace::Role::ExpAvg}).empty() &&
                         !reader.select(trace::Filter{.role = trace::Role::ExpAvgSq}).empty();
    if (!moments || !opt.beta1 || !opt.beta2 || !opt.eps) {
      s.unavailable(!moments ? "the trace holds no AdamW moments (exp_avg and exp_avg_sq)"
                             : "the trace does not record the optimizer's beta1, beta2 and eps",
                    "record a trace of training with fp8sim.capture.TraceRecorder (docs/python.md), which "
                    "stores the moments and the optimizer's hyper-parameters");
      return s.take();
    }
    // The replay (Table 1, drift) and Figure 3 are independent: a failure of one is reported in
    // the section and does not hide the other.
    std::vector<std::string> failures;
    try {
      optim_part(ctx, s, reader);
    } catch (const std::exception& e) {
      if (dist::distributed()) throw;  // as guarded(): the job ends
      failures.push_back(std::string("optimizer replay: ") + e.what());
    }
    try {
      fig3_part(ctx, s, reader);
    } catch (const std::exception& e) {
      if (dist::distributed()) throw;
      failures.push_back(std::string("Figure 3 histograms: ") + e.what());
    }
    if (!failures.empty()) {
      std::string all;
      for (const auto& f : failures) all += (all.empty() ? "" : "; ") + f;
      s.error(all);
    }
    return s.take();
  });
}

namespace {

// ---- fp8sim optim: Table 1, drift, fp32 replay, bytes per parameter
void optim_part(Context& ctx, Section& s, const trace::TraceReader& reader) {
  const auto& o = ctx.opts;
  optim::OptimOptions oo;
  oo.progress = [&](double done, double total) { ctx.progress(0.5 * done, total); };
  // The default state recipes, plus any a training recipe uses that they lack (fp32 is the
  // replay's reference and always runs).
  std::vector<std::string> extra;
  for (const auto& r : o.recipes) {
    const auto& st = recipe_of(r).optimizer_state;
    if (!st || *st == "fp32") continue;
    bool have = std::find(extra.begin(), extra.end(), *st) != extra.end();
    for (const auto& d : optim::default_state_recipes()) have = have || d.name == *st;
    if (!have) extra.push_back(*st);
  }
  if (!extra.empty()) {
    oo.recipes = optim::default_state_recipes();
    for (const auto& st : extra) oo.recipes.push_back(optim::StateRecipe::parse(st));
  }
  // Without a grad window (a trace of one step, a synthetic trace) Table 1 and the bytes still run.
  oo.drift = reader.header().grad_window.has_value();
  const optim::OptimResult doc = optim::optim_replay(reader, oo);

  const optim::OptimDefinitions& defs = doc.definitions;
  const auto& formats = optim::table1_formats();
  if (doc.table1) {
    const optim::Table1Matrix& t1 = doc.table1->mse;
    const optim::Table1Matrix& paper = doc.table1->paper;
    const optim::Table1Matrix& ratio = doc.table1->ratio_to_e4m3;
    const optim::Table1Matrix& pratio = doc.table1->paper_ratio_to_e4m3;
    Row header{"m \\ v"};
    for (const auto& f : formats) header.push_back(f.label);
    std::vector<Row> rows, rrows, prow;
    // The best cell of each matrix in bold, as the paper marks it.
    auto best_of = [&](const optim::Table1Matrix& m) {
      double b = INFINITY;
      for (const auto& row : m)
        for (double v : row) b = std::min(b, v);
      return b;
    };
    const double best = best_of(t1), pbest = best_of(paper);
    for (size_t a = 0; a < 4; ++a) {
      Row r{formats[a].label}, rr{formats[a].label}, pr{formats[a].label};
      for (size_t c = 0; c < 4; ++c) {
        const double v = t1[a][c];
        r.push_back(v == best ? "**" + fmt_num(v, 4) + "**" : fmt_num(v, 4));
        rr.push_back(fmt_num(ratio[a][c], 3) + " / " + fmt_num(pratio[a][c], 3));
        const double p = paper[a][c];
        pr.push_back(p == pbest ? "**" + fmt_num(p, 4) + "**" : fmt_num(p, 4));
      }
      rows.push_back(std::move(r));
      rrows.push_back(std::move(rr));
      prow.push_back(std::move(pr));
    }
    s.para("**COAT Table 1.** " + defs.table1 + ".");
    s.table("This run: MSE of m/sqrt(v), first moment (rows) x second moment (columns)", header, rows,
            table1_note(doc.table1->details));
    s.table("COAT paper, Table 1 (their model's states)", header, prow);
    s.table("Ratio to E4M3 / E4M3: this run / paper", header, rrows,
            "The paper's absolute MSE depends on its model and step; ratios compare the recipes' relative quality.");
    Json pd;
    pd["file"] = "table1.png";
    pd["title"] = "MSE of m/sqrt(v) with quantized optimizer states (rows m, columns v)";
    Json labels = Json::array();
    for (const auto& f : formats) labels.push_back(f.label);
    pd["rows"] = labels;
    pd["cols"] = labels;
    auto matrix = [&](const optim::Table1Matrix& m) {
      Json mat = Json::array();
      for (const auto& r : m) {
        Json row = Json::array();
        for (double v : r) row.push_back(v);
        mat.push_back(std::move(row));
      }
      return mat;
    };
    pd["ours"] = matrix(t1);
    pd["ours_label"] = o.trace.filename().string();
    pd["paper"] = matrix(paper);
    ctx.plot_data["table1"] = std::move(pd);
    s.plot("table1.png", "Table 1 as heatmaps: this run (left) beside the COAT paper (right); the best cell in bold.");
  } else {
    s.para(fmt::format("Table 1 was not computed: {}.", doc.table1_skipped));
  }

  // ---- drift over the grad window, and bytes per parameter
  std::map<std::string, double> bytes_per_param;
  for (const optim::StateMemory& e : doc.memory) bytes_per_param[e.recipe] = e.bytes_per_param;
  if (!oo.drift)
    s.para(
        "No multi-step drift: the trace has no grad window (record one with `scripts/capture_trace.py --window` or "
        "the recorder's `window`).");
  if (const auto& drift = doc.drift) {
    std::vector<Row> rows;
    for (const optim::DriftRun& run : *drift) {
      if (run.steps.empty()) continue;
      const optim::DriftStep& last = run.steps.back();
      const auto bp = bytes_per_param.find(run.name);
      rows.push_back({run.name, bp == bytes_per_param.end() ? "n/a" : fmt_num(bp->second, 4),
                      fmt::format("{}", run.steps.size()), fmt_num(last.param_rel_l2, 3),
                      fmt_num(last.displacement_rel_err, 3), fmt_num(last.update_cosine, 6), fmt_num(last.m_nmse, 3),
                      fmt_num(last.v_nmse, 3)});
    }
    s.para(
        "**Multi-step drift.** From the start of the trace's grad window, every state recipe runs AdamW on the "
        "same captured grads in lockstep with an fp32-state run; after the last step: " +
        defs.param_rel_l2 + " (param rel. L2); " + defs.displacement_rel_err + " (displacement err.); " +
        defs.update_cosine + " (update cosine); " + defs.m_nmse + " (m NMSE; v likewise).");
    s.table("Drift from the fp32-state run after the window",
            {"state recipe", "state bytes/param", "steps", "param rel. L2", "displacement err.", "update cosine",
             "m NMSE", "v NMSE"},
            rows, "Per-step values are in `data.optim.drift`.");
    for (const auto& entry : o.recipes) {
      const recipe::TrainingRecipe& rec = recipe_of(entry);
      if (!rec.optimizer_state) continue;
      const std::string& r = rec.name;
      const std::string& sr = *rec.optimizer_state;
      const auto bp = bytes_per_param.find(sr);
      ctx.add_summary(r, "optimizer states",
                      fmt::format("{} ({} B/param)", sr,
                                  bp == bytes_per_param.end() ? (sr == "fp32" ? "8" : "n/a") : fmt_num(bp->second, 3)));
      const auto e = std::find_if(drift->begin(), drift->end(), [&](const optim::DriftRun& d) { return d.name == sr; });
      if (e != drift->end() && !e->steps.empty()) {
        const double d = e->steps.back().param_rel_l2;
        ctx.add_summary(r, "param drift vs fp32 states", fmt_num(d, 3));
        ctx.add_figure(r, "param_drift", d, fmt_num(d, 3), "optimizer");
      } else if (sr == "fp32") {
        ctx.add_summary(r, "param drift vs fp32 states", "0 (reference)");
        ctx.add_figure(r, "param_drift", 0.0, "0 (reference)", "optimizer");
      }
    }
  }
  if (const auto& rp = doc.fp32_replay)
    s.para(
        fmt::format("Faithfulness: replaying torch's AdamW with fp32 states over the window reproduces the captured "
                    "end-of-window weights to a max relative error of {} ({}).",
                    fmt_num(rp->max_rel_err, 3), defs.fp32_replay_max_rel_err));
  ctx.data["optim"] = doc.to_json();
}

// ---- Figure 3 histograms from the trace's moments
void fig3_part(Context& ctx, Section& s, const trace::TraceReader& reader) {
  {
    const auto step = moments_step(reader);
    if (!step) {
      s.para("Figure 3 needs AdamW moments (exp_avg, exp_avg_sq) in the trace; this trace has none.");
    } else {
      const QuantSpec spec = QuantSpec::parse(kFig3Spec);
      MomentHist m, v;
      m.name = "first moment m (exp_avg)";
      v.name = "second moment v (exp_avg_sq)";
      std::vector<MomentHist> worst_m, worst_v;  // the kWorstTensors most flushed, most flushed first
      int visited = 0;
      for (auto* h : {&m, &v}) {
        trace::Filter f;
        f.step = *step;
        f.role = h == &m ? trace::Role::ExpAvg : trace::Role::ExpAvgSq;
        reader.for_each(f, [&](const trace::TensorInfo& info, const trace::TensorData& data) {
          const Buffer<float> x = data.widened();
          const std::vector<int64_t> flat = {static_cast<int64_t>(x.size())};  // COAT flattens each parameter
          const QuantizedTensor q = quantize(x.data(), flat, spec);
          const ScaledHistograms sh = scaled_histograms(x.data(), q);
          MomentHist one;
          one.name = fmt::format("{} ({})", info.name, h == &m ? "m" : "v");
          one.before.merge(sh.before);
          one.after.merge(sh.after);
          for (float k : q.expand_k)
            if (std::isfinite(k)) one.k.push_back(k);
          one.tensors = 1;
          one.elements = info.numel();
          h->before.merge(sh.before);
          h->after.merge(sh.after);
          h->k.insert(h->k.end(), one.k.begin(), one.k.end());
          h->tensors += 1;
          h->elements += info.numel();
          auto& worst = h == &m ? worst_m : worst_v;
          const auto at = std::find_if(worst.begin(), worst.end(),
                                       [&](const MomentHist& w) { return flushed_before(one) > flushed_before(w); });
          if (static_cast<size_t>(at - worst.begin()) < kWorstTensors) worst.insert(at, std::move(one));
          if (worst.size() > kWorstTensors) worst.pop_back();
          ctx.progress(0.5 + 0.25 * ++visited / std::max<size_t>(1, reader.select(f).size()), 1.0);
        });
      }
      Json hj;
      hj["step"] = *step;
      hj["spec"] = kFig3Spec;
      hj["m"] = histogram_json(m);
      hj["v"] = histogram_json(v);
      ctx.data["fig3_histograms"] = hj;
      s.para(fmt::format(
          "**COAT Figure 3.** |x/s| of the trace's AdamW moments at step {} ({} parameters, {} elements), quantized "
          "to E4M3 in 1x128 groups of each flattened parameter (`{}`): *before* is plain absmax scaling "
          "(|x| / (absmax/448)), *after* is |x'/s| with Dynamic Range Expansion x' = sign(x)(|x|/c)^k. Values "
          "below 2^-10 round to 0 in E4M3. Median k: m {}, v {} (the paper reports k near 2 for m and near 10 "
          "for v).",
          *step, m.tensors, m.elements, kFig3Spec, fmt_num(median(m.k), 3), fmt_num(median(v.k), 3)));
      std::vector<Row> rows;
      for (const auto* h : {&m, &v}) {
        const auto frac = [](int64_t part, int64_t total) {
          return total > 0 ? fmt::format("{:.2f}%", 100.0 * double(part) / double(total)) : std::string("n/a");
        };
        const int64_t nb = h->before.total() - h->before.zeros(), na = h->after.total() - h->after.zeros();
        rows.push_back({h->name, fmt_num(median(h->k), 3),
                        h->k.empty() ? "n/a"
                                     : fmt::format("{} .. {}", fmt_num(*std::min_element(h->k.begin(), h->k.end()), 3),
                                                   fmt_num(*std::max_element(h->k.begin(), h->k.end()), 3)),
                        frac(h->before.below(), nb), frac(h->after.below(), na),
                        frac(h->before.zeros(), h->before.total())});
      }
      s.table("Dynamic Range Expansion on the trace's moments",
              {"moment", "median k", "k range", "flushed to 0 before", "flushed to 0 after", "exact zeros"}, rows,
              "Flushed: nonzero elements whose |x/s| is below 2^-10, which E4M3 stores as 0.");
      Json pd;
      pd["file"] = "fig3_histograms.png";
      pd["title"] =
          fmt::format("|x/s| of AdamW moments before and after dynamic range expansion (E4M3, step {})", *step);
      Json edges = Json::array();
      for (int b = m.before.lo(); b <= m.before.hi(); ++b) edges.push_back(b);
      pd["bin_edges_log2"] = std::move(edges);
      Json moments = Json::array();
      moments.push_back(plot_moment(m));
      moments.push_back(plot_moment(v));
      // The tensors expansion matters most for: per moment, those plain scaling flushes most.
      Json worst_rows = Json::array();
      for (const auto* worst : {&worst_m, &worst_v})
        for (const auto& w : *worst) {
          const bool is_m = worst == &worst_m;
          Json pm = plot_moment(w);
          pm["name"] = fmt::format("{}: {:.2f}% flushed before", w.name, 100.0 * flushed_before(w));
          moments.push_back(std::move(pm));
          Json wj = Json::object();
          wj["moment"] = is_m ? "m" : "v";
          wj["tensor"] = w.name;
          wj["elements"] = w.elements;
          wj["flushed_before"] = flushed_before(w);
          const int64_t nz_after = w.after.total() - w.after.zeros();
          wj["flushed_after"] =
              nz_after > 0 ? static_cast<double>(w.after.below()) / static_cast<double>(nz_after) : 0.0;
          wj["k_median"] = median(w.k);
          worst_rows.push_back(std::move(wj));
        }
      ctx.data["fig3_histograms"]["worst_tensors"] = worst_rows;
      pd["moments"] = std::move(moments);
      ctx.plot_data["histograms"] = std::move(pd);
      s.plot("fig3_histograms.png",
             fmt::format("COAT Figure 3 style: share of elements per log2 bin of |x/s|, before (blue) and after "
                         "(orange) expansion: first over all the trace's moments, then for the {} tensors of each "
                         "moment that plain absmax scaling flushes most.",
                         kWorstTensors));
    }
  }
}

}  // namespace

}  // namespace fp8sim::report
