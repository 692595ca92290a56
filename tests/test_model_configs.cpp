// Model configs (models/*.json) and their per-layer expansion (sim/model).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
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
  for (const char* need : {"llama2-7b", "llama2-13b", "llama-30b", "llama2-70b", "llama3-8b", "olmo-1b", "olmo-7b",
                           "tiny-llama", "tinyllama-1.1b"})
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
  EXPECT_EQ(model::load_model("tinyllama-1.1b").param_count(), 1100048384);
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

// ---- plain Hugging Face config.json files (tests/data/hf/<checkpoint>/config.json) ---------------

ModelConfig load_hf(const std::string& checkpoint) {
  return model::load_model(std::string(FP8SIM_TEST_DATA) + "/hf/" + checkpoint + "/config.json");
}

TEST(HuggingFaceConfig, MistralNemoHeadDimDiffersFromHiddenOverHeads) {
  const ModelConfig m = load_hf("Mistral-Nemo-Base-2407");
  EXPECT_EQ(m.name, "Mistral-Nemo-Base-2407");  // no 'name': the checkpoint's folder
  EXPECT_EQ(m.norm, model::NormKind::RMSNorm);  // model_type mistral
  EXPECT_EQ(m.act, model::ActKind::SwiGLU);     // hidden_act silu
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.qkv_bias || m.o_bias || m.mlp_bias);
  EXPECT_EQ(m.head_dim, 128);  // not 5120 / 32 = 160
  EXPECT_EQ(m.q_dim(), 4096);
  EXPECT_EQ(m.kv_dim(), 1024);
  EXPECT_DOUBLE_EQ(m.rope_theta, 1e6);
  EXPECT_EQ(m.max_seq, 1024000);
  // By hand, H = 5120, Q = 32 x 128 = 4096, KV = 8 x 128 = 1024, F = 14336:
  //   per layer: 2 RMSNorm weights 2 x 5120 = 10,240; q 4096 x 5120 = 20,971,520;
  //   k and v 1024 x 5120 = 5,242,880 each; o 5120 x 4096 = 20,971,520;
  //   gate, up, down 3 x 5120 x 14336 = 220,200,960; sum 272,640,000.
  //   40 layers: 10,905,600,000; embedding and untied LM head 2 x 131072 x 5120 = 1,342,177,280;
  //   final norm 5,120. Total 12,247,782,400 (~12.2 B published; reading head_dim as 160 would
  //   give 12,771,545,600 instead).
  EXPECT_EQ(m.layer_param_count(), 272640000);
  EXPECT_EQ(m.param_count(), 12247782400);
  const auto ops = model::layer_ops(m, 1, 16);
  auto find = [&](const std::string& n) {
    return *std::find_if(ops.begin(), ops.end(), [&](auto& o) { return o.name == n; });
  };
  EXPECT_EQ(find("q_proj").weight_shape, (std::vector<int64_t>{4096, 5120}));
  EXPECT_EQ(find("k_proj").weight_shape, (std::vector<int64_t>{1024, 5120}));
  EXPECT_EQ(find("v_proj").weight_shape, (std::vector<int64_t>{1024, 5120}));
  EXPECT_EQ(find("o_proj").weight_shape, (std::vector<int64_t>{5120, 4096}));
  EXPECT_EQ(find("o_proj").in_shape, (std::vector<int64_t>{16, 4096}));
  EXPECT_EQ(find("attention").out_shape, (std::vector<int64_t>{16, 4096}));
  EXPECT_EQ(find("rope").saved[0].shape, (std::vector<int64_t>{16, 4096}));
  EXPECT_EQ(find("attention").saved[3].shape, (std::vector<int64_t>{1, 32, 16}));  // lse (B, heads, S)
  // Every inference is recorded beside the config's own fields.
  ASSERT_TRUE(m.source.is_object());
  EXPECT_NE(m.source.find("norm"), nullptr);
  EXPECT_NE(m.source.find("activation"), nullptr);
}

