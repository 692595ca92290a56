#include "sim/memory/framework.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/common/check.hpp"

namespace fp8sim::memory {

namespace {

using model::ModelConfig;

// Where the terms come from. Line-level references are to the published sources of these versions.
constexpr const char* kHfLlama = "transformers 5.x models/llama/modeling_llama.py";
constexpr const char* kHf445Llama = "transformers 4.45.2 models/llama/modeling_llama.py";
constexpr const char* kCoat = "fp8-coat 1.0.11 coat/models/coat_llama.py";

bool repeats_kv(const FrameworkInfo& fw) { return fw.name == "hf-4.45" || fw.name == "hf-eager" || fw.name == "coat"; }

int64_t tensor_bytes(int64_t elements, int bytes_per_element) { return elements * bytes_per_element; }

int64_t lsm_bytes(const std::vector<FrameworkTensor>& outside) {
  for (const auto& t : outside)
    if (t.name == "loss.log_probs") return t.bytes;
  return 0;
}

}  // namespace

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
  };
  return list;
}

const FrameworkInfo& find_framework(const std::string& name) {
  for (const auto& f : frameworks())
    if (f.name == name) return f;
  std::string names;
  for (const auto& f : frameworks()) names += (names.empty() ? "" : ", ") + f.name;
  throw UsageError(fmt::format("unknown framework '{}' (one of: {})", name, names));
}

std::vector<FrameworkTensor> framework_layer_tensors(const FrameworkInfo& fw, const ModelConfig& m, int64_t batch,
                                                     int64_t seq) {
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
  add("gate_up_proj.inputs", "bf16", 2 * tensor_bytes(T * H, 2),
      "torch.autocast casts the fp32 norm output to bf16 separately for gate_proj and up_proj");
  add("mlp.gate_silu_up_product", "bf16", 4 * tensor_bytes(T * F, 2),
      src +
          " LlamaMLP: SiLU saves gate_proj's output, the product saves SiLU's and up_proj's outputs, "
          "down_proj saves the product");
  return v;
}

