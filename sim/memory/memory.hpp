#pragma once
// Per-GPU memory footprint of one training step: every term named, explained and computed from
// the model's parameter and saved-tensor lists (sim/model) and the recipe's storage choices (its
// memory model, sim/recipe/recipe.hpp). No fitted constants. The results' to_json() documents are
// exactly what `fp8sim memory --json` writes.
//
// What is counted (per GPU, N = gpus, ZeRO stage z):
//   persistent  master weights         recipe.master per parameter, sharded over N when z >= 1
//                                      (ZeRO counts fp32 master weights as optimizer state;
//                                      FSDP's flat parameter is the sharded master)
//               working weights        bf16 copy the GEMMs read when z <= 2 (2 B/param, replicated);
//                                      under z = 3 it only exists per layer (a temporary)
//               gradients              recipe.grad per parameter, sharded when z >= 2; resident
//                                      through forward/backward unless grads_persist is false
//               DDP buckets            z = 0 and N > 1: DDP's bucket buffers, a second fp32 copy
//                                      of the gradients (gradient_as_bucket_view=False, its default)
//               reduce buckets         z = 1, 2 and N > 1: DeepSpeed's default reduce_bucket_size,
//                                      5e8 elements of fp32 (or the whole model if smaller)
//               optimizer states       exp_avg and exp_avg_sq codes of each (shard of a) parameter
//               optimizer metadata     their per-group / per-tensor scales, DE exponents, centres
//               fp8 scaling state      TE delayed scaling: per FP8 GEMM operand an amax history of
//                                      1024 fp32 plus scale and scale_inv (replicated)
//               GEMM workspace         cuBLAS workspace, 32 MiB (PyTorch's default on Hopper,
//                                      4096 KiB x 8); FP8 recipes add TE/cuBLASLt's own 32 MiB
//   activations every tensor each op keeps for backward (sim/model layer_ops + outside_ops) in
//               the recipe's storage, x layers, plus the embedding ids, final norm, LM head input,
//               bf16 logits and cross-entropy's fp32 buffer. With checkpointing, each layer keeps
//               only its input and one layer is recomputed during backward.
//   temporaries by phase (the peak is the largest phase):
//               forward_end      FSDP root unit (embedding, final norm, LM head) gathered in bf16
//                                (FSDP keeps the root unsharded from forward to backward)
//               backward_loss    + cross-entropy backward: nll_loss's dense fp32 grad and
//                                log_softmax's fp32 input grad (8 B x tokens x vocab);
//                                + FSDP: next layer prefetched in bf16
//               backward_layers  logits/loss buffers freed; + FSDP: 2 layers gathered (current +
//                                prefetch, BACKWARD_PRE), 1 layer's unsharded bf16 grads before
//                                reduce-scatter, the root's unsharded LM head / embedding grad;
//                                + FP8 recipes: one layer's weights cast to FP8 (codes and the
//                                transposed codes for dgrad); + the backward working set of an
//                                MLP: 3 x (T, ffn) + 2 x (T, hidden) bf16 activation grads
//               optimizer_step   activations freed; + torch.optim.AdamW foreach: sqrt(v) for the
//                                whole shard (4 B/param) for fp32-state recipes
// The peak excludes the CUDA context and allocator fragmentation (torch.cuda.max_memory_allocated
// semantics). GiB = 2^30 bytes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/model/model.hpp"
#include "sim/recipe/recipe.hpp"

