#include "sim/memory/framework.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/common/check.hpp"
#include "sim/memory/fsdp2.hpp"

namespace fp8sim::memory {

namespace {

using model::ModelConfig;

// Where the terms come from. Line-level references are to the published sources of these versions.
constexpr const char* kHfLlama = "transformers 5.x models/llama/modeling_llama.py";
constexpr const char* kHf445Llama = "transformers 4.45.2 models/llama/modeling_llama.py";
constexpr const char* kCoat = "fp8-coat 1.0.11 coat/models/coat_llama.py";
constexpr const char* kTorchao = "torchao 0.16 float8/float8_linear.py matmul_with_hp_or_float8_args";
constexpr const char* kTorchRef = "scripts/measure_memory.py Block.forward";
// megatron-te is derived from these sources (TransformerEngine 2.20.0.dev0 at commit d0067d0,
// Megatron-LM with Megatron-Core 0.20.0 at commit d98e8a6), not measured.
constexpr const char* kTe = "TE 2.20.0.dev0 transformer_engine/pytorch/";
constexpr const char* kMc = "Megatron-Core 0.20.0 megatron/core/";
constexpr int64_t kMiB = 1 << 20;

bool repeats_kv(const FrameworkInfo& fw) { return fw.name == "hf-4.45" || fw.name == "hf-eager" || fw.name == "coat"; }

int64_t tensor_bytes(int64_t elements, int bytes_per_element) { return elements * bytes_per_element; }

int64_t lsm_bytes(const std::vector<FrameworkTensor>& outside) {
  for (const auto& t : outside)
    if (t.name == "loss.log_probs") return t.bytes;
  return 0;
}

// What megatron-te's decoder layer keeps for backward (fp8: TE FP8 delayed scaling on the four
// linears). Megatron builds the Llama layer with get_gpt_layer_with_transformer_engine_submodules
// (models/gpt/gpt_layer_specs.py:319-336, MLP via get_mlp_module_spec_for_backend): linear_qkv and
// linear_fc1 are TELayerNormColumnParallelLinear (RMSNorm fused into the GEMM's input),
// core_attention TEDotProductAttention, linear_proj and linear_fc2 TERowParallelLinear, and the
// MLP's SwiGLU is Megatron's fused bias_swiglu_impl. Hidden and attention dropout are 0 (as the
// Llama example, examples/llama/train_llama3_8b_h100_fp8.sh, sets), so the bias-dropout-adds keep
// nothing.
std::vector<FrameworkTensor> megatron_layer_tensors(const ModelConfig& m, int64_t batch, int64_t seq, bool fp8) {
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), KV = m.kv_dim(), NH = m.heads;
  const std::string ln = std::string(kTe) + "module/layernorm_linear.py _LayerNormLinear.forward";
  const std::string lin = std::string(kTe) + "module/linear.py _linear_forward_impl";
  const std::string attn = std::string(kTe) + "attention/dot_product_attention/backends.py FusedAttnFunc.forward";
  std::vector<FrameworkTensor> v;
  auto add = [&](std::string name, std::string dtype, int64_t bytes, std::string source) {
    v.push_back({std::move(name), std::move(dtype), bytes, std::move(source)});
  };
  // The norm output: BF16 saves it for the weight gradient; FP8 has the norm kernel write E4M3
  // directly (input_quantizer, :257) and drops the row-wise copy after the forward GEMM on Hopper
  // (update_usage(rowwise_usage=False), :487), keeping the transposed codes for the wgrad GEMM.
  auto ln_out = [&](const std::string& module) {
    if (fp8)
      add(module + ".ln_out_fp8_t", "e4m3 (transposed)", tensor_bytes(T * H, 1),
          ln + ":257,487,526 the norm writes E4M3; only the transposed copy is saved for wgrad");
    else add(module + ".ln_out", "bf16", tensor_bytes(T * H, 2), ln + ":526 saves the norm output for wgrad");
  };
  add("qkv.norm_input", "bf16", tensor_bytes(T * H, 2), ln + ":526 saves inputmat (the layer input) for the norm");
  add("qkv.rsigma", "fp32", tensor_bytes(T, 4),
      ln + ":257 apply_normalization -> rmsnorm_fwd (csrc/extensions/normalization.cpp:448) returns fp32 rsigma");
  ln_out("qkv");
  add("attention.q_k_v", "bf16", tensor_bytes(T * (Q + 2 * KV), 2),
      attn +
          ":1655 saves q, k, v: q and k are new tensors from the fused RoPE (attention/rope.py FusedRoPEFunc "
          "saves only freqs, :152), v a strided view of the QKV output that get_qkv_layout (dot_product_attention/"
          "utils.py:2613) makes contiguous");
  add("attention.out", "bf16", tensor_bytes(T * Q, 2),
      attn + ":1655 saves its output" +
          (fp8 ? std::string() : "; linear_proj saves the same storage as its input (" + lin + ":621)"));
  add("attention.softmax_stats", "fp32", tensor_bytes(T * NH, 4),
      attn + ":1662 aux_ctx_tensors: cuDNN's fp32 softmax statistics (batch, heads, seq, 1) and the RNG state");
  if (fp8)
    add("proj.input_fp8_t", "e4m3 (transposed)", tensor_bytes(T * Q, 1),
        lin + ":436,616,621 quantizes linear_proj's input, keeps only the transposed codes for wgrad");
  add("fc1.norm_input", "bf16", tensor_bytes(T * H, 2),
      ln + ":526 saves inputmat (the residual after attention) for the norm");
  add("fc1.rsigma", "fp32", tensor_bytes(T, 4), ln + ":257 rmsnorm_fwd's fp32 rsigma");
  ln_out("fc1");
  add("swiglu.input", "bf16", tensor_bytes(T * 2 * F, 2),
      std::string(kMc) +
          "fusions/fused_bias_swiglu.py SwiGLUFunction.forward:232-235 saves its input, linear_fc1's (T, 2 ffn) "
          "output (activation_func_fp8_input_store off)");
  if (fp8)
    add("fc2.input_fp8_t", "e4m3 (transposed)", tensor_bytes(T * F, 1),
        lin + ":436,616,621 quantizes linear_fc2's input (the SwiGLU output), keeps only the transposed codes");
  else add("fc2.input", "bf16", tensor_bytes(T * F, 2), lin + ":621 saves linear_fc2's input, the SwiGLU output");
  return v;
}

// Outside the layers: VocabParallelEmbedding, the final TENorm, Megatron's own (BF16)
// ColumnParallelLinear output layer and the default (unfused) vocab-parallel cross-entropy.
std::vector<FrameworkTensor> megatron_outside_tensors(const ModelConfig& m, int64_t batch, int64_t seq) {
  const int64_t T = batch * seq, H = m.hidden, V = m.vocab;
  const std::string mc = kMc;
  return {{"embedding.ids", "int64", tensor_bytes(T, 8),
           mc + "tensor_parallel/layers.py VocabParallelEmbedding.forward:362 F.embedding saves the token ids"},
          {"final_norm.input", "bf16", tensor_bytes(T * H, 2),
           std::string(kTe) + "ops/basic/rmsnorm.py RMSNorm.op_forward:209 saves x (the last layer's output)"},
          {"final_norm.rstdevs", "fp32", tensor_bytes(T, 4), std::string(kTe) + "ops/basic/rmsnorm.py:209 and rstdevs"},
          {"output_layer.input", "bf16", tensor_bytes(T * H, 2),
           mc + "tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication.forward:604 saves its "
                "input (the final norm output); the output layer runs in BF16 under both recipes"},
          {"loss.softmax", "fp32", tensor_bytes(T * V, 4),
           mc + "tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy.forward: logits.float() (:25), "
                "exp and normalise in place, save the fp32 softmax (:181)"},
          {"loss.target", "bool + int64", tensor_bytes(T, 1) + tensor_bytes(T, 8),
           mc + "tensor_parallel/cross_entropy.py:181 the target mask and the masked targets"}};
}

}  // namespace

