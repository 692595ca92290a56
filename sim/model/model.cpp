#include "sim/model/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <system_error>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

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

// Reads a required positive integer field; every failure names the file and the field.
int64_t positive_int(const Json& j, const std::string& origin, std::string_view key) {
  const Json* v = j.find(key);
  FP8SIM_REQUIRE(v != nullptr, "model config {}: missing field '{}'", origin, key);
  FP8SIM_REQUIRE(v->is_number(), "model config {}: field '{}' must be an integer", origin, key);
  const double d = v->as_number();
  FP8SIM_REQUIRE(d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 1e15,
                 "model config {}: field '{}' must be an integer, not {}", origin, key, d);
  FP8SIM_REQUIRE(d > 0, "model config {}: field '{}' must be positive, not {}", origin, key, static_cast<int64_t>(d));
  return static_cast<int64_t>(d);
}

const std::string& required_string(const Json& j, const std::string& origin, std::string_view key) {
  const Json* v = j.find(key);
  FP8SIM_REQUIRE(v != nullptr, "model config {}: missing field '{}'", origin, key);
  FP8SIM_REQUIRE(v->is_string(), "model config {}: field '{}' must be a string", origin, key);
  return v->as_string();
}

bool required_bool(const Json& j, const std::string& origin, std::string_view key) {
  const Json* v = j.find(key);
  FP8SIM_REQUIRE(v != nullptr, "model config {}: missing field '{}'", origin, key);
  FP8SIM_REQUIRE(v->is_bool(), "model config {}: field '{}' must be true or false", origin, key);
  return v->as_bool();
}

double optional_positive_number(const Json& j, const std::string& origin, std::string_view key, double dflt) {
  const Json* v = j.find(key);
  if (v == nullptr || v->is_null()) return dflt;
  FP8SIM_REQUIRE(v->is_number(), "model config {}: field '{}' must be a number", origin, key);
  const double d = v->as_number();
  FP8SIM_REQUIRE(d > 0 && d < 1e300, "model config {}: field '{}' must be positive, not {}", origin, key, d);
  return d;
}

// Products of sizes must stay far from int64 overflow (bytes are computed as int64 too).
void require_product_fits(const std::string& origin, std::initializer_list<int64_t> sizes, std::string_view what) {
  long double p = 1;
  for (int64_t s : sizes) p *= static_cast<long double>(s);
  FP8SIM_REQUIRE(p < 1e15L, "model config {}: {} is absurdly large ({:.3g} elements)", origin, what,
                 static_cast<double>(p));
}

}  // namespace

ModelConfig parse_model(const Json& j, const std::string& origin) {
  FP8SIM_REQUIRE(j.is_object(), "model config {}: expected a JSON object", origin);
  ModelConfig m;
  m.origin = origin;
  m.name = required_string(j, origin, "name");
  FP8SIM_REQUIRE(!m.name.empty(), "model config {}: field 'name' is empty", origin);
  if (const Json* d = j.find("display_name"); d && d->is_string()) m.display_name = d->as_string();
  if (m.display_name.empty()) m.display_name = m.name;
  m.hidden = positive_int(j, origin, "hidden_size");
  m.ffn = positive_int(j, origin, "intermediate_size");
  m.layers = positive_int(j, origin, "num_hidden_layers");
  m.heads = positive_int(j, origin, "num_attention_heads");
  m.kv_heads = positive_int(j, origin, "num_key_value_heads");
  m.vocab = positive_int(j, origin, "vocab_size");
  FP8SIM_REQUIRE(m.hidden % m.heads == 0, "model config {}: num_attention_heads ({}) does not divide hidden_size ({})",
                 origin, m.heads, m.hidden);
  FP8SIM_REQUIRE(m.heads % m.kv_heads == 0,
                 "model config {}: num_key_value_heads ({}) does not divide num_attention_heads ({})", origin,
                 m.kv_heads, m.heads);
  m.head_dim = m.hidden / m.heads;
  const std::string& norm = required_string(j, origin, "norm");
  if (norm == "rmsnorm") m.norm = NormKind::RMSNorm;
  else if (norm == "layernorm") m.norm = NormKind::LayerNorm;
  else if (norm == "layernorm_nonparam") m.norm = NormKind::LayerNormNonParam;
  else
    throw Error(fmt::format("model config {}: unknown norm '{}' (valid: rmsnorm, layernorm, layernorm_nonparam)",
                            origin, norm));
  const std::string& act = required_string(j, origin, "activation");
  if (act == "swiglu") m.act = ActKind::SwiGLU;
  else if (act == "gelu") m.act = ActKind::GELU;
  else throw Error(fmt::format("model config {}: unknown activation '{}' (valid: swiglu, gelu)", origin, act));
  m.tied_embeddings = required_bool(j, origin, "tie_word_embeddings");
  if (const Json* b = j.find("attention_bias"); b && !b->is_null()) {
    FP8SIM_REQUIRE(b->is_bool(), "model config {}: field 'attention_bias' must be true or false", origin);
    m.attention_bias = b->as_bool();
  }
  m.norm_eps = optional_positive_number(j, origin, "norm_eps", 1e-5);
  m.rope_theta = optional_positive_number(j, origin, "rope_theta", 10000.0);
  if (const Json* s = j.find("max_position_embeddings"); s && !s->is_null())
    m.max_seq = positive_int(j, origin, "max_position_embeddings");
  if (const Json* s = j.find("source"); s) {
    FP8SIM_REQUIRE(s->is_object(), "model config {}: field 'source' must be an object (field -> text)", origin);
    m.source = *s;
  }
  require_product_fits(origin, {m.hidden, m.ffn}, "intermediate_size x hidden_size");
  require_product_fits(origin, {m.hidden, m.vocab}, "vocab_size x hidden_size");
  require_product_fits(origin, {m.hidden, m.hidden, m.layers}, "the layer stack");
  require_product_fits(origin, {m.hidden, m.ffn, m.layers}, "the layer stack");
  return m;
}

std::filesystem::path models_dir() {
  if (const char* env = std::getenv("FP8SIM_MODELS_DIR"); env && *env) return env;
  return std::filesystem::path(FP8SIM_SOURCE_DIR) / "models";
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
  const bool is_path =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
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
  if (m.attention_bias) {
    ps.push_back({"q_proj.bias", {Q}});
    ps.push_back({"k_proj.bias", {KV}});
    ps.push_back({"v_proj.bias", {KV}});
  }
  ps.push_back({"o_proj.weight", {H, Q}});
  if (m.attention_bias) ps.push_back({"o_proj.bias", {H}});
  norm("mlp_norm");
  if (m.act == ActKind::SwiGLU) ps.push_back({"gate_proj.weight", {F, H}});
  ps.push_back({"up_proj.weight", {F, H}});
  ps.push_back({"down_proj.weight", {H, F}});
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
