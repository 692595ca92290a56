// The replay's view of a model: sim/model's config, checked against sim/model's per-layer
// expansion so that the replay's Linear shapes are the ones the memory model and the trace
// capture use.
#include <fmt/format.h>

#include "sim/common/check.hpp"
#include "sim/model/model.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim::speed {

ModelShape load_model_shape(const std::string& name_or_path) { return model_shape(model::load_model(name_or_path)); }

ModelShape model_shape(const model::ModelConfig& cfg) {
  ModelShape m;
  m.name = cfg.name;
  m.hidden = cfg.hidden;
  m.ffn = cfg.ffn;
  m.layers = cfg.layers;
  m.heads = cfg.heads;
  m.kv_heads = cfg.kv_heads;
  m.head_dim = cfg.head_dim;
  m.vocab = cfg.vocab;
  m.tied = cfg.tied_embeddings;
  m.norm = std::string(model::norm_kind_name(cfg.norm));
  m.activation = std::string(model::act_kind_name(cfg.act));
  m.params = cfg.param_count();
  m.root_params = cfg.outside_param_count();
  check_shape(m);

  // The replay hard-codes a Llama block (q, k, v, o, gate, up, down); make sure the model's own
  // expansion agrees on every Linear's weight shape.
  const int64_t q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected{
      {"q_proj", {q, m.hidden}},       {"k_proj", {kv, m.hidden}},       {"v_proj", {kv, m.hidden}},
      {"o_proj", {m.hidden, q}},       {"gate_proj", {m.ffn, m.hidden}}, {"up_proj", {m.ffn, m.hidden}},
      {"down_proj", {m.hidden, m.ffn}}};
  const auto ops = model::layer_ops(cfg, 1, 16);
  for (const auto& [name, shape] : expected) {
    const model::OpDesc* found = nullptr;
    for (const auto& op : ops)
      if (op.name == name) found = &op;
    FP8SIM_REQUIRE(found != nullptr, "model '{}': its layer has no '{}', which the speed replay needs", m.name, name);
    FP8SIM_REQUIRE(found->weight_shape == shape, "model '{}': '{}' weight is ({}), the speed replay expected ({}, {})",
                   m.name, name, fmt::join(found->weight_shape, ", "), shape[0], shape[1]);
  }
  return m;
}

}  // namespace fp8sim::speed
