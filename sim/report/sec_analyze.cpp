// Accuracy sections from fp8sim analyze, run once per recipe on the trace: the quantization
// error of every tensor (aggregated by role and op) and the per-layer forward GEMM error
// (COAT Figure 4(a) style).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "sim/analyze/analyze.hpp"
#include "sim/gemm/tc_study.hpp"
#include "sim/report/sections.hpp"

namespace fp8sim::report {

namespace {

using Analyses = std::vector<std::pair<std::string, analyze::AnalyzeResult>>;

// The per-layer x GEMM heatmap's plot data: for each recipe with a quantized GEMM, its relative
// forward output error at every (layer, GEMM) pair, the GEMM named by its module's last component
// (q_proj, ..., down_proj; lm_head outside the layers); null where the recipe has no such GEMM.
// One panel per recipe, one shared log colour scale (scripts/plots.py, plot_layer_gemm_heatmap).
template <class LayerOf>
void add_layer_gemm_heatmap(Context& ctx, Section& s, const Analyses& recs, const std::vector<int64_t>& layers,
                            const LayerOf& layer_of) {
  auto short_name = [](const std::string& module) {
    const auto dot = module.rfind('.');
    return dot == std::string::npos ? module : module.substr(dot + 1);
  };
  std::vector<std::string> gemms;
  for (const auto& [_, doc] : recs)
    for (const auto& l : doc.layers)
      for (const auto& g : l.gemms)
        if (std::find(gemms.begin(), gemms.end(), short_name(g.module)) == gemms.end())
          gemms.push_back(short_name(g.module));
  if (gemms.empty() || layers.empty()) return;
  // A layer's GEMMs in execution order where the name is a known one, the rest after them.
  static const std::vector<std::string> order = {"q_proj",    "k_proj",  "v_proj",       "qkv_proj",  "o_proj",
                                                 "gate_proj", "up_proj", "gate_up_proj", "down_proj", "lm_head"};
  auto rank = [&](const std::string& n) {
    const auto it = std::find(order.begin(), order.end(), n);
    return it == order.end() ? order.size() : static_cast<size_t>(it - order.begin());
  };
  std::stable_sort(gemms.begin(), gemms.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  Json panels = Json::object();
  for (const auto& [r, doc] : recs) {
    Json grid = Json::array();
    bool any = false;
    for (int64_t L : layers) {
      Json row = Json::array();
      for (const auto& name : gemms) {
        Json cell(nullptr);
        if (const analyze::LayerGemms* l = layer_of(doc, L))
          for (const auto& g : l->gemms)
            if (short_name(g.module) == name && std::isfinite(g.stats.nmse())) {
              cell = g.stats.nmse();
              any = any || g.stats.nmse() > 0;
            }
        row.push_back(std::move(cell));
      }
      grid.push_back(std::move(row));
    }
    if (any) panels[r] = std::move(grid);
  }
  if (panels.size() == 0) return;
  Json pd = Json::object();
  pd["file"] = "layer_gemm_error.png";
  pd["title"] = "Forward GEMM output error per layer and GEMM (||Y_q - Y|| / ||Y||, log colour scale)";
  Json rows = Json::array(), cols = Json::array();
  for (int64_t L : layers) rows.push_back(L < 0 ? std::string("outside") : fmt::format("{}", L));
  for (const auto& g : gemms) cols.push_back(g);
  pd["layers"] = std::move(rows);
  pd["gemms"] = std::move(cols);
  pd["recipes"] = std::move(panels);
  ctx.plot_data["layer_gemm_heatmap"] = std::move(pd);
  s.plot("layer_gemm_error.png",
         "Where the error sits: relative forward GEMM output error of every GEMM of every layer, one panel per "
         "recipe, one colour scale for all (darker = larger error; blank = no such GEMM in that layer).");
}

// SNR in dB as a cell (+Inf when nothing was lost).
std::string snr_cell(const ErrorStats& stats) { return fmt::format("{:.1f}", stats.snr_db()); }

// Runs (once) fp8sim analyze for every recipe, in --recipes order; both accuracy sections read the
// result, data.analyze holds the documents.
const Analyses& analyses(Context& ctx) {
  if (ctx.analyses) return *ctx.analyses;
  // Every recipe has analyze rules.
  const auto& recipes = ctx.opts.recipes;
  Analyses all;
  Json docs = Json::object();
  analyze::AnalyzeOptions ao;
  ao.progress = false;  // the report draws one bar for the phase
  const trace::TraceReader reader(ctx.opts.trace);
  for (size_t i = 0; i < recipes.size(); ++i) {
    const recipe::TrainingRecipe& rec = recipe_of(recipes[i]);
    all.emplace_back(rec.name, analyze::analyze_trace(reader, rec, ao));
    docs[rec.name] = all.back().second.to_json();
    ctx.progress(static_cast<double>(i + 1), static_cast<double>(recipes.size()));
  }
  ctx.data["analyze"] = std::move(docs);
  ctx.analyses = std::move(all);
  return *ctx.analyses;
}

const analyze::Aggregate* find_agg(const std::vector<analyze::Aggregate>& table, const std::string& key) {
  for (const auto& a : table)
    if (a.key == key) return &a;
  return nullptr;
}

}  // namespace

Json section_tensors(Context& ctx) {
  const char* id = "tensors";
  const char* title = "Quantization error of the trace's tensors";
  return guarded(id, title, [&] {
    Section s(id, title);
    const Analyses& recs = analyses(ctx);
    if (recs.empty()) {
      s.unavailable("none of the recipes in --recipes is an analyze recipe",
                    "add one of the recipes `fp8sim analyze --list-recipes` shows to --recipes");
      return s.take();
    }
    const analyze::AnalyzeResult& first = recs.front().second;
    s.para(fmt::format(
        "Every tensor of step {} of the trace (weights, grads, AdamW moments, activations and activation grads "
        "captured "
        "from real training) goes through the QuantSpec its recipe assigns by role and op, and back; the error is "
        "measured against the stored value (bf16 tensors are quantized from their bf16 bits: one rounding). "
        "SNR = 10 log10(sum x^2 / sum (x - q(x))^2) in dB, higher is better; `exact`: nothing lost (the recipe keeps "
        "the tensor, or every value is representable). Aggregates merge the sums of the quantized tensors.",
        first.step));

    // By role:op, SNR per recipe.
    std::vector<std::string> keys;
    for (const auto& [_, doc] : recs)
      for (const auto& a : doc.aggregates.by_op)
        if (std::find(keys.begin(), keys.end(), a.key) == keys.end()) keys.push_back(a.key);
    Row header{"role:op"};
    for (const auto& [r, _] : recs) header.push_back(r);
    std::vector<Row> rows;
    for (const auto& k : keys) {
      Row row{k};
      for (const auto& [r, doc] : recs) {
        const analyze::Aggregate* a = find_agg(doc.aggregates.by_op, k);
        if (!a) row.push_back("-");
        else if (a->quantized_tensors == 0) row.push_back("kept");
        else row.push_back(snr_cell(*a->stats));
      }
      rows.push_back(std::move(row));
    }
    s.table(
        "SNR (dB) by tensor role and op", header, rows,
        "`kept`: the recipe leaves these tensors in their stored precision (e.g. BF16 training, fp32 master weights).");

    // Which spec each recipe applies, per role:op.
    std::vector<Row> srows;
    for (const auto& k : keys) {
      Row row{k};
      for (const auto& [r, doc] : recs) {
        const analyze::Aggregate* a = find_agg(doc.aggregates.by_op, k);
        std::string specs;
        if (a)
          for (const auto& sp : a->specs) specs += (specs.empty() ? "" : ", ") + ("`" + sp + "`");
        row.push_back(specs.empty() ? "-" : specs);
      }
      srows.push_back(std::move(row));
    }
    s.table("QuantSpec per tensor role and op", header, srows,
            "Spec text: FORMAT:GRANULARITY[:options] (tensor, row, gN = 1xN groups, bRxC = blocks; de = dynamic range "
            "expansion; scale = scale storage). `none`: kept as stored.");

    // Bytes: what the recipe would store for the trace's tensors.
    std::vector<Row> brows;
    for (const auto& [r, doc] : recs) {
      const analyze::Totals& t = doc.totals;
      const double el = static_cast<double>(t.elements);
      brows.push_back({r, fmt::format("{}", t.tensors), fmt::format("{}", t.quantized_tensors),
                       fmt::format("{:.0f}", el), fmt::format("{:.2f}", 8.0 * static_cast<double>(t.stored_bytes) / el),
                       fmt::format("{:.2f}", 8.0 * static_cast<double>(t.recipe_bytes) / el)});
    }
    // By role, SNR per recipe: the activation row is the verdict's and the summary's activation error.
    std::vector<std::string> roles;
    for (const auto& [_, doc] : recs)
      for (const auto& a : doc.aggregates.by_role)
        if (std::find(roles.begin(), roles.end(), a.key) == roles.end()) roles.push_back(a.key);
    std::vector<Row> rrows;
    for (const auto& role : roles) {
      Row row{role};
      for (const auto& [r, doc] : recs) {
        const analyze::Aggregate* a = find_agg(doc.aggregates.by_role, role);
        const bool kept = a && a->quantized_tensors == 0;
        row.push_back(!a ? "-" : kept ? "kept" : snr_cell(*a->stats));
        if (a && role == "activation") {
          ctx.add_summary(r, "activation SNR dB", row.back());
          ctx.add_figure(r, "activation_snr_db", kept ? std::nan("") : a->stats->snr_db(), row.back(), id);
        }
      }
      rrows.push_back(std::move(row));
    }
    Row rheader = header;
    rheader[0] = "role";
    s.table("SNR (dB) by tensor role", rheader, rrows,
            "All quantized tensors of a role together (the sums of the rows above merged); the activation row is "
            "the verdict's activation error.");
    s.table("Storage of the trace's tensors",
            {"recipe", "tensors", "quantized", "elements", "stored bits/element", "recipe bits/element"}, brows,
            "Recipe bits include the scales and DE metadata (exact, from the quantizer's accounting).");
    // Warnings the analyses raised, so nothing is silently dropped.
    for (const auto& [r, doc] : recs) {
      const std::tuple<size_t, const char*, const char*> warnings[] = {
          {doc.nonfinite_tensors.size(), "nonfinite_tensors", "tensors hold NaN/Inf"},
          {doc.unmatched_tensors.size(), "unmatched_tensors", "tensors matched no rule and stay unquantized"},
          {doc.skipped_gemms.size(), "skipped_gemms", "GEMMs could not be paired and were skipped"}};
      for (const auto& [n, k, what] : warnings)
        if (n > 0) s.para(fmt::format("{}: {} {} (listed in `data.analyze.{}.{}`).", r, n, what, r, k));
    }
    return s.take();
  });
}

Json section_gemm(Context& ctx) {
  const char* id = "gemm";
  const char* title = "Per-layer forward GEMM error";
  return guarded(id, title, [&] {
    Section s(id, title);
    const Analyses& recs = analyses(ctx);
    if (recs.empty()) {
      s.unavailable("none of the recipes in --recipes is an analyze recipe",
                    "add one of the recipes `fp8sim analyze --list-recipes` shows to --recipes");
      return s.take();
    }
    s.para(
        "For every linear layer with captured input X (T, K) and weight W (N, K): Y = X W^T in fp32 against "
        "Y_q = deq(q(X)) deq(q(W))^T, both computed the same way (Eigen, fp32), so the difference is the "
        "quantization alone. Error = ||Y_q - Y|| / ||Y|| (relative L2), per layer over its GEMMs; COAT's Figure 4(a) "
        "plots the same per-layer forward error against depth.");
    // Per layer: rows = layer, columns = recipes.
    std::vector<int64_t> layers;
    for (const auto& [_, doc] : recs)
      for (const auto& l : doc.layers)
        if (std::find(layers.begin(), layers.end(), l.layer) == layers.end()) layers.push_back(l.layer);
    std::sort(layers.begin(), layers.end());
    auto layer_of = [](const analyze::AnalyzeResult& doc, int64_t layer) -> const analyze::LayerGemms* {
      for (const auto& l : doc.layers)
        if (l.layer == layer) return &l;
      return nullptr;
    };
    Row header{"layer"};
    for (const auto& [r, _] : recs) header.push_back(r);
    std::vector<Row> rows;
    Json per_recipe = Json::object();
    for (const auto& [r, _] : recs) per_recipe[r] = Json::array();
    for (int64_t L : layers) {
      Row row{L < 0 ? std::string("outside") : fmt::format("{}", L)};
      for (const auto& [r, doc] : recs) {
        const analyze::LayerGemms* l = layer_of(doc, L);
        const double e = l ? l->stats.nmse() : std::nan("");
        row.push_back(l ? fmt_num(e, 3) : "-");
        per_recipe[r].push_back(e);
      }
      rows.push_back(std::move(row));
    }
    // The mean over layers: the summary's and the verdict's GEMM error.
    Row mean_row{"mean over layers"};
    for (const auto& [r, doc] : recs) {
      double sum = 0;
      int n = 0;
      for (const auto& l : doc.layers) {
        const double e = l.stats.nmse();
        if (std::isfinite(e)) sum += e, ++n;
      }
      mean_row.push_back(n ? fmt_num(sum / n, 3) : "-");
      if (!n) continue;
      ctx.add_summary(r, "GEMM output rel. error (mean over layers)", mean_row.back());
      ctx.add_figure(r, "gemm_rel_err_mean", sum / n, mean_row.back(), id);
    }
    rows.push_back(std::move(mean_row));
    s.table("Relative L2 error of the forward GEMM outputs, per layer", header, rows);

    // Per GEMM, when the table stays readable.
    std::vector<Row> grows;
    for (int64_t L : layers) {
      std::vector<std::string> modules;
      for (const auto& [_, doc] : recs)
        if (const analyze::LayerGemms* l = layer_of(doc, L))
          for (const auto& g : l->gemms)
            if (std::find(modules.begin(), modules.end(), g.module) == modules.end()) modules.push_back(g.module);
      for (const auto& m : modules) {
        Row row{m};
        std::string shape;
        for (const auto& [r, doc] : recs) {
          const analyze::GemmRecord* hit = nullptr;
          if (const analyze::LayerGemms* l = layer_of(doc, L))
            for (const auto& g : l->gemms)
              if (g.module == m) hit = &g;
          row.push_back(hit ? fmt_num(hit->stats.nmse(), 3) : "-");
          if (hit && shape.empty()) shape = fmt::format("{}x{}x{}", hit->m, hit->n, hit->k);
        }
        row.insert(row.begin() + 1, shape);
        grows.push_back(std::move(row));
      }
    }
    if (!grows.empty() && grows.size() <= 64) {
      Row gheader{"GEMM (module)", "M x N x K"};
      for (const auto& [r, _] : recs) gheader.push_back(r);
      s.table("Relative L2 error per GEMM", gheader, grows);
    } else if (!grows.empty()) {
      s.para(fmt::format("{} GEMMs: the per-GEMM errors are in `data.analyze.<recipe>.layers[].gemms`.", grows.size()));
    }

    Json pd;
    pd["file"] = "gemm_error.png";
    pd["title"] = "Forward GEMM output error per layer (COAT Fig. 4(a) style)";
    pd["xlabel"] = "transformer layer";
    pd["ylabel"] = "||Y_q - Y|| / ||Y||";
    Json labels = Json::array();
    for (int64_t L : layers) labels.push_back(L < 0 ? std::string("outside") : fmt::format("{}", L));
    pd["layers"] = std::move(labels);
    // A recipe with no quantized GEMM (bf16) has zero error everywhere: nothing to draw on a log axis.
    Json drawn = Json::object();
    std::vector<std::string> exact;
    for (const auto& [r, v] : per_recipe.as_object()) {
      bool any = false;
      for (const auto& e : v.as_array()) any = any || (e.is_number() && e.as_number() > 0);
      if (any) drawn[r] = v;
      else exact.push_back(r);
    }
    const bool any_drawn = drawn.size() > 0;
    pd["recipes"] = std::move(drawn);
    if (any_drawn) {
      ctx.plot_data["gemm_error"] = std::move(pd);
      std::string caption = "Relative forward GEMM output error per layer, one line per recipe (log scale).";
      if (!exact.empty()) {
        std::string l;
        for (const auto& r : exact) l += (l.empty() ? "" : ", ") + r;
        caption += " Not drawn (zero error: no quantized GEMM): " + l + ".";
      }
      s.plot("gemm_error.png", caption);
    }
    add_layer_gemm_heatmap(ctx, s, recs, layers, layer_of);

    // The same GEMMs as Hopper's tensor cores compute them (analyze's tensor-core model).
    std::vector<Row> trows;
    std::vector<std::string> absent;
    for (const auto& [r, doc] : recs) {
      int64_t gemms = 0, modelled = 0, fast_gemms = 0;
      ErrorStats ideal, promote, fast, acc_promote, acc_fast;
      for (const auto& l : doc.layers) {
        gemms += static_cast<int64_t>(l.gemms.size());
        if (l.tc_gemms == 0) continue;
        auto merge = [](ErrorStats& into, const ErrorStats& from, bool first) {
          if (first) into = from;
          else into.merge(from);
        };
        merge(ideal, l.tc_ideal, modelled == 0);
        merge(promote, l.tc_promote, modelled == 0);
        merge(acc_promote, l.tc_promote_vs_ideal, modelled == 0);
        modelled += l.tc_gemms;
        if (l.tc_fast_gemms > 0) {
          merge(fast, l.tc_fast, fast_gemms == 0);
          merge(acc_fast, l.tc_fast_vs_ideal, fast_gemms == 0);
          fast_gemms += l.tc_fast_gemms;
        }
      }
      if (modelled == 0) {
        const std::string why = analyze::tensor_core_absent(doc);
        if (!why.empty()) absent.push_back(r + ": " + why);
        continue;
      }
      trows.push_back({r, fmt::format("{} of {}", modelled, gemms), fmt_num(ideal.nmse(), 3),
                       fmt_num(promote.nmse(), 3), fast_gemms ? fmt_num(fast.nmse(), 3) : "-",
                       fmt_num(acc_promote.nmse(), 3), fast_gemms ? fmt_num(acc_fast.nmse(), 3) : "-"});
    }
    if (!trows.empty()) {
      s.table(
          "The same GEMMs on Hopper's tensor cores",
          {"recipe", "GEMMs modelled", "ideal fp32", "tensor cores, promote 128", "tensor cores, fast",
           "accumulation alone, promote 128", "accumulation alone, fast"},
          trows,
          "Relative L2 error of Y against the unquantized product, over sampled rows of every GEMM whose scales "
          "an sm_90 cuBLASLt GEMM takes, computed by the tensor-core model that `fp8sim compare` checks bit for "
          "bit against cuBLASLt: promote 128 = the partial sum moves to fp32 every 128 of K (cuBLASLt's default, "
          "and block scaling; for BF16 operands the BF16 tensor cores), fast = never (fast accumulation, per-tensor "
          "and row scales). `accumulation alone` "
          "is the tensor cores' Y against the ideal fp32 product of the same quantized operands; `fp8sim accum` "
          "shows how it grows with K.");
    }
    for (const auto& a : absent) s.para("Not on the tensor cores: " + a + ".");

    // How the accumulation's error grows with K (fp8sim accum, a smaller run).
    gemm::AccumStudyOptions ao;
    ao.ks = {256, 1024, 4096, 16384};
    ao.intervals = {128, 0};
    ao.data = {"normal", "positive"};
    ao.m = ao.n = 32;
    const gemm::AccumStudy st = gemm::run_accum_study(ao);
    std::vector<Row> arows;
    for (const auto& [kind, series] : st.results)
      for (size_t ki = 0; ki < ao.ks.size(); ++ki) {
        Row row{kind, fmt::format("{}", ao.ks[ki])};
        for (const auto& sr : series) row.push_back(fmt_num(sr.rel_l2[ki], 3));
        arows.push_back(std::move(row));
      }
    Row aheader{"operands", "K"};
    for (const auto& sr : st.results.front().second) aheader.push_back(sr.config);
    s.table("Accumulation error against K (fp8sim accum)", aheader, arows,
            "Relative L2 error of 32 x 32 outputs of per-tensor E4M3 GEMMs against the exact product of the same "
            "codes: the accumulation alone. `positive`: same-sign products, where fast accumulation's truncation "
            "adds up. `fp8sim accum` runs the full study (more K, intervals and data kinds).");
    Json ad = st.to_json();
    Json apd = Json::object();
    apd["file"] = "accum.png";
    apd["ks"] = ad.at("ks");
    apd["data"] = ad.at("data");
    ctx.plot_data["accum"] = std::move(apd);
    s.plot("accum.png", "Accumulation error of the FP8 tensor cores against K, per promotion interval (log-log).");
    return s.take();
  });
}

}  // namespace fp8sim::report
