// Up-front checks of what `fp8sim report` was given, before any analysis runs: each piece's
// own validation, so a typo costs a second, not the whole report.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "sim/analyze/recipe.hpp"
#include "sim/common/check.hpp"
#include "sim/memory/recipes.hpp"
#include "sim/model/model.hpp"
#include "sim/report/sections.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::report {

std::vector<std::string> known_recipes() {
  std::set<std::string> all;
  for (const auto& r : analyze::builtin_recipe_names()) all.insert(r);
  for (const auto& r : memory::recipe_names()) all.insert(r);
  for (const char* r : {"bf16", "te", "coat"}) all.insert(r);  // speed
  return {all.begin(), all.end()};
}

void validate_pieces(const ReportOptions& o) {
  trace::TraceReader reader(o.trace);  // validates the schema from metadata alone; one-line Error
  model::load_model(o.model);          // one-line Error naming the valid models
  const auto known = known_recipes();
  for (const auto& r : o.recipes) {
    if (std::find(known.begin(), known.end(), r) == known.end()) {
      std::string valid;
      for (const auto& k : known) valid += (valid.empty() ? "" : ", ") + k;
      throw UsageError(fmt::format("unknown recipe '{}' in --recipes (valid: {})", r, valid));
    }
  }
}

}  // namespace fp8sim::report
