// sim/recipe: the built-in recipes are the files in recipes/; a recipe file takes what it leaves
// out from its base and fails with one line naming the file and the field; and a new recipe file
// in the recipes folder ($FP8SIM_RECIPES_DIR) shows up in every command that lists recipes, with
// nothing else changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::recipe {
namespace {

namespace fs = std::filesystem;

std::string canon(const char* spec) { return QuantSpec::parse(spec).to_string(); }

TEST(RecipeRegistry, TheBuiltinsAreTheFilesOfTheRecipesFolder) {
  EXPECT_EQ(recipes_dir(), fs::path(FP8SIM_SOURCE_DIR) / "recipes");
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(recipes_dir()))
    if (e.path().extension() == ".json") files.insert(e.path().stem().string());
  const std::vector<std::string> n = names();
  EXPECT_EQ(std::set<std::string>(n.begin(), n.end()), files);
  // Listed by their order field; every one has rules, a description and its own colour.
  std::set<std::string> colours;
  int64_t last = INT64_MIN;
  for (const TrainingRecipe& r : all()) {
    ASSERT_TRUE(r.order.has_value()) << r.name;
    EXPECT_GT(*r.order, last) << r.name;
    last = *r.order;
    EXPECT_FALSE(r.rules.empty()) << r.name;
    EXPECT_FALSE(r.description.empty()) << r.name;
    EXPECT_TRUE(colours.insert(r.colour).second) << r.name << " shares its colour";
    EXPECT_EQ(r.file, recipes_dir() / (r.name + ".json"));
  }
  // What each command models follows from the fields; the baseline has all of them.
  for (const auto& m : memory_names()) EXPECT_TRUE(get(m).memory.has_value()) << m;
  for (const auto& s : speed_names()) EXPECT_TRUE(get(s).speed_plan.has_value()) << s;
  const TrainingRecipe& bf16 = get("bf16");
  EXPECT_TRUE(bf16.memory && bf16.speed_plan && bf16.optimizer_state && bf16.default_in_report);
  EXPECT_EQ(*bf16.speed_plan, speed::Plan::BF16);
  EXPECT_THROW(get("fp4"), UsageError);
  EXPECT_THROW(get(""), UsageError);
}

TEST(RecipeFiles, ABaseGivesWhatTheFileLeavesOut) {
  const TrainingRecipe r = parse(Json::parse(R"({"base": "coat", "colour": "#123456",
      "rules": [{"role": "exp_avg", "spec": "bf16"}, {"role": "exp_avg_sq", "spec": "bf16"}],
      "memory": {"exp_avg": "bf16", "exp_avg_sq": "bf16"}, "optimizer_state": "bf16", "speed_plan": null})"),
                                 "dir/coat-bf16m.json");
  const TrainingRecipe& coat = get("coat");
  EXPECT_EQ(r.name, "coat-bf16m");  // the file's stem
  EXPECT_EQ(r.description, "based on coat");
  // The file's rules first, then the base's.
  ASSERT_EQ(r.rules.size(), coat.rules.size() + 2);
  EXPECT_EQ(r.match(trace::Role::ExpAvg, "linear", {"layers.0.mlp.up_proj"})->spec->to_string(), canon("bf16"));
  EXPECT_EQ(r.match(trace::Role::Weight, "linear", {"layers.0.mlp.up_proj"})->spec->to_string(), canon("coat-w"));
  // Memory: the two moments changed, everything else COAT's; described by the recipe.
  ASSERT_TRUE(r.memory.has_value());
  EXPECT_EQ(r.memory->exp_avg.label, "bf16");
  EXPECT_FALSE(r.memory->exp_avg.quantized);
  EXPECT_EQ(r.memory->master.label, coat.memory->master.label);
  EXPECT_EQ(r.memory->activation(model::SavedRole::NormInput).label, canon("coat-act"));
  EXPECT_EQ(r.memory->checkpoint_fp8_input, coat.memory->checkpoint_fp8_input);
  EXPECT_EQ(r.memory->description, "based on coat");
  EXPECT_EQ(r.optimizer_state, std::optional<std::string>("bf16"));
  EXPECT_FALSE(r.speed_plan.has_value());  // null: not modelled
  EXPECT_EQ(r.colour, "#123456");
  EXPECT_FALSE(r.order.has_value());  // not inherited
  EXPECT_FALSE(r.default_in_report);
  // Without a memory object the base's model (and its description) is kept whole.
  const TrainingRecipe same = parse(Json::parse(R"({"name": "x", "base": "te"})"), "x.json");
  EXPECT_EQ(same.memory->description, get("te").memory->description);
  EXPECT_EQ(same.speed_plan, get("te").speed_plan);
  EXPECT_EQ(same.rules_json().at("rules").dump(), get("te").rules_json().at("rules").dump());
  // memory: null drops the base's model.
  EXPECT_FALSE(parse(Json::parse(R"({"base": "te", "memory": null})"), "y.json").memory.has_value());
}

