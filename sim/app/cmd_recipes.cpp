// fp8sim recipes: the training-recipe registry (recipes/*.json) and what each command models of
// each recipe; with arguments, the recipes they name (registry names or recipe files).
#include <fmt/format.h>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/output.hpp"
#include "sim/common/paths.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

int run_recipes(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::vector<std::string> wanted;
  std::string json_out;
  opts.add_options()("recipe", po::value(&wanted)->multitoken(),
                     "recipes to show: registry names or recipe .json files (positional; default: the whole registry)")(
      "json", po::value(&json_out), "write every recipe, resolved (base applied), as JSON (atomically; - : stdout)");
  po::positional_options_description pos;
  pos.add("recipe", -1);
  po::variables_map vm;
  if (!cli::parse("recipes", args, opts, pos, vm, "[NAME|FILE.json ...] [--json OUT]",
                  "Lists the training recipes: the registry (one JSON file per recipe in $FP8SIM_RECIPES_DIR, else\n"
                  "the recipes/ folder of the sources) or the recipes named. For each: its description, whether\n"
                  "fp8sim memory has a memory model of it, the optimizer-state recipe fp8sim report pairs it with,\n"
                  "the kernel plan fp8sim speed replays for it, its plot colour, and whether fp8sim report\n"
                  "compares it by default. Every recipe has analyze rules (fp8sim analyze --list-recipes shows\n"
                  "them). A recipe file that is malformed fails here with the file and field named, so this is\n"
                  "also the way to check one. The file format: docs/recipes.md.\n"
                  "Examples:\n"
                  "  fp8sim recipes\n"
                  "  fp8sim recipes my_recipe.json --json -"))
    return 0;
  RunFiles files;
  for (const auto& w : wanted)
    if (!recipe::is_registered(w)) files.input("NAME|FILE", w);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;

  std::vector<const recipe::TrainingRecipe*> shown;
  if (wanted.empty())
    for (const auto& r : recipe::all()) shown.push_back(&r);
  for (const auto& w : wanted) shown.push_back(&recipe::get(w));

  std::vector<std::vector<std::string>> rows;
  Json arr = Json::array();
  for (const recipe::TrainingRecipe* r : shown) {
    rows.push_back({r->name, r->memory ? "yes" : "-", r->optimizer_state.value_or("-"),
                    r->speed_plan ? speed::plan_name(*r->speed_plan) : "-", r->default_in_report ? "yes" : "-",
                    r->colour.empty() ? "-" : r->colour, source_relative(r->file)});
    arr.push_back(r->to_json());
  }
  Json doc = Json::object();
  doc["recipes_dir"] = source_relative(recipe::recipes_dir());
  doc["recipes"] = std::move(arr);
  if (json_id >= 0) files.write(json_id, doc.dump(2) + "\n");

  cli::print_table({"recipe", "memory", "optimizer state", "speed plan", "in report", "colour", "file"}, rows);
  fmt::print("\n");
  for (const recipe::TrainingRecipe* r : shown) fmt::print("{}: {}\n", r->name, r->description);
  std::fflush(stdout);
  files.commit();
  if (json_id >= 0 && json_out != "-") cli::note(fmt::format("wrote {}", json_out));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("recipes", "list the training recipes (recipes/*.json) and what each command models of them",
               fp8sim::run_recipes);
