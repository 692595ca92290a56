// Presentation of an analysis (sim/analyze/analyze.hpp): tables and Markdown.
#include <fmt/format.h>

#include "sim/analyze/analyze.hpp"

namespace fp8sim::analyze {

namespace {

std::string g4(double v) { return fmt::format("{:.4g}", v); }

std::string snr(const ErrorStats& s) { return fmt::format("{:.2f}", s.snr_db()); }

std::string pct(double v) { return fmt::format("{:.3f}%", 100.0 * v); }

std::string kib(uint64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1024.0); }

std::string join_specs(const std::vector<std::string>& specs) {
  std::string s;
  for (const auto& x : specs) s += (s.empty() ? "" : " | ") + x;
  return s;
}

void md_table(std::string& out, const Table& t) {
  out += "|";
  for (const auto& h : t.header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) out += i == 0 ? "---|" : "---:|";
  out += "\n";
  for (const auto& r : t.rows) {
    out += "|";
    for (const auto& c : r) out += " " + c + " |";
    out += "\n";
  }
}

}  // namespace

Table op_table(const AnalyzeResult& a) {
  Table t{{"role:op", "tensors", "spec", "elements", "nmse", "snr_db", "underflow", "saturated", "KiB stored",
           "KiB recipe"},
          {}};
  for (const Aggregate& r : a.aggregates.by_op) {
    const ErrorStats* s = r.stats ? &*r.stats : nullptr;
    t.rows.push_back({r.key, fmt::format("{}", r.tensors), join_specs(r.specs), fmt::format("{}", r.elements),
                      s ? g4(s->nmse()) : "-", s ? snr(*s) : "-", s ? pct(s->underflow_frac()) : "-",
                      s ? pct(s->saturated_frac()) : "-", kib(r.stored_bytes), kib(r.recipe_bytes)});
  }
  return t;
}

Table layer_gemm_table(const AnalyzeResult& a) {
  Table t{{"layer", "GEMMs", "output mse", "output nmse", "output snr_db", "worst GEMM (nmse)"}, {}};
  for (const LayerGemms& l : a.layers) {
    std::string worst = "-";
    double wn = -1;
    for (const GemmRecord& g : l.gemms) {
      if (g.stats.nmse() > wn) {
        wn = g.stats.nmse();
        worst = fmt::format("{} ({:.3g})", g.module, wn);
      }
    }
    t.rows.push_back({l.layer < 0 ? std::string("outside") : fmt::format("{}", l.layer),
                      fmt::format("{}", l.gemms.size()), g4(l.stats.mse()), g4(l.stats.nmse()), snr(l.stats), worst});
  }
  return t;
}

Table tensor_core_table(const AnalyzeResult& a) {
  Table t{{"layer", "GEMMs", "rows", "nmse ideal", "nmse TC promote 128", "nmse TC fast", "accum nmse promote",
           "accum nmse fast"},
          {}};
  for (const LayerGemms& l : a.layers) {
    if (l.tc_gemms == 0) continue;
    int64_t rows = 0;
    for (const GemmRecord& g : l.gemms) rows = std::max(rows, g.tensor_core.rows);
    const double ideal = l.tc_ideal.nmse();
    const bool fast = l.tc_fast_gemms > 0;
    t.rows.push_back({l.layer < 0 ? std::string("outside") : fmt::format("{}", l.layer),
                      fmt::format("{} of {}", l.tc_gemms, l.gemms.size()), fmt::format("{}", rows), g4(ideal),
                      g4(l.tc_promote.nmse()), fast ? g4(l.tc_fast.nmse()) : "-", g4(l.tc_promote_vs_ideal.nmse()),
                      fast ? g4(l.tc_fast_vs_ideal.nmse()) : "-"});
  }
  return t;
}

// Why no GEMM of the step was modelled (the first GEMM's reason), or empty.
std::string tensor_core_absent(const AnalyzeResult& a) {
  for (const LayerGemms& l : a.layers)
    if (l.tc_gemms > 0) return "";
  for (const LayerGemms& l : a.layers)
    for (const GemmRecord& g : l.gemms) return g.tensor_core.why;
  return "";
}

