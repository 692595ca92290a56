// The verdict: the report's answer first. Per recipe, the headline figures the other sections
// produced (ctx.figures: accuracy from the trace, memory and speed from the target model), each
// linked to its section, beside TE's, and a rule-based recommendation whose reasons are printed.
// Nothing here is recomputed: every number is a section's own value and cell text.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "sim/model/model.hpp"
#include "sim/report/sections.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::report {

namespace {

// The accuracy reference: TE's recipe (per-tensor FP8 scaling, E4M3 forward, E5M2 gradients), the
// scheme Micikevicius et al. 2022 (arXiv:2209.05433) show to match 16-bit training quality. No
// published threshold bounds the per-tensor errors fp8sim measures (docs/report.md), so the rule
// compares each recipe's error with TE's on the same trace.
constexpr const char* kReference = "te";
// An error up to this factor above TE's counts as TE's level: fp8sim's own margin (docs/report.md),
// far below the 2x that one mantissa bit more or less makes.
constexpr double kTolerance = 1.10;

// The accuracy figures and how each becomes an error amplitude (larger is worse) for the ratio to TE.
struct Metric {
  const char* key;
  const char* label;
  bool snr;  // SNR in dB: the amplitude ratio is 10^((SNR_te - SNR) / 20)
};
constexpr Metric kAccuracy[] = {
    {"activation_snr_db", "activation error", true},
    {"gemm_rel_err_mean", "GEMM output error", false},
    {"param_drift", "optimizer-state drift", false},
};

const Json* figure(const Context& ctx, const std::string& recipe, const char* key) {
  const Json* r = ctx.figures.find(recipe);
  return r ? r->find(key) : nullptr;
}

std::optional<double> value(const Json* f) {
  const Json* v = f ? f->find("value") : nullptr;
  if (!v || !v->is_number()) return std::nullopt;
  return v->as_number();
}

// A section's number as the verdict shows it: the section's cell, linked to the section.
std::string linked(const Json* f) {
  if (!f) return "n/a";
  return fmt::format("[{}](#{})", f->at("cell").as_string(), f->at("section").as_string());
}

// The error of `recipe` as a multiple of TE's for one metric; nullopt when either is missing.
// An exact or kept activation set (SNR null: no error) has ratio 0 against a finite TE SNR.
std::optional<double> ratio_to_te(const Context& ctx, const std::string& recipe, const Metric& m) {
  const Json* f = figure(ctx, recipe, m.key);
  const Json* t = figure(ctx, kReference, m.key);
  if (!f || !t) return std::nullopt;
  const auto v = value(f), tv = value(t);
  if (m.snr) {
    if (!tv) return std::nullopt;  // TE loses nothing here: no ratio
    if (!v) return 0.0;
    return std::pow(10.0, (*tv - *v) / 20.0);
  }
  if (!v || !tv) return std::nullopt;
  if (*tv == 0) return *v == 0 ? std::optional<double>(1.0) : std::optional<double>(INFINITY);
  return *v / *tv;
}

std::string ratio_text(double r) {
  if (!std::isfinite(r)) return "inf";
  if (r == 0) return "0x";
  return r < 0.01 ? fmt::format("{:.1e}x", r) : fmt::format("{:.2f}x", r);
}

// The trace's model as one line, and whether it is the memory and speed model (same shape).
struct ModelMatch {
  std::string trace_model, target_model;
  bool same = false;
};

ModelMatch match_models(const ReportOptions& o) {
  ModelMatch mm;
  const model::ModelConfig target = model::load_model(o.model);
  mm.target_model =
      fmt::format("`{}` ({}, d={}, {} layers)", target.name, target.display_name, target.hidden, target.layers);
  const trace::TraceReader reader(o.trace);
  const Json& c = reader.header().model_config;
  auto int_of = [&](const char* k) -> int64_t {
    const Json* v = c.is_object() ? c.find(k) : nullptr;
    return v && v->is_number() ? v->as_int() : -1;
  };
  const Json* name = c.is_object() ? c.find("name") : nullptr;
  const int64_t d = int_of("hidden_size"), L = int_of("num_hidden_layers"), ffn = int_of("intermediate_size");
  if (d < 0 || L < 0) {
    mm.trace_model = "a model the trace does not describe";
    return mm;
  }
  mm.trace_model = fmt::format("`{}` (d={}, {} layers)", name && name->is_string() ? name->as_string() : "?", d, L);
  mm.same = d == target.hidden && L == target.layers && (ffn < 0 || ffn == target.ffn);
  return mm;
}

}  // namespace