TEST(HuggingFaceConfig, Qwen2HasQkvBiasesAndTiedEmbeddings) {
  const ModelConfig m = load_hf("Qwen2-0.5B");
  EXPECT_TRUE(m.qkv_bias);  // Qwen2Attention: bias on q/k/v, none on o, no config field
  EXPECT_FALSE(m.o_bias);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);  // rms_norm_eps
  EXPECT_EQ(m.head_dim, 64);
  // By hand, H = 896, Q = 896, KV = 2 x 64 = 128, F = 4864: per layer 2 x 896 (norms)
  //   + 896 x 896 + 896 (q) + 2 x (128 x 896 + 128) (k, v) + 896 x 896 (o) + 3 x 896 x 4864
  //   = 1,792 + 803,712 + 229,632 + 802,816 + 13,074,432 = 14,912,384; 24 layers 357,897,216;
  //   tied embedding 151936 x 896 = 136,134,656; final norm 896. Total 494,032,768 (~0.49 B).
  EXPECT_EQ(m.layer_param_count(), 14912384);
  EXPECT_EQ(m.param_count(), 494032768);
}

TEST(HuggingFaceConfig, GptNeoXIsLayerNormGeluWithBiases) {
  const ModelConfig m = load_hf("pythia-160m");
  EXPECT_EQ(m.norm, model::NormKind::LayerNorm);
  EXPECT_EQ(m.act, model::ActKind::GELU);
  EXPECT_EQ(m.kv_heads, 12);  // no num_key_value_heads: multi-head
  EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias);
  // By hand, H = 768, F = 3072: per layer 2 x 2 x 768 (LayerNorm weight and bias)
  //   + 3 x (768 x 768 + 768) (q, k, v) + 768 x 768 + 768 (o) + 768 x 3072 + 3072 + 3072 x 768 + 768
  //   = 3,072 + 1,771,776 + 590,592 + 4,722,432 = 7,087,872; 12 layers 85,054,464;
  //   untied embedding and head 2 x 50304 x 768 = 77,266,944; final LayerNorm 1,536.
  //   Total 162,322,944 (the Pythia paper's count for Pythia-160M).
  EXPECT_EQ(m.param_count(), 162322944);
}

// A committed model with fp8sim's own keys replaced by what its Hugging Face config.json states
// (model_type and hidden_act instead of norm and activation, no name) is the same model.
// Gemma: a gated GELU MLP (GeGLU, the SwiGLU structure), head_dim 256 independent of the width,
// multi-query attention on the 2B, and tied embeddings by GemmaConfig's default (its config.json
// does not say).
TEST(HuggingFaceConfig, GemmaIsAGatedGeluMlpWithTiedEmbeddingsByDefault) {
  const ModelConfig m = load_hf("gemma-2b");
  EXPECT_EQ(m.norm, model::NormKind::RMSNorm);
  EXPECT_EQ(m.act, model::ActKind::SwiGLU);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_FALSE(m.qkv_bias || m.o_bias || m.mlp_bias);
  EXPECT_EQ(m.q_dim(), 2048);
  EXPECT_EQ(m.kv_dim(), 256);
  // By hand, H = 2048, Q = 8 x 256 = 2048, KV = 1 x 256, F = 16384: per layer 2 norms 4,096;
  //   q and o 2 x 2048 x 2048 = 8,388,608; k and v 2 x 256 x 2048 = 1,048,576; gate, up, down
  //   3 x 2048 x 16384 = 100,663,296; sum 110,104,576. 18 layers 1,981,882,368; tied embedding
  //   256000 x 2048 = 524,288,000; final norm 2,048. Total 2,506,172,416, the published count.
  EXPECT_EQ(m.layer_param_count(), 110104576);
  EXPECT_EQ(m.param_count(), 2506172416);
  // Gemma-7B: H = 3072, Q = KV = 16 x 256 = 4096 (wider than H), F = 24576: per layer 6,144
  //   + 4 x 3072 x 4096 = 50,331,648 + 3 x 3072 x 24576 = 226,492,416, sum 276,830,208; 28 layers
  //   7,751,245,824; embedding 786,432,000; final norm 3,072. Total 8,537,680,896 (published).
  const ModelConfig g7 = load_hf("gemma-7b");
  EXPECT_EQ(g7.q_dim(), 4096);
  EXPECT_EQ(g7.param_count(), 8537680896);
  ASSERT_TRUE(m.source.is_object());
  ASSERT_NE(m.source.find("activation"), nullptr);
  EXPECT_NE(m.source.at("activation").as_string().find("gated GELU"), std::string::npos);
  EXPECT_EQ(m.source.at("tie_word_embeddings").as_string(), "true: model_type 'gemma' default");
}

