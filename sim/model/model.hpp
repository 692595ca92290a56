#pragma once
// Model configs (models/<name>.json) and their expansion into one decoder layer's operations and
// tensors. Shared by the memory model (sim/memory), the speed replay (sim/speed) and trace capture
// (scripts/capture_trace.py reads the same JSON).
//
// The expansion is recipe-independent: it says WHAT each op keeps for backward (shape, role) in a
// plain BF16 training run; a recipe (sim/memory/recipes.hpp) then says HOW each role is stored
// (fp32, bf16, FP8 per-tensor, FP8 1x16 groups, ...). Tokens are folded: T = batch * seq.
//
// The saved-tensor list follows the COAT paper's Table 2 accounting of a Llama layer:
//   RMSNorm    each pre-norm keeps its input                          (2 norms)
//   SiLU&Mul   SiLU keeps its input (gate output); Mul keeps both inputs (silu output, up output)
//   RoPE       q and k before rotation
//   FlashAttn  rotated q, rotated k, v (+ the fp32 softmax log-sum-exp, an auxiliary tensor)
//   Linear     q/k/v's shared input, o_proj's input (the attention output), gate/up's shared
//              input, down_proj's input (the SwiGLU product)
// A tensor read by several ops (q/k/v read the same normed input) is listed once, on the first op.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::model {

enum class NormKind : uint8_t { RMSNorm, LayerNorm, LayerNormNonParam };
enum class ActKind : uint8_t { SwiGLU, GELU };

std::string_view norm_kind_name(NormKind k);  // "rmsnorm", "layernorm", "layernorm_nonparam"
std::string_view act_kind_name(ActKind k);    // "swiglu", "gelu"

struct ModelConfig {
  std::string name;          // command-line name ("llama2-7b")
  std::string display_name;  // "Llama-2-7B" (= name when the file has none)
  std::string origin;        // the file it was read from ("" when built in code)
  int64_t hidden = 0;        // hidden_size
  int64_t ffn = 0;           // intermediate_size: width of ONE SwiGLU branch
  int64_t layers = 0;        // num_hidden_layers
  int64_t heads = 0;         // num_attention_heads
  int64_t kv_heads = 0;      // num_key_value_heads
  int64_t head_dim = 0;      // hidden / heads
  int64_t vocab = 0;         // vocab_size (as trained, padded if the model pads)
  NormKind norm = NormKind::RMSNorm;
  ActKind act = ActKind::SwiGLU;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections have biases (attention_bias; Qwen2 always)
  bool o_bias = false;    // o_proj has a bias (attention_bias)
  bool mlp_bias = false;  // the MLP's projections have biases (mlp_bias; GPT-NeoX always)
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_seq = 0;  // max_position_embeddings (0 = unknown)
  Json source;          // field -> where the value comes from

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t norm_params() const;        // one norm's parameters (H, 2H or 0)
  int64_t layer_param_count() const;  // one decoder layer
  // One decoder layer's linear weights and biases: what F.linear reads (the layer less its norms).
  int64_t layer_linear_param_count() const { return layer_param_count() - 2 * norm_params(); }
  int64_t embedding_param_count() const { return vocab * hidden; }
  int64_t head_param_count() const { return tied_embeddings ? 0 : vocab * hidden; }  // LM head
  // Parameters outside the decoder layers: embedding, LM head (unless tied), final norm.
  int64_t outside_param_count() const;
  int64_t param_count() const { return layers * layer_param_count() + outside_param_count(); }
};

// Builds a config from JSON: the models/*.json schema, or a plain Hugging Face config.json of a
// Llama, Mistral, Qwen2, OLMo (-hf) or GPT-NeoX model. What the fp8sim schema states and a Hugging
// Face config leaves to the model class is inferred: the norm and MLP from `model_type`, the
// activation from `hidden_act` (SiLU: SwiGLU), biases and tied embeddings from the family's
// defaults, the name from the file (see load_model); `rms_norm_eps` / `layer_norm_eps` give
// norm_eps, `head_dim` the attention width (q_dim() = heads x head_dim may differ from hidden),
// no num_key_value_heads means multi-head. Every inference is recorded in `source`. All problems
// (missing fields, wrong types, non-positive sizes, heads not dividing, unknown norm/activation,
// mixture-of-experts) are reported together in one one-line fp8sim::Error that names `origin`.
// Unknown keys are ignored.
ModelConfig parse_model(const Json& j, const std::string& origin);

// NAME (a file models/NAME.json) or a path to a JSON file (anything containing '/' or ending in
// ".json"). An unknown NAME is an Error listing the valid names. A config without `name` takes the
// file's stem, or for .../NAME/config.json the folder's NAME.
ModelConfig load_model(const std::string& name_or_path);

// The directory of the committed configs: $FP8SIM_MODELS_DIR if set, else <source dir>/models.
std::filesystem::path models_dir();
// Names of the configs in models_dir(), sorted.
std::vector<std::string> list_models();

// ---- the per-layer expansion ------------------------------------------------------------------

