#pragma once
// Training recipes: everything one training recipe (BF16, TransformerEngine FP8, COAT, ...)
// decides, as one value, and the registry that holds the built-in ones.
//
// A TrainingRecipe says
//   rules            which QuantSpec each tensor of a trace gets (fp8sim analyze): an ordered list
//                    of (role, op, module regex) -> spec rules, the first match deciding;
//   memory           how each kind of tensor is stored (fp8sim memory): master weights, gradients,
//                    the two AdamW moments and every saved-activation role of sim/model; optional
//                    (a recipe without one has no memory model);
//   optimizer_state  the optimizer-state recipe of fp8sim optim (how m and v are stored, a preset
//                    name or m=SPEC,v=SPEC, sim/optim/state_recipe.hpp); optional;
//   speed_plan       the kernel plan of fp8sim speed's replay (sim/speed/plan.hpp); optional (a
//                    recipe without one is not modelled by speed);
//   and how it is shown: description, colour (plots), order (listings) and whether
//   `fp8sim report` compares it by default.
//
// The built-in recipes are data: one JSON file per recipe in the recipes folder
// ($FP8SIM_RECIPES_DIR, else <source dir>/recipes), read and validated once, on first use. A
// recipe file may name a `base` recipe of the registry and give only what differs. A user's
// recipe file works wherever a registry name does (get()). docs/recipes.md gives the format.
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/model/model.hpp"
#include "sim/quant/spec.hpp"
#include "sim/speed/plan.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::recipe {

// One analyze rule: a tensor whose role and op match (and, when `module` is set, one of whose
// module paths the regex finds) is quantized with `spec`, or kept in its stored precision when
// `spec` is nullopt ("none").
struct QuantRule {
  std::string role = "*";         // a trace role name or "*"
  std::string op = "*";           // an op name or "*"
  std::string module;             // ECMAScript regex searched in the module path; empty: any
  std::optional<QuantSpec> spec;  // nullopt: keep unquantized ("none")
  std::string note;               // why (shown by analyze --list-recipes)

  std::optional<std::regex> module_re;  // compiled from `module`
  bool matches(std::string_view role_name, std::string_view op_name, const std::vector<std::string>& modules) const;
};

// How one tensor is stored: a plain type (fp32, bf16, fp16, int64) or a QuantSpec.
struct Storage {
  bool quantized = false;
  int plain_bytes = 0;  // !quantized: bytes per element
  QuantSpec spec;       // quantized: the quantizer's spec (codes + per-group metadata)
  std::string label;    // the plain type's name, or the canonical spec text

  // "fp32", "bf16", "fp16", "int64", or any QuantSpec text; throws Error for anything else.
  static Storage parse(std::string_view text);
};

// Bytes of a tensor of `shape` under `s`: `data` = element codes, `meta` = scales / k / centre.
// Exact (quantized_size for quantized storage, sim/quant/quantize.hpp).
struct StorageBytes {
  int64_t data = 0, meta = 0;
  int64_t total() const { return data + meta; }
  StorageBytes& operator+=(const StorageBytes& o) {
    data += o.data;
    meta += o.meta;
    return *this;
  }
};
StorageBytes storage_bytes(const Storage& s, std::span<const int64_t> shape);

// The memory model's view of a recipe (sim/memory/memory.hpp uses every field).
struct MemoryModel {
  std::string description;  // one line, shown beside memory's results
  Storage master;           // master weights (what the optimizer updates)
  Storage grad;             // the gradient buffer the optimizer reads
  Storage exp_avg;          // AdamW first moment, applied to each parameter flattened to 1-D
  Storage exp_avg_sq;       // AdamW second moment
  // torch.optim.AdamW's default (foreach) path allocates sqrt(v) for every parameter of the
  // shard during the step; fused FP8 kernels update in place.
  bool foreach_adamw_temporary = false;
  bool fp8_gemm = false;    // decoder-layer Linears run in FP8 (weights cast just in time)
  int te_amax_history = 0;  // > 0: TransformerEngine delayed scaling state per FP8 GEMM operand
  // With activation checkpointing each layer also keeps the FP8 copy of its input (stored as
  // norm_input), as COAT's layers pass it beside the BF16 residual stream.
  bool checkpoint_fp8_input = false;
  std::map<model::SavedRole, Storage> activations;  // every saved role of sim/model

  const Storage& activation(model::SavedRole role) const;
};

struct TrainingRecipe {
  std::string name;
  std::string description;
  std::filesystem::path file;  // the file it was read from
  std::vector<QuantRule> rules;
  std::optional<MemoryModel> memory;
  std::optional<std::string> optimizer_state;  // optim::StateRecipe text (a preset or m=...,v=...)
  std::optional<speed::Plan> speed_plan;
  std::string colour;              // "#rrggbb", or empty: the plots pick one
  std::optional<int64_t> order;    // listings sort by it (recipes without one after, by name)
  bool default_in_report = false;  // in `fp8sim report`'s default --recipes

  // The first rule that matches, or nullptr. `modules`: the module path(s) the tensor belongs to.
  const QuantRule* match(trace::Role role, std::string_view op, const std::vector<std::string>& modules) const;
  // analyze's view: {name, description, rules: [{role, op, module?, spec, note?}]}.
  Json rules_json() const;
  // Everything, resolved (base applied): what `fp8sim recipes --json` prints.
  Json to_json() const;
};

// ---- the registry -----------------------------------------------------------------------------

// $FP8SIM_RECIPES_DIR if set, else <source dir>/recipes.
std::filesystem::path recipes_dir();
// Every recipe of the recipes folder, in order. Throws Error (one line naming the file and the
// field) when a file is malformed or the folder holds none; the first call reads the folder.
const std::vector<TrainingRecipe>& all();
std::vector<std::string> names();
// The names of the recipes with a memory model / a speed plan, in order.
std::vector<std::string> memory_names();
std::vector<std::string> speed_names();
// The names of the recipes `fp8sim report` compares by default, in order.
std::vector<std::string> report_default_names();
// "a, b, c": names joined for messages and help texts.
std::string join(const std::vector<std::string>& names);
bool is_registered(std::string_view name);
// The error for a recipe argument that is neither a registered name nor an existing file: a path
// (a '/' or a .json ending) that does not exist is a missing input (Error, status 1); anything
// else an unknown name (UsageError, status 2) naming `valid`. `context` follows the name in the
// message (" in --recipes").
[[noreturn]] void throw_unknown(const std::string& name_or_file, const std::string& valid,
                                std::string_view context = "");

// A registry name, or a path to a recipe file (read once, then kept). Throws UsageError for a
// name that is neither, listing the registry; Error for a malformed file.
const TrainingRecipe& get(const std::string& name_or_file);
// A recipe document; `base` is resolved against the registry. `origin` names the document in
// messages and gives the default name (its file stem). Throws Error ("recipe <origin>: ...").
TrainingRecipe parse(const Json& doc, const std::string& origin);

}  // namespace fp8sim::recipe
