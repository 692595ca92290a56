#include "sim/recipe/recipe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::recipe {

namespace fs = std::filesystem;

// ---- rules ------------------------------------------------------------------------------------

bool QuantRule::matches(std::string_view role_name, std::string_view op_name,
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

const QuantRule* TrainingRecipe::match(trace::Role role, std::string_view op,
                                       const std::vector<std::string>& modules) const {
  const std::string_view rn = trace::role_name(role);
  for (const auto& r : rules)
    if (r.matches(rn, op, modules)) return &r;
  return nullptr;
}

namespace {

Json rule_json(const QuantRule& r) {
  Json rj = Json::object();
  rj["role"] = r.role;
  rj["op"] = r.op;
  if (!r.module.empty()) rj["module"] = r.module;
  rj["spec"] = r.spec ? r.spec->to_string() : std::string("none");
  if (!r.note.empty()) rj["note"] = r.note;
  return rj;
}

}  // namespace

Json TrainingRecipe::rules_json() const {
  Json j = Json::object();
  j["name"] = name;
  j["description"] = description;
  Json rs = Json::array();
  for (const auto& r : rules) rs.push_back(rule_json(r));
  j["rules"] = std::move(rs);
  return j;
}

Json TrainingRecipe::to_json() const {
  Json j = Json::object();
  j["name"] = name;
  j["description"] = description;
  j["file"] = source_relative(file);
  j["order"] = order ? Json(*order) : Json();
  j["colour"] = colour.empty() ? Json() : Json(colour);
  j["default_in_report"] = default_in_report;
  Json rs = Json::array();
  for (const auto& r : rules) rs.push_back(rule_json(r));
  j["rules"] = std::move(rs);
  if (memory) {
    Json m = Json::object();
    m["description"] = memory->description;
    m["master"] = memory->master.label;
    m["grad"] = memory->grad.label;
    m["exp_avg"] = memory->exp_avg.label;
    m["exp_avg_sq"] = memory->exp_avg_sq.label;
    m["foreach_adamw_temporary"] = memory->foreach_adamw_temporary;
    m["fp8_gemm"] = memory->fp8_gemm;
    m["te_amax_history"] = memory->te_amax_history;
    m["checkpoint_fp8_input"] = memory->checkpoint_fp8_input;
    Json a = Json::object();
    for (const auto& [role, s] : memory->activations) a[std::string(model::saved_role_name(role))] = s.label;
    m["activations"] = std::move(a);
    j["memory"] = std::move(m);
  } else {
    j["memory"] = Json();
  }
  j["optimizer_state"] = optimizer_state ? Json(*optimizer_state) : Json();
  j["speed_plan"] = speed_plan ? Json(speed::plan_name(*speed_plan)) : Json();
  return j;
}

// ---- storage ----------------------------------------------------------------------------------

Storage Storage::parse(std::string_view text) {
  Storage s;
  s.label = std::string(text);
  if (text == "fp32") s.plain_bytes = 4;
  else if (text == "bf16" || text == "fp16") s.plain_bytes = 2;
  else if (text == "int64") s.plain_bytes = 8;
  if (s.plain_bytes > 0) return s;
  s.quantized = true;
  s.spec = QuantSpec::parse(text);
  // The canonical spec text (aliases such as coat-act expanded) says exactly what is stored.
  s.label = s.spec.to_string();
  return s;
}

StorageBytes storage_bytes(const Storage& s, std::span<const int64_t> shape) {
  StorageBytes b;
  if (s.quantized) {
    const QuantizedSize q = quantized_size(s.spec, shape);
    b.data = q.code_bytes;
    b.meta = q.metadata_bytes();
  } else {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    b.data = n * s.plain_bytes;
  }
  return b;
}

const Storage& MemoryModel::activation(model::SavedRole role) const {
  const auto it = activations.find(role);
  FP8SIM_CHECK(it != activations.end(), "memory model has no storage for role {}", model::saved_role_name(role));
  return it->second;
}

// ---- parsing ----------------------------------------------------------------------------------

namespace {

using BaseLookup = std::function<const TrainingRecipe&(const std::string& base)>;

// Messages: "recipe <origin>: "<field>": <what>", one line.
class Doc {
 public:
  explicit Doc(std::string origin) : origin_(std::move(origin)) {}
  const std::string& origin() const { return origin_; }

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw Error(fmt::format("recipe {}: \"{}\": {}", origin_, field, what));
  }

  void only_keys(const Json& obj, std::string_view where, std::initializer_list<std::string_view> keys) const {
    for (const auto& [k, v] : obj.as_object()) {
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      std::string list;
      for (auto key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
      fail(where.empty() ? k : std::string(where) + "." + k, fmt::format("unknown field (fields here: {})", list));
    }
  }

  std::string str(const Json& v, std::string_view field) const {
    if (!v.is_string()) fail(field, "must be a string");
    return v.as_string();
  }
  bool boolean(const Json& v, std::string_view field) const {
    if (!v.is_bool()) fail(field, "must be true or false");
    return v.as_bool();
  }
  int64_t integer(const Json& v, std::string_view field, int64_t lo, int64_t hi) const {
    // The range first: converting a double outside int64's range is undefined.
    if (!v.is_number() || !(v.as_number() >= static_cast<double>(lo) && v.as_number() <= static_cast<double>(hi)) ||
        v.as_number() != static_cast<double>(static_cast<int64_t>(v.as_number())))
      fail(field, fmt::format("must be an integer from {} to {}", lo, hi));
    return static_cast<int64_t>(v.as_number());
  }
  Storage storage(const Json& v, std::string_view field) const {
    const std::string text = str(v, field);
    try {
      return Storage::parse(text);
    } catch (const Error& e) {
      fail(field, fmt::format("'{}' is neither fp32, bf16, fp16, int64 nor a quantization spec ({})", text, e.what()));
    }
  }

 private:
  std::string origin_;
};

std::string rule_str(const Json& rj, const char* key, const std::string& where, bool required,
                     const std::string& dflt = "") {
  const Json* v = rj.find(key);
  if (!v) {
    FP8SIM_REQUIRE(!required, "recipe {}: a rule lacks \"{}\"", where, key);
    return dflt;
  }
  FP8SIM_REQUIRE(v->is_string(), "recipe {}: \"{}\" must be a string", where, key);
  return v->as_string();
}

std::vector<QuantRule> parse_rules(const Doc& d, const Json& rules) {
  if (!rules.is_array()) d.fail("rules", "must be an array of rules");
  std::vector<QuantRule> out;
  const auto valid_role = [](const std::string& s) { return s == "*" || trace::parse_role(s).has_value(); };
  size_t i = 0;
  for (const Json& rj : rules.as_array()) {
    const std::string where = fmt::format("{} rule {}", d.origin(), i);
    FP8SIM_REQUIRE(rj.is_object(), "recipe {}: must be an object", where);
    d.only_keys(rj, fmt::format("rules[{}]", i), {"role", "op", "module", "spec", "note", "comment"});
    ++i;
    QuantRule rule;
    rule.role = rule_str(rj, "role", where, false, "*");
    FP8SIM_REQUIRE(valid_role(rule.role),
                   "recipe {}: unknown role '{}' (weight, grad, exp_avg, exp_avg_sq, activation, activation_grad, *)",
                   where, rule.role);
    rule.op = rule_str(rj, "op", where, false, "*");
    rule.module = rule_str(rj, "module", where, false);
    if (!rule.module.empty()) {
      try {
        rule.module_re = std::regex(rule.module, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw Error(fmt::format("recipe {}: module '{}' is not a valid regex ({})", where, rule.module, e.what()));
      }
    }
    const std::string spec = rule_str(rj, "spec", where, true);
    if (spec != "none") {
      try {
        rule.spec = QuantSpec::parse(spec);
      } catch (const Error& e) {
        throw Error(fmt::format("recipe {}: spec '{}': {}", where, spec, e.what()));
      }
    }
    rule.note = rule_str(rj, "note", where, false);
    out.push_back(std::move(rule));
  }
  return out;
}

// The memory object over `base` (the base recipe's model, or nullopt). Every field must be known
// once the base is applied.
MemoryModel parse_memory(const Doc& d, const Json& m, const std::optional<MemoryModel>& base,
                         const std::string& recipe_description) {
  if (!m.is_object()) d.fail("memory", "must be an object (or null: no memory model)");
  d.only_keys(m, "memory",
              {"description", "master", "grad", "exp_avg", "exp_avg_sq", "foreach_adamw_temporary", "fp8_gemm",
               "te_amax_history", "checkpoint_fp8_input", "activations", "comment"});
  MemoryModel mm = base.value_or(MemoryModel{});
  // A changed model is described by the recipe unless it says otherwise.
  mm.description = recipe_description;
  if (const Json* v = m.find("description")) mm.description = d.str(*v, "memory.description");
  const std::pair<const char*, Storage*> storages[] = {
      {"master", &mm.master}, {"grad", &mm.grad}, {"exp_avg", &mm.exp_avg}, {"exp_avg_sq", &mm.exp_avg_sq}};
  for (const auto& [key, dst] : storages) {
    const std::string field = std::string("memory.") + key;
    if (const Json* v = m.find(key)) *dst = d.storage(*v, field);
    if (dst->label.empty()) d.fail(field, "missing (no base recipe gives it)");
  }
  if (const Json* v = m.find("foreach_adamw_temporary"))
    mm.foreach_adamw_temporary = d.boolean(*v, "memory.foreach_adamw_temporary");
  if (const Json* v = m.find("fp8_gemm")) mm.fp8_gemm = d.boolean(*v, "memory.fp8_gemm");
  if (const Json* v = m.find("te_amax_history"))
    mm.te_amax_history = static_cast<int>(d.integer(*v, "memory.te_amax_history", 0, 1 << 20));
  if (const Json* v = m.find("checkpoint_fp8_input"))
    mm.checkpoint_fp8_input = d.boolean(*v, "memory.checkpoint_fp8_input");
  if (const Json* a = m.find("activations")) {
    if (!a->is_object()) d.fail("memory.activations", "must be an object: saved role -> storage");
    for (const auto& [k, v] : a->as_object()) {
      const auto role = model::parse_saved_role(k);
      if (!role) {
        std::string roles;
        for (model::SavedRole r : model::kAllSavedRoles)
          roles += (roles.empty() ? "" : ", ") + std::string(model::saved_role_name(r));
        d.fail("memory.activations." + k, fmt::format("unknown saved role (roles: {})", roles));
      }
      mm.activations[*role] = d.storage(v, "memory.activations." + k);
    }
  }
  for (model::SavedRole r : model::kAllSavedRoles)
    if (!mm.activations.count(r))
      d.fail("memory.activations." + std::string(model::saved_role_name(r)), "missing (every saved role needs one)");
  return mm;
}

bool is_colour(const std::string& s) {
  return s.size() == 7 && s[0] == '#' &&
         std::all_of(s.begin() + 1, s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

TrainingRecipe resolve(const Json& doc, const std::string& origin, const fs::path& file,
                       const std::string& default_name, const BaseLookup& find_base) {
  const Doc d(origin);
  FP8SIM_REQUIRE(doc.is_object(), "recipe {}: the document must be a JSON object", origin);
  d.only_keys(doc, "",
              {"name", "description", "base", "rules", "memory", "optimizer_state", "speed_plan", "colour", "order",
               "default_in_report", "comment"});
  const TrainingRecipe* base = nullptr;
  if (const Json* b = doc.find("base")) {
    // The file's content is data: an unknown base is a bad file (exit 1), not bad usage.
    FP8SIM_REQUIRE(b->is_string(), "recipe {}: \"base\" must be a recipe name", origin);
    base = &find_base(b->as_string());
  }
  TrainingRecipe r;
  if (base) {
    // Inherited: memory, optimizer_state, speed_plan. Not inherited: what names and shows the
    // recipe itself (name, description, colour, order, default_in_report).
    r.memory = base->memory;
    r.optimizer_state = base->optimizer_state;
    r.speed_plan = base->speed_plan;
  }
  r.file = file;
  r.name = default_name;
  if (const Json* v = doc.find("name")) r.name = d.str(*v, "name");
  if (r.name.empty()) d.fail("name", "is empty");
  if (const Json* v = doc.find("description")) r.description = d.str(*v, "description");
  else if (base) r.description = "based on " + base->name;

  // The file's own rules come first, then the base's: the first match decides.
  if (const Json* rules = doc.find("rules")) r.rules = parse_rules(d, *rules);
  else FP8SIM_REQUIRE(base, "recipe {}: needs a \"rules\" array (or a \"base\" to take them from)", origin);
  if (base) r.rules.insert(r.rules.end(), base->rules.begin(), base->rules.end());
  FP8SIM_REQUIRE(!r.rules.empty(), "recipe {}: no rules", origin);

  if (const Json* m = doc.find("memory")) {
    if (m->is_null()) r.memory.reset();
    else r.memory = parse_memory(d, *m, base ? base->memory : std::nullopt, r.description);
  }
  if (const Json* v = doc.find("optimizer_state")) {
    if (v->is_null()) {
      r.optimizer_state.reset();
    } else {
      const std::string text = d.str(*v, "optimizer_state");
      try {
        optim::StateRecipe::parse(text).check_supported();
      } catch (const Error& e) {
        d.fail("optimizer_state", e.what());
      }
      r.optimizer_state = text;
    }
  }
  if (const Json* v = doc.find("speed_plan")) {
    if (v->is_null()) {
      r.speed_plan.reset();
    } else {
      const std::string text = d.str(*v, "speed_plan");
      r.speed_plan = speed::find_plan(text);
      if (!r.speed_plan)
        d.fail("speed_plan", fmt::format("unknown plan '{}' (plans: {}; or null: not modelled by fp8sim speed)", text,
                                         speed::plan_names()));
    }
  }
  if (const Json* v = doc.find("colour")) {
    r.colour = d.str(*v, "colour");
    if (!is_colour(r.colour)) d.fail("colour", fmt::format("'{}' is not a colour of the form #rrggbb", r.colour));
  }
  if (const Json* v = doc.find("order")) r.order = d.integer(*v, "order", -1000000, 1000000);
  if (const Json* v = doc.find("default_in_report")) r.default_in_report = d.boolean(*v, "default_in_report");
  return r;
}

Json read_doc(const fs::path& p, const std::string& origin) {
  const std::string text = read_text_file(p);
  try {
    return Json::parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("recipe {}: {}", origin, e.what()));
  }
}

// Registry names: what a command line can name and a comma-separated list can hold.
bool is_recipe_name(const std::string& s) {
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '+';
  });
}

std::vector<TrainingRecipe> load_registry() {
  const fs::path dir = recipes_dir();
  std::error_code ec;
  FP8SIM_REQUIRE(fs::is_directory(dir, ec),
                 "no recipes folder at '{}' (set FP8SIM_RECIPES_DIR to a folder of recipe files)", dir.string());
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".json") files.push_back(it->path());
  FP8SIM_REQUIRE(!ec, "cannot list the recipes folder '{}': {}", dir.string(), ec.message());
  FP8SIM_REQUIRE(!files.empty(), "the recipes folder '{}' holds no recipe (*.json) files", dir.string());
  std::sort(files.begin(), files.end());

  struct Entry {
    fs::path file;
    std::string origin;
    Json doc;
  };
  std::map<std::string, Entry> docs;
  for (const auto& p : files) {
    const std::string origin = source_relative(p);
    const std::string name = p.stem().string();
    FP8SIM_REQUIRE(is_recipe_name(name),
                   "recipe {}: '{}' is not a recipe name (a recipe file is named NAME.json, NAME of letters, digits "
                   "and . _ - +)",
                   origin, name);
    docs.emplace(name, Entry{p, origin, read_doc(p, origin)});
  }

  std::map<std::string, TrainingRecipe> done;
  std::vector<std::string> stack;
  std::function<const TrainingRecipe&(const std::string&)> resolve_name =
      [&](const std::string& name) -> const TrainingRecipe& {
    if (const auto it = done.find(name); it != done.end()) return it->second;
    const auto& [file, origin, doc] = docs.at(name);
    if (std::find(stack.begin(), stack.end(), name) != stack.end()) {
      std::string cycle;
      for (const auto& s : stack) cycle += s + " -> ";
      throw Error(fmt::format("recipe {}: \"base\" makes a cycle ({}{})", origin, cycle, name));
    }
    stack.push_back(name);
    TrainingRecipe r = resolve(doc, origin, file, name, [&](const std::string& b) -> const TrainingRecipe& {
      if (!docs.count(b))
        throw Error(fmt::format("recipe {}: \"base\" names unknown recipe '{}' (recipes: {})", origin, b, [&] {
          std::string l;
          for (const auto& [n, unused] : docs) l += (l.empty() ? "" : ", ") + n;
          return l;
        }()));
      return resolve_name(b);
    });
    stack.pop_back();
    FP8SIM_REQUIRE(r.name == name, "recipe {}: \"name\" is '{}', but a recipe file's name is its file name ('{}')",
                   origin, r.name, name);
    return done.emplace(name, std::move(r)).first->second;
  };
  std::vector<TrainingRecipe> out;
  for (const auto& [name, unused] : docs) out.push_back(resolve_name(name));
  std::stable_sort(out.begin(), out.end(), [](const TrainingRecipe& a, const TrainingRecipe& b) {
    if (a.order.has_value() != b.order.has_value()) return a.order.has_value();
    if (a.order && *a.order != *b.order) return *a.order < *b.order;
    return a.name < b.name;
  });
  return out;
}

std::vector<std::string> names_if(const std::function<bool(const TrainingRecipe&)>& keep) {
  std::vector<std::string> out;
  for (const auto& r : all())
    if (keep(r)) out.push_back(r.name);
  return out;
}

}  // namespace

