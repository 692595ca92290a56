#pragma once
// Internal to sim/report: the state the sections share while a report is built, and one
// function per section. Each section function catches its own failures and returns a section
// with status "error" instead of throwing, so one failed analysis never hides the others.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/analyze/analyze.hpp"
#include "sim/backend/backend.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/report/report.hpp"
#include "sim/report/section.hpp"

namespace fp8sim::report {

struct Context {
  const ReportOptions& opts;
  gpu::Backend& gpu;
  // gpu.device(), asked once for every section
  gpu::DeviceStatus device;
  Json data;       // report.json's `data`: each piece's document, verbatim
  Json plot_data;  // report.json's `plot_data`: what scripts/plots.py draws
  // Headline numbers per recipe for the summary, filled by the sections as they run:
  // summary[recipe][column] = formatted cell.
  Json summary;
  std::vector<std::string> summary_columns;
  // The same headline numbers as values, for the verdict: figures[recipe][key] =
  // {"value": number or null, "cell": the text the section's own table shows, "section": its id}.
  // The verdict copies them, so its numbers are the sections' numbers by construction.
  Json figures;
  // Progress of the running phase (done, total): drives that phase's bar on stderr.
  std::function<void(double, double)> progress = [](double, double) {};
  // The trace's analysis per recipe (in --recipes order), run once for the accuracy sections;
  // data.analyze holds their documents.
  std::optional<std::vector<std::pair<std::string, analyze::AnalyzeResult>>> analyses = std::nullopt;
  void add_summary(const std::string& recipe, const std::string& column, std::string cell);
  void add_figure(const std::string& recipe, const std::string& key, double value, std::string cell,
                  const std::string& section);
};

// Checks the trace, the model and the recipes (registry names or recipe files, read here once)
// before any analysis (throws Error / UsageError).
void validate_pieces(const ReportOptions& opts);
// The recipe an entry of --recipes names: a registry name or a recipe file (recipe::get).
const recipe::TrainingRecipe& recipe_of(const std::string& entry);
// Names for prose: "a", "a and b", "a, b and c" (`last` "and" or "or").
std::string join_prose(const std::vector<std::string>& names, const char* last);

Json section_tensors(Context& ctx);    // analyze: per-tensor quantization error
Json section_gemm(Context& ctx);       // analyze: per-layer forward GEMM error (Fig. 4(a))
Json section_optimizer(Context& ctx);  // optim: Table 1, Fig. 3 histograms, drift
Json section_memory(Context& ctx);     // memory: per-recipe breakdown
Json section_speed(Context& ctx);      // speed: step time per op (GPU or calibration)
Json section_compare(Context& ctx);    // compare: CPU vs GPU bits (GPU only)
Json section_bench(Context& ctx);      // bench: kernel throughput (GPU only)
// The verdict: per recipe, the figures above beside TE's and a rule-based recommendation; runs
// after every other section (it reads ctx.figures) and writes data.verdict.
Json section_verdict(Context& ctx);

// Runs `body` and turns an exception into an "error" section (same id and title).
template <class F>
Json guarded(const std::string& id, const std::string& title, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    // Under MPI a failing section ends the job: a rank that went on past it could make fewer
    // collective steps than the others (docs/scale-out.md).
    if (dist::distributed()) throw;
    Section s(id, title);
    s.error(e.what());
    return s.take();
  }
}

}  // namespace fp8sim::report