bool FrameworkInfo::runs(const std::string& r) const {
  return r == recipe || std::find(other_recipes.begin(), other_recipes.end(), r) != other_recipes.end();
}

const std::vector<FrameworkInfo>& frameworks() {
  // NOT-RECIPES: frameworks; the second field is the one registry recipe each framework runs.
  static const std::vector<FrameworkInfo> list = {
      {"torch", "", "the project's plain PyTorch reference (COAT Table 2's accounting, any recipe)"},
      {"hf", "bf16",
       "Hugging Face transformers 5.x LlamaForCausalLM, SDPA attention, fp32 params + bf16 autocast, fused AdamW, "
       "zero_grad(set_to_none=True)"},
      {"hf-4.45", "bf16", "the same in transformers 4.45.2 (COAT's base): K/V repeated to every head for SDPA"},
      {"hf-eager", "bf16", "transformers 5.x with attn_implementation=\"eager\": attention probabilities saved"},
      {"coat", "coat", "COAT's own code: fp8-coat 1.0.11 CoatLlamaForCausalLM (transformers 4.45.2) + CoatAdamW"},
      {"torchao-float8", "te",
       "the hf model with torchao 0.16's float8 training (convert_to_float8_training: tensorwise dynamic scaling, "
       "every decoder linear in FP8, the LM head in BF16), under torch.compile as torchao prescribes"},
      {"megatron-te",
       "bf16",
       "Megatron-LM GPT (Megatron-Core 0.20) from TransformerEngine 2.20 layers: RMSNorm fused into the QKV/FC1 "
       "linears, fused SwiGLU, cuDNN attention, bf16 params + fp32 main grads/params/Adam; recipe bf16 or te (FP8 "
       "delayed scaling); DERIVED from their source, not measured",
       {"te"}},
  };
  return list;
}

bool models_compile(const std::string& name) {
  return name == "hf" || name == "hf-eager" || name == "torchao-float8" || name == "torch";
}

bool models_ddp(const std::string& name) { return name == "hf" || name == "hf-eager" || name == "hf-4.45"; }

bool models_fsdp2(const std::string& name) { return name == "torch" || name == "hf" || name == "hf-eager"; }

const FrameworkInfo& find_framework(const std::string& name) {
  for (const auto& f : frameworks())
    if (f.name == name) return f;
  std::string names;
  for (const auto& f : frameworks()) names += (names.empty() ? "" : ", ") + f.name;
  throw UsageError(fmt::format("unknown framework '{}' (one of: {})", name, names));
}

