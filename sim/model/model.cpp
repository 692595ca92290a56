#include "sim/model/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"

namespace fp8sim::model {

std::string_view norm_kind_name(NormKind k) {
  switch (k) {
    case NormKind::RMSNorm:
      return "rmsnorm";
    case NormKind::LayerNorm:
      return "layernorm";
    case NormKind::LayerNormNonParam:
      return "layernorm_nonparam";
  }
  return "?";
}

std::string_view act_kind_name(ActKind k) { return k == ActKind::SwiGLU ? "swiglu" : "gelu"; }

int64_t ModelConfig::norm_params() const {
  switch (norm) {
    case NormKind::RMSNorm:
      return hidden;  // weight
    case NormKind::LayerNorm:
      return 2 * hidden;  // weight + bias
    case NormKind::LayerNormNonParam:
      return 0;  // OLMo: no affine parameters
  }
  return 0;
}

int64_t ModelConfig::layer_param_count() const {
  int64_t n = 0;
  for (const auto& p : layer_params(*this)) n += p.numel();
  return n;
}

int64_t ModelConfig::outside_param_count() const {
  int64_t n = 0;
  for (const auto& p : outside_params(*this)) n += p.numel();
  return n;
}

namespace {

// Every problem of one config, reported together in one line: missing fields first, then the rest.
struct Problems {
  std::vector<std::string> missing, other;
  void miss(std::string_view key) { missing.push_back(fmt::format("'{}'", key)); }
  template <typename... A>
  void add(fmt::format_string<A...> f, A&&... a) {
    other.push_back(fmt::format(f, std::forward<A>(a)...));
  }
  bool any() const { return !missing.empty() || !other.empty(); }
  void throw_if_any(const std::string& origin) const {
    if (!any()) return;
    std::string msg = fmt::format("model config {}: ", origin);
    if (!missing.empty()) {
      msg += missing.size() == 1 ? "missing field " : "missing fields ";
      for (size_t i = 0; i < missing.size(); ++i) msg += (i ? ", " : "") + missing[i];
    }
    for (size_t i = 0; i < other.size(); ++i) msg += (i || !missing.empty() ? "; " : "") + other[i];
    throw Error(msg);
  }
};

// A field that is absent or JSON null counts as absent (Hugging Face writes null for "default").
const Json* field(const Json& j, std::string_view key) {
  const Json* v = j.find(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

// A positive integer field; nullopt (with the problem recorded) when it is missing or bad.
std::optional<int64_t> positive_int(const Json& j, Problems& pr, std::string_view key, bool required = true) {
  const Json* v = field(j, key);
  if (v == nullptr) {
    if (required) pr.miss(key);
    return std::nullopt;
  }
  if (!v->is_number()) {
    pr.add("field '{}' must be an integer", key);
    return std::nullopt;
  }
  const double d = v->as_number();
  if (d != static_cast<double>(static_cast<int64_t>(d)) || std::abs(d) >= 1e15) {
    pr.add("field '{}' must be an integer, not {}", key, d);
    return std::nullopt;
  }
  if (d <= 0) {
    pr.add("field '{}' must be positive, not {}", key, static_cast<int64_t>(d));
    return std::nullopt;
  }
  return static_cast<int64_t>(d);
}

std::optional<std::string> string_field(const Json& j, Problems& pr, std::string_view key) {
  const Json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    pr.add("field '{}' must be a string", key);
    return std::nullopt;
  }
  return v->as_string();
}

std::optional<bool> bool_field(const Json& j, Problems& pr, std::string_view key) {
  const Json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_bool()) {
    pr.add("field '{}' must be true or false", key);
    return std::nullopt;
  }
  return v->as_bool();
}

// The first present key of `keys` as a positive number, else `dflt`.
double positive_number(const Json& j, Problems& pr, std::initializer_list<std::string_view> keys, double dflt) {
  for (std::string_view key : keys) {
    const Json* v = field(j, key);
    if (v == nullptr) continue;
    if (!v->is_number()) {
      pr.add("field '{}' must be a number", key);
      return dflt;
    }
    const double d = v->as_number();
    if (!(d > 0 && d < 1e300)) pr.add("field '{}' must be positive, not {}", key, d);
    return d > 0 && d < 1e300 ? d : dflt;
  }
  return dflt;
}

// Products of sizes must stay far from int64 overflow (bytes are computed as int64 too).
void require_product_fits(const std::string& origin, std::initializer_list<int64_t> sizes, std::string_view what) {
  long double p = 1;
  for (int64_t s : sizes) p *= static_cast<long double>(s);
  FP8SIM_REQUIRE(p < 1e15L, "model config {}: {} is absurdly large ({:.3g} elements)", origin, what,
                 static_cast<double>(p));
}

// The Hugging Face `model_type`s whose layer fp8sim's expansion describes, with what each
// transformers class fixes in code rather than in config.json: the norm, whether the MLP is gated
// (gate/up/down: act(gate) * up) or plain (up/act/down), the gate's activation, and its biases.
// `bias_key_default` is the default of the config's `attention_bias` key (q/k/v/o biases) when
// the family reads one; `tied_default` is the *Config class's tie_word_embeddings default.
struct HfFamily {
  std::string_view model_type;
  NormKind norm;
  bool gated_mlp;
  bool qkv_bias;  // fixed q/k/v biases (Qwen2), independent of attention_bias
  bool mlp_bias;  // fixed MLP biases (GPT-NeoX)
  bool bias_key_default;
  bool gelu_gate = false;  // the gated MLP's activation is GELU (Gemma's GeGLU), not SiLU
  bool tied_default = false;
};
constexpr HfFamily kHfFamilies[] = {
    {"llama", NormKind::RMSNorm, true, false, false, false},
    {"mistral", NormKind::RMSNorm, true, false, false, false},
    {"qwen2", NormKind::RMSNorm, true, true, false, false},
    {"olmo", NormKind::LayerNormNonParam, true, false, false, false},
    {"gpt_neox", NormKind::LayerNorm, false, false, true, true},
    // GemmaRMSNorm scales by (1 + weight): one weight per channel, as RMSNorm. The embedding's
    // sqrt(hidden) multiplier has no parameter.
    {"gemma", NormKind::RMSNorm, true, false, false, false, true, true},
};

const HfFamily* hf_family(std::string_view model_type) {
  for (const HfFamily& f : kHfFamilies)
    if (f.model_type == model_type) return &f;
  return nullptr;
}

std::string known_model_types() {
  std::string s;
  for (const HfFamily& f : kHfFamilies) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

// The name a config without a `name` field gets: its file's stem, or for a file called config.json
// (a Hugging Face checkout) its folder's name; then `_name_or_path`'s last component; then
// `model_type`.
std::string default_name(const Json& j, const std::string& origin) {
  const std::filesystem::path p(origin);
  if (p.extension() == ".json") {
    if (p.stem() != "config") return p.stem().string();
    const std::filesystem::path dir = p.parent_path().filename();
    if (!dir.empty() && dir != "." && dir != "..") return dir.string();
  }
  if (const Json* n = field(j, "_name_or_path"); n && n->is_string() && !n->as_string().empty()) {
    const std::string& s = n->as_string();
    const size_t slash = s.find_last_of('/');
    const std::string last = slash == std::string::npos ? s : s.substr(slash + 1);
    if (!last.empty()) return last;
  }
  if (const Json* t = field(j, "model_type"); t && t->is_string() && !t->as_string().empty()) return t->as_string();
  return "";
}

}  // namespace

ModelConfig parse_model(const Json& j, const std::string& origin) {
  FP8SIM_REQUIRE(j.is_object(), "model config {}: expected a JSON object", origin);
  Problems pr;
  ModelConfig m;
  m.origin = origin;
  Json inferred = Json::object();  // source lines for what the config does not state

  if (auto n = string_field(j, pr, "name")) {
    m.name = *n;
    if (m.name.empty()) pr.add("field 'name' is empty");
  } else if (!field(j, "name")) {
    m.name = default_name(j, origin);
    if (m.name.empty()) pr.miss("name");
  }
  if (const Json* d = j.find("display_name"); d && d->is_string()) m.display_name = d->as_string();
  if (m.display_name.empty()) m.display_name = m.name;

  const std::optional<std::string> model_type = string_field(j, pr, "model_type");
  const HfFamily* family = model_type ? hf_family(*model_type) : nullptr;

  const auto hidden = positive_int(j, pr, "hidden_size");
  const auto ffn = positive_int(j, pr, "intermediate_size");
  const auto layers = positive_int(j, pr, "num_hidden_layers");
  const auto heads = positive_int(j, pr, "num_attention_heads");
  const auto vocab = positive_int(j, pr, "vocab_size");
  // Hugging Face's convention: no num_key_value_heads means multi-head attention.
  const bool has_kv = field(j, "num_key_value_heads") != nullptr;
  const auto kv_heads = has_kv ? positive_int(j, pr, "num_key_value_heads") : heads;
  if (!has_kv && heads) inferred["num_key_value_heads"] = "num_attention_heads (no num_key_value_heads: multi-head)";
  // head_dim may differ from hidden / heads (Mistral-Nemo: 5120 / 32 heads of 128).
  const bool has_head_dim = field(j, "head_dim") != nullptr;
  const auto head_dim = has_head_dim ? positive_int(j, pr, "head_dim") : std::nullopt;

  // Norm: the `norm` field, else the model type's.
  if (auto norm = string_field(j, pr, "norm")) {
    if (*norm == "rmsnorm") m.norm = NormKind::RMSNorm;
    else if (*norm == "layernorm") m.norm = NormKind::LayerNorm;
    else if (*norm == "layernorm_nonparam") m.norm = NormKind::LayerNormNonParam;
    else pr.add("unknown norm '{}' (valid: rmsnorm, layernorm, layernorm_nonparam)", *norm);
  } else if (!field(j, "norm")) {
    if (family) {
      m.norm = family->norm;
      inferred["norm"] = fmt::format("{}: model_type '{}'", norm_kind_name(m.norm), *model_type);
    } else if (model_type) {
      pr.add("model_type '{}' is not one whose norm fp8sim knows ({}): give 'norm'", *model_type, known_model_types());
    } else {
      pr.miss("norm");
    }
  }

  // Activation: the `activation` field, else `hidden_act` with the model type's MLP.
  if (auto act = string_field(j, pr, "activation")) {
    if (*act == "swiglu") m.act = ActKind::SwiGLU;
    else if (*act == "gelu") m.act = ActKind::GELU;
    else pr.add("unknown activation '{}' (valid: swiglu, gelu)", *act);
  } else if (!field(j, "activation")) {
    const std::optional<std::string> hact = string_field(j, pr, "hidden_act");
    const bool silu = hact && (*hact == "silu" || *hact == "swish");
    const bool gelu = hact && hact->starts_with("gelu");
    if (!hact) {
      if (!field(j, "hidden_act")) pr.miss("activation");
    } else if (family && family->gated_mlp && family->gelu_gate && gelu) {
      // GeGLU: the gated MLP's weights, GEMMs and saved tensors are SwiGLU's; only the gate's
      // elementwise function differs.
      m.act = ActKind::SwiGLU;
      inferred["activation"] = fmt::format(
          "swiglu: hidden_act '{}', model_type '{}' (gated GELU MLP, modelled as the gated MLP)", *hact, *model_type);
    } else if (family && (family->gated_mlp != silu || family->gelu_gate)) {
      pr.add("hidden_act '{}' with model_type '{}' is not modelled ({} MLP)", *hact, *model_type,
             family->gated_mlp ? "gated" : "plain");
    } else if (silu) {
      // Every SiLU MLP of a Hugging Face decoder is gated (gate_proj, up_proj, down_proj).
      m.act = ActKind::SwiGLU;
      inferred["activation"] = fmt::format("swiglu: hidden_act '{}' (gated MLP)", *hact);
    } else if (gelu && family) {
      m.act = ActKind::GELU;
      inferred["activation"] = fmt::format("gelu: hidden_act '{}', model_type '{}' (plain MLP)", *hact, *model_type);
    } else {
      pr.add("hidden_act '{}' without a known model_type ({}): give 'activation' (swiglu or gelu)", *hact,
             known_model_types());
    }
  }

  // Embeddings: the family's default where the config does not say (transformers' *Config classes).
  if (auto tied = bool_field(j, pr, "tie_word_embeddings")) m.tied_embeddings = *tied;
  else if (!field(j, "tie_word_embeddings")) {
    if (family) {
      m.tied_embeddings = family->tied_default;
      inferred["tie_word_embeddings"] =
          fmt::format("{}: model_type '{}' default", family->tied_default ? "true" : "false", *model_type);
    } else {
      pr.miss("tie_word_embeddings");
    }
  }

  // Biases: `attention_bias` (q/k/v/o) with the family's default, plus what the family fixes.
  const std::optional<bool> bias = bool_field(j, pr, "attention_bias");
  const bool attn_bias = bias.value_or(family ? family->bias_key_default : false);
  m.qkv_bias = attn_bias || (family && family->qkv_bias);
  m.o_bias = attn_bias;
  if (auto mb = bool_field(j, pr, "mlp_bias")) m.mlp_bias = *mb;
  else m.mlp_bias = family && family->mlp_bias;

  m.norm_eps = positive_number(j, pr, {"norm_eps", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"}, 1e-5);
  m.rope_theta = positive_number(j, pr, {"rope_theta", "rotary_emb_base"}, 10000.0);
  if (auto s = positive_int(j, pr, "max_position_embeddings", false)) m.max_seq = *s;

  // Mixture-of-experts layers have no expansion here; refuse rather than count one dense MLP.
  for (std::string_view key : {"num_local_experts", "num_experts", "n_routed_experts"})
    if (const Json* e = field(j, key); e && e->is_number() && e->as_number() > 1)
      pr.add("mixture-of-experts layers ('{}') are not modelled", key);

  if (const Json* s = j.find("source"); s) {
    if (!s->is_object()) pr.add("field 'source' must be an object (field -> text)");
    else m.source = *s;
  }
  if (!inferred.as_object().empty()) {
    if (!m.source.is_object()) m.source = Json::object();
    for (const auto& [k, v] : inferred.as_object())
      if (!m.source.find(k)) m.source[k] = v;
  }

  if (heads && kv_heads && *heads % *kv_heads != 0)
    pr.add("num_key_value_heads ({}) does not divide num_attention_heads ({})", *kv_heads, *heads);
  if (hidden && heads && !has_head_dim && *hidden % *heads != 0)
    pr.add("num_attention_heads ({}) does not divide hidden_size ({}) and there is no head_dim", *heads, *hidden);
  pr.throw_if_any(origin);

  m.hidden = *hidden;
  m.ffn = *ffn;
  m.layers = *layers;
  m.heads = *heads;
  m.kv_heads = *kv_heads;
  m.vocab = *vocab;
  m.head_dim = has_head_dim ? *head_dim : m.hidden / m.heads;
  require_product_fits(origin, {m.hidden, m.ffn}, "intermediate_size x hidden_size");
  require_product_fits(origin, {m.hidden, m.vocab}, "vocab_size x hidden_size");
  require_product_fits(origin, {m.hidden, m.hidden, m.layers}, "the layer stack");
  require_product_fits(origin, {m.hidden, m.q_dim(), m.layers}, "the layer stack");
  require_product_fits(origin, {m.hidden, m.ffn, m.layers}, "the layer stack");
  return m;
}

std::filesystem::path models_dir() {
  if (const char* env = std::getenv("FP8SIM_MODELS_DIR"); env && *env) return env;
  return data_root() / "models";
}

std::vector<std::string> list_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(models_dir(), ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".json") names.push_back(it->path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig load_model(const std::string& name_or_path) {
  // A name that is not a model is bad usage (exit 2); a file that cannot be read is bad data.
  if (name_or_path.empty()) throw UsageError("no model given (a name such as llama2-7b, or a JSON file)");
  const bool is_path = names_a_file(name_or_path);
  std::filesystem::path p = is_path ? std::filesystem::path(name_or_path) : models_dir() / (name_or_path + ".json");
  std::error_code ec;
  if (!is_path && !std::filesystem::is_regular_file(p, ec)) {
    std::string valid;
    for (const auto& n : list_models()) valid += (valid.empty() ? "" : ", ") + n;
    throw UsageError(fmt::format("unknown model '{}' (valid: {}; or give a JSON file)", name_or_path,
                                 valid.empty() ? "none found in " + models_dir().string() : valid));
  }
  if (is_path && !std::filesystem::exists(p, ec))
    throw Error(fmt::format("model config '{}': no such file", name_or_path));
  Json j;
  try {
    j = Json::parse(read_text_file(p));
  } catch (const Error& e) {
    throw Error(fmt::format("model config {}: {}", p.string(), e.what()));
  }
  return parse_model(j, p.string());
}

// ---- expansion --------------------------------------------------------------------------------

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Embedding:
      return "embedding";
    case OpKind::Norm:
      return "norm";
    case OpKind::Linear:
      return "linear";
    case OpKind::Rope:
      return "rope";
    case OpKind::Attention:
      return "attention";
    case OpKind::Activation:
      return "activation";
    case OpKind::Mul:
      return "mul";
    case OpKind::ResidualAdd:
      return "residual_add";
    case OpKind::LmHead:
      return "lm_head";
    case OpKind::Loss:
      return "loss";
  }
  return "?";
}

std::string_view saved_role_name(SavedRole r) {
  switch (r) {
    case SavedRole::NormInput:
      return "norm_input";
    case SavedRole::NormStats:
      return "norm_stats";
    case SavedRole::LinearInput:
      return "linear_input";
    case SavedRole::AttnOutput:
      return "attn_output";
    case SavedRole::RopeInput:
      return "rope_input";
    case SavedRole::AttnInput:
      return "attn_input";
    case SavedRole::AttnStats:
      return "attn_stats";
    case SavedRole::ActInput:
      return "act_input";
    case SavedRole::MulInput:
      return "mul_input";
    case SavedRole::TokenIds:
      return "token_ids";
    case SavedRole::FinalNormInput:
      return "final_norm_input";
    case SavedRole::HeadInput:
      return "head_input";
    case SavedRole::Logits:
      return "logits";
    case SavedRole::LossBuffer:
      return "loss_buffer";
  }
  return "?";
}

std::optional<SavedRole> parse_saved_role(std::string_view name) {
  for (SavedRole r : kAllSavedRoles)
    if (saved_role_name(r) == name) return r;
  return std::nullopt;
}

std::string_view table2_column_name(Table2Column c) {
  switch (c) {
    case Table2Column::RMSNorm:
      return "RMSNorm";
    case Table2Column::SiLUMul:
      return "SiLU&Mul";
    case Table2Column::RoPE:
      return "RoPE";
    case Table2Column::FlashAttn:
      return "FlashAttn";
    case Table2Column::Linear:
      return "Linear";
    case Table2Column::None:
      return "-";
  }
  return "?";
}

int64_t SavedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ParamDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

OpDesc make_op(std::string name, OpKind kind, std::string block, std::vector<int64_t> in, std::vector<int64_t> out) {
  OpDesc op;
  op.name = std::move(name);
  op.kind = kind;
  op.block = std::move(block);
  op.in_shape = std::move(in);
  op.out_shape = std::move(out);
  return op;
}

OpDesc make_linear(std::string name, std::string block, int64_t T, int64_t k, int64_t n) {
  OpDesc op = make_op(std::move(name), OpKind::Linear, std::move(block), {T, k}, {T, n});
  op.weight_shape = {n, k};
  op.fp8_gemm_candidate = true;
  return op;
}

void save(OpDesc& op, std::string name, SavedRole role, std::vector<int64_t> shape, Table2Column col) {
  op.saved.push_back(SavedTensor{std::move(name), role, std::move(shape), col});
}

void add_norm_stats(OpDesc& op, const ModelConfig& m, int64_t T) {
  // RMSNorm keeps rstd per token; LayerNorm keeps mean and rstd (fp32 each).
  const int64_t per_token = m.norm == NormKind::RMSNorm ? 1 : 2;
  save(op, op.name + ".stats", SavedRole::NormStats, {T, per_token}, Table2Column::None);
}

void check_tokens(int64_t batch, int64_t seq) {
  FP8SIM_REQUIRE(batch >= 1, "batch must be >= 1, not {}", batch);
  FP8SIM_REQUIRE(seq >= 1, "sequence length must be >= 1, not {}", seq);
  FP8SIM_REQUIRE(static_cast<long double>(batch) * seq < 1e12L, "batch x seq = {} x {} is absurdly large", batch, seq);
}

}  // namespace

std::vector<OpDesc> layer_ops(const ModelConfig& m, int64_t batch, int64_t seq) {
  check_tokens(batch, seq);
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), KV = m.kv_dim();
  std::vector<OpDesc> ops;