Table tensor_table(const AnalyzeResult& a) {
  Table t{{"tensor", "role", "op", "layer", "dtype", "spec", "nmse", "snr_db", "underflow", "saturated", "NaN/Inf"},
          {}};
  for (const TensorRecord& e : a.tensors) {
    const int64_t bad = e.nan_count + e.inf_count;
    t.rows.push_back({e.name, e.role, e.op, e.layer < 0 ? std::string("-") : fmt::format("{}", e.layer), e.dtype,
                      e.spec, g4(e.stats.nmse()), snr(e.stats), pct(e.stats.underflow_frac()),
                      pct(e.stats.saturated_frac()), bad ? fmt::format("{}", bad) : "0"});
  }
  return t;
}

std::string analysis_markdown(const AnalyzeResult& a) {
  const recipe::TrainingRecipe& rec = a.recipe;
  std::string out = fmt::format("# fp8sim analyze: `{}` step {} under recipe `{}`\n\n", a.trace, a.step, rec.name);
  out += rec.description + "\n\n";
  out += "## Rules (first match wins)\n\n| role | op | module | spec | note |\n|---|---|---|---|---|\n";
  for (const recipe::QuantRule& r : rec.rules)
    out += fmt::format("| {} | {} | {} | `{}` | {} |\n", r.role, r.op,
                       r.module.empty() ? std::string("") : "`" + r.module + "`",
                       r.spec ? r.spec->to_string() : std::string("none"), r.note);
  const Totals& tot = a.totals;
  out += fmt::format("\n{} tensors ({} quantized), {} elements; {:.1f} KiB as stored, {:.1f} KiB under the recipe.\n",
                     tot.tensors, tot.quantized_tensors, tot.elements, static_cast<double>(tot.stored_bytes) / 1024,
                     static_cast<double>(tot.recipe_bytes) / 1024);
  out +=
      "\n## Error per role and op\n\nnmse = ||x - deq(q(x))|| / ||x||; snr_db = 10 log10(sum x^2 / sum err^2); "
      "underflow = nonzeros flushed to zero; saturated = |x/s| above the format's max.\n\n";
  md_table(out, op_table(a));
  if (!a.layers.empty()) {
    out +=
        "\n## Forward GEMM output error per layer (COAT Figure 4(a))\n\nY = X W^T in fp32 with both operands "
        "quantized by the recipe, against the unquantized product.\n\n";
    md_table(out, layer_gemm_table(a));
    out +=
        "\n## The same GEMMs on Hopper's tensor cores\n\nY as cuBLASLt computes it on sm_90 (the tensor-core "
        "model: each 32-product step keeps 13 bits below its largest term and truncates its result to 13 "
        "fraction bits; promote 128 = the partial sum moves to fp32 every 128 of K, as cuBLASLt's default and "
        "block-scaled GEMMs do (BF16 operands: the BF16 tensor cores); fast = never, cuBLASLt's fast accumulation), "
        "against the unquantized product, "
        "on `rows` evenly spaced rows of Y; `nmse ideal` is the fp32 product of the same rows; `accum nmse` is "
        "the tensor cores' Y against that ideal product (the accumulation's own error, relative to the ideal "
        "product's energy).\n\n";
    const Table tc = tensor_core_table(a);
    if (tc.rows.empty()) out += "Not modelled: " + tensor_core_absent(a) + ".\n";
    else md_table(out, tc);
  }
  out += "\n## Tensors\n\n";
  md_table(out, tensor_table(a));
  auto list = [&](const std::vector<std::string>& items, const char* title) {
    if (items.empty()) return;
    out += fmt::format("\n**{}** ({}):", title, items.size());
    for (const auto& x : items) out += " `" + x + "`";
    out += "\n";
  };
  list(a.nonfinite_tensors, "Tensors with NaN/Inf values");
  list(a.unmatched_tensors, "Tensors no rule matched (left unquantized)");
  std::vector<std::string> skipped;
  for (const SkippedGemm& s : a.skipped_gemms) skipped.push_back(s.to_json().dump(-1));
  list(skipped, "GEMMs skipped");
  return out;
}

}  // namespace fp8sim::analyze