std::vector<FrameworkTensor> framework_layer_tensors(const FrameworkInfo& fw, const ModelConfig& m, int64_t batch,
                                                     int64_t seq, const std::string& recipe, bool bf16_params) {
  if (fw.name == "megatron-te") return megatron_layer_tensors(m, batch, seq, recipe == "te");
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), NH = m.heads;
  const int64_t KV = repeats_kv(fw) ? Q : m.kv_dim();
  std::vector<FrameworkTensor> v;
  auto add = [&](std::string name, std::string dtype, int64_t bytes, std::string source) {
    v.push_back({std::move(name), std::move(dtype), bytes, std::move(source)});
  };
  if (fw.name == "coat") {
    // COAT's fused modules keep FP8 copies with 1x16 bf16 group scales (group_size 16).
    const std::string at = kCoat;
    add("attn_residual.input_fp8", "e4m3 + bf16 1x16 scales", tensor_bytes(T * H, 1) + tensor_bytes(T * H / 16, 2),
        at + ":272 _CoatLlamaBeforeAttentionResidual saves the layer input in FP8 with its group scales");
    add("attn_norm.output_t_fp8", "e4m3", tensor_bytes(T * H, 1),
        at + ":272 the normalised input, transposed FP8, for the q/k/v weight gradients");
    add("attn_norm.rstd", "fp32", tensor_bytes(T, 4), at + ":280 the RMSNorm rstd on ctx");
    add("attention.qkv", "bf16", tensor_bytes(T * (Q + 2 * KV), 2),
        std::string(kHf445Llama) + " LlamaSdpaAttention: SDPA saves q, repeat_kv(k), repeat_kv(v)");
    add("attention.out", "bf16", tensor_bytes(T * Q, 2), at + ":440 the attention output, o_proj's input");
    add("attention.lse", "fp32", tensor_bytes(T * NH, 4), "torch flash attention's log-sum-exp");
    add("mlp_residual.input_fp8", "e4m3 + bf16 1x16 scales", tensor_bytes(T * H, 1) + tensor_bytes(T * H / 16, 2),
        at + ":665 _CoatLlamaMLPResidual saves its input in FP8 with its group scales");
    add("mlp_norm.output_t_fp8", "e4m3", tensor_bytes(T * H, 1), at + ":665 the normalised input, transposed FP8");
    add("mlp_norm.rstd", "fp32", tensor_bytes(T, 4), at + ":677 the RMSNorm rstd on ctx");
    add("mlp.gate_up_silu_fp8", "e4m3 + bf16 1x16 scales", 3 * (tensor_bytes(T * F, 1) + tensor_bytes(T * F / 16, 2)),
        at + ":665 gate, up and SiLU outputs in FP8 with their group scales");
    add("mlp.product_t_fp8", "e4m3", tensor_bytes(T * F, 1), at + ":665 SiLU x up, transposed FP8, for down_proj");
    return v;
  }
  const std::string src = fw.name == "hf-4.45" ? kHf445Llama : kHfLlama;
  for (const char* norm : {"attn_norm", "mlp_norm"}) {
    if (bf16_params) {
      add(fmt::format("{}.input", norm), "fp32", tensor_bytes(T * H, 4),
          src +
              " LlamaRMSNorm.forward: hidden_states.to(float32) makes an fp32 copy of the bf16 residual stream, "
              "which pow(2) and the rsqrt product save");
      add(fmt::format("{}.rstd", norm), "fp32", tensor_bytes(T, 4), src + " LlamaRMSNorm.forward: rsqrt's output");
      add(fmt::format("{}.normalised", norm), "bf16", tensor_bytes(T * H, 2),
          src + " LlamaRMSNorm.forward: weight * x.to(bfloat16) saves the bf16 normalised x");
      add(fmt::format("{}.output", norm), "bf16", tensor_bytes(T * H, 2),
          std::string(norm) == "attn_norm" ? "the bf16 norm output, one storage saved by q_proj, k_proj and v_proj"
                                           : "the bf16 norm output, one storage saved by gate_proj and up_proj");
      continue;
    }
    add(fmt::format("{}.input", norm), "fp32", tensor_bytes(T * H, 4),
        src + " LlamaRMSNorm.forward: pow(2) saves the fp32 residual-stream input");
    add(fmt::format("{}.rstd", norm), "fp32", tensor_bytes(T, 4), src + " LlamaRMSNorm.forward: rsqrt's output");
    add(fmt::format("{}.normalised", norm), "fp32", tensor_bytes(T * H, 4),
        src + " LlamaRMSNorm.forward: weight * x saves the fp32 normalised x for the weight gradient");
    if (std::string(norm) == "attn_norm")
      add("q_k_v_proj.inputs", "bf16", 3 * tensor_bytes(T * H, 2),
          "torch.autocast casts the fp32 norm output to bf16 separately for each of q_proj, k_proj, v_proj");
  }
  if (fw.name == "hf-eager") {
    add("attention.q_k_v", "bf16", tensor_bytes(T * 3 * Q, 2),
        src + " eager_attention_forward: matmuls save q, repeat_kv(k), repeat_kv(v)");
    add("attention.probs_fp32", "fp32", tensor_bytes(batch * NH * seq * seq, 4),
        src + " eager_attention_forward: softmax(dtype=float32) saves its output");
    add("attention.probs_bf16", "bf16", tensor_bytes(batch * NH * seq * seq, 2),
        src + " eager_attention_forward: .to(query.dtype) copy saved by the matmul with v");
    add("o_proj.input", "bf16", tensor_bytes(T * Q, 2), src + " attn_output.transpose(1, 2).contiguous(): a copy");
  } else {
    add("attention.q_k_v", "bf16", tensor_bytes(T * (Q + 2 * KV), 2),
        fw.name == "hf-4.45" ? src + " LlamaSdpaAttention: repeat_kv(k), repeat_kv(v), then SDPA saves q, k, v"
                             : src + " sdpa_attention_forward (enable_gqa): SDPA saves q, k, v");
    add("attention.out", "bf16", tensor_bytes(T * Q, 2),
        "SDPA (flash) saves its output; it is laid out (B, S, heads, dim), so transpose(1, 2).contiguous() is "
        "a view and o_proj saves the same storage");
    add("attention.lse", "fp32", tensor_bytes(T * NH, 4), "flash attention's log-sum-exp, fp32 (B, heads, S)");
  }
  if (!bf16_params)
    add("gate_up_proj.inputs", "bf16", 2 * tensor_bytes(T * H, 2),
        "torch.autocast casts the fp32 norm output to bf16 separately for gate_proj and up_proj");
  add("mlp.gate_silu_up_product", "bf16", 4 * tensor_bytes(T * F, 2),
      src +
          " LlamaMLP: SiLU saves gate_proj's output, the product saves SiLU's and up_proj's outputs, "
          "down_proj saves the product");
  return v;
}

namespace {

std::vector<FrameworkTensor> compiled_layer_tensors(const FrameworkInfo& fw, const ModelConfig& m, int64_t batch,
                                                    int64_t seq) {
  // What Inductor's min-cut partitioner keeps for transformers' layer (torch 2.11, measured on the
  // H200 to within 1% of the per-token bytes on six configurations): the fp32 norm inputs and
  // rstd, ONE bf16 cast of each norm output (the per-projection casts are merged), q/k/v at full
  // head width (the compiled SDPA path repeats K/V), the attention output and log-sum-exp, and
  // three (T, ffn) bf16 tensors of the MLP; norms and the SwiGLU product are recomputed.
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), NH = m.heads;
  const std::string why = "torch.compile (Inductor min-cut partitioner)";
  if (fw.name == "torchao-float8") {
    // torchao's float8 linears read E4M3/E5M2 copies made by a cast with a tensorwise scale: a
    // pointwise function of a tensor the partitioner keeps anyway. So the bf16 norm outputs, the
    // SiLU output and the SwiGLU product are not kept (their FP8 casts are recomputed in backward
    // from the norm inputs and rstd, and from gate/up); q/k/v and the attention output stay for
    // SDPA's backward (o_proj's FP8 input is recast from the latter).
    const std::string ao = std::string(kTorchao) + " with " + why;
    return {
        {"norm_inputs", "fp32", 2 * T * H * 4, ao + ": both norms' fp32 inputs (the FP8 GEMM inputs recomputed)"},
        {"norm_rstd", "fp32", 2 * T * 4, ao + ": both norms' rstd"},
        {"attention.q_k_v", "bf16", 3 * T * Q * 2, ao + ": q, k, v at full head width"},
        {"attention.out", "bf16", T * Q * 2, ao + ": the attention output (SDPA backward; o_proj's FP8 input recast)"},
        {"attention.lse", "fp32", T * NH * 4, "flash attention's log-sum-exp"},
        {"mlp", "bf16", 2 * T * F * 2,
         ao + ": gate_proj's and up_proj's outputs (SiLU, the product and down_proj's FP8 input recomputed)"}};
  }
  std::vector<FrameworkTensor> v{{"norm_inputs", "fp32", 2 * T * H * 4, why + ": both norms' fp32 inputs"},
                                 {"norm_rstd", "fp32", 2 * T * 4, why + ": both norms' rstd"},
                                 {"norm_outputs", "bf16", 2 * T * H * 2, why + ": one bf16 cast of each norm output"},
                                 {"attention.q_k_v", "bf16", 3 * T * Q * 2, why + ": q, k, v at full head width"},
                                 {"attention.out", "bf16", T * Q * 2, why + ": the attention output (o_proj's input)"}};
  if (fw.name == "hf-eager") {
    // The eager attention's matmuls and softmax are ordinary ops to Inductor, which keeps the
    // probabilities as eager mode does rather than recompute the (B, heads, S, S) scores.
    const int64_t scores = batch * NH * seq * seq;
    v.push_back(
        {"attention.probs_fp32", "fp32", scores * 4,
         why + ": softmax(dtype=float32)'s output, kept as in eager mode (" + kHfLlama + " eager_attention_forward)"});
    v.push_back({"attention.probs_bf16", "bf16", scores * 2, why + ": its bf16 copy, the matmul with v's input"});
  } else {
    v.push_back({"attention.lse", "fp32", T * NH * 4, "flash attention's log-sum-exp"});
  }
  v.push_back({"mlp", "bf16", 3 * T * F * 2, why + ": gate_proj's and up_proj's outputs and the SiLU output"});
  return v;
}

