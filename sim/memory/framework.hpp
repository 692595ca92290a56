#pragma once
// Framework profiles: what a real training framework keeps for backward and holds in each phase
// of one step, op by op, so that the memory prediction holds on the implementation a user runs
// rather than on an idealised accounting. Each term names the code that allocates it.
//
//   torch     the project's plain PyTorch reference (memory.hpp's recipe-driven accounting)
//   hf        Hugging Face transformers 5.x LlamaForCausalLM, attn_implementation "sdpa"
//             (K/V not repeated for grouped-query attention), fp32 parameters + bf16 autocast,
//             loss = model(labels=...), AdamW(fused=True), zero_grad(set_to_none=True)
//   hf-4.45   the same in transformers 4.45.2 (COAT's base): repeat_kv copies K/V to every head
//   hf-eager  transformers 5.x with attn_implementation "eager": the attention probabilities are
//             materialised (fp32 softmax output and its bf16 copy)
//   coat      COAT's own published code (fp8-coat 1.0.11 CoatLlamaForCausalLM on transformers
//             4.45.2, CoatAdamW with FP8 moments and dynamic range expansion)
//   torchao-float8  the hf model with torchao 0.16's float8 training (tensorwise dynamic scaling,
//             the decoder linears in FP8), under torch.compile only, as torchao prescribes
//   megatron-te  Megatron-LM's GPT model built from TransformerEngine layers (Megatron-Core 0.20,
//             TransformerEngine 2.20.0.dev0): RMSNorm fused into the QKV and FC1 linears, fused
//             SwiGLU, cuDNN fused attention, bf16 parameters with fp32 main grads and Megatron's
//             mixed-precision optimizer; BF16 (recipe bf16) or TE FP8 delayed scaling (recipe te).
//             DERIVED from the source, not measured (neither is installed on the GPU host).
// The framework profiles model one GPU without sharding (tensor parallel 1, no sequence
// parallelism), eager mode; torch.compile is modelled for hf and hf-eager (with and without
// checkpointing), torchao-float8, and the torch reference on one GPU without checkpointing
// (measured in reports/h200/frameworks).
#include <cstdint>
#include <string>
#include <vector>

#include "sim/memory/memory.hpp"

namespace fp8sim::memory {

struct FrameworkInfo {
  std::string name;
  std::string recipe;  // the recipe the framework runs by default ("" = any, the torch reference)
  std::string what;
  std::vector<std::string> other_recipes = {};  // further recipes the profile models
  // Whether the profile models recipe `r` (the default or one of the others).
  bool runs(const std::string& r) const;
};
const std::vector<FrameworkInfo>& frameworks();
// Whether the profile `name` models torch.compile: hf, hf-eager, torchao-float8 and torch (the
// reference, within the limits torch_compiled_footprint states).
bool models_compile(const std::string& name);
// Whether the profile `name` models data parallelism over several GPUs as DDP (eager, --zero 0:
// every rank holds the whole model plus DDP's bucket buffers): transformers' eager profiles (hf,
// hf-eager, hf-4.45). The torch reference models every ZeRO stage and FSDP itself.
bool models_ddp(const std::string& name);
// Whether the profile `name` models FSDP2 (--zero 3 --fsdp 2): the torch reference, and
// transformers 5.x's eager profiles (hf, hf-eager).
bool models_fsdp2(const std::string& name);
// The profile named `name`; UsageError listing the names otherwise.
const FrameworkInfo& find_framework(const std::string& name);

// One tensor a framework keeps (per layer or outside the layers), with its bytes for the
// configuration and where in the framework's code it is allocated.
struct FrameworkTensor {
  std::string name;
  std::string dtype;
  int64_t bytes = 0;
  std::string source;
};

// What the framework keeps for backward in one decoder layer (checkpointing false) and outside
// the layers, for micro-batch x seq tokens. `recipe` picks the variant of a profile that models
// more than one ("" = its default recipe). `bf16_params` (hf and hf-eager): the layers run on bf16
// parameters (FSDP2's param_dtype=bf16) instead of fp32 ones under autocast: a bf16 residual
// stream, the norms' normalised output kept in bf16, one bf16 input shared by q/k/v_proj and one
// by gate/up_proj (10 H bytes per token fewer per layer, 2 H outside).
std::vector<FrameworkTensor> framework_layer_tensors(const FrameworkInfo& fw, const model::ModelConfig& m,
                                                     int64_t batch, int64_t seq, const std::string& recipe = "",
                                                     bool bf16_params = false);
std::vector<FrameworkTensor> framework_outside_tensors(const FrameworkInfo& fw, const model::ModelConfig& m,
                                                       int64_t batch, int64_t seq, bool bf16_params = false);

// What torch.compile(model) keeps for backward in one decoder layer of the torch reference model
// (scripts/measure_memory.py's Block: RMSNorm, SDPA with enable_gqa, SwiGLU) for micro-batch x seq
// tokens: the tensors Inductor's min-cut partitioner saves, 12H + 4Q + 4KV + 6F bytes per token
// plus the fp32 rstd and log-sum-exp (H hidden, Q and KV the query and key/value widths, F ffn).
std::vector<FrameworkTensor> torch_compiled_layer_tensors(const model::ModelConfig& m, int64_t batch, int64_t seq);

// The torch reference under torch.compile(model), the loss (F.cross_entropy on logits.float())
// outside the compiled graph as the reference loop computes it (compute_footprint dispatches here
// for framework torch with `compiled`). Persistent terms are the reference's at ZeRO-0; the loop
// holds the logits or not as o.loop_holds_logits says. Throws UsageError outside what was measured:
// more than one GPU, ZeRO other than 0, a recipe other than bf16, checkpointing, layers other than
// RMSNorm + SwiGLU.
Footprint torch_compiled_footprint(const model::ModelConfig& m, const MemoryOptions& o);

// The footprint under a framework profile other than torch (compute_footprint dispatches here).
// Throws UsageError when the options ask for something the profile does not model (more than one
// GPU, another recipe, megatron-te on a model that is not RMSNorm + SwiGLU).
Footprint framework_footprint(const model::ModelConfig& m, const MemoryOptions& o);

}  // namespace fp8sim::memory
