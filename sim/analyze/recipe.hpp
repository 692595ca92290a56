#pragma once
// Recipes: which QuantSpec an FP8 training recipe applies to each tensor of a trace, decided by
// the tensor's role (weight, grad, exp_avg, ...), op (linear, norm_input, silu_input, ...) and,
// where a recipe singles a module out (the LM head), its module path.
//
// A recipe is an ordered list of rules; the first rule that matches a tensor decides. A rule's
// spec is a QuantSpec text (sim/quant/spec.hpp) or "none" (the tensor stays in its stored
// precision, e.g. fp32 master weights). A tensor that no rule matches stays unquantized and is
// reported as such ("no rule").
//
// JSON recipe files:
//   {"name": "my-recipe", "description": "...", "base": "coat",          (base: optional)
//    "rules": [{"role": "activation", "op": "norm_input", "spec": "e4m3:g32"},
//              {"role": "weight", "op": "linear", "module": "^lm_head$", "spec": "none"},
//              {"role": "*", "op": "*", "spec": "none"}]}
// role / op: an exact name or "*"; module: an ECMAScript regex searched in the module path
// (a tied parameter also matches through its aliases' modules); the rules of `base` follow the
// file's own rules.
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/quant/spec.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::analyze {

struct RecipeRule {
  std::string role = "*";         // role name or "*"
  std::string op = "*";           // op name or "*"
  std::string module;             // regex text; empty matches every module
  std::optional<QuantSpec> spec;  // nullopt: keep unquantized ("none")
  std::string note;               // why (shown by --list-recipes)

  std::optional<std::regex> module_re;  // compiled from `module`
  bool matches(std::string_view role_name, std::string_view op_name, const std::vector<std::string>& modules) const;
};

struct Recipe {
  std::string name;
  std::string description;
  std::vector<RecipeRule> rules;

  // The first matching rule, or nullptr. `modules`: the module path(s) the tensor belongs to.
  const RecipeRule* match(trace::Role role, std::string_view op, const std::vector<std::string>& modules) const;
  Json to_json() const;
};

std::vector<std::string> builtin_recipe_names();  // bf16, te, coat, fp8lm, deepseek, mxfp8
bool is_builtin_recipe(const std::string& name);
// A built-in recipe by name; throws UsageError listing the names.
Recipe builtin_recipe(std::string_view name);
// NAME of a built-in recipe, or a path to a JSON recipe file.
Recipe load_recipe(const std::string& name_or_file);
// Throws fp8sim::Error ("recipe <origin>: ...") for a malformed document or an invalid spec.
Recipe parse_recipe(const Json& doc, const std::string& origin);

}  // namespace fp8sim::analyze
