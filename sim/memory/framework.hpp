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
// The framework profiles model one GPU without sharding, BF16 (or COAT's own) training, eager
// mode; torch.compile changes which tensors are saved (Inductor's partitioner) and is measured
// (reports/h200/frameworks) but not modelled.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/memory/memory.hpp"

namespace fp8sim::memory {

struct FrameworkInfo {
  std::string name;
  std::string recipe;  // the recipe the framework runs ("" = any, the torch reference)
  std::string what;
};
const std::vector<FrameworkInfo>& frameworks();
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
// the layers, for micro-batch x seq tokens.
std::vector<FrameworkTensor> framework_layer_tensors(const FrameworkInfo& fw, const model::ModelConfig& m,
                                                     int64_t batch, int64_t seq);
std::vector<FrameworkTensor> framework_outside_tensors(const FrameworkInfo& fw, const model::ModelConfig& m,
                                                       int64_t batch, int64_t seq);

// The footprint under a framework profile other than torch (compute_footprint dispatches here).
// Throws UsageError when the options ask for something the profile does not model (more than one
// GPU, another recipe).
Footprint framework_footprint(const model::ModelConfig& m, const MemoryOptions& o);

}  // namespace fp8sim::memory