Json section_verdict(Context& ctx) {
  const char* id = "verdict";
  const char* title = "Verdict";
  return guarded(id, title, [&] {
    Section s(id, title);
    const auto& o = ctx.opts;
    std::vector<std::string> names;
    for (const auto& e : o.recipes) names.push_back(recipe_of(e).name);
    const bool have_ref = std::find(names.begin(), names.end(), kReference) != names.end();
    Json vj;
    vj["reference"] = kReference;
    vj["tolerance"] = kTolerance;

    // Which models the numbers describe.
    const ModelMatch mm = match_models(o);
    Json models;
    models["accuracy"] = mm.trace_model;
    models["memory_speed"] = mm.target_model;
    models["same"] = mm.same;
    vj["models"] = models;
    if (!mm.same)
      s.para(fmt::format(
          "**Different models.** The accuracy columns come from the trace's model, {}; memory and speed from {}. "
          "Quantization error depends on the tensors' distributions, which change with model size and training "
          "step, so the two halves describe different models. To make them agree, capture a trace of the target "
          "model (`scripts/capture_trace.py llama --model models/{}.json --out target.h5 ...`, on a GPU, or "
          "`capture_trace.py generic --factory ...` for your own training code) and pass it as TRACE, or run "
          "with `--model` set to the traced model's config for its memory and speed.",
          mm.trace_model, mm.target_model, o.model));

    s.para(fmt::format(
        "Per recipe: the accuracy cost on the trace (activation SNR, mean forward-GEMM output error and "
        "optimizer-state drift, each also as a multiple of {}'s error), memory per GPU at micro-batch {} and the "
        "largest micro-batch that fits, and throughput with each recipe at its own largest micro-batch. Each "
        "number links to the section that measured it. No published threshold marks a per-tensor error as safe "
        "(docs/report.md says what the literature does state), so the reference is TE's FP8 recipe, which "
        "trains to 16-bit quality (Micikevicius et al. 2022, arXiv:2209.05433).",
        kReference, o.batch));

    // The rule, per recipe.
    struct Entry {
      std::string name;
      bool accuracy_ok = true, fits = true, has_speed = false;
      std::vector<std::string> over;  // metrics above the tolerance
      double worst_ratio = NAN;       // largest error ratio to TE
      double tps = NAN;
    };
    std::vector<Entry> entries;
    std::vector<Row> rows;
    Json per = Json::object();
    for (const auto& r : names) {
      Entry e;
      e.name = r;
      Json rj;
      Row row{r};
      for (const Metric& m : kAccuracy) {
        const Json* f = figure(ctx, r, m.key);
        Json mj = f ? *f : Json();
        std::string cell = linked(f);
        if (r != kReference && have_ref) {
          if (const auto q = ratio_to_te(ctx, r, m)) {
            mj["ratio_to_te"] = std::isfinite(*q) ? Json(*q) : Json();
            cell += " (" + ratio_text(*q) + ")";
            if (std::isnan(e.worst_ratio) || *q > e.worst_ratio) e.worst_ratio = *q;
            if (*q > kTolerance && r != "bf16") e.over.push_back(fmt::format("{} {} TE's", m.label, ratio_text(*q)));
          }
        }
        rj[m.key] = std::move(mj);
        row.push_back(cell);
      }
      e.accuracy_ok = e.over.empty();
      for (const char* k :
           {"peak_gib", "memory_saving_vs_bf16", "max_batch", "tokens_per_s_at_max_batch", "speedup_at_max_batch"}) {
        const Json* f = figure(ctx, r, k);
        rj[k] = f ? *f : Json();
        row.push_back(linked(f));
      }
      const auto mb = value(figure(ctx, r, "max_batch"));
      e.fits = !mb || *mb >= 1;
      if (const auto t = value(figure(ctx, r, "tokens_per_s_at_max_batch"))) {
        e.has_speed = true;
        e.tps = *t;
      }
      per[r] = std::move(rj);
      entries.push_back(std::move(e));
      rows.push_back(std::move(row));
    }

    // Recommendation: among the recipes that fit and are at TE's accuracy level (bf16 is the
    // reference for accuracy and always is), the fastest at its own largest micro-batch; without
    // speed figures, the one with the smallest peak memory.
    const Entry* best = nullptr;
    bool by_speed = false;
    for (const auto& e : entries)
      if (e.fits && e.accuracy_ok && e.has_speed && (!best || e.tps > best->tps)) best = &e, by_speed = true;
    if (!best) {
      double best_peak = INFINITY;
      for (const auto& e : entries) {
        const auto p = value(figure(ctx, e.name, "peak_gib"));
        if (e.fits && e.accuracy_ok && p && *p < best_peak) best = &e, best_peak = *p;
      }
    }
    // One line per recipe: what it buys against bf16, its accuracy against TE, and the rule's decision.
    auto versus_bf16 = [&](const std::string& r) {
      std::vector<std::string> parts;
      if (const Json* f = figure(ctx, r, "memory_saving_vs_bf16"); f && r != "bf16")
        parts.push_back(fmt::format("{} less peak memory than bf16", linked(f)));
      const auto mb = value(figure(ctx, r, "max_batch")), mb0 = value(figure(ctx, "bf16", "max_batch"));
      if (const Json* f = figure(ctx, r, "speedup_at_max_batch"); f && r != "bf16") {
        std::string at = mb && mb0 && *mb0 > 0 ? fmt::format(" at {:.2g}x the micro-batch ({} vs {})", *mb / *mb0,
                                                             linked(figure(ctx, r, "max_batch")),
                                                             linked(figure(ctx, "bf16", "max_batch")))
                                               : std::string();
        parts.push_back(fmt::format("{} bf16's tokens/s{}", linked(f), at));
      }
      return parts;
    };
    std::vector<std::string> lines;
    Json decisions = Json::object();
    for (const auto& e : entries) {
      std::vector<std::string> reasons = versus_bf16(e.name);
      std::string decision;
      if (e.name == "bf16") reasons.push_back("the accuracy reference: no FP8 anywhere");
      else if (e.name == kReference) reasons.push_back("the FP8 accuracy reference");
      else if (!have_ref) reasons.push_back(fmt::format("accuracy not ranked: {} is not in --recipes", kReference));
      else if (e.accuracy_ok)
        reasons.push_back(std::isnan(e.worst_ratio) ? std::string("no error figure to compare with TE's")
                                                    : fmt::format("every error within {:.2f}x of TE's (largest {})",
                                                                  kTolerance, ratio_text(e.worst_ratio)));
      else reasons.push_back(fmt::format("over the {:.2f}x rule: {}", kTolerance, join_prose(e.over, "and")));
      if (!e.fits) reasons.push_back("fits at no micro-batch on this GPU");
      if (!e.has_speed) reasons.push_back("no speed figure (no speed plan, or the speed section did not run)");
      if (best == &e) decision = "recommended";
      else if (!e.fits) decision = "does not fit";
      else if (!e.accuracy_ok) decision = "accuracy below TE's level";
      else if (by_speed && e.has_speed) decision = fmt::format("{:.2f}x {}'s tokens/s", e.tps / best->tps, best->name);
      else decision = "acceptable";
      rows[&e - entries.data()].push_back(decision == "recommended" ? "**recommended**" : decision);
      lines.push_back(fmt::format("**{}** ({}): {}.", e.name, decision,
                                  reasons.empty() ? std::string("no figures") : join_prose(reasons, "and")));
      Json dj;
      dj["decision"] = decision;
      Json rs = Json::array();
      for (const auto& x : reasons) rs.push_back(x);
      dj["reasons"] = std::move(rs);
      per[e.name]["verdict"] = std::move(dj);
    }
    if (best && have_ref) {
      s.para(fmt::format(
          "**Recommendation: {}.** {} Rule: among the recipes that fit and whose errors are within {:.2f}x of "
          "TE's on every metric, the {}.",
          best->name,
          by_speed ? "The fastest at its own largest micro-batch of the recipes at TE's accuracy level."
                   : "The smallest peak memory of the recipes at TE's accuracy level (no speed figures).",
          kTolerance,
          by_speed ? "highest tokens/s/GPU at its own largest micro-batch" : "smallest peak memory per GPU"));
    } else if (best) {
      // Without the reference the accuracy columns stand alone: the choice rests on memory and speed.
      s.para(fmt::format(
          "**Recommendation on memory and speed only: {}.** {} is not in --recipes, so no recipe's accuracy is "
          "compared with it (add it to rank accuracy); of the recipes that fit, this one has the {}.",
          best->name, kReference,
          by_speed ? "highest tokens/s/GPU at its own largest micro-batch" : "smallest peak memory per GPU"));
    }
    if (best) {
      vj["recommendation"] = best->name;
    } else {
      s.para(have_ref ? "**No recommendation:** no recipe both fits on this GPU and stays at TE's accuracy level."
                      : "**No recommendation:** no recipe fits on this GPU.");
      vj["recommendation"] = Json();
    }
    vj["rule"] = fmt::format(
        "among the recipes that fit (max batch >= 1) and whose activation, GEMM output and optimizer-state errors "
        "are each at most {:.2f}x {}'s (bf16 always qualifies), the highest tokens/s/GPU at its own largest "
        "micro-batch; without speed figures, the smallest peak GiB/GPU",
        kTolerance, kReference);
    s.table(
        "Verdict per recipe",
        {"recipe", "activation SNR dB (error x TE)", "GEMM output rel. error (x TE)", "optimizer param drift (x TE)",
         fmt::format("peak GiB/GPU at micro-batch {}", o.batch), "memory saving vs bf16", "max micro-batch",
         "tokens/s/GPU at max micro-batch", "speedup vs bf16", "verdict"},
        rows,
        "Accuracy: higher SNR and lower errors are better; (x TE) is the error amplitude as a multiple of TE's "
        "on the same tensors. Memory at --batch; throughput and speedup with each recipe at its own largest "
        "micro-batch (speedup against bf16 at its own). `n/a`: the section that produces the number did not "
        "run or does not model the recipe.");
    for (const auto& l : lines) s.para(l);
    vj["recipes"] = std::move(per);
    ctx.data["verdict"] = std::move(vj);
    return s.take();
  });
}

}  // namespace fp8sim::report
