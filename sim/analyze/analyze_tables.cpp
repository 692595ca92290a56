// Presentation of an analysis document (sim/analyze/analyze.hpp): tables and Markdown.
#include <fmt/format.h>

#include <cmath>

#include "sim/analyze/analyze.hpp"

namespace fp8sim::analyze {

namespace {

std::string g4(const Json* v) {
  if (!v || !v->is_number()) return "-";
  return fmt::format("{:.4g}", v->as_number());
}
std::string g4(const Json& j, const char* key) { return g4(j.find(key)); }

// snr_db is +Inf (written as null) when the values are reproduced exactly.
std::string snr(const Json& j) {
  const Json* v = j.find("snr_db");
  if (v && v->is_number()) return fmt::format("{:.2f}", v->as_number());
  const Json* mse = j.find("mse");
  if (mse && mse->is_number() && mse->as_number() == 0.0) return "exact";
  return "-";
}

std::string pct(const Json& j, const char* key) {
  const Json* v = j.find(key);
  if (!v || !v->is_number()) return "-";
  return fmt::format("{:.3f}%", 100.0 * v->as_number());
}

std::string kib(const Json& j, const char* key) {
  const Json* v = j.find(key);
  if (!v || !v->is_number()) return "-";
  return fmt::format("{:.1f}", v->as_number() / 1024.0);
}

std::string join_specs(const Json& a) {
  std::string s;
  if (!a.is_array()) return s;
  for (const Json& x : a.as_array()) s += (s.empty() ? "" : " | ") + x.as_string();
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

Table op_table(const Json& a) {
  Table t{{"role:op", "tensors", "spec", "elements", "nmse", "snr_db", "underflow", "saturated", "KiB stored",
           "KiB recipe"},
          {}};
  for (const Json& r : a.at("aggregates").at("by_op").as_array()) {
    t.rows.push_back({r.at("key").as_string(), fmt::format("{}", r.at("tensors").as_int()), join_specs(r.at("specs")),
                      fmt::format("{}", r.at("elements").as_int()),
                      r.at("quantized_tensors").as_int() ? g4(r, "nmse") : "-",
                      r.at("quantized_tensors").as_int() ? snr(r) : "-", pct(r, "underflow_frac"),
                      pct(r, "saturated_frac"), kib(r, "stored_bytes"), kib(r, "recipe_bytes")});
  }
  return t;
}

Table layer_gemm_table(const Json& a) {
  Table t{{"layer", "GEMMs", "output mse", "output nmse", "output snr_db", "worst GEMM (nmse)"}, {}};
  for (const Json& l : a.at("layers").as_array()) {
    std::string worst = "-";
    double wn = -1;
    for (const Json& g : l.at("gemms").as_array()) {
      const Json* n = g.find("nmse");
      if (n && n->is_number() && n->as_number() > wn) {
        wn = n->as_number();
        worst = fmt::format("{} ({:.3g})", g.at("module").as_string(), wn);
      }
    }
    const int64_t layer = l.at("layer").as_int();
    t.rows.push_back({layer < 0 ? std::string("outside") : fmt::format("{}", layer),
                      fmt::format("{}", l.at("gemms").size()), g4(l, "mse"), g4(l, "nmse"), snr(l), worst});
  }
  return t;
}

Table tensor_table(const Json& a) {
  Table t{{"tensor", "role", "op", "layer", "dtype", "spec", "nmse", "snr_db", "underflow", "saturated", "NaN/Inf"},
          {}};
  for (const Json& e : a.at("tensors").as_array()) {
    const int64_t bad = e.at("nan_count").as_int() + e.at("inf_count").as_int();
    t.rows.push_back({e.at("name").as_string(), e.at("role").as_string(), e.at("op").as_string(),
                      e.at("layer").as_int() < 0 ? std::string("-") : fmt::format("{}", e.at("layer").as_int()),
                      e.at("dtype").as_string(), e.at("spec").as_string(), g4(e, "nmse"), snr(e),
                      pct(e, "underflow_frac"), pct(e, "saturated_frac"), bad ? fmt::format("{}", bad) : "0"});
  }
  return t;
}

std::string analysis_markdown(const Json& a) {
  const Json& rec = a.at("recipe");
  std::string out = fmt::format("# fp8sim analyze: `{}` step {} under recipe `{}`\n\n", a.at("trace").as_string(),
                                a.at("step").as_int(), rec.at("name").as_string());
  out += rec.at("description").as_string() + "\n\n";
  out += "## Rules (first match wins)\n\n| role | op | module | spec | note |\n|---|---|---|---|---|\n";
  for (const Json& r : rec.at("rules").as_array()) {
    const Json* m = r.find("module");
    const Json* n = r.find("note");
    out += fmt::format("| {} | {} | {} | `{}` | {} |\n", r.at("role").as_string(), r.at("op").as_string(),
                       m ? "`" + m->as_string() + "`" : std::string(""), r.at("spec").as_string(),
                       n ? n->as_string() : std::string(""));
  }
  const Json& tot = a.at("totals");
  out += fmt::format("\n{} tensors ({} quantized), {} elements; {:.1f} KiB as stored, {:.1f} KiB under the recipe.\n",
                     tot.at("tensors").as_int(), tot.at("quantized_tensors").as_int(), tot.at("elements").as_int(),
                     tot.at("stored_bytes").as_number() / 1024, tot.at("recipe_bytes").as_number() / 1024);
  out +=
      "\n## Error per role and op\n\nnmse = ||x - deq(q(x))|| / ||x||; snr_db = 10 log10(sum x^2 / sum err^2); "
      "underflow = nonzeros flushed to zero; saturated = |x/s| above the format's max.\n\n";
  md_table(out, op_table(a));
  if (!a.at("layers").as_array().empty()) {
    out +=
        "\n## Forward GEMM output error per layer (COAT Figure 4(a))\n\nY = X W^T in fp32 with both operands "
        "quantized by the recipe, against the unquantized product.\n\n";
    md_table(out, layer_gemm_table(a));
  }
  out += "\n## Tensors\n\n";
  md_table(out, tensor_table(a));
  auto list = [&](const char* key, const char* title) {
    const auto& arr = a.at(key).as_array();
    if (arr.empty()) return;
    out += fmt::format("\n**{}** ({}):", title, arr.size());
    for (const Json& x : arr) out += " `" + (x.is_string() ? x.as_string() : x.dump(-1)) + "`";
    out += "\n";
  };
  list("nonfinite_tensors", "Tensors with NaN/Inf values");
  list("unmatched_tensors", "Tensors no rule matched (left unquantized)");
  list("skipped_gemms", "GEMMs skipped");
  return out;
}

}  // namespace fp8sim::analyze