  OpDesc attn_norm = make_op("attn_norm", OpKind::Norm, "attn", {T, H}, {T, H});
  save(attn_norm, "attn_norm.input", SavedRole::NormInput, {T, H}, Table2Column::RMSNorm);
  add_norm_stats(attn_norm, m, T);
  ops.push_back(attn_norm);

  OpDesc q = make_linear("q_proj", "attn", T, H, Q);
  save(q, "attn_norm.output", SavedRole::LinearInput, {T, H}, Table2Column::Linear);
  ops.push_back(q);
  OpDesc k = make_linear("k_proj", "attn", T, H, KV);
  k.also_reads = {"attn_norm.output"};
  ops.push_back(k);
  OpDesc v = make_linear("v_proj", "attn", T, H, KV);
  v.also_reads = {"attn_norm.output"};
  ops.push_back(v);

  OpDesc rope = make_op("rope", OpKind::Rope, "attn", {T, Q + KV}, {T, Q + KV});
  save(rope, "rope.q", SavedRole::RopeInput, {T, Q}, Table2Column::RoPE);
  save(rope, "rope.k", SavedRole::RopeInput, {T, KV}, Table2Column::RoPE);
  ops.push_back(rope);

  OpDesc attn = make_op("attention", OpKind::Attention, "attn", {T, Q + 2 * KV}, {T, Q});
  save(attn, "attention.q", SavedRole::AttnInput, {T, Q}, Table2Column::FlashAttn);
  save(attn, "attention.k", SavedRole::AttnInput, {T, KV}, Table2Column::FlashAttn);
  save(attn, "attention.v", SavedRole::AttnInput, {T, KV}, Table2Column::FlashAttn);
  save(attn, "attention.lse", SavedRole::AttnStats, {batch, m.heads, seq}, Table2Column::None);
  ops.push_back(attn);