std::vector<FrameworkTensor> compiled_outside_tensors(const ModelConfig& m, int64_t batch, int64_t seq) {
  const int64_t T = batch * seq;
  return {{"final_norm.input", "fp32", T * m.hidden * 4, "torch.compile: the final norm's fp32 input"},
          {"final_norm.rstd", "fp32", T * 4, "torch.compile: its rstd"},
          {"logits", "bf16", T * m.vocab * 2,
           "torch.compile: the bf16 logits; log_softmax is fused into the loss and recomputed in backward"}};
}

}  // namespace

std::vector<FrameworkTensor> framework_outside_tensors(const FrameworkInfo& fw, const ModelConfig& m, int64_t batch,
                                                       int64_t seq, bool bf16_params) {
  if (fw.name == "megatron-te") return megatron_outside_tensors(m, batch, seq);
  const int64_t T = batch * seq, H = m.hidden, V = m.vocab;
  const std::string src = fw.name == "hf" || fw.name == "hf-eager" ? kHfLlama : kHf445Llama;
  std::vector<FrameworkTensor> v;
  if (fw.name == "coat") {
    const std::string at = kCoat;
    v.push_back({"final_norm.input", "fp32", tensor_bytes(T * H, 4), at + " CoatLlamaModel: model.norm's fp32 input"});
    v.push_back({"final_norm.rstd", "fp32", tensor_bytes(T, 4), "LlamaRMSNorm's rsqrt output"});
    v.push_back({"final_norm.normalised", "bf16", tensor_bytes(T * H, 2), "LlamaRMSNorm's bf16 normalised copy"});
    v.push_back({"lm_head.input", "bf16", tensor_bytes(T * H, 2), "torch.autocast's bf16 cast of lm_head's input"});
    v.push_back({"loss.log_probs", "fp32", tensor_bytes(T * V, 4),
                 std::string(kHf445Llama) + " LlamaForCausalLM.forward: CrossEntropyLoss on the fp32 logits"});
    return v;
  }
  v.push_back({"final_norm.input", "fp32", tensor_bytes(T * H, 4),
               src + (bf16_params ? " LlamaRMSNorm (model.norm): the fp32 copy of the bf16 residual stream"
                                  : " LlamaRMSNorm (model.norm)")});
  v.push_back({"final_norm.rstd", "fp32", tensor_bytes(T, 4), src + " LlamaRMSNorm (model.norm)"});
  v.push_back({"final_norm.normalised", bf16_params ? "bf16" : "fp32", tensor_bytes(T * H, bf16_params ? 2 : 4),
               src + " LlamaRMSNorm: weight * x"});
  v.push_back({"lm_head.input", "bf16", tensor_bytes(T * H, 2),
               bf16_params ? "the bf16 final norm output" : "torch.autocast's bf16 cast of lm_head's input"});
  v.push_back({"loss.log_probs", "fp32", tensor_bytes(T * V, 4),
               "cross_entropy on logits.float(): log_softmax saves its fp32 output"});
  return v;
}

std::vector<FrameworkTensor> torch_compiled_layer_tensors(const ModelConfig& m, int64_t batch, int64_t seq) {
  // The same partition as transformers' compiled layer (compiled_layer_tensors) with one
  // difference: the reference calls SDPA with enable_gqa, so K and V are saved at their own width
  // rather than repeated to every head. Derived from the H200 runs' per-token bytes (1 B MHA and
  // Llama-3-8B layers), not from Inductor's source.
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), KV = m.kv_dim(), NH = m.heads;
  const std::string why = std::string(kTorchRef) + " under torch.compile (Inductor min-cut partitioner)";
  return {{"norm_inputs", "fp32", 2 * T * H * 4, why + ": both norms' fp32 inputs (the residual stream)"},
          {"norm_rstd", "fp32", 2 * T * 4, why + ": both norms' rsqrt outputs"},
          {"norm_outputs", "bf16", 2 * T * H * 2,
           why + ": norm(x).to(bfloat16), one per norm, read by q/k/v_proj and by gate/up_proj"},
          {"attention.q_k_v", "bf16", T * (Q + 2 * KV) * 2,
           why + ": SDPA's q and k (after RoPE) and v; enable_gqa, so K and V at their own width"},
          {"attention.out", "bf16", T * Q * 2, why + ": SDPA's output, o_proj's input"},
          {"attention.lse", "fp32", T * NH * 4, "flash attention's log-sum-exp, fp32 (B, heads, S)"},
          {"mlp", "bf16", 3 * T * F * 2, why + ": gate_proj's and up_proj's outputs and the SiLU output"}};
}