TEST(HuggingFaceConfig, CommittedModelsFromTheirHuggingFaceKeys) {
  for (const auto& [name, type, eps_key] :
       {std::tuple{"llama2-7b", "llama", "rms_norm_eps"}, std::tuple{"llama3-8b", "llama", "rms_norm_eps"},
        std::tuple{"olmo-1b", "olmo", ""}, std::tuple{"olmo-7b", "olmo", ""}}) {
    const ModelConfig ref = model::load_model(name);
    Json j = Json::parse(read_text_file(model::models_dir() / (std::string(name) + ".json")));
    j = without(without(without(without(without(j, "name"), "norm"), "activation"), "source"), "norm_eps");
    j["model_type"] = type;
    j["hidden_act"] = "silu";
    if (*eps_key) j[eps_key] = ref.norm_eps;
    const ModelConfig m = model::parse_model(j, std::string(name) + "/config.json");
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(m.norm, ref.norm) << name;
    EXPECT_EQ(m.act, ref.act) << name;
    EXPECT_EQ(m.norm_eps, ref.norm_eps) << name;
    EXPECT_EQ(m.head_dim, ref.head_dim) << name;
    EXPECT_EQ(m.param_count(), ref.param_count()) << name;
    EXPECT_EQ(model::model_to_json(m).dump(), model::model_to_json(ref).dump()) << name;
  }
}

TEST(HuggingFaceConfig, AllProblemsInOneLine) {
  Json j = Json::object();
  j["hidden_size"] = 256;
  j["num_attention_heads"] = 0;
  j["vocab_size"] = "many";
  try {
    model::parse_model(j, "mine.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("mine.json: missing fields 'intermediate_size', 'num_hidden_layers', 'norm', 'activation', "
                       "'tie_word_embeddings'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("field 'num_attention_heads' must be positive, not 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("field 'vocab_size' must be an integer"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'name'"), std::string::npos) << "the name comes from the file: " << msg;
  }
}

TEST(HuggingFaceConfig, RefusesWhatTheExpansionDoesNotDescribe) {
  Json j = base_config();
  j = without(without(without(j, "norm"), "activation"), "tie_word_embeddings");
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  EXPECT_EQ(model::parse_model(j, "ok.json").act, model::ActKind::SwiGLU);
  j["hidden_act"] = "gelu";  // a gated GELU MLP (GeGLU)
  expect_error(j, "hidden_act 'gelu' with model_type 'llama' is not modelled (gated MLP)");
  j["hidden_act"] = "silu";
  j["num_local_experts"] = 8;
  expect_error(j, "mixture-of-experts layers ('num_local_experts') are not modelled");
  j = without(j, "num_local_experts");
  j["model_type"] = "gemma";  // Gemma's gated MLP is GELU's
  expect_error(j, "hidden_act 'silu' with model_type 'gemma' is not modelled (gated MLP)");
  j["model_type"] = "phi3";
  expect_error(j,
               "model_type 'phi3' is not one whose norm fp8sim knows (llama, mistral, qwen2, olmo, gpt_neox, gemma)");
  j = without(j, "model_type");
  j["hidden_act"] = "gelu";
  expect_error(j, "hidden_act 'gelu' without a known model_type");
  j = base_config();
  j["head_dim"] = 48;  // 4 x 48 = 192 != 256 is allowed with an explicit head_dim
  j["num_attention_heads"] = 4;
  EXPECT_EQ(model::parse_model(j, "hd.json").q_dim(), 192);
  j["head_dim"] = -1;
  expect_error(j, "field 'head_dim' must be positive");
}

TEST(HuggingFaceConfig, NameFromFileOrFolder) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8sim_test_hf" / "My-Model-1B";
  std::filesystem::create_directories(dir);
  const Json j = without(base_config(), "name");
  std::ofstream(dir / "config.json") << j.dump();
  std::ofstream(dir / "renamed.json") << j.dump();
  EXPECT_EQ(model::load_model((dir / "config.json").string()).name, "My-Model-1B");
  EXPECT_EQ(model::load_model((dir / "renamed.json").string()).name, "renamed");
  std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace fp8sim