TEST(RecipeFiles, MalformedFilesFailWithOneLineNamingTheFileAndField) {
  auto expect_bad = [](const std::string& doc, const std::vector<std::string>& needles) {
    try {
      parse(Json::parse(doc), "bad.json");
      ADD_FAILURE() << "accepted: " << doc;
    } catch (const UsageError& e) {
      ADD_FAILURE() << "bad data is not bad usage: " << e.what();
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_NE(m.find("bad.json"), std::string::npos) << m;
      for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m << " lacks " << n;
    }
  };
  expect_bad(R"({"base": "coat", "colr": "#000000"})", {"\"colr\"", "unknown field"});
  expect_bad(R"({"base": "coat", "colour": "red"})", {"\"colour\"", "#rrggbb"});
  expect_bad(R"({"base": "coat", "order": 1.5})", {"\"order\"", "integer"});
  expect_bad(R"({"base": "coat", "default_in_report": "yes"})", {"\"default_in_report\"", "true or false"});
  expect_bad(R"({"base": "coat", "speed_plan": "nvfp4"})",
             {"\"speed_plan\"", "unknown plan 'nvfp4'", "bf16, te, coat, fp8lm, deepseek, mxfp8"});
  expect_bad(R"({"base": "coat", "optimizer_state": "fp4"})", {"\"optimizer_state\"", "fp4"});
  expect_bad(R"({"base": "coat", "optimizer_state": "m=e4m3:tensor:delayed=16,v=fp32"})",
             {"\"optimizer_state\"", "delayed"});
  expect_bad(R"({"base": "coat", "memory": {"master": "fp33"}})", {"\"memory.master\"", "fp33"});
  expect_bad(R"({"base": "coat", "memory": {"activations": {"norm_inputs": "bf16"}}})",
             {"\"memory.activations.norm_inputs\"", "unknown saved role", "norm_input"});
  expect_bad(R"({"base": "coat", "memory": {"speed": 1}})", {"\"memory.speed\"", "unknown field"});
  expect_bad(R"({"base": "coat", "memory": 3})", {"\"memory\"", "object"});
  expect_bad(R"({"rules": [{"spec": "none"}], "memory": {"master": "fp32", "grad": "fp32", "exp_avg": "fp32",
      "exp_avg_sq": "fp32", "activations": {"norm_input": "bf16"}}})",
             {"\"memory.activations.norm_stats\"", "missing"});
  expect_bad(R"({"rules": [{"spec": "none"}], "memory": {"master": "fp32"}})", {"\"memory.grad\"", "missing"});
  expect_bad(R"({"base": "coat", "rules": [{"role": "weight", "spec": "none", "why": "x"}]})",
             {"\"rules[0].why\"", "unknown field"});
  expect_bad(R"({"base": "nope"})", {"unknown recipe 'nope'", "coat"});
  expect_bad(R"({"name": 7, "base": "coat"})", {"\"name\"", "string"});
}

// ---- the registry folder, through the binary (the registry is read once per process) ----------

struct Folder {
  std::string dir = test::temp_dir() + "/recipes";
  Folder() {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(fs::path(FP8SIM_SOURCE_DIR) / "recipes"))
      if (e.path().extension() == ".json") fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  void put(const std::string& name, const std::string& text) const { std::ofstream(dir + "/" + name) << text; }
  test::RunResult run(const std::vector<std::string>& args) const {
    test::RunOptions o;
    o.env["FP8SIM_RECIPES_DIR"] = dir;
    o.env["FP8SIM_GPU_MODULE"] = dir + "/no-gpu-module.so";  // the CPU paths, also in a CUDA build
    o.cwd = FP8SIM_SOURCE_DIR;
    o.timeout_s = 300;
    return test::run(args, o);
  }
};