namespace {

// megatron-te: Megatron-LM's pretrain_gpt.py loop on one GPU (tensor, pipeline and context parallel
// 1), --bf16, the default fp32 gradient accumulation, gradient_accumulation_fusion, TE FusedAdam
// through Megatron's mixed-precision (or distributed) optimizer; recipe te adds --fp8-format hybrid
// with delayed scaling, the amax history as the recipe gives it (1024, as Megatron's Llama FP8
// example sets). Derived from the sources named in each term, not measured.
Footprint megatron_footprint(const ModelConfig& m, const MemoryOptions& o) {
  if (m.norm != model::NormKind::RMSNorm || m.act != model::ActKind::SwiGLU)
    throw UsageError("framework megatron-te models Llama layers (RMSNorm, SwiGLU); use --framework torch");
  const bool fp8 = o.recipe == "te";
  Footprint f;
  f.model = m;
  f.opts = o;
  f.opts.zero = 0;
  f.opts.grads_persist = true;  // Megatron's grad buffer is allocated once and never freed
  f.params = m.param_count();
  const int64_t P = f.params, L = m.layers, T = o.batch * o.seq, V = m.vocab, H = m.hidden, F = m.ffn;
  const std::string mc = kMc;
  f.persistent.push_back({"model_params", "weights", P * 2,
                          "bf16 parameters (--bf16), views into Megatron DDP's contiguous buffer (" + mc +
                              "distributed/param_and_grad_buffer.py)"});
  f.persistent.push_back({"main_params", "weights", P * 4,
                          "fp32 main copy of every bf16 parameter (" + mc +
                              "optimizer/distrib_optimizer.py _build_model_and_main_param_groups:445 clone().float(); "
                              "the non-distributed Float16OptimizerWithFloat16Params keeps the same)"});
  f.persistent.push_back(
      {"main_grads", "gradients", P * 4,
       "fp32 main_grad buffer (" + mc +
           "distributed/param_and_grad_buffer.py:924 grad_dtype fp32; megatron/training/arguments.py:1216 "
           "accumulates bf16 models' grads in fp32), allocated at wrap time and resident in every phase; TE's wgrad "
           "GEMMs accumulate into it (gradient_accumulation_fusion), the optimizer reads it as a view "
           "(distrib_optimizer.py:2792 .float() of fp32 is no copy)"});
  f.persistent.push_back({"optimizer_states", "optimizer", P * 8,
                          "Adam exp_avg + exp_avg_sq fp32 (TE FusedAdam, " + mc +
                              "optimizer/__init__.py:14); with the above 18 B per parameter, as Megatron's "
                              "docs/user-guide/features/dist_optimizer.md:19 tabulates for one GPU"});
  f.persistent.push_back({"optimizer_metadata", "optimizer", 0, "none: plain fp32 moments"});
  // The decoder layers' four linears (qkv, proj, fc1, fc2) without the fused norms' weights.
  const int64_t linear_params = m.layer_linear_param_count();
  if (fp8) {
    f.persistent.push_back(
        {"fp8_weight_cache", "weights", L * linear_params * 2,
         std::string("E4M3 weight + its transpose per decoder linear (Hopper has no non-TN FP8 GEMM), cached in the "
                     "module's _fp8_workspaces across steps because Megatron passes is_first_microbatch (") +
             mc + "extensions/transformer_engine.py TELinear.forward:1336-1345; " + kTe +
             "module/linear.py:1958,2071, module/base.py quantize_weight:792); forward saves the same storage"});
    // Per TE module (one GEMM each, four per layer): 3 forward + 2 backward quantizers, each with
    // an amax history of `te_amax_history` fp32 and one fp32 scale.
    const int64_t hist = find_recipe(o.recipe).memory->te_amax_history;
    f.persistent.push_back({"fp8_scaling_state", "other", L * 4 * 5 * (hist + 1) * 4,
                            fmt::format("delayed scaling: per TE module 3 forward + 2 backward quantizers ({}module/"
                                        "base.py set_meta_tensor:1139), each an amax history of {} fp32 and a "
                                        "scale (quantization.py DelayedScalingRecipeState:1437), 4 modules per layer",
                                        kTe, hist)});
  }
  f.persistent.push_back({"gemm_workspace", "other", 32 * kMiB + 1024 + 32 * kMiB,
                          std::string("TE's cuBLAS workspace, 32 MiB + 1 KiB on Hopper (") + kTe +
                              "cpp_extensions/gemm.py get_cublas_workspace_size_bytes:40), and PyTorch's 32 MiB for "
                              "the output layer's matmul"});

  const std::vector<FrameworkTensor> layer = megatron_layer_tensors(m, o.batch, o.seq, fp8);
  const std::vector<FrameworkTensor> outside = megatron_outside_tensors(m, o.batch, o.seq);
  int64_t layer_bytes = 0;
  for (const auto& t : layer) layer_bytes += t.bytes;
  f.layer_activation_bytes = layer_bytes;
  f.unit_u_bytes = T * H * 2;
  if (!o.checkpointing) {
    for (const auto& t : layer)
      f.activations.push_back({fmt::format("layers.{}", t.name), "activations", t.bytes * L,
                               fmt::format("{} layers x {} {}: {}", L, t.dtype, t.name, t.source)});
  } else {
    f.activations.push_back(
        {"layers.checkpointed_inputs", "activations", L * T * H * 2,
         fmt::format("{} layers x the bf16 layer input Megatron's full recompute keeps ({}transformer/"
                     "transformer_block.py TransformerBlock.forward:663 checkpointed_forward)",
                     L, mc)});
  }
  for (const auto& t : outside)
    f.activations.push_back({fmt::format("outside.{}", t.name), "activations", t.bytes, t.dtype + ": " + t.source});
  f.sum_groups();

  const int64_t resident = f.weights + f.gradients + f.optimizer() + f.other_persistent;
  const int64_t TV = T * V;
  Phase fwd{"forward_loss",
            "cross-entropy in forward: every saved tensor, the bf16 logits beside their fp32 copy",
            resident + f.activations_total,
            {}};
  fwd.temporaries.push_back({"logits", "temporaries", TV * 2,
                             "the output layer's bf16 logits, alive while the loss makes its fp32 copy (" + mc +
                                 "tensor_parallel/cross_entropy.py:25)"});
  Phase loss{"backward_loss", "cross-entropy backward: all activations alive", resident + f.activations_total, {}};
  loss.temporaries.push_back({"loss_grad_bf16", "temporaries", TV * 2,
                              "the logits gradient is formed in place in the saved fp32 softmax (cross_entropy.py:88); "
                              ".float()'s backward casts it to bf16 for the output layer"});
  // Backward of the first layer: the other layers' saved tensors are freed; the grad buffer is
  // resident throughout, so no gradient appears here.
  Phase bwd{"backward_layers",
            "backward of the first decoder layer: its saved tensors and the MLP working set",
            resident,
            {}};
  bwd.temporaries.push_back(
      {"layer0_activations", "temporaries", layer_bytes,
       o.checkpointing ? "the first layer's saved tensors, recomputed" : "the first layer's saved tensors"});
  if (o.checkpointing)
    bwd.temporaries.push_back({"layer0_input", "temporaries", T * H * 2, "its checkpointed bf16 input"});
  bwd.temporaries.push_back(
      {"backward_working_set", "temporaries", fp8 ? T * (8 * F + 4 * H) : T * (6 * F + 4 * H),
       fp8 ? "linear_fc1 backward: the bf16 gradient of its (T, 2 ffn) output and its E5M2 row-wise and transposed "
             "copies for the dgrad and wgrad GEMMs, beside two bf16 residual-stream gradients"
           : "SwiGLU backward: the bf16 gradients of its (T, ffn) output and (T, 2 ffn) input, beside two bf16 "
             "residual-stream gradients"});
  Phase opt{"optimizer_step", "optimizer step: activations freed; TE FusedAdam updates in place", resident, {}};
  f.phases = {fwd, loss, bwd, opt};
  f.pick_peak();
  return f;
}

}  // namespace