enum class OpKind : uint8_t { Embedding, Norm, Linear, Rope, Attention, Activation, Mul, ResidualAdd, LmHead, Loss };
std::string_view op_kind_name(OpKind k);

// Why a tensor is kept for backward. A recipe chooses the storage of each role.
enum class SavedRole : uint8_t {
  NormInput,       // input of a decoder layer's pre-norm (needed for the norm's input gradient)
  NormStats,       // the norm's per-token fp32 statistics (rstd; mean too for LayerNorm)
  LinearInput,     // a Linear's input (needed for the weight gradient); q/k/v and gate/up share one
  AttnOutput,      // attention output = o_proj input (FlashAttention's backward also needs it)
  RopeInput,       // q and k before rotation (Table 2's RoPE column)
  AttnInput,       // rotated q, rotated k, v: FlashAttention's saved inputs
  AttnStats,       // FlashAttention's softmax log-sum-exp, fp32 (batch, heads, seq)
  ActInput,        // SiLU / GELU input
  MulInput,        // the two inputs of the SwiGLU product
  TokenIds,        // embedding lookup indices, int64
  FinalNormInput,  // the final norm's input (outside the layers)
  HeadInput,       // LM head input (the final norm's output)
  Logits,          // LM head output, kept alive by the model's output until backward
  LossBuffer,      // what cross-entropy keeps for backward: fp32 (T, V) log-probabilities
};
std::string_view saved_role_name(SavedRole r);
inline constexpr SavedRole kAllSavedRoles[] = {SavedRole::NormInput,  SavedRole::NormStats,      SavedRole::LinearInput,
                                               SavedRole::AttnOutput, SavedRole::RopeInput,      SavedRole::AttnInput,
                                               SavedRole::AttnStats,  SavedRole::ActInput,       SavedRole::MulInput,
                                               SavedRole::TokenIds,   SavedRole::FinalNormInput, SavedRole::HeadInput,
                                               SavedRole::Logits,     SavedRole::LossBuffer};
// The role whose saved_role_name is `name`, or nullopt.
std::optional<SavedRole> parse_saved_role(std::string_view name);

// The columns of COAT's Table 2 (None: auxiliary tensors and outside-layer tensors).
enum class Table2Column : uint8_t { RMSNorm, SiLUMul, RoPE, FlashAttn, Linear, None };
std::string_view table2_column_name(Table2Column c);
inline constexpr Table2Column kTable2Columns[] = {Table2Column::RMSNorm, Table2Column::SiLUMul, Table2Column::RoPE,
                                                  Table2Column::FlashAttn, Table2Column::Linear};

struct SavedTensor {
  std::string name;  // "attn_norm.input"
  SavedRole role;
  std::vector<int64_t> shape;  // row-major; last dimension is the feature dimension
  Table2Column column;
  int64_t numel() const;
};

struct OpDesc {
  std::string name;  // "q_proj", "attn_norm", ... (unique within the layer)
  OpKind kind;
  std::string block;                         // "attn" | "mlp" (decoder layer), "embed" | "head" (outside)
  std::vector<int64_t> in_shape, out_shape;  // (T, K) -> (T, N) for a Linear
  // Linear / LmHead: the weight as nn.Linear stores it, (N, K); fprop is Y(T,N) = X(T,K) W^T.
  std::vector<int64_t> weight_shape;
  // FP8 recipes run this GEMM in FP8 (decoder-layer Linears; never the LM head).
  bool fp8_gemm_candidate = false;
  std::vector<SavedTensor> saved;       // tensors this op keeps that no earlier op already keeps
  std::vector<std::string> also_reads;  // names of earlier saved tensors this op reuses
  int64_t gemm_m() const { return kind == OpKind::Linear || kind == OpKind::LmHead ? in_shape[0] : 0; }
  int64_t gemm_n() const { return weight_shape.empty() ? 0 : weight_shape[0]; }
  int64_t gemm_k() const { return weight_shape.empty() ? 0 : weight_shape[1]; }
};

struct ParamDesc {
  std::string name;            // "q_proj.weight", "embed_tokens.weight"
  std::vector<int64_t> shape;  // as stored (nn.Linear: (out, in))
  int64_t numel() const;
};

// One decoder layer, in forward order: attn_norm, q_proj, k_proj, v_proj, rope, attention, o_proj,
// attn_residual, mlp_norm, gate_proj, up_proj, act (silu or gelu), mul (SwiGLU only), down_proj,
// mlp_residual. Shapes use T = batch * seq tokens. Throws Error for batch or seq < 1.
std::vector<OpDesc> layer_ops(const ModelConfig& m, int64_t batch, int64_t seq);
// Outside the layers: embedding, final_norm, lm_head, loss.
std::vector<OpDesc> outside_ops(const ModelConfig& m, int64_t batch, int64_t seq);
// Parameters of one decoder layer / of the rest (embedding, final norm, LM head unless tied).
std::vector<ParamDesc> layer_params(const ModelConfig& m);
std::vector<ParamDesc> outside_params(const ModelConfig& m);

// The model as JSON (the schema's keys plus derived counts), for reports.
Json model_to_json(const ModelConfig& m);

}  // namespace fp8sim::model