// ---- the registry -----------------------------------------------------------------------------

fs::path recipes_dir() {
  if (const char* env = std::getenv("FP8SIM_RECIPES_DIR"); env && *env) return env;
  return data_root() / "recipes";
}

const std::vector<TrainingRecipe>& all() {
  static const std::vector<TrainingRecipe> recipes = load_registry();
  return recipes;
}

std::vector<std::string> names() {
  return names_if([](const TrainingRecipe&) { return true; });
}
std::vector<std::string> memory_names() {
  return names_if([](const TrainingRecipe& r) { return r.memory.has_value(); });
}
std::vector<std::string> speed_names() {
  return names_if([](const TrainingRecipe& r) { return r.speed_plan.has_value(); });
}
std::vector<std::string> report_default_names() {
  return names_if([](const TrainingRecipe& r) { return r.default_in_report; });
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool is_registered(std::string_view name) {
  for (const auto& r : all())
    if (r.name == name) return true;
  return false;
}

TrainingRecipe parse(const Json& doc, const std::string& origin) {
  return resolve(
      doc, origin, origin, fs::path(origin).stem().string(), [&](const std::string& b) -> const TrainingRecipe& {
        for (const auto& r : all())
          if (r.name == b) return r;
        throw Error(
            fmt::format("recipe {}: \"base\" names unknown recipe '{}' (recipes: {})", origin, b, join(names())));
      });
}

void throw_unknown(const std::string& name_or_file, const std::string& valid, std::string_view context) {
  if (names_a_file(name_or_file)) throw Error(fmt::format("recipe file '{}'{}: no such file", name_or_file, context));
  throw UsageError(
      fmt::format("unknown recipe '{}'{} (valid: {}; or a recipe .json file)", name_or_file, context, valid));
}

const TrainingRecipe& get(const std::string& name_or_file) {
  for (const auto& r : all())
    if (r.name == name_or_file) return r;
  std::error_code ec;
  if (name_or_file.empty() || !fs::exists(name_or_file, ec)) throw_unknown(name_or_file, join(names()));
  // Files are read once per run; the map's nodes keep the references handed out valid.
  static std::mutex mu;
  static std::map<std::string, TrainingRecipe> files;
  const std::lock_guard lock(mu);
  if (const auto it = files.find(name_or_file); it != files.end()) return it->second;
  TrainingRecipe r = parse(read_doc(name_or_file, name_or_file), name_or_file);
  return files.emplace(name_or_file, std::move(r)).first->second;
}

}  // namespace fp8sim::recipe