namespace fp8sim::memory {

inline constexpr double kGiB = 1073741824.0;
// An H100 80GB's memory as the COAT paper's GPU reports it: 81559 MiB.
inline constexpr double kH100GiB = 81559.0 / 1024.0;

using recipe::Storage;
using recipe::StorageBytes;

// The recipe whose memory model the footprint uses: a registry name or a recipe file. Throws
// UsageError for an unknown name or a recipe without a memory model, naming those with one.
const recipe::TrainingRecipe& find_recipe(const std::string& name_or_file);
// The registry's recipes that have a memory model, in order.
std::vector<std::string> recipe_names();

struct MemoryOptions {
  std::string recipe = "bf16";  // a registry name or a recipe file (find_recipe)
  int64_t gpus = 1;
  int64_t batch = 1;  // micro-batch per GPU
  int64_t seq = 2048;
  int zero = 3;  // 0 = DDP, 1/2 = ZeRO-1/2, 3 = ZeRO-3 / FSDP FULL_SHARD
  // Which FSDP runs zero = 3: 1, FSDP1 as COAT's training ran it (flat parameters per block, bf16
  // mixed precision, the root unit unsharded from forward to backward); 2, FSDP2 (fully_shard per
  // decoder layer and on the root, dim-0 shards, MixedPrecisionPolicy(param_dtype=bf16,
  // reduce_dtype=fp32)), whose buffers follow torch 2.11's code (memory.cpp, docs/memory-model.md).
  int fsdp = 1;
  // FSDP2 without a MixedPrecisionPolicy: fp32 all-gathers, gradients and reduce-scatters, and
  // torch.autocast's bf16 copies of the gathered linears' weights kept for backward.
  bool fsdp_gather_fp32 = false;
  bool checkpointing = false;  // full activation checkpointing of every decoder layer
  bool grads_persist = true;   // gradient buffers stay allocated between steps (see memory.cpp)
  // The framework profile (framework.hpp): "torch" is the recipe-driven reference accounting;
  // others follow what that framework's code keeps (one GPU, their own recipe).
  std::string framework = "torch";
  // torch.compile(model): modelled for the hf, hf-eager and torchao-float8 profiles, and for the
  // torch reference on one GPU at ZeRO-0 with the bf16 recipe, without checkpointing (framework.hpp).
  bool compiled = false;
  // The torch reference's loop keeps the model's bf16 logits alive until backward has run (as
  // scripts/measure_memory.py's loop does); false: they are freed once the loss is formed. Only
  // the compiled torch reference models a loop that frees them; the framework profiles model their
  // own loops, which hold only the loss.
  bool loop_holds_logits = true;
  // The torch reference's RMSNorm and RoPE as eager PyTorch ops rather than Table 2's fused kernels:
  // each RMSNorm (x * rstd, then * weight, in fp32) keeps x * rstd for the weight's gradient, and
  // RoPE (mul by cos/sin tables and cat) keeps no per-token tensor. The measured reference loop
  // (scripts/measure_step.py --framework torch) runs them so; models without RMSNorm are unchanged.
  bool eager_norms = false;
  double gpu_mem_gib = kH100GiB;
};
// Throws UsageError naming the bad option (gpus/batch/seq < 1, zero outside 0..3, gpu memory
// not a positive finite number, unknown recipe).
void validate(const MemoryOptions& o);

struct Component {
  std::string name;   // "master_weights", "optimizer_metadata", "layers.SiLU&Mul", ...
  std::string group;  // weights | gradients | optimizer | activations | temporaries | other
  int64_t bytes = 0;
  std::string what;  // one line: what it is and how it is sized
};

struct Phase {
  std::string name;  // forward_end, backward_loss, backward_layers, optimizer_step
  std::string what;
  int64_t resident = 0;                // persistent terms + live activations in this phase
  std::vector<Component> temporaries;  // terms that exist only in this phase
  int64_t total() const;
};

// Per-layer activation detail (Table 2's accounting).
struct SavedBytes {
  std::string op, tensor;
  model::SavedRole role;
  model::Table2Column column;
  std::vector<int64_t> shape;
  std::string storage;
  StorageBytes bytes;
};

struct Footprint {
  model::ModelConfig model;
  MemoryOptions opts;
  int64_t params = 0;
  std::vector<Component> persistent;
  std::vector<Component> activations;
  std::vector<Phase> phases;
  std::vector<SavedBytes> layer_saved;    // one decoder layer
  std::vector<SavedBytes> outside_saved;  // embedding, final norm, head, loss
  int64_t layer_activation_bytes = 0;     // one layer, recipe storage (data + meta)
  int64_t unit_u_bytes = 0;               // Table 2's U = batch * seq * hidden * 2
  // Sums by group.
  int64_t weights = 0, gradients = 0, optimizer_states = 0, optimizer_metadata = 0, other_persistent = 0;
  int64_t activations_total = 0;
  int64_t peak = 0;
  std::string peak_phase;
  int64_t optimizer() const { return optimizer_states + optimizer_metadata; }
  // Fills the group sums (weights .. other_persistent, activations_total) from `persistent` and
  // `activations`, and the peak and its phase from `phases`.
  void sum_groups();
  void pick_peak();
  int64_t temporaries_at_peak() const;
  bool fits() const { return static_cast<double>(peak) <= opts.gpu_mem_gib * kGiB; }
  // Table 2 units of one layer: data bytes of the column's saved tensors / U (metadata excluded;
  // Table 2 counts element bytes only). column None gives the total over the five columns.
  double table2_units(model::Table2Column column) const;
  double table2_total_units() const;
};

Footprint compute_footprint(const model::ModelConfig& m, const MemoryOptions& o);

// Largest micro-batch whose peak fits in o.gpu_mem_gib (0 if batch 1 does not fit); pow2 = only
// powers of two are tried (how the COAT paper's max-batch column was found: 1, 2, 4, 8).
int64_t max_batch(const model::ModelConfig& m, MemoryOptions o, bool pow2 = false);

inline double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

// What `fp8sim memory` reports for one recipe: the footprint with the recipe's name and memory
// model, the sharding in words and the largest micro-batches that fit.
struct MemoryResult {
  Footprint footprint;
  std::string recipe;              // the recipe's name
  std::string recipe_description;  // its memory model's description
  std::string sharding;            // "ZeRO-2 over 4 GPUs (+ gradients sharded)", ...
  // Largest micro-batch whose peak fits (max_batch()), any and powers of two; absent where not
  // computed.
  std::optional<int64_t> max_batch, max_batch_pow2;
  // The document `fp8sim memory` writes: options, every component with its explanation, the
  // phases, per-layer Table 2 units, and the keys weights_gib, gradients_gib, optimizer_gib,
  // activations_gib, temporaries_gib, peak_gib, fits (+ max_batch, max_batch_pow2 when computed).
  Json to_json() const;
};
// `f` described; with_max_batch runs max_batch() twice (a footprint per micro-batch tried).
MemoryResult memory_result(const Footprint& f, bool with_max_batch = true);
MemoryResult memory_breakdown(const std::string& model_name_or_file, const MemoryOptions& o);
MemoryResult memory_breakdown(const model::ModelConfig& m, const MemoryOptions& o);

// BF16 / recipe: how many times less memory than BF16 (the paper's "mem ratio"); absent where the
// recipe's term is 0.
struct RatiosVsBf16 {
  std::string recipe;  // the key of this entry in the document
  std::optional<double> optimizer, activations, peak;
};

// All recipes side by side.
struct MemoryComparison {
  model::ModelConfig model;
  std::vector<MemoryResult> recipes;
  std::vector<RatiosVsBf16> ratios_vs_bf16;  // one per entry of `recipes`, in the same order
  // {"model": ..., "recipes": [doc...], "ratios_vs_bf16": {recipe: {optimizer, activations, peak}}}.
  Json to_json() const;
};
MemoryComparison memory_compare(const std::string& model_name_or_file, const MemoryOptions& o);
MemoryComparison memory_compare(const model::ModelConfig& m, const MemoryOptions& o);

// What a framework profile other than "torch" fixes (`fp8sim memory --framework`): one GPU,
// gradients freed between steps (zero_grad(set_to_none=True)), and the profile's recipe unless
// `recipe_given`. "torch" leaves `o` unchanged.
void apply_framework_profile(MemoryOptions& o, bool recipe_given);

}  // namespace fp8sim::memory
