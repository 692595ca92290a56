// Framework profiles (sim/memory/framework.hpp): the terms follow the frameworks' code, and the
// predictions hold on the committed H200 measurements of those frameworks (reports/h200/frameworks,
// written by scripts/measure_step.py).
#include <gtest/gtest.h>

#include <string>

#include "sim/common/check.hpp"
#include "sim/memory/framework.hpp"
#include "sim/memory/memory.hpp"
#include "sim/memory/validate.hpp"
#include "sim/model/model.hpp"

namespace fp8sim {
namespace {

using memory::compute_footprint;
using memory::Footprint;
using memory::MemoryOptions;

model::ModelConfig llama(int64_t kv_heads) {
  Json j = Json::object();
  j["name"] = "t";
  j["hidden_size"] = 2048;
  j["intermediate_size"] = 5632;
  j["num_hidden_layers"] = 4;
  j["num_attention_heads"] = 32;
  j["num_key_value_heads"] = kv_heads;
  j["vocab_size"] = 32000;
  j["norm"] = "rmsnorm";
  j["activation"] = "swiglu";
  j["tie_word_embeddings"] = false;
  return model::parse_model(j, "test");
}

Footprint run(const std::string& fw, const model::ModelConfig& m, bool ckpt = false, int64_t batch = 2,
              bool compiled = false) {
  MemoryOptions o;
  o.compiled = compiled;
  o.framework = fw;
  o.recipe = memory::find_framework(fw).recipe;
  o.batch = batch;
  o.seq = 2048;
  o.checkpointing = ckpt;
  o.grads_persist = false;
  return compute_footprint(m, o);
}

TEST(MemoryFrameworks, CommittedMeasurementsAreWithinTheTargets) {
  const Json v = memory::memory_validate_steps({std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/frameworks"});
  EXPECT_GE(v.at("modelled").as_int(), 50);
  for (const auto& r : v.at("rows").as_array()) {
    if (!r.at("modelled").as_bool()) continue;
    EXPECT_TRUE(r.at("ok").as_bool()) << r.at("file").as_string() << " batch " << r.at("batch").as_int() << ": peak "
                                      << r.at("peak_rel").as_number() << ", forward-retained "
                                      << r.at("retained_rel").as_number();
  }
}

TEST(MemoryFrameworks, GroupedQueryAttentionSavesOnlyWhereKvIsNotRepeated) {
  const int64_t T = 2 * 2048, Q = 2048, KV = 256;
  // transformers 5.x passes enable_gqa to SDPA: K and V are saved at their own width.
  EXPECT_EQ(run("hf", llama(32)).layer_activation_bytes - run("hf", llama(4)).layer_activation_bytes,
            2 * 2 * T * (Q - KV));
  // 4.45.2 repeats K/V to every head before SDPA, eager attention always does.
  EXPECT_EQ(run("hf-4.45", llama(32)).layer_activation_bytes, run("hf-4.45", llama(4)).layer_activation_bytes);
  EXPECT_EQ(run("hf-eager", llama(32)).layer_activation_bytes, run("hf-eager", llama(4)).layer_activation_bytes);
}

TEST(MemoryFrameworks, EagerAttentionKeepsTheProbabilitiesInFp32AndBf16) {
  const model::ModelConfig m = llama(32);
  const int64_t scores = 2 * 32 * int64_t{2048} * 2048, T = 2 * 2048;
  // Eager adds 6 B per score and drops SDPA's fp32 log-sum-exp (32 heads x 4 B per token).
  EXPECT_EQ(run("hf-eager", m).layer_activation_bytes - run("hf", m).layer_activation_bytes, 6 * scores - 4 * 32 * T);
}

TEST(MemoryFrameworks, CheckpointingKeepsTheFp32LayerInputs) {
  const model::ModelConfig m = llama(4);
  const Footprint f = run("hf", m, true);
  int64_t layers = 0;
  for (const auto& c : f.activations)
    if (c.name.rfind("layers.", 0) == 0) layers += c.bytes;
  EXPECT_EQ(layers, m.layers * 2 * 2048 * m.hidden * 4);
  EXPECT_LT(f.peak, run("hf", m, false).peak);
}

TEST(MemoryFrameworks, CoatKeepsLessThanItsBf16BaseAndNoLayerWeightCopies) {
  const model::ModelConfig m = llama(32);
  const Footprint coat = run("coat", m), bf16 = run("hf-4.45", m);
  EXPECT_LT(coat.layer_activation_bytes * 2, bf16.layer_activation_bytes);
  for (const auto& c : coat.persistent)
    if (c.name == "autocast_weight_copies") EXPECT_EQ(c.bytes, m.vocab * m.hidden * 2);  // the LM head only
  EXPECT_LT(coat.optimizer(), bf16.optimizer() / 3);
}

TEST(MemoryFrameworks, CompiledLayersKeepOneCastPerNormAndNoLogSoftmax) {
  const model::ModelConfig m = llama(4);
  const Footprint eager = run("hf", m), compiled = run("hf", m, false, 2, true);
  const int64_t T = 2 * 2048, H = m.hidden, F = m.ffn, Q = m.q_dim();
  // 12H + 8Q + 6F + 4 heads + 8 bytes per token (fp32 norm inputs and rstd, one bf16 cast per
  // norm, q/k/v at full width, the attention output, three ffn-wide tensors).
  EXPECT_EQ(compiled.layer_activation_bytes, T * (12 * H + 8 * Q + 6 * F + 4 * m.heads + 8));
  EXPECT_LT(compiled.activations_total, eager.activations_total);
  for (const auto& p : compiled.phases)
    if (p.name == "forward_loss") EXPECT_TRUE(p.temporaries.empty());  // the loss is fused
}

TEST(MemoryFrameworks, ProfilesRefuseWhatTheyDoNotModel) {
  const model::ModelConfig m = llama(4);
  MemoryOptions o;
  o.framework = "hf";
  o.recipe = "bf16";
  o.gpus = 2;
  EXPECT_THROW(compute_footprint(m, o), UsageError);
  o.gpus = 1;
  o.recipe = "coat";
  EXPECT_THROW(compute_footprint(m, o), UsageError);
  o.framework = "megatron";
  EXPECT_THROW(compute_footprint(m, o), UsageError);
  o.framework = "hf";
  o.recipe = "bf16";
  o.compiled = true;
  o.checkpointing = true;
  EXPECT_THROW(compute_footprint(m, o), UsageError);  // measured, not modelled
  o.framework = "hf-eager";
  o.checkpointing = false;
  EXPECT_THROW(compute_footprint(m, o), UsageError);
}

}  // namespace
}  // namespace fp8sim