Footprint framework_footprint(const ModelConfig& m, const MemoryOptions& o) {
  const FrameworkInfo& fw = find_framework(o.framework);
  // Several GPUs: transformers' eager model under DDP (its buckets are the only addition per
  // rank) or FSDP2 (transformers 5.x: sharded states, FSDP2's buffers; with bf16 parameters the
  // layers keep other tensors, below).
  const bool fsdp2 = o.zero == 3 && o.fsdp == 2;
  const bool ddp = o.gpus > 1 && !fsdp2;
  const bool sharded_ok = fsdp2 ? models_fsdp2(fw.name) : models_ddp(fw.name) && o.zero == 0;
  if ((ddp || fsdp2) && !(sharded_ok && !o.compiled))
    throw UsageError(fmt::format(
        "framework {} is modelled on one GPU{}; use --framework torch for sharded runs", fw.name,
        models_ddp(fw.name) ? " and, eager, under DDP (--zero 0) or, for hf and hf-eager, FSDP2 (--fsdp 2)" : ""));
  // FSDP2 with MixedPrecisionPolicy(param_dtype=bf16): the layers run on bf16 parameters, and the
  // residual stream is bf16 (fp32 under autocast on fp32 parameters).
  const bool bf16_params = fsdp2 && !o.fsdp_gather_fp32;
  const int64_t residual_bytes = bf16_params ? 2 : 4;
  if (!fw.runs(o.recipe)) {
    std::string recipes = fw.recipe;
    for (const auto& r : fw.other_recipes) recipes += " or " + r;
    throw UsageError(fmt::format("framework {} runs the {} recipe (give --recipe {})", fw.name, recipes, recipes));
  }
  if (o.compiled && !models_compile(fw.name))
    throw UsageError(fmt::format(
        "torch.compile is modelled for the hf, hf-eager, torchao-float8 and torch profiles only, not {}", fw.name));
  const bool torchao = fw.name == "torchao-float8";
  if (torchao && !o.compiled)
    throw UsageError(
        "framework torchao-float8 is modelled under torch.compile, as torchao's float8 training runs; "
        "add --compile");
  if (fw.name == "megatron-te") return megatron_footprint(m, o);
  // Parameters, gradients and optimizer states as the recipe stores them: the torch reference's
  // persistent terms on one GPU without a working-weight copy (autocast's copies are counted below).
  MemoryOptions ref = o;
  // torchao's dynamic tensorwise scaling keeps no amax history; its fp32 parameters, gradients
  // and moments are the BF16 recipe's.
  if (torchao) ref.recipe = "bf16";
  ref.framework = "torch";
  ref.compiled = false;
  ref.gpus = fsdp2 ? o.gpus : 1;
  ref.zero = 3;
  ref.checkpointing = false;
  ref.grads_persist = true;
  const Footprint base = compute_footprint(m, ref);
  Footprint f;
  f.model = m;
  f.opts = o;
  if (!fsdp2) f.opts.zero = 0;  // one GPU or DDP: nothing sharded
  f.params = base.params;
  for (const auto& c : base.persistent)
    if (c.name != "working_weights") f.persistent.push_back(c);
  if (ddp)
    f.persistent.push_back({"ddp_buckets", "other", f.params * 4,
                            "DDP's all-reduce bucket buffers: fp32 (the parameters' dtype), allocated when DDP is "
                            "built (gradient_as_bucket_view=False)"});

  const int64_t T = o.batch * o.seq, V = m.vocab, L = m.layers;
  // Every nn.Linear weight is cast to bf16 once per step by autocast and kept for backward
  // (the autocast weight cache): all layers' and the LM head's.
  const int64_t linear_params = m.layer_linear_param_count();
  const int64_t head_params = m.vocab * m.hidden;
  const bool coat = fw.name == "coat";
  // COAT's and torchao's linears cast the fp32 weights to FP8 themselves; only the LM head goes
  // through autocast.
  const bool own_weight_casts = coat || torchao;
  // With bf16 parameters (FSDP2) the linears read FSDP2's unsharded bf16 parameters: no copies.
  // Gathering fp32 under FSDP2, autocast's copies follow each layer's forward and backward, as
  // FSDP2's phases count them (fsdp2.hpp), not a persistent term.
  const int64_t layer_copies = own_weight_casts || bf16_params ? 0 : linear_params * 2;
  const int64_t head_copy = bf16_params ? 0 : head_params * 2;
  const int64_t copies = fsdp2 ? 0 : (o.checkpointing || own_weight_casts ? head_copy : L * layer_copies + head_copy);
  f.persistent.push_back(
      {"autocast_weight_copies", "weights", copies,
       bf16_params        ? "none: the linears read FSDP2's unsharded bf16 parameters (its buffers, below)"
       : fsdp2            ? "none kept for the step: autocast's copies of FSDP2's gathered fp32 weights are "
                            "temporaries of each layer's forward and backward"
       : o.checkpointing  ? "bf16 copy of the LM head weight (torch.autocast's cache); checkpointed "
                            "layers cast theirs again when recomputed"
       : own_weight_casts ? "bf16 copy of the LM head weight (torch.autocast's cache); the decoder linears cast their "
                            "fp32 weights to FP8 per GEMM and keep no copy"
                          : "bf16 copies of every Linear weight (torch.autocast's cache), kept for backward"});
  const std::vector<FrameworkTensor> layer = o.compiled
                                                 ? compiled_layer_tensors(fw, m, o.batch, o.seq)
                                                 : framework_layer_tensors(fw, m, o.batch, o.seq, "", bf16_params);
  const std::vector<FrameworkTensor> outside = o.compiled
                                                   ? compiled_outside_tensors(m, o.batch, o.seq)
                                                   : framework_outside_tensors(fw, m, o.batch, o.seq, bf16_params);
  int64_t layer_bytes = 0;
  for (const auto& t : layer) layer_bytes += t.bytes;
  f.layer_activation_bytes = layer_bytes;
  f.unit_u_bytes = T * m.hidden * 2;
  if (!o.checkpointing) {
    for (const auto& t : layer)
      f.activations.push_back({fmt::format("layers.{}", t.name), "activations", t.bytes * L,
                               fmt::format("{} layers x {} {}: {}", L, t.dtype, t.name, t.source)});
  } else {
    // COAT's layers pass three tensors (bf16 residual, its FP8 copy and the 1x16 scales) that
    // its checkpoint keeps; transformers' layers pass the residual stream (fp32, or bf16 on bf16
    // parameters).
    const int64_t per_token = coat ? 2 * m.hidden + m.hidden + m.hidden / 8 : residual_bytes * m.hidden;
    f.activations.push_back({"layers.checkpointed_inputs", "activations", L * T * per_token,
                             fmt::format("{} layers x the layer inputs torch.utils.checkpoint keeps", L)});
    if (fw.name == "hf-eager")
      f.activations.push_back({"layers.causal_mask", "activations", o.batch * o.seq * o.seq * residual_bytes,
                               "the 4-D causal mask eager attention builds in the embeddings' dtype, an input every "
                               "checkpointed layer keeps (one storage)"});
  }
  for (const auto& t : outside)
    f.activations.push_back({fmt::format("outside.{}", t.name), "activations", t.bytes, t.dtype + ": " + t.source});
  f.sum_groups();
  // zero_grad(set_to_none=True): gradients exist from their first accumulation in backward
  // until the next zero_grad; the forward pass runs without them.
  const int64_t resident = f.weights + f.optimizer() + f.other_persistent;
  const int64_t TV = T * V;
  // In forward the loss holds the bf16 logits and their fp32 upcast (5.x) -- 4.45.2's forward
  // also makes the shifted contiguous fp32 copy -- beside log_softmax's output.
  const bool v445 = fw.name == "hf-4.45" || fw.name == "coat";
  Phase fwd{"forward_loss",
            "cross-entropy in forward: every saved tensor and the logits alive",
            resident + f.activations_total,
            {}};
  // Checkpointed layers' autocast casts: nothing saves them for backward, but autocast's cache
  // holds them until it exits, after the loss.
  if (o.checkpointing && layer_copies > 0 && !o.compiled && !fsdp2)
    fwd.temporaries.push_back({"autocast_layer_casts", "temporaries", L * layer_copies,
                               "torch.autocast's cache of the checkpointed layers' bf16 weight casts, freed when "
                               "autocast exits"});
  if (!o.compiled)
    fwd.temporaries.push_back({"logits", "temporaries", v445 ? TV * 8 : TV * 6,
                               v445 ? "fp32 logits (lm_head output .float()) and their shifted contiguous copy"
                                    : "bf16 logits and their fp32 upcast (loss_utils ForCausalLMLoss)"});
  // The final norm's output: LlamaRMSNorm returns weight * x.to(input_dtype), which an fp32 weight
  // promotes to fp32, and LlamaForCausalLM.forward holds it (the base model's output) until it
  // returns, after the loss. Nothing saves it for backward. On bf16 parameters it is the LM head's
  // bf16 input, counted above.
  if (!o.compiled && !bf16_params)
    fwd.temporaries.push_back({"final_norm_output", "temporaries", T * m.hidden * 4,
                               "the final RMSNorm's fp32 output (fp32 weight x normalised), held by the causal-LM "
                               "forward through the LM head and the loss"});
  Phase loss{"backward_loss", "cross-entropy backward: all activations alive", resident + f.activations_total, {}};
  if (o.compiled)
    loss.temporaries.push_back({"loss_grads", "temporaries", TV * 4, "the fused loss backward's fp32 logits gradient"});
  else
    loss.temporaries.push_back({"loss_grads", "temporaries", TV * 8,
                                "nll_loss's dense fp32 gradient + log_softmax's fp32 input gradient (tokens x vocab)"});
  // Backward of layer 0 (the last): every other gradient exists, the other layers' activations
  // and weight copies are freed; layer 0's are alive (recomputed, with its weight copy, when
  // checkpointed).
  // The embedding's gradient (untied) is made by the very last backward op, after layer 0's.
  const int64_t grad_bytes_per_param = f.gradients / std::max<int64_t>(1, f.params);
  const int64_t layer_grads =
      grad_bytes_per_param * (m.layer_param_count() + (m.tied_embeddings ? 0 : m.embedding_param_count()));
  Phase bwd{"backward_layers",
            "backward of the first decoder layer: the gradients of the other layers and the LM head allocated",
            f.weights - copies + f.optimizer() + f.other_persistent + (f.gradients - layer_grads),
            {}};
  bwd.temporaries.push_back(
      {"layer0_weight_copies", "temporaries", layer_copies, "the first layer's bf16 weight copies (autocast)"});
  bwd.temporaries.push_back({"layer0_activations", "temporaries", layer_bytes,
                             o.checkpointing ? "the first layer's saved tensors, recomputed"
                                             : "the first layer's "
                                               "saved tensors"});
  if (o.checkpointing)
    bwd.temporaries.push_back({"layer0_input", "temporaries", T * m.hidden * 4, "its checkpointed input"});
  // The compiled graph also returns the logits (the model's output holds them): a (tokens, vocab)
  // bf16 buffer that the autograd engine allocates for their gradient stays alive as an input of the
  // compiled backward until it ends (the allocator's history of the H200 runs: no Python frame,
  // alive at the end of every compiled backward, beside all the gradients).
  if (o.compiled)
    bwd.temporaries.push_back({"logits_output_grad", "temporaries", TV * 2,
                               "autograd's bf16 gradient of the compiled graph's logits output, alive through the "
                               "compiled backward"});
  bwd.temporaries.push_back({"backward_working_set", "temporaries",
                             ((m.act == model::ActKind::SwiGLU ? 3 : 2) * m.ffn * 2 + 2 * m.hidden * 4) * T,
                             "MLP backward: bf16 grads of the (T, ffn) tensors and two fp32 residual-stream grads"});
  // Eager attention's backward holds the fp32 upcast of the probabilities' gradient and
  // softmax's fp32 input gradient at once: 8 B per score, beside the saved probabilities.
  const bool eager = fw.name == "hf-eager";
  const int64_t scores = o.batch * m.heads * o.seq * o.seq;
  const FrameworkTensor* mlp_saved = nullptr;
  for (const auto& t : layer)
    if (t.name == "mlp.gate_silu_up_product") mlp_saved = &t;
  if (eager)
    bwd.temporaries.push_back({"eager_attention_backward", "temporaries", scores * 8,
                               "softmax backward: fp32 gradient of the probabilities and of the scores"});
  std::vector<Phase> extra;
  if (eager && !o.checkpointing && mlp_saved) {
    // The last layer's attention backward: every activation but the loss buffer and that layer's
    // MLP tensors is alive, the LM head's and that MLP's gradients exist, plus the transient.
    // (gradients in the parameters' dtype: fp32, or bf16 unsharded ones under FSDP2's bf16 parameters)
    const int64_t gb = bf16_params ? 2 : 4;
    const int64_t mlp_grads = (m.act == model::ActKind::SwiGLU ? 3 : 2) * m.hidden * m.ffn * gb;
    Phase att{"backward_last_attention",
              "eager attention backward of the last layer",
              resident + f.activations_total - lsm_bytes(outside) - mlp_saved->bytes,
              {}};
    att.temporaries.push_back({"grads_so_far", "temporaries", head_params * gb + mlp_grads,
                               "fp32 gradients of the LM head and of the last layer's MLP"});
    att.temporaries.push_back({"eager_attention_backward", "temporaries", scores * 8,
                               "softmax backward: fp32 gradient of the probabilities and of the scores"});
    extra.push_back(att);
  }
  Phase opt{"optimizer_step",
            "optimizer step: activations freed, gradients complete",
            f.weights - copies + f.gradients + f.optimizer() + f.other_persistent,
            {}};
  f.phases = {fwd, loss};
  f.phases.insert(f.phases.end(), extra.begin(), extra.end());
  f.phases.push_back(bwd);
  f.phases.push_back(opt);
  if (fsdp2) {
    // FSDP2's buffers; transformers computes the loss in the model's forward (model(labels=...)).
    Fsdp2Steps st;
    st.forward = "forward_loss";
    st.loss_in_model = true;
    st.persistent_fwd_bwd = resident;
    st.persistent_all = resident + f.gradients;
    st.working_set = {"backward_working_set", "temporaries",
                      ((m.act == model::ActKind::SwiGLU ? 3 : 2) * m.ffn * 2 + 2 * m.hidden * residual_bytes) * T,
                      "MLP backward: bf16 grads of the (T, ffn) tensors and two residual-stream grads"};
    if (o.checkpointing)
      st.layer_backward_extra.push_back(
          {"recomputed_layer", "temporaries", layer_bytes, "the layer's saved tensors, recomputed for its backward"});
    if (eager)
      st.layer_backward_extra.push_back({"eager_attention_backward", "temporaries", scores * 8,
                                         "softmax backward: fp32 gradient of the probabilities and of the scores"});
    add_fsdp2_phases(f, m, o, *find_recipe(o.recipe).memory, st);
  }
  f.pick_peak();
  return f;
}

