// Up-front checks of what `fp8sim report` was given, before any analysis runs: each piece's
// own validation, so a typo costs a second, not the whole report.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "sim/common/check.hpp"
#include "sim/model/model.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/report/sections.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::report {

const recipe::TrainingRecipe& recipe_of(const std::string& entry) { return recipe::get(entry); }

std::string join_prose(const std::vector<std::string>& names, const char* last) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? fmt::format(" {} ", last) : std::string(", ");
    out += names[i];
  }
  return out;
}

void validate_pieces(const ReportOptions& o) {
  trace::TraceReader reader(o.trace);  // validates the schema from metadata alone; one-line Error
  model::load_model(o.model);          // one-line Error naming the valid models
  for (const auto& r : o.recipes) {
    std::error_code ec;
    if (!recipe::is_registered(r) && !std::filesystem::exists(r, ec))
      recipe::throw_unknown(r, recipe::join(recipe::names()), " in --recipes");
    recipe_of(r);  // reads and validates a recipe file
  }
}

}  // namespace fp8sim::report