// A variation of COAT with BF16 moments: a base, its own rules, a memory override, a colour.
constexpr const char* kNewRecipe = R"({
  "description": "COAT with BF16 optimizer moments",
  "base": "coat",
  "order": 70,
  "colour": "#17becf",
  "default_in_report": true,
  "rules": [{"role": "exp_avg", "spec": "bf16", "note": "BF16 moments"},
            {"role": "exp_avg_sq", "spec": "bf16", "note": "BF16 moments"}],
  "memory": {"exp_avg": "bf16", "exp_avg_sq": "bf16"},
  "optimizer_state": "bf16"
})";

const Json* find_named(const Json& arr, const char* key, const std::string& name) {
  for (const Json& e : arr.as_array())
    if (e.at(key).as_string() == name) return &e;
  return nullptr;
}

TEST(RecipeRegistry, ANewRecipeFileShowsInEveryCommandThatListsRecipes) {
  const Folder f;
  f.put("coat-bf16m.json", kNewRecipe);
  const std::string name = "coat-bf16m";

  // fp8sim recipes: the registry, resolved.
  auto r = f.run({"recipes", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json reg = Json::parse(r.out);
  const Json* mine = find_named(reg.at("recipes"), "name", name);
  ASSERT_NE(mine, nullptr) << r.out.substr(0, 400);
  EXPECT_EQ(reg.at("recipes").as_array().back().at("name").as_string(), name);  // order 70: last
  EXPECT_EQ(mine->at("colour").as_string(), "#17becf");
  EXPECT_EQ(mine->at("speed_plan").as_string(), "coat");  // from the base
  EXPECT_EQ(mine->at("memory").at("exp_avg").as_string(), "bf16");

  // Every --help that names recipes, and analyze's list.
  for (const char* cmd : {"analyze", "memory", "speed", "report"}) {
    r = f.run({cmd, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(name), std::string::npos) << cmd << " --help";
  }
  r = f.run({"analyze", "--list-recipes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(name + ": COAT with BF16 optimizer moments"), std::string::npos);

  // analyze runs it.
  r = f.run({"analyze", "traces/tiny-llama-s300.h5", "--recipe", name, "--no-gemm", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json a = Json::parse(r.out);
  EXPECT_EQ(a.at("recipe").at("name").as_string(), name);
  for (const Json& t : a.at("tensors").as_array()) {
    if (t.at("role").as_string() == "exp_avg") {
      EXPECT_EQ(t.at("spec").as_string(), canon("bf16"));
    }
  }

  // memory lists and compares it: COAT's activations, DeepSeek's (BF16) moments.
  r = f.run({"memory", "--list-recipes", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(find_named(Json::parse(r.out).at("recipes"), "name", name), nullptr);
  r = f.run({"memory", "--model", "llama2-7b", "--gpus", "4", "--batch", "2", "--compare", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json mc = Json::parse(r.out);
  const Json* mm = find_named(mc.at("recipes"), "recipe", name);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->at("activations_gib").as_number(),
            find_named(mc.at("recipes"), "recipe", "coat")->at("activations_gib").as_number());
  EXPECT_EQ(mm->at("optimizer_gib").as_number(),
            find_named(mc.at("recipes"), "recipe", "deepseek")->at("optimizer_gib").as_number());
  EXPECT_TRUE(mc.at("ratios_vs_bf16").contains(name));

  // speed models it by default (COAT's plan, so COAT's step).
  r = f.run({"speed", "--model", "llama2-7b", "--batch", "2", "--gpus", "4", "--calibration",
             "reports/h200/calibration.json", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json sp = Json::parse(r.out);
  const Json* ss = find_named(sp.at("recipes"), "recipe", name);
  ASSERT_NE(ss, nullptr);
  EXPECT_EQ(ss->at("step_ms").as_number(), find_named(sp.at("recipes"), "recipe", "coat")->at("step_ms").as_number());

  // report: in the default set, in every section, with its colour for the plots.
  const std::string out = test::temp_dir() + "/report";
  r = f.run({"report", "--no-plots", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rep = Json::parse(test::file_content(out + "/report.json"));
  const auto& listed = rep.at("meta").at("recipes").as_array();
  EXPECT_EQ(listed.back().as_string(), name);
  EXPECT_EQ(rep.at("meta").at("recipe_colours").at(name).as_string(), "#17becf");
  EXPECT_TRUE(rep.at("data").at("analyze").contains(name));
  EXPECT_TRUE(rep.at("data").at("memory").contains(name));
  EXPECT_NE(find_named(rep.at("data").at("speed").at("recipes"), "recipe", name), nullptr);
  bool in_summary = false;
  for (const Json& s : rep.at("sections").as_array())
    if (s.at("id").as_string() == "summary")
      for (const Json& b : s.at("blocks").as_array())
        if (b.contains("table"))
          for (const Json& row : b.at("table").at("rows").as_array())
            if (row.as_array().front().as_string() == name) {
              in_summary = true;
              EXPECT_NE(row.dump().find("bf16 (4.00 B/param)"), std::string::npos) << row.dump();
            }
  EXPECT_TRUE(in_summary);
}

TEST(RecipeRegistry, ABadFileInTheFolderIsBadDataNamingFileAndField) {
  const struct {
    const char* file;
    const char* text;
    const char* named;  // the file the message names
    const char* needle;
  } cases[] = {
      {"broken.json", R"({"base": "coat", "memory": {"master": "fp33"}})", "broken.json", "\"memory.master\""},
      {"other.json", R"({"name": "another", "base": "coat"})", "other.json", "file's name"},
      {"a.json", R"({"base": "b"})", "a.json", "cycle (a -> b -> a)"},
      {"syntax.json", R"({"base": )", "syntax.json", "syntax.json"},
  };
  for (const auto& c : cases) {
    const Folder f;
    f.put(c.file, c.text);
    if (std::string(c.file) == "a.json") f.put("b.json", R"({"base": "a"})");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"recipes"}, {"memory", "--model", "llama2-7b", "--recipe", "coat"}}) {
      const auto r = f.run(args);
      EXPECT_EQ(r.exit_code, 1) << c.file << ": " << r.err;
      EXPECT_NE(r.err.find(c.named), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
    }
    // --help still works.
    EXPECT_EQ(f.run({"memory", "--help"}).exit_code, 0);
  }
  // An empty folder is bad data too.
  const Folder empty;
  for (const auto& e : fs::directory_iterator(empty.dir)) fs::remove(e.path());
  const auto r = empty.run({"recipes"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("holds no recipe"), std::string::npos) << r.err;
}

TEST(RecipeFiles, AUserFileWorksWhereARegistryNameDoes) {
  const std::string dir = test::temp_dir();
  const std::string file = dir + "/mine.json";
  std::ofstream(file) << kNewRecipe;
  auto run = [](const std::vector<std::string>& args) {
    test::RunOptions o;
    o.cwd = FP8SIM_SOURCE_DIR;
    o.env["FP8SIM_GPU_MODULE"] = "/nonexistent/no-gpu-module.so";
    return test::run(args, o);
  };
  auto r = run({"recipes", file, "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out).at("recipes").as_array().front().at("name").as_string(), "mine");
  r = run({"analyze", "traces/tiny-llama-s300.h5", "--recipe", file, "--no-gemm", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out).at("recipe").at("name").as_string(), "mine");
  r = run({"memory", "--model", "llama2-7b", "--recipe", file, "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out).at("recipe").as_string(), "mine");
  r = run(
      {"speed", "--recipes", "bf16," + file, "--calibration", "reports/h200/calibration.json", "--json", "-", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(find_named(Json::parse(r.out).at("recipes"), "recipe", "mine"), nullptr);
  // A recipe without a memory model or a speed plan is refused there, naming those with one.
  std::ofstream(dir + "/nomem.json") << R"({"base": "coat", "memory": null, "speed_plan": null})";
  r = run({"memory", "--model", "llama2-7b", "--recipe", dir + "/nomem.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has no memory model"), std::string::npos) << r.err;
  r = run({"speed", "--recipes", dir + "/nomem.json", "--calibration", "reports/h200/calibration.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has no speed plan"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp8sim::recipe