// The compiled graph ends at the logits: the reference loop computes the loss outside it, so the
// loss keeps what eager cross-entropy keeps (log_softmax's fp32 output), and its backward hands the
// compiled backward a real bf16 gradient of the logits. On the H200 runs (seven configurations, a
// loop that freed its logits) what forward leaves is the weight copies, these layer terms and the
// outside terms to within 0.4%; the forward peak is that plus the bf16 logits and their fp32
// upcast; the step's peak is the loss backward (8 bytes per logit) or the optimizer step.
Footprint torch_compiled_footprint(const ModelConfig& m, const MemoryOptions& o) {
  if (o.gpus != 1 || o.zero != 0)
    throw UsageError(
        "torch.compile of the torch reference is modelled on one GPU with --zero 0 (as measured); give --gpus 1 "
        "--zero 0");
  if (o.recipe != "bf16")
    throw UsageError(
        fmt::format("torch.compile of the torch reference is modelled for the bf16 recipe, not {}", o.recipe));
  if (o.checkpointing)
    throw UsageError(
        "torch.compile of the torch reference is modelled without checkpointing (its loop has none; give "
        "--framework hf)");
  if (m.norm != model::NormKind::RMSNorm || m.act != model::ActKind::SwiGLU)
    throw UsageError("torch.compile of the torch reference is modelled for Llama layers (RMSNorm, SwiGLU)");
  // Persistent terms: the eager reference's (fp32 master weights, autocast's bf16 copies of what
  // F.linear reads, which the compiled graph saves for backward, gradients, moments, workspace).
  MemoryOptions eager = o;
  eager.compiled = false;
  eager.loop_holds_logits = true;
  eager.eager_norms = false;  // only the persistent terms are read
  const Footprint base = compute_footprint(m, eager);
  Footprint f;
  f.model = m;
  f.opts = o;
  f.params = base.params;
  f.persistent = base.persistent;
  const int64_t T = o.batch * o.seq, V = m.vocab, L = m.layers, TV = T * V;
  const std::vector<FrameworkTensor> layer = torch_compiled_layer_tensors(m, o.batch, o.seq);
  int64_t layer_bytes = 0;
  for (const auto& t : layer) layer_bytes += t.bytes;
  f.layer_activation_bytes = layer_bytes;
  f.unit_u_bytes = T * m.hidden * 2;
  for (const auto& t : layer)
    f.activations.push_back({fmt::format("layers.{}", t.name), "activations", t.bytes * L,
                             fmt::format("{} layers x {} {}: {}", L, t.dtype, t.name, t.source)});
  f.activations.push_back({"outside.final_norm.input", "activations", T * m.hidden * 4,
                           "fp32: torch.compile keeps the final norm's fp32 input (its bf16 output, the LM head's "
                           "input, is recomputed)"});
  f.activations.push_back({"outside.final_norm.rstd", "activations", T * 4, "fp32: its rstd"});
  if (o.loop_holds_logits)
    f.activations.push_back({"outside.logits", "activations", TV * 2,
                             "bf16: the compiled graph's logits output, which the loop holds until backward has run"});
  const int64_t log_probs = TV * 4;
  f.activations.push_back({"outside.loss.log_probs", "activations", log_probs,
                           "fp32: F.cross_entropy on logits.float(), outside the compiled graph: log_softmax saves "
                           "its fp32 output"});
  f.sum_groups();
  const int64_t persistent_all = f.weights + f.gradients + f.optimizer() + f.other_persistent;
  const int64_t persistent_fwd_bwd = o.grads_persist ? persistent_all : persistent_all - f.gradients;

  Phase fwd{"forward_loss",
            "cross-entropy in forward: every saved tensor, the logits and their fp32 upcast alive",
            persistent_fwd_bwd + f.activations_total,
            {}};
  if (!o.loop_holds_logits)
    fwd.temporaries.push_back(
        {"logits", "temporaries", TV * 2, "the compiled graph's bf16 logits output, freed once the loss is formed"});
  fwd.temporaries.push_back(
      {"logits_fp32", "temporaries", TV * 4, "logits.float(), alive while log_softmax writes its fp32 output"});
  Phase loss{
      "backward_loss", "cross-entropy backward: all activations alive", persistent_fwd_bwd + f.activations_total, {}};
  loss.temporaries.push_back({"loss_grads", "temporaries", TV * 8,
                              "nll_loss's dense fp32 gradient + log_softmax's fp32 input gradient (tokens x vocab)"});
  // The compiled backward starts with every layer's saved tensors alive (it frees them as it goes,
  // so its first layer, the last decoder layer, is its largest point), the loss's buffers freed.
  // It holds its logits-gradient input until it returns, as the allocator's history of the hf
  // compiled runs shows for that input; no history of a compiled torch run was recorded, and this
  // phase stays below the loss backward by 10 bytes per logit less the MLP working set.
  Phase bwd{"backward_layers",
            "start of the compiled backward (the last decoder layer): the loss's buffers freed, every saved tensor "
            "alive",
            persistent_fwd_bwd + f.activations_total - log_probs,
            {}};
  bwd.temporaries.push_back({"logits_output_grad", "temporaries", TV * 2,
                             "the bf16 gradient of the compiled graph's logits output (.float()'s backward), an input "
                             "the compiled backward holds until it returns"});
  if (!o.grads_persist)
    bwd.temporaries.push_back({"grads_so_far", "temporaries",
                               f.gradients / std::max<int64_t>(1, f.params) * m.outside_param_count(),
                               "gradients allocated so far (LM head, final norm)"});
  bwd.temporaries.push_back({"backward_working_set", "temporaries", (3 * m.ffn + 2 * m.hidden) * T * 2,
                             "MLP backward: grads of the (T, ffn) tensors and of the (T, hidden) residual stream, "
                             "bf16"});
  // The optimizer step is the eager reference's: same parameters, gradients and optimizer.
  const auto opt =
      std::find_if(base.phases.begin(), base.phases.end(), [](const Phase& p) { return p.name == "optimizer_step"; });
  FP8SIM_CHECK(opt != base.phases.end(), "the torch reference has no optimizer_step phase");
  f.phases = {fwd, loss, bwd, *opt};
  f.pick_peak();
  return f;
}

}  // namespace fp8sim::memory