namespace {

std::vector<FrameworkTensor> compiled_layer_tensors(const ModelConfig& m, int64_t batch, int64_t seq) {
  // What Inductor's min-cut partitioner keeps for transformers' layer (torch 2.11, measured on the
  // H200 to within 1% of the per-token bytes on six configurations): the fp32 norm inputs and
  // rstd, ONE bf16 cast of each norm output (the per-projection casts are merged), q/k/v at full
  // head width (the compiled SDPA path repeats K/V), the attention output and log-sum-exp, and
  // three (T, ffn) bf16 tensors of the MLP; norms and the SwiGLU product are recomputed.
  const int64_t T = batch * seq, H = m.hidden, F = m.ffn, Q = m.q_dim(), NH = m.heads;
  const std::string why = "torch.compile (Inductor min-cut partitioner)";
  return {{"norm_inputs", "fp32", 2 * T * H * 4, why + ": both norms' fp32 inputs"},
          {"norm_rstd", "fp32", 2 * T * 4, why + ": both norms' rstd"},
          {"norm_outputs", "bf16", 2 * T * H * 2, why + ": one bf16 cast of each norm output"},
          {"attention.q_k_v", "bf16", 3 * T * Q * 2, why + ": q, k, v at full head width"},
          {"attention.out", "bf16", T * Q * 2, why + ": the attention output (o_proj's input)"},
          {"attention.lse", "fp32", T * NH * 4, "flash attention's log-sum-exp"},
          {"mlp", "bf16", 3 * T * F * 2, why + ": gate_proj's and up_proj's outputs and the SiLU output"}};
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
                                                       int64_t seq) {
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
  v.push_back({"final_norm.input", "fp32", tensor_bytes(T * H, 4), src + " LlamaRMSNorm (model.norm)"});
  v.push_back({"final_norm.rstd", "fp32", tensor_bytes(T, 4), src + " LlamaRMSNorm (model.norm)"});
  v.push_back({"final_norm.normalised", "fp32", tensor_bytes(T * H, 4), src + " LlamaRMSNorm: weight * x"});
  v.push_back({"lm_head.input", "bf16", tensor_bytes(T * H, 2), "torch.autocast's bf16 cast of lm_head's input"});
  v.push_back({"loss.log_probs", "fp32", tensor_bytes(T * V, 4),
               "cross_entropy on logits.float(): log_softmax saves its fp32 output"});
  return v;
}

Footprint framework_footprint(const ModelConfig& m, const MemoryOptions& o) {
  const FrameworkInfo& fw = find_framework(o.framework);
  if (o.gpus != 1)
    throw UsageError(
        fmt::format("framework {} is modelled on one GPU; use --framework torch for sharded runs", fw.name));
  if (o.recipe != fw.recipe)
    throw UsageError(fmt::format("framework {} runs the {} recipe (give --recipe {})", fw.name, fw.recipe, fw.recipe));
  // Parameters, gradients and optimizer states as the recipe stores them: the torch reference's
  // persistent terms on one GPU without a working-weight copy (autocast's copies are counted below).
  MemoryOptions ref = o;
  ref.framework = "torch";
  ref.compiled = false;
  ref.zero = 3;
  ref.checkpointing = false;
  ref.grads_persist = true;
  const Footprint base = compute_footprint(m, ref);
  Footprint f;
  f.model = m;
  f.opts = o;
  f.opts.zero = 0;  // one GPU, nothing sharded
  f.params = base.params;
  for (const auto& c : base.persistent)
    if (c.name != "working_weights") f.persistent.push_back(c);

  const int64_t T = o.batch * o.seq, V = m.vocab, L = m.layers;
  // Every nn.Linear weight is cast to bf16 once per step by autocast and kept for backward
  // (the autocast weight cache): all layers' and the LM head's.
  const int64_t linear_params = m.layer_param_count() - 2 * m.norm_params();
  const int64_t head_params = m.vocab * m.hidden;
  const bool coat = fw.name == "coat";
  const int64_t layer_copies = coat ? 0 : linear_params * 2, head_copy = head_params * 2;
  const int64_t copies = o.checkpointing || coat ? head_copy : L * layer_copies + head_copy;
  f.persistent.push_back({"autocast_weight_copies", "weights", copies,
                          o.checkpointing ? "bf16 copy of the LM head weight (torch.autocast's cache); checkpointed "
                                            "layers cast theirs again when recomputed"
                                          : "bf16 copies of every Linear weight (torch.autocast's cache), kept for "
                                            "backward"});
  if (o.compiled && fw.name != "hf")
    throw UsageError(fmt::format("torch.compile is modelled for the hf profile only, not {}", fw.name));
  // Compiled and checkpointed, the recomputation happens inside Inductor's backward graph, whose
  // working set this profile does not model (measured: reports/h200/frameworks).
  if (o.compiled && o.checkpointing)
    throw UsageError("torch.compile with checkpointing is measured but not modelled; drop one of them");
  const std::vector<FrameworkTensor> layer =
      o.compiled ? compiled_layer_tensors(m, o.batch, o.seq) : framework_layer_tensors(fw, m, o.batch, o.seq);
  const std::vector<FrameworkTensor> outside =
      o.compiled ? compiled_outside_tensors(m, o.batch, o.seq) : framework_outside_tensors(fw, m, o.batch, o.seq);
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
    // its checkpoint keeps; transformers' layers pass the fp32 residual stream.
    const int64_t per_token = coat ? 2 * m.hidden + m.hidden + m.hidden / 8 : 4 * m.hidden;
    f.activations.push_back({"layers.checkpointed_inputs", "activations", L * T * per_token,
                             fmt::format("{} layers x the layer inputs torch.utils.checkpoint keeps", L)});
    if (fw.name == "hf-eager")
      f.activations.push_back({"layers.causal_mask", "activations", o.batch * o.seq * o.seq * 4,
                               "the fp32 4-D causal mask eager attention builds, an input every checkpointed layer "
                               "keeps (one storage)"});
  }
  for (const auto& t : outside)
    f.activations.push_back({fmt::format("outside.{}", t.name), "activations", t.bytes, t.dtype + ": " + t.source});
  for (const auto& c : f.activations) f.activations_total += c.bytes;

  for (const auto& c : f.persistent) {
    if (c.group == "weights") f.weights += c.bytes;
    else if (c.group == "gradients") f.gradients += c.bytes;
    else if (c.name == "optimizer_states") f.optimizer_states += c.bytes;
    else if (c.name == "optimizer_metadata") f.optimizer_metadata += c.bytes;
    else f.other_persistent += c.bytes;
  }
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
  if (!o.compiled)
    fwd.temporaries.push_back({"logits", "temporaries", v445 ? TV * 8 : TV * 6,
                               v445 ? "fp32 logits (lm_head output .float()) and their shifted contiguous copy"
                                    : "bf16 logits and their fp32 upcast (loss_utils ForCausalLMLoss)"});
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
    const int64_t mlp_grads = (m.act == model::ActKind::SwiGLU ? 3 : 2) * m.hidden * m.ffn * 4;
    Phase att{"backward_last_attention",
              "eager attention backward of the last layer",
              resident + f.activations_total - lsm_bytes(outside) - mlp_saved->bytes,
              {}};
    att.temporaries.push_back({"grads_so_far", "temporaries", head_params * 4 + mlp_grads,
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
  for (const auto& p : f.phases)
    if (p.total() > f.peak) {
      f.peak = p.total();
      f.peak_phase = p.name;
    }
  return f;
}

}  // namespace fp8sim::memory
