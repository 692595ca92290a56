#include "sim/analyze/recipe.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <filesystem>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

namespace fp8sim::analyze {

bool RecipeRule::matches(std::string_view role_name, std::string_view op_name,
                         const std::vector<std::string>& modules) const {
  if (role != "*" && role != role_name) return false;
  if (op != "*" && op != op_name) return false;
  if (module_re) {
    bool any = false;
    for (const auto& m : modules) any = any || std::regex_search(m, *module_re);
    if (!any) return false;
  }
  return true;
}

const RecipeRule* Recipe::match(trace::Role role, std::string_view op, const std::vector<std::string>& modules) const {
  const std::string_view rn = trace::role_name(role);
  for (const auto& r : rules)
    if (r.matches(rn, op, modules)) return &r;
  return nullptr;
}

Json Recipe::to_json() const {
  Json j = Json::object();
  j["name"] = name;
  j["description"] = description;
  Json rs = Json::array();
  for (const auto& r : rules) {
    Json rj = Json::object();
    rj["role"] = r.role;
    rj["op"] = r.op;
    if (!r.module.empty()) rj["module"] = r.module;
    rj["spec"] = r.spec ? r.spec->to_string() : std::string("none");
    if (!r.note.empty()) rj["note"] = r.note;
    rs.push_back(std::move(rj));
  }
  j["rules"] = std::move(rs);
  return j;
}

namespace {

RecipeRule rule(std::string role, std::string op, const std::string& spec, std::string note, std::string module = "") {
  RecipeRule r;
  r.role = std::move(role);
  r.op = std::move(op);
  r.module = std::move(module);
  if (!r.module.empty()) r.module_re = std::regex(r.module, std::regex::ECMAScript);
  if (spec != "none") r.spec = QuantSpec::parse(spec);
  r.note = std::move(note);
  return r;
}

// Rules every FP8 recipe below shares for the tensors FP8 recipes do not touch.
void add_common_tail(std::vector<RecipeRule>& rs) {
  rs.push_back(rule("weight", "norm", "none", "norm weights stay in master precision"));
  rs.push_back(rule("weight", "embedding", "none", "embedding stays in master precision"));
  rs.push_back(rule("*", "*", "none", "everything else stays in its stored precision"));
}

// The LM head (and its input) is left in BF16 by COAT, TE recipes as commonly deployed, and
// DeepSeek-V3 (its output head runs in BF16).
void add_lm_head(std::vector<RecipeRule>& rs) {
  rs.push_back(rule("activation", "*", "bf16", "the LM head runs in BF16", "^lm_head$"));
  rs.push_back(rule("activation_grad", "*", "bf16", "the LM head runs in BF16", "^lm_head$"));
  rs.push_back(rule("weight", "*", "bf16", "the LM head runs in BF16 (tied: the embedding)", "^lm_head$"));
}

Recipe make_bf16() {
  Recipe r{"bf16",
           "BF16 mixed precision baseline: BF16 compute copies of weights, activations and activation "
           "gradients; fp32 master weights, gradients and AdamW moments",
           {}};
  r.rules.push_back(rule("weight", "*", "bf16", "BF16 compute copy of the fp32 master weight"));
  r.rules.push_back(rule("activation", "*", "bf16", "activations in BF16"));
  r.rules.push_back(rule("activation_grad", "*", "bf16", "activation gradients in BF16"));
  r.rules.push_back(rule("*", "*", "none", "grads and moments in fp32"));
  return r;
}

Recipe make_te() {
  Recipe r{"te",
           "TransformerEngine FP8 HYBRID with current (just-in-time) per-tensor scaling: E4M3 linear inputs and "
           "weights, E5M2 gradients of linear outputs; non-linear layers, master weights, grads and moments "
           "unchanged (a single captured step has no amax history for DelayedScaling)",
           {}};
  add_lm_head(r.rules);
  r.rules.push_back(rule("weight", "linear", "e4m3:tensor", "Float8CurrentScaling weight"));
  r.rules.push_back(rule("activation", "linear_input", "e4m3:tensor", "GEMM input, E4M3 per tensor"));
  r.rules.push_back(rule("activation", "attn_output", "e4m3:tensor", "o_proj GEMM input, E4M3 per tensor"));
  r.rules.push_back(rule("activation", "*", "bf16", "non-linear layers run in BF16 in TE"));
  r.rules.push_back(rule("activation_grad", "*", "e5m2:tensor", "HYBRID: gradients in E5M2"));
  add_common_tail(r.rules);
  return r;
}

Recipe make_coat() {
  Recipe r{"coat",
           "COAT (Xi et al. 2025): per-tensor E4M3 linear inputs and weights, 1x16 E4M3 with BF16 scales for the "
           "inputs of non-linear layers, per-tensor E5M2 activation gradients, E4M3 1x128 optimizer states with "
           "Dynamic Range Expansion (COAT's kernel formulas), fp32 master weights and grads",
           {}};
  add_lm_head(r.rules);
  r.rules.push_back(rule("weight", "linear", "coat-w", "E4M3 per tensor, just-in-time scale (absmax + 1e-10)/448"));
  r.rules.push_back(
      rule("activation", "linear_input", "e4m3:tensor:eps=1e-10", "per-tensor FP8 GEMM input (Group Scaling)"));
  r.rules.push_back(rule("activation", "attn_output", "e4m3:tensor:eps=1e-10", "o_proj input, per-tensor FP8"));
  r.rules.push_back(rule("activation", "norm_input", "coat-act", "non-linear input: 1x16 E4M3, bf16 scales"));
  r.rules.push_back(rule("activation", "silu_input", "coat-act", "non-linear input: 1x16 E4M3, bf16 scales"));
  r.rules.push_back(rule("activation", "mul_input", "coat-act", "non-linear input: 1x16 E4M3, bf16 scales"));
  r.rules.push_back(rule("activation", "residual_add", "coat-act", "non-linear input: 1x16 E4M3, bf16 scales"));
  r.rules.push_back(rule("activation_grad", "*", "e5m2:tensor:eps=1e-10", "backward gradients in E5M2"));
  r.rules.push_back(rule("exp_avg", "*", "coat-opt", "first moment: E4M3, 128-element groups, expansion"));
  r.rules.push_back(rule("exp_avg_sq", "*", "coat-opt", "second moment: E4M3, 128-element groups, expansion"));
  add_common_tail(r.rules);
  return r;
}

Recipe make_fp8lm() {
  // MS-AMP O2: FP8 (E4M3) weights and weight gradients with power-of-two per-tensor scaling
  // factors (ScalingMeta), FP8 first moment, FP16 second moment (scaled), TE-style FP8 GEMMs.
  Recipe r{"fp8lm",
           "FP8-LM / MS-AMP O2: E4M3 weights and weight gradients with power-of-two per-tensor scales, E4M3 first "
           "moment and FP16 second moment (power-of-two scale), TE HYBRID FP8 GEMM inputs",
           {}};
  add_lm_head(r.rules);
  r.rules.push_back(rule("weight", "linear", "e4m3:tensor:scale=pow2", "FP8 weight (ScalingTensor)"));
  r.rules.push_back(rule("grad", "linear", "e4m3:tensor:scale=pow2", "FP8 weight gradient (O1)"));
  r.rules.push_back(rule("activation", "linear_input", "e4m3:tensor", "GEMM input, E4M3 per tensor"));
  r.rules.push_back(rule("activation", "attn_output", "e4m3:tensor", "o_proj GEMM input, E4M3 per tensor"));
  r.rules.push_back(rule("activation", "*", "bf16", "non-linear layers in BF16"));
  r.rules.push_back(rule("activation_grad", "*", "e5m2:tensor", "gradients in E5M2"));
  r.rules.push_back(rule("exp_avg", "*", "e4m3:tensor:scale=pow2", "O2: FP8 first moment"));
  r.rules.push_back(rule("exp_avg_sq", "*", "fp16:tensor:scale=pow2", "O2: FP16 second moment, pow2 scale"));
  add_common_tail(r.rules);
  return r;
}

Recipe make_deepseek() {
  Recipe r{"deepseek",
           "DeepSeek-V3 fine-grained FP8: E4M3 everywhere, 1x128 tiles for activations and activation gradients, "
           "128x128 blocks for weights, BF16 AdamW moments, fp32 master weights and grads",
           {}};
  add_lm_head(r.rules);
  r.rules.push_back(rule("weight", "linear", "deepseek-w", "128x128 blocks, E4M3"));
  r.rules.push_back(rule("activation", "linear_input", "deepseek-act", "1x128 tiles, E4M3"));
  r.rules.push_back(rule("activation", "attn_output", "deepseek-act", "1x128 tiles, E4M3"));
  r.rules.push_back(rule("activation", "*", "bf16", "non-linear layers in BF16"));
  r.rules.push_back(rule("activation_grad", "*", "deepseek-act", "E4M3 (not E5M2) gradients, 1x128 tiles"));
  r.rules.push_back(rule("exp_avg", "*", "bf16", "moments in BF16"));
  r.rules.push_back(rule("exp_avg_sq", "*", "bf16", "moments in BF16"));
  add_common_tail(r.rules);
  return r;
}

Recipe make_mxfp8() {
  Recipe r{"mxfp8",
           "OCP MXFP8 (TransformerEngine MXFP8BlockScaling): 1x32 blocks with E8M0 scales, E4M3 for weights, GEMM "
           "inputs and activation gradients; non-linear layers in BF16",
           {}};
  add_lm_head(r.rules);
  r.rules.push_back(rule("weight", "linear", "mxfp8", "1x32 blocks along K, E8M0 scales"));
  r.rules.push_back(rule("activation", "linear_input", "mxfp8", "1x32 blocks along K, E8M0 scales"));
  r.rules.push_back(rule("activation", "attn_output", "mxfp8", "1x32 blocks along K, E8M0 scales"));
  r.rules.push_back(rule("activation", "*", "bf16", "non-linear layers in BF16"));
  r.rules.push_back(rule("activation_grad", "*", "mxfp8", "E4M3 gradients, 1x32 blocks"));
  add_common_tail(r.rules);
  return r;
}

std::string str_field(const Json& j, const char* key, const std::string& origin, bool required,
                      const std::string& dflt = "") {
  const Json* v = j.find(key);
  if (!v) {
    FP8SIM_REQUIRE(!required, "recipe {}: a rule lacks \"{}\"", origin, key);
    return dflt;
  }
  FP8SIM_REQUIRE(v->is_string(), "recipe {}: \"{}\" must be a string", origin, key);
  return v->as_string();
}

}  // namespace

std::vector<std::string> builtin_recipe_names() { return {"bf16", "te", "coat", "fp8lm", "deepseek", "mxfp8"}; }

bool is_builtin_recipe(const std::string& name) {
  const auto names = builtin_recipe_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Recipe builtin_recipe(std::string_view name) {
  if (name == "bf16") return make_bf16();
  if (name == "te") return make_te();
  if (name == "coat") return make_coat();
  if (name == "fp8lm") return make_fp8lm();
  if (name == "deepseek") return make_deepseek();
  if (name == "mxfp8") return make_mxfp8();
  throw UsageError(
      fmt::format("unknown recipe '{}' (built-in: bf16, te, coat, fp8lm, deepseek, mxfp8; or a .json file)", name));
}

Recipe parse_recipe(const Json& doc, const std::string& origin) {
  FP8SIM_REQUIRE(doc.is_object(), "recipe {}: the document must be a JSON object", origin);
  Recipe r;
  r.name = str_field(doc, "name", origin, false, std::filesystem::path(origin).stem().string());
  r.description = str_field(doc, "description", origin, false);
  const Json* rules = doc.find("rules");
  FP8SIM_REQUIRE(rules && rules->is_array(), "recipe {}: needs a \"rules\" array", origin);
  const auto valid_role = [](const std::string& s) { return s == "*" || trace::parse_role(s).has_value(); };
  size_t i = 0;
  for (const Json& rj : rules->as_array()) {
    const std::string where = fmt::format("{} rule {}", origin, i++);
    FP8SIM_REQUIRE(rj.is_object(), "recipe {}: must be an object", where);
    RecipeRule rule;
    rule.role = str_field(rj, "role", where, false, "*");
    FP8SIM_REQUIRE(valid_role(rule.role),
                   "recipe {}: unknown role '{}' (weight, grad, exp_avg, exp_avg_sq, activation, activation_grad, *)",
                   where, rule.role);
    rule.op = str_field(rj, "op", where, false, "*");
    rule.module = str_field(rj, "module", where, false);
    if (!rule.module.empty()) {
      try {
        rule.module_re = std::regex(rule.module, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw Error(fmt::format("recipe {}: module '{}' is not a valid regex ({})", where, rule.module, e.what()));
      }
    }
    const std::string spec = str_field(rj, "spec", where, true);
    if (spec != "none") {
      try {
        rule.spec = QuantSpec::parse(spec);
      } catch (const Error& e) {
        throw Error(fmt::format("recipe {}: spec '{}': {}", where, spec, e.what()));
      }
    }
    rule.note = str_field(rj, "note", where, false);
    r.rules.push_back(std::move(rule));
  }
  if (const Json* base = doc.find("base")) {
    // The file's content is data: an unknown base is a bad file (exit 1), not bad usage.
    FP8SIM_REQUIRE(base->is_string(), "recipe {}: \"base\" must be a built-in recipe name", origin);
    FP8SIM_REQUIRE(is_builtin_recipe(base->as_string()),
                   "recipe {}: \"base\" names unknown recipe '{}' (built-in: bf16, te, coat, fp8lm, deepseek, mxfp8)",
                   origin, base->as_string());
    Recipe b = builtin_recipe(base->as_string());
    for (auto& br : b.rules) r.rules.push_back(std::move(br));
    if (r.description.empty()) r.description = "based on " + b.name;
  }
  FP8SIM_REQUIRE(!r.rules.empty(), "recipe {}: no rules", origin);
  return r;
}

Recipe load_recipe(const std::string& name_or_file) {
  for (const auto& n : builtin_recipe_names())
    if (n == name_or_file) return builtin_recipe(n);
  std::error_code ec;
  if (!std::filesystem::exists(name_or_file, ec)) builtin_recipe(name_or_file);  // throws the helpful message
  const std::string text = read_text_file(name_or_file);
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("recipe {}: {}", name_or_file, e.what()));
  }
  return parse_recipe(doc, name_or_file);
}

}  // namespace fp8sim::analyze
