// Model configs (models/*.json) and their per-layer expansion (sim/model).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "sim/common/check.hpp"
#include "sim/model/model.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

using model::ModelConfig;

// A minimal valid config; tests remove or break one field at a time.
Json base_config() {
  Json j = Json::object();
  j["name"] = "t";
  j["hidden_size"] = 256;
  j["intermediate_size"] = 688;
  j["num_hidden_layers"] = 4;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 2;
  j["vocab_size"] = 256;
  j["norm"] = "rmsnorm";
  j["activation"] = "swiglu";
  j["tie_word_embeddings"] = false;
  return j;
}

Json without(const Json& j, const std::string& key) {
  Json out = Json::object();
  for (const auto& [k, v] : j.as_object())
    if (k != key) out[k] = v;
  return out;
}

// Parsing must fail with a one-line message containing `needle`.
void expect_error(const Json& j, const std::string& needle) {
  try {
    model::parse_model(j, "test.json");
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(ModelConfig, EveryCommittedModelLoadsWithASourceForEachField) {
  const auto names = model::list_models();
  for (const char* need :
       {"llama2-7b", "llama2-13b", "llama-30b", "llama2-70b", "llama3-8b", "olmo-1b", "olmo-7b", "tiny-llama"})
    EXPECT_NE(std::find(names.begin(), names.end(), need), names.end()) << need;
  for (const auto& n : names) {
    const ModelConfig m = model::load_model(n);
    EXPECT_EQ(m.name, n) << "the 'name' field must equal the file stem";
    ASSERT_TRUE(m.source.is_object()) << n << ": no source object";
    for (const char* f : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "vocab_size", "norm", "activation", "tie_word_embeddings"}) {
      const Json* s = m.source.find(f);
      ASSERT_NE(s, nullptr) << n << ": no source line for " << f;
      EXPECT_TRUE(s->is_string() && s->as_string().size() > 10) << n << "." << f;
    }
  }
}

// Parameter counts published for these checkpoints (model cards / HF safetensors metadata).
TEST(ModelConfig, ParameterCountsMatchThePublishedCheckpoints) {
  EXPECT_EQ(model::load_model("llama2-7b").param_count(), 6738415616);
  EXPECT_EQ(model::load_model("llama2-13b").param_count(), 13015864320);
  EXPECT_EQ(model::load_model("llama2-70b").param_count(), 68976648192);
  EXPECT_EQ(model::load_model("llama3-8b").param_count(), 8030261248);
  EXPECT_EQ(model::load_model("llama-30b").param_count(), 32528943616);
  EXPECT_EQ(model::load_model("olmo-1b").param_count(), 1176764416);
  EXPECT_EQ(model::load_model("olmo-7b").param_count(), 6888095744);
}

TEST(ModelConfig, FieldsAreReadExactly) {
  const ModelConfig m = model::load_model("llama3-8b");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.ffn, 14336);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.norm, model::NormKind::RMSNorm);
  EXPECT_FALSE(m.tied_embeddings);
  const ModelConfig o = model::load_model("olmo-1b");
  EXPECT_EQ(o.norm, model::NormKind::LayerNormNonParam);
  EXPECT_TRUE(o.tied_embeddings);
  EXPECT_EQ(o.norm_params(), 0);
  EXPECT_EQ(o.head_param_count(), 0);
}

TEST(ModelConfig, LoadsAFileByPath) {
  const auto p = std::filesystem::temp_directory_path() / "fp8sim_test_model.json";
  std::ofstream(p) << base_config().dump();
  const ModelConfig m = model::load_model(p.string());
  EXPECT_EQ(m.hidden, 256);
  EXPECT_EQ(m.kv_heads, 2);
  std::filesystem::remove(p);
}

TEST(ModelConfig, BadConfigsGiveOneLineErrors) {
  expect_error(without(base_config(), "hidden_size"), "missing field 'hidden_size'");
  expect_error(without(base_config(), "tie_word_embeddings"), "missing field 'tie_word_embeddings'");
  Json j = base_config();
  j["num_hidden_layers"] = -3;
  expect_error(j, "'num_hidden_layers' must be positive");
  j = base_config();
  j["intermediate_size"] = 0;
  expect_error(j, "'intermediate_size' must be positive");
  j = base_config();
  j["num_attention_heads"] = 3;  // 256 % 3 != 0
  expect_error(j, "num_attention_heads (3) does not divide hidden_size (256)");
  j = base_config();
  j["num_key_value_heads"] = 3;
  expect_error(j, "num_key_value_heads (3) does not divide num_attention_heads (4)");
  j = base_config();
  j["hidden_size"] = 256.5;
  expect_error(j, "must be an integer");
  j = base_config();
  j["hidden_size"] = "256";
  expect_error(j, "'hidden_size' must be an integer");
  j = base_config();
  j["norm"] = "batchnorm";
  expect_error(j, "unknown norm 'batchnorm' (valid: rmsnorm, layernorm, layernorm_nonparam)");
  j = base_config();
  j["activation"] = "relu";
  expect_error(j, "unknown activation 'relu'");
  j = base_config();
  j["vocab_size"] = 1e14;
  expect_error(j, "absurdly large");
  expect_error(Json::array(), "expected a JSON object");
}