  OpDesc o = make_linear("o_proj", "attn", T, Q, H);
  // FlashAttention's output is o_proj's input: one tensor, counted here (Table 2's Linear column).
  save(o, "attention.output", SavedRole::AttnOutput, {T, Q}, Table2Column::Linear);
  ops.push_back(o);
  ops.push_back(make_op("attn_residual", OpKind::ResidualAdd, "attn", {T, H}, {T, H}));

  OpDesc mlp_norm = make_op("mlp_norm", OpKind::Norm, "mlp", {T, H}, {T, H});
  save(mlp_norm, "mlp_norm.input", SavedRole::NormInput, {T, H}, Table2Column::RMSNorm);
  add_norm_stats(mlp_norm, m, T);
  ops.push_back(mlp_norm);

  if (m.act == ActKind::SwiGLU) {
    OpDesc gate = make_linear("gate_proj", "mlp", T, H, F);
    save(gate, "mlp_norm.output", SavedRole::LinearInput, {T, H}, Table2Column::Linear);
    ops.push_back(gate);
    OpDesc up = make_linear("up_proj", "mlp", T, H, F);
    up.also_reads = {"mlp_norm.output"};
    ops.push_back(up);
    OpDesc silu = make_op("act", OpKind::Activation, "mlp", {T, F}, {T, F});
    save(silu, "gate_proj.output", SavedRole::ActInput, {T, F}, Table2Column::SiLUMul);
    ops.push_back(silu);
    OpDesc mul = make_op("mul", OpKind::Mul, "mlp", {T, 2 * F}, {T, F});
    save(mul, "act.output", SavedRole::MulInput, {T, F}, Table2Column::SiLUMul);
    save(mul, "up_proj.output", SavedRole::MulInput, {T, F}, Table2Column::SiLUMul);
    ops.push_back(mul);
    OpDesc down = make_linear("down_proj", "mlp", T, F, H);
    save(down, "mul.output", SavedRole::LinearInput, {T, F}, Table2Column::Linear);
    ops.push_back(down);
  } else {
    OpDesc up = make_linear("up_proj", "mlp", T, H, F);
    save(up, "mlp_norm.output", SavedRole::LinearInput, {T, H}, Table2Column::Linear);
    ops.push_back(up);
    OpDesc gelu = make_op("act", OpKind::Activation, "mlp", {T, F}, {T, F});
    save(gelu, "up_proj.output", SavedRole::ActInput, {T, F}, Table2Column::SiLUMul);
    ops.push_back(gelu);
    OpDesc down = make_linear("down_proj", "mlp", T, F, H);
    save(down, "act.output", SavedRole::LinearInput, {T, F}, Table2Column::Linear);
    ops.push_back(down);
  }
  ops.push_back(make_op("mlp_residual", OpKind::ResidualAdd, "mlp", {T, H}, {T, H}));
  return ops;
}

std::vector<OpDesc> outside_ops(const ModelConfig& m, int64_t batch, int64_t seq) {
  check_tokens(batch, seq);
  const int64_t T = batch * seq, H = m.hidden, V = m.vocab;
  std::vector<OpDesc> ops;
  OpDesc emb = make_op("embedding", OpKind::Embedding, "embed", {T}, {T, H});
  emb.weight_shape = {V, H};
  save(emb, "input_ids", SavedRole::TokenIds, {T}, Table2Column::None);
  ops.push_back(emb);

  OpDesc fn = make_op("final_norm", OpKind::Norm, "head", {T, H}, {T, H});
  save(fn, "final_norm.input", SavedRole::FinalNormInput, {T, H}, Table2Column::None);
  add_norm_stats(fn, m, T);
  ops.push_back(fn);

  OpDesc head = make_op("lm_head", OpKind::LmHead, "head", {T, H}, {T, V});
  head.weight_shape = {V, H};
  save(head, "final_norm.output", SavedRole::HeadInput, {T, H}, Table2Column::None);
  save(head, "logits", SavedRole::Logits, {T, V}, Table2Column::None);
  ops.push_back(head);

  OpDesc loss = make_op("loss", OpKind::Loss, "head", {T, V}, {1});
  save(loss, "loss.log_probs", SavedRole::LossBuffer, {T, V}, Table2Column::None);
  ops.push_back(loss);
  return ops;
}

std::vector<ParamDesc> layer_params(const ModelConfig& m) {
  const int64_t H = m.hidden, F = m.ffn, Q = m.q_dim(), KV = m.kv_dim();
  std::vector<ParamDesc> ps;
  auto norm = [&](const std::string& n) {
    if (m.norm == NormKind::RMSNorm || m.norm == NormKind::LayerNorm) ps.push_back({n + ".weight", {H}});
    if (m.norm == NormKind::LayerNorm) ps.push_back({n + ".bias", {H}});
  };
  norm("attn_norm");
  ps.push_back({"q_proj.weight", {Q, H}});
  ps.push_back({"k_proj.weight", {KV, H}});
  ps.push_back({"v_proj.weight", {KV, H}});
  if (m.qkv_bias) {
    ps.push_back({"q_proj.bias", {Q}});
    ps.push_back({"k_proj.bias", {KV}});
    ps.push_back({"v_proj.bias", {KV}});
  }
  ps.push_back({"o_proj.weight", {H, Q}});
  if (m.o_bias) ps.push_back({"o_proj.bias", {H}});
  norm("mlp_norm");
  if (m.act == ActKind::SwiGLU) {
    ps.push_back({"gate_proj.weight", {F, H}});
    if (m.mlp_bias) ps.push_back({"gate_proj.bias", {F}});
  }
  ps.push_back({"up_proj.weight", {F, H}});
  if (m.mlp_bias) ps.push_back({"up_proj.bias", {F}});
  ps.push_back({"down_proj.weight", {H, F}});
  if (m.mlp_bias) ps.push_back({"down_proj.bias", {H}});
  return ps;
}

std::vector<ParamDesc> outside_params(const ModelConfig& m) {
  std::vector<ParamDesc> ps;
  ps.push_back({"embed_tokens.weight", {m.vocab, m.hidden}});
  if (m.norm == NormKind::RMSNorm || m.norm == NormKind::LayerNorm) ps.push_back({"final_norm.weight", {m.hidden}});
  if (m.norm == NormKind::LayerNorm) ps.push_back({"final_norm.bias", {m.hidden}});
  if (!m.tied_embeddings) ps.push_back({"lm_head.weight", {m.vocab, m.hidden}});
  return ps;
}

Json model_to_json(const ModelConfig& m) {
  Json j = Json::object();
  j["name"] = m.name;
  j["display_name"] = m.display_name;
  j["hidden_size"] = m.hidden;
  j["intermediate_size"] = m.ffn;
  j["num_hidden_layers"] = m.layers;
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.kv_heads;
  j["head_dim"] = m.head_dim;
  j["vocab_size"] = m.vocab;
  j["norm"] = std::string(norm_kind_name(m.norm));
  j["activation"] = std::string(act_kind_name(m.act));
  j["tie_word_embeddings"] = m.tied_embeddings;
  j["params"] = m.param_count();
  j["layer_params"] = m.layer_param_count();
  j["outside_params"] = m.outside_param_count();
  return j;
}

}  // namespace fp8sim::model