TEST(ModelConfig, UnknownNameListsTheValidOnes) {
  try {
    model::load_model("llama9-1t");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown model 'llama9-1t'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama2-7b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("olmo-1b"), std::string::npos) << msg;
  }
  EXPECT_THROW(model::load_model("/nonexistent/dir/model.json"), Error);
}

TEST(ModelConfig, MalformedJsonFileIsOneLineError) {
  const auto p = std::filesystem::temp_directory_path() / "fp8sim_test_bad_model.json";
  std::ofstream(p) << "{\"name\": \"x\", \"hidden_size\": ";
  try {
    model::load_model(p.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  std::filesystem::remove(p);
}

TEST(ModelExpansion, Llama2LayerOpsShapesAndSavedTensors) {
  const ModelConfig m = model::load_model("llama2-7b");
  const auto ops = model::layer_ops(m, 2, 2048);
  std::vector<std::string> names;
  for (const auto& op : ops) names.push_back(op.name);
  const std::vector<std::string> expect = {"attn_norm", "q_proj", "k_proj",        "v_proj",    "rope",
                                           "attention", "o_proj", "attn_residual", "mlp_norm",  "gate_proj",
                                           "up_proj",   "act",    "mul",           "down_proj", "mlp_residual"};
  EXPECT_EQ(names, expect);
  const int64_t T = 4096;
  auto find = [&](const std::string& n) {
    return *std::find_if(ops.begin(), ops.end(), [&](auto& o) { return o.name == n; });
  };
  EXPECT_EQ(find("q_proj").weight_shape, (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(find("down_proj").weight_shape, (std::vector<int64_t>{4096, 11008}));
  EXPECT_EQ(find("down_proj").in_shape, (std::vector<int64_t>{T, 11008}));
  EXPECT_EQ(find("gate_proj").gemm_m(), T);
  EXPECT_EQ(find("gate_proj").gemm_n(), 11008);
  EXPECT_EQ(find("gate_proj").gemm_k(), 4096);
  EXPECT_TRUE(find("o_proj").fp8_gemm_candidate);
  EXPECT_FALSE(find("rope").fp8_gemm_candidate);
  // Every saved name is unique and every also_reads names an earlier saved tensor.
  std::set<std::string> seen;
  for (const auto& op : ops) {
    for (const auto& r : op.also_reads) EXPECT_TRUE(seen.count(r)) << op.name << " reads " << r;
    for (const auto& s : op.saved) EXPECT_TRUE(seen.insert(s.name).second) << s.name;
  }
  // The layer's parameters add up to the config's count.
  int64_t n = 0;
  for (const auto& p : model::layer_params(m)) n += p.numel();
  EXPECT_EQ(n, 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096);
}

TEST(ModelExpansion, GroupedQueryAttentionShrinksKAndV) {
  const ModelConfig m = model::load_model("llama2-70b");  // 64 heads, 8 KV heads, head_dim 128
  const auto ops = model::layer_ops(m, 1, 16);
  for (const auto& op : ops) {
    if (op.name == "k_proj" || op.name == "v_proj") {
      EXPECT_EQ(op.weight_shape, (std::vector<int64_t>{1024, 8192}));
    }
    if (op.name == "attention") {
      ASSERT_GE(op.saved.size(), 3u);
      EXPECT_EQ(op.saved[0].shape, (std::vector<int64_t>{16, 8192}));  // q
      EXPECT_EQ(op.saved[1].shape, (std::vector<int64_t>{16, 1024}));  // k
    }
  }
}

TEST(ModelExpansion, GeluMlpHasNoGateAndNoMul) {
  Json j = base_config();
  j["activation"] = "gelu";
  const ModelConfig m = model::parse_model(j, "gelu.json");
  const auto ops = model::layer_ops(m, 1, 8);
  for (const auto& op : ops) {
    EXPECT_NE(op.name, "gate_proj");
    EXPECT_NE(op.name, "mul");
  }
  EXPECT_EQ(m.layer_param_count(), 256 * 256 * 2 + 2 * 128 * 256 + 2 * 688 * 256 + 2 * 256);
}

TEST(ModelExpansion, OutsideOpsAndBadTokens) {
  const ModelConfig m = model::load_model("olmo-1b");
  const auto ops = model::outside_ops(m, 2, 100);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[2].name, "lm_head");
  EXPECT_EQ(ops[2].out_shape, (std::vector<int64_t>{200, 50304}));
  EXPECT_THROW(model::layer_ops(m, 0, 100), Error);
  EXPECT_THROW(model::layer_ops(m, 1, -5), Error);
}

}  // namespace
}  // namespace fp8sim
