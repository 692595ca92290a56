#include "sim/memory/memory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sim/common/check.hpp"
#include "sim/common/sizes.hpp"
#include "sim/memory/framework.hpp"
#include "sim/memory/fsdp2.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::memory {

using model::ModelConfig;
using model::OpDesc;
using model::ParamDesc;
using model::SavedRole;
using model::Table2Column;

namespace {

constexpr int64_t kMiB = 1 << 20;
// PyTorch's cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG default ":4096:8"), allocated
// through the caching allocator; TransformerEngine / cuBLASLt FP8 GEMMs keep their own 32 MiB.
constexpr int64_t kCublasWorkspace = 32 * kMiB;
constexpr int64_t kFp8GemmWorkspace = 32 * kMiB;
// DeepSpeed ZeRO-1/2's default reduce_bucket_size (elements).
constexpr int64_t kZeroReduceBucket = 500'000'000;

// FSDP2 / ZeRO shard a parameter along dim 0: each rank holds ceil(rows / N) rows (the last rank
// fewer; the largest shard is what must fit).
std::vector<int64_t> shard_shape(const std::vector<int64_t>& shape, int64_t n) {
  std::vector<int64_t> s = shape;
  if (!s.empty() && n > 1) s[0] = (s[0] + n - 1) / n;
  return s;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// All parameters of the model, each with how many times it occurs (layers x per-layer params).
struct ParamUse {
  ParamDesc p;
  int64_t count;
  bool in_layer;
};

std::vector<ParamUse> all_params(const ModelConfig& m) {
  std::vector<ParamUse> ps;
  for (auto& p : model::layer_params(m)) ps.push_back({p, m.layers, true});
  for (auto& p : model::outside_params(m)) ps.push_back({p, 1, false});
  return ps;
}

// Bytes per GPU of storing every parameter under `s`, sharded over `shards` ranks.
StorageBytes param_storage(const std::vector<ParamUse>& ps, const Storage& s, int64_t shards, bool flatten) {
  StorageBytes total;
  for (const auto& u : ps) {
    std::vector<int64_t> shape = shard_shape(u.p.shape, shards);
    if (flatten) shape = {numel(shape)};  // optimizer states are grouped over the flattened tensor
    StorageBytes b = storage_bytes(s, shape);
    b.data *= u.count;
    b.meta *= u.count;
    total += b;
  }
  return total;
}

int64_t param_elements(const std::vector<ParamUse>& ps, int64_t shards) {
  int64_t n = 0;
  for (const auto& u : ps) n += numel(shard_shape(u.p.shape, shards)) * u.count;
  return n;
}

std::vector<SavedBytes> saved_bytes(const std::vector<OpDesc>& ops, const recipe::MemoryModel& r) {
  std::vector<SavedBytes> out;
  for (const auto& op : ops)
    for (const auto& t : op.saved) {
      const Storage& s = r.activation(t.role);
      out.push_back({op.name, t.name, t.role, t.column, t.shape, s.label, storage_bytes(s, t.shape)});
    }
  return out;
}

// MemoryOptions::eager_norms: each norm also keeps its fp32 normalised input x * rstd (the weight
// multiply's saved operand); RoPE's inputs are not kept (its multiplies save only the cos/sin
// tables, which need no gradient, and cat saves nothing).
std::vector<SavedBytes> eager_norms_saved(const std::vector<SavedBytes>& v) {
  const Storage fp32 = Storage::parse("fp32");
  std::vector<SavedBytes> out;
  for (const auto& s : v) {
    if (s.role == SavedRole::RopeInput) continue;
    out.push_back(s);
    if (s.role == SavedRole::NormInput || s.role == SavedRole::FinalNormInput)
      out.push_back({s.op, s.op + ".normalised", s.role, s.column, s.shape, fp32.label, storage_bytes(fp32, s.shape)});
  }
  return out;
}

int64_t sum_total(const std::vector<SavedBytes>& v) {
  int64_t b = 0;
  for (const auto& s : v) b += s.bytes.total();
  return b;
}

std::string sharding_name(int zero, int fsdp, int64_t gpus) {
  if (zero == 3 && fsdp == 2)
    return fmt::format("FSDP2 (fully_shard per layer and on the root) over {} GPU{} (+ parameters sharded)", gpus,
                       gpus == 1 ? "" : "s");
  if (gpus == 1)
    return zero == 3 ? "FSDP FULL_SHARD on 1 GPU (nothing to shard; per-layer gathering still happens)" : "single GPU";
  switch (zero) {
    case 0:
      return fmt::format("DDP over {} GPUs (everything replicated)", gpus);
    case 1:
      return fmt::format("ZeRO-1 over {} GPUs (optimizer states and master weights sharded)", gpus);
    case 2:
      return fmt::format("ZeRO-2 over {} GPUs (+ gradients sharded)", gpus);
    default:
      return fmt::format("ZeRO-3 / FSDP FULL_SHARD over {} GPUs (+ parameters sharded)", gpus);
  }
}

}  // namespace

const recipe::TrainingRecipe& find_recipe(const std::string& name_or_file) {
  const bool named = recipe::is_registered(name_or_file);
  std::error_code ec;
  if (!named && !std::filesystem::exists(name_or_file, ec))
    recipe::throw_unknown(name_or_file, recipe::join(recipe_names()));
  const recipe::TrainingRecipe& r = recipe::get(name_or_file);
  if (!r.memory)
    throw UsageError(
        fmt::format("recipe '{}' has no memory model (recipes with one: {})", r.name, recipe::join(recipe_names())));
  return r;
}

std::vector<std::string> recipe_names() { return recipe::memory_names(); }

void validate(const MemoryOptions& o) {
  find_recipe(o.recipe);
  find_framework(o.framework);
  validate_run_sizes({.batch = o.batch, .seq = o.seq, .gpus = o.gpus, .grad_accum = std::nullopt});
  if (o.zero < 0 || o.zero > 3) throw UsageError(fmt::format("--zero must be 0, 1, 2 or 3, not {}", o.zero));
  if (o.fsdp != 1 && o.fsdp != 2) throw UsageError(fmt::format("--fsdp must be 1 or 2, not {}", o.fsdp));
  if (o.fsdp == 2 && !models_fsdp2(o.framework))
    throw UsageError(
        fmt::format("--fsdp 2 is modelled for the torch reference, hf and hf-eager, not --framework {}", o.framework));
  if (o.fsdp == 2 && o.zero != 3) throw UsageError("--fsdp 2 shards parameters: it needs --zero 3");
  if (o.fsdp_gather_fp32 && o.fsdp != 2)
    throw UsageError("--fsdp-param-dtype fp32 describes FSDP2's all-gathers: it needs --fsdp 2 --zero 3");
  if (!(std::isfinite(o.gpu_mem_gib) && o.gpu_mem_gib > 0 && o.gpu_mem_gib <= 1e6))
    throw UsageError(fmt::format("--gpu-mem-gib must be a positive number of GiB up to 1e6, not {}", o.gpu_mem_gib));
}

int64_t Phase::total() const {
  int64_t t = resident;
  for (const auto& c : temporaries) t += c.bytes;
  return t;
}

int64_t Footprint::temporaries_at_peak() const {
  for (const auto& p : phases)
    if (p.name == peak_phase) return p.total() - p.resident;
  return 0;
}

double Footprint::table2_units(Table2Column column) const {
  int64_t b = 0;
  for (const auto& s : layer_saved)
    if (s.column == column) b += s.bytes.data;
  return static_cast<double>(b) / static_cast<double>(unit_u_bytes);
}

double Footprint::table2_total_units() const {
  double u = 0;
  for (Table2Column c : model::kTable2Columns) u += table2_units(c);
  return u;
}

void Footprint::sum_groups() {
  activations_total = weights = gradients = optimizer_states = optimizer_metadata = other_persistent = 0;
  for (const auto& c : activations) activations_total += c.bytes;
  for (const auto& c : persistent) {
    if (c.group == "weights") weights += c.bytes;
    else if (c.group == "gradients") gradients += c.bytes;
    else if (c.name == "optimizer_states") optimizer_states += c.bytes;
    else if (c.name == "optimizer_metadata") optimizer_metadata += c.bytes;
    else other_persistent += c.bytes;
  }
}

void Footprint::pick_peak() {
  peak = 0;
  peak_phase.clear();
  for (const auto& p : phases)
    if (p.total() > peak) {
      peak = p.total();
      peak_phase = p.name;
    }
}

// FSDP2 (fully_shard on every decoder layer and on the root; torch 2.11's
// torch/distributed/fsdp/_fully_shard): the buffers a rank holds beside its shards, per phase,
// with P the parameters of a unit (a layer, or the root: embedding, final norm, LM head), Pad
// their dim-0-padded count (ceil(rows / N) rows on every rank), s the bytes of a gathered element
// (2 under param_dtype=bf16, 4 gathering fp32):
//   - a unit's all-gather output (s Pad) and its unsharded parameters (s Pad): forward holds the
//     last layer's output until the root's post-forward, beside the root's parameters, which are
//     not resharded after forward; at each layer's copy-out the previous layer's output is still
//     alive (root + 3 layers);
//   - backward prefetches one layer ahead; the layer's unsharded gradients (s P, the parameters'
//     dtype) are copied into an fp32 reduce-scatter input (4 Pad) that stays alive until the
//     next layer's reduce-scatter: at the end of a layer's backward the root, the LM head's and
//     final norm's gradients, the previous layer's reduce-scatter input, this layer and the
//     prefetched one, and this layer's gradients;
//   - the root reduce-scatters in the final callback, with every activation gone:
//     max(root gradients + its reduce-scatter input, LM-head gradient + input + the new shard).
void add_fsdp2_phases(Footprint& f, const ModelConfig& m, const MemoryOptions& o, const recipe::MemoryModel& r,
                      const Fsdp2Steps& st) {
  const int64_t persistent_fwd_bwd = st.persistent_fwd_bwd, persistent_all = st.persistent_all;
  // From f: the token ids (kept from forward's start) and the loss's saved tensors (made after the
  // LM head), what the LM head's backward frees outside the layers, what one layer keeps.
  int64_t ids = 0, loss_saved = 0, outside = 0;
  for (const auto& x : f.outside_saved) {
    if (x.role == SavedRole::TokenIds) ids += x.bytes.total();
    if (x.role == SavedRole::LossBuffer) loss_saved += x.bytes.total();
  }
  int64_t per_layer = f.layer_activation_bytes;
  for (const auto& a : f.activations) {
    if (a.name.rfind("outside.", 0) == 0) outside += a.bytes;
    if (a.name == "layers.checkpointed_inputs") per_layer = a.bytes / m.layers;
  }
  const int64_t outside_freed_after_head = outside - ids;
  const int64_t N = o.gpus, s = o.fsdp_gather_fp32 ? 4 : 2;
  int64_t pad_l = 0, pad_r = 0, shard_r = 0;
  for (const auto& u : all_params(m)) {
    const int64_t shard = numel(shard_shape(u.p.shape, N));
    (u.in_layer ? pad_l : pad_r) += shard * N;
    if (!u.in_layer) shard_r += shard;
  }
  const int64_t P_l = m.layer_param_count(), P_r = m.outside_param_count();
  // The root's last parameter, whose unsharded gradient the reduce-scatter's loop still holds when
  // it allocates the new shard: the LM head, or with tied embeddings the final norm's weight (the
  // embedding when the norm has none).
  const int64_t last_root = !m.tied_embeddings    ? m.head_param_count()
                            : m.norm_params() > 0 ? m.norm_params()
                                                  : m.embedding_param_count();
  const int64_t after_head = m.tied_embeddings ? P_r : P_r - m.embedding_param_count();
  const Component root{"fsdp_root_params", "temporaries", s * pad_r,
                       "the root unit (embedding, final norm, LM head) gathered, not resharded after forward"};
  const Component layer_gather{"fsdp_layer_gather", "temporaries", s * pad_l, "a decoder layer's all-gather output"};
  const Component layer_params{"fsdp_layer_params", "temporaries", s * pad_l,
                               "the layer's unsharded parameters, copied out of it"};
  const Component last_gather{"fsdp_last_layer_gather", "temporaries", s * pad_l,
                              "the last layer's all-gather output, held until the root's post-forward"};
  // The root's post-forward frees the last layer's all-gather output: after the loss when the model
  // computes it, else once the logits are made (before the loop's loss). Backward prefetches the
  // last layer from the root's pre-backward hook on the model's output: before the loss's backward
  // when that output is the loss, after it when it is the logits.
  Phase lm_head{"forward_lm_head",
                "forward, the LM head making the logits: the last layer's all-gather output held",
                persistent_fwd_bwd + f.activations_total - loss_saved,
                {root, last_gather}};
  for (auto& ph : f.phases) {
    auto& t = ph.temporaries;
    if (ph.name == st.forward) {
      t.push_back(root);
      if (st.loss_in_model) t.push_back(last_gather);
    } else if (ph.name == st.loss) {
      t.push_back(root);
      if (st.loss_in_model)
        t.push_back({"fsdp_prefetched_layer", "temporaries", s * pad_l,
                     "the last layer, prefetched for backward before the loss's backward"});
    } else if (ph.name == "backward_last_attention") {  // eager attention's softmax backward, last layer
      t.push_back(root);
      t.push_back({"fsdp_gathered_layers", "temporaries", 2 * s * pad_l,
                   "this layer's unsharded parameters and the next layer's prefetched all-gather"});
    }
  }
  // At each layer's copy-out the previous unit's all-gather output is still held: the root's at
  // the first layer, the previous layer's at the others (the last one has the most activations).
  const Component root_gather{"fsdp_root_gather", "temporaries", s * pad_r,
                              "the root's all-gather output, held until the first layer's copy-out returns"};
  Phase first_copy{"forward_first_copy_out",
                   "forward, the first layer's parameters copied out of its all-gather while the root's output is "
                   "still held",
                   persistent_fwd_bwd + ids,
                   {root, root_gather, layer_gather, layer_params}};
  Phase copy_out{"forward_copy_out",
                 "forward, the last layer's parameters copied out of its all-gather while the previous layer's "
                 "output is still held",
                 persistent_fwd_bwd + ids + (m.layers - 1) * per_layer,
                 {root,
                  {"fsdp_previous_layer_gather", "temporaries", s * pad_l, "the previous layer's all-gather output"},
                  layer_gather,
                  layer_params}};
  auto layer_backward = [&](const std::string& name, const std::string& what, int64_t layers_freed,
                            bool previous_reduce) {
    Phase b{
        name, what, persistent_fwd_bwd + f.activations_total - outside_freed_after_head - layers_freed * per_layer, {}};
    b.temporaries.push_back(root);
    b.temporaries.push_back({"fsdp_root_grads", "temporaries", s * after_head,
                             "the root's unsharded gradients made so far (LM head, final norm)"});
    if (previous_reduce) {
      b.temporaries.push_back({"fsdp_reduce_scatter_input", "temporaries", 4 * pad_l,
                               "the previous layer's fp32 reduce-scatter input, held until this layer's"});
      if (!o.grads_persist)
        b.temporaries.push_back(
            {"fsdp_layer_shard_grads", "temporaries", 4 * pad_l / N, "the previous layer's sharded fp32 gradients"});
    }
    b.temporaries.push_back({"fsdp_gathered_layers", "temporaries", 2 * s * pad_l,
                             "this layer's unsharded parameters and the next layer's prefetched all-gather"});
    b.temporaries.push_back(
        {"fsdp_layer_grads", "temporaries", s * P_l, "this layer's unsharded gradients in the parameters' dtype"});
    if (r.fp8_gemm)
      b.temporaries.push_back({"fp8_weight_cast", "temporaries", P_l * 2,
                               "one layer's weights cast to FP8 just in time: codes + transposed codes for dgrad"});
    b.temporaries.push_back(st.working_set);
    for (const auto& c : st.layer_backward_extra) b.temporaries.push_back(c);
    return b;
  };
  Phase last = layer_backward("backward_layers", "backward of the last decoder layer (FSDP2's buffers)", 0, false);
  Phase next = layer_backward("backward_next_layer",
                              "backward of the second-to-last layer: the last layer's reduce-scatter input still held",
                              1, m.layers > 1);
  // Gathering fp32, the linears' weights reach F.linear through autocast's bf16 casts of the
  // unsharded parameters: each cast is cached until autocast exits and saved for backward, so a
  // layer's casts live from its forward to its backward (with checkpointing, backward keeps only
  // the recomputed layer's); the LM head's until its backward.
  const int64_t cast_layer = o.fsdp_gather_fp32 ? 2 * m.layer_linear_param_count() : 0;
  const int64_t cast_head = o.fsdp_gather_fp32 ? 2 * m.vocab * m.hidden : 0;
  auto casts = [&](int64_t layers, bool head) {
    return Component{"autocast_weight_copies", "temporaries", layers * cast_layer + (head ? cast_head : 0),
                     "torch.autocast's bf16 casts of the gathered fp32 linear weights still alive"};
  };
  if (o.fsdp_gather_fp32) {
    copy_out.temporaries.push_back(casts(m.layers - 1, false));
    last.temporaries.push_back(casts(o.checkpointing ? 1 : m.layers - 1, false));
    next.temporaries.push_back(casts(o.checkpointing ? 1 : std::max<int64_t>(0, m.layers - 2), false));
    // The loss's backward runs after autocast has exited: with checkpointing its cache let the
    // layers' casts go (none was saved for backward) and only the LM head's, saved by F.linear, lives.
    for (auto& ph : f.phases)
      if (ph.name == st.forward || ph.name == st.loss)
        ph.temporaries.push_back(casts(ph.name == st.loss && o.checkpointing ? 0 : m.layers, true));
    lm_head.temporaries.push_back(casts(m.layers, true));
  }
  Phase end{"backward_end",
            "end of backward: the root reduce-scatters in FSDP2's final callback, every activation freed",
            persistent_all - (o.grads_persist ? 0 : 4 * shard_r),
            {{"fsdp_root_reduce_scatter_input", "temporaries", 4 * pad_r, "the root's fp32 reduce-scatter input"},
             {"fsdp_root_unsharded_grads", "temporaries", std::max(s * P_r, s * last_root + 4 * shard_r),
              "the root's unsharded gradients, then its last parameter's beside the root's new sharded gradients"}}};
  std::vector<Phase> phases;
  for (auto& ph : f.phases) {
    if (ph.name == st.backward) {
      phases.push_back(last);
      phases.push_back(next);
      phases.push_back(end);
      continue;
    }
    phases.push_back(ph);
    if (ph.name == st.forward) {
      phases.insert(phases.end() - 1, first_copy);
      if (m.layers > 1) phases.insert(phases.end() - 1, copy_out);  // a previous layer's output held
      if (!st.loss_in_model) phases.insert(phases.end() - 1, lm_head);
    }
  }
  f.phases = phases;
}

Footprint compute_footprint(const ModelConfig& m, const MemoryOptions& o) {
  validate(o);
  if (o.framework != "torch") return framework_footprint(m, o);
  if (o.compiled) return torch_compiled_footprint(m, o);
  // Table 2's accounting counts the bf16 logits among the saved tensors, as the reference loop
  // holds them; a loop that frees them is modelled for the compiled reference only.
  if (!o.loop_holds_logits)
    throw UsageError(
        "the torch reference counts the logits its loop holds; a loop that frees them is modelled "
        "under torch.compile only");
  const recipe::MemoryModel& r = *find_recipe(o.recipe).memory;
  Footprint f;
  f.model = m;
  f.opts = o;
  const int64_t N = o.gpus;
  const int64_t T = o.batch * o.seq;
  const std::vector<ParamUse> ps = all_params(m);
  f.params = m.param_count();
  const Storage bf16 = Storage::parse("bf16");

  // ---- persistent --------------------------------------------------------------------------
  const int64_t master_shards = o.zero >= 1 ? N : 1;
  const int64_t grad_shards = o.zero >= 2 ? N : 1;
  const int64_t opt_shards = o.zero >= 1 ? N : 1;
  const StorageBytes master = param_storage(ps, r.master, master_shards, false);
  f.persistent.push_back({"master_weights", "weights", master.total(),
                          fmt::format("{} master copy of {} params{}", r.master.label, f.params,
                                      master_shards > 1 ? fmt::format(", sharded over {} GPUs", N) : "")});
  const bool fsdp2 = o.zero == 3 && o.fsdp == 2;
  if (o.zero == 0) {
    // torch.autocast casts what F.linear reads: the layers' linears and the LM head (the embedding
    // when tied); norm weights and an untied embedding stay fp32.
    // With checkpointing the layers' casts live only while autocast runs (its cache holds them
    // through forward; nothing saves them for backward): a temporary of forward, and of each
    // layer's recomputation (below).
    const int64_t cast = (o.checkpointing ? 0 : m.layers * m.layer_linear_param_count()) + m.vocab * m.hidden;
    f.persistent.push_back({"working_weights", "weights", cast * 2,
                            o.checkpointing ? "bf16 copy torch.autocast makes of the LM head's weight, kept for "
                                              "backward (the checkpointed layers' casts are temporaries)"
                                            : "bf16 copies torch.autocast makes of the linears' weights (not of norms "
                                              "or an untied embedding), replicated"});
  } else if (o.zero <= 2) {
    const StorageBytes work = param_storage(ps, bf16, 1, false);
    f.persistent.push_back({"working_weights", "weights", work.total(),
                            "bf16 copy of every parameter the GEMMs read, replicated (ZeRO-3/FSDP would gather "
                            "it per layer instead)"});
  }
  const StorageBytes grads = param_storage(ps, r.grad, grad_shards, false);
  f.persistent.push_back({"gradients", "gradients", grads.total(),
                          fmt::format("{} gradient of every parameter{}", r.grad.label,
                                      grad_shards > 1 ? fmt::format(", sharded over {} GPUs", N) : "")});
  if (o.zero == 0 && N > 1)
    f.persistent.push_back(
        {"ddp_buckets", "other", grads.total(),
         "DDP all-reduce bucket buffers: a second copy of the gradients (gradient_as_bucket_view=False)"});
  if ((o.zero == 1 || o.zero == 2) && N > 1)
    f.persistent.push_back({"reduce_buckets", "other", std::min(kZeroReduceBucket, f.params) * 4,
                            "DeepSpeed reduce bucket: reduce_bucket_size 5e8 elements of fp32 (default)"});
  const StorageBytes m1 = param_storage(ps, r.exp_avg, opt_shards, true);
  const StorageBytes m2 = param_storage(ps, r.exp_avg_sq, opt_shards, true);
  f.persistent.push_back(
      {"optimizer_states", "optimizer", m1.data + m2.data,
       fmt::format("AdamW exp_avg ({}) + exp_avg_sq ({}) element codes{}", r.exp_avg.label, r.exp_avg_sq.label,
                   opt_shards > 1 ? fmt::format(", sharded over {} GPUs", N) : "")});
  f.persistent.push_back({"optimizer_metadata", "optimizer", m1.meta + m2.meta,
                          m1.meta + m2.meta == 0 ? "none: plain-format moments carry no scales"
                                                 : "per-group / per-tensor scales (and DE exponent k and centre c) "
                                                   "of both moments, exact (quantized_size)"});
  std::vector<OpDesc> lops = model::layer_ops(m, o.batch, o.seq);
  int64_t fp8_linears = 0;
  for (const auto& op : lops) fp8_linears += op.fp8_gemm_candidate ? 1 : 0;
  if (r.te_amax_history > 0) {
    // Per FP8 GEMM: forward input and weight, backward output-gradient: three scaled operands.
    const int64_t per_operand = (r.te_amax_history + 2) * 4;
    f.persistent.push_back({"fp8_scaling_state", "other", m.layers * fp8_linears * 3 * per_operand,
                            fmt::format("delayed scaling: amax history {} + scale + scale_inv (fp32) for 3 "
                                        "operands of each of {} FP8 GEMMs per layer",
                                        r.te_amax_history, fp8_linears)});
  }
  f.persistent.push_back({"gemm_workspace", "other", kCublasWorkspace + (r.fp8_gemm ? kFp8GemmWorkspace : 0),
                          r.fp8_gemm ? "cuBLAS workspace 32 MiB + FP8 GEMM (cuBLASLt/TE) workspace 32 MiB"
                                     : "cuBLAS workspace 32 MiB (PyTorch default on Hopper)"});

  // ---- activations -------------------------------------------------------------------------
  f.unit_u_bytes = T * m.hidden * 2;
  f.layer_saved = saved_bytes(lops, r);
  f.outside_saved = saved_bytes(model::outside_ops(m, o.batch, o.seq), r);
  if (o.eager_norms && m.norm == model::NormKind::RMSNorm) {
    f.layer_saved = eager_norms_saved(f.layer_saved);
    f.outside_saved = eager_norms_saved(f.outside_saved);
  }
  f.layer_activation_bytes = sum_total(f.layer_saved);
  if (!o.checkpointing) {
    for (Table2Column c : model::kTable2Columns) {
      int64_t b = 0;
      for (const auto& s : f.layer_saved)
        if (s.column == c) b += s.bytes.total();
      f.activations.push_back({fmt::format("layers.{}", model::table2_column_name(c)), "activations", b * m.layers,
                               fmt::format("{} layers x saved tensors of the {} column (data + scales)", m.layers,
                                           model::table2_column_name(c))});
    }
    int64_t aux = 0;
    for (const auto& s : f.layer_saved)
      if (s.column == Table2Column::None) aux += s.bytes.total();
    f.activations.push_back(
        {"layers.stats", "activations", aux * m.layers, "norm rstd/mean and FlashAttention log-sum-exp, fp32"});
  } else {
    // Each checkpointed layer keeps its input (the bf16 residual stream; COAT's layers also pass
    // their FP8 1x16 copy of it); backward recomputes one layer at a time.
    // The residual stream is bf16 where the layers run on bf16 parameters (FSDP's mixed precision,
    // ZeRO-1/2's bf16 copies), fp32 where autocast runs them on fp32 parameters (one GPU or DDP,
    // FSDP2 gathering fp32).
    const bool fp32_residual = o.zero == 0 || (o.zero == 3 && o.fsdp == 2 && o.fsdp_gather_fp32);
    StorageBytes in = storage_bytes(fp32_residual ? Storage::parse("fp32") : bf16, std::vector<int64_t>{T, m.hidden});
    if (r.checkpoint_fp8_input)
      in += storage_bytes(r.activation(SavedRole::NormInput), std::vector<int64_t>{T, m.hidden});
    f.activations.push_back({"layers.checkpointed_inputs", "activations", in.total() * m.layers,
                             fmt::format("{} layers x the layer input kept by activation checkpointing", m.layers)});
    // One layer's saved tensors exist again while backward recomputes it: a temporary of the
    // backward phases (below), not something forward keeps.
  }
  for (const auto& s : f.outside_saved)
    f.activations.push_back({fmt::format("outside.{}", s.tensor), "activations", s.bytes.total(),
                             fmt::format("{} {} [{}]", s.storage, model::saved_role_name(s.role),
                                         fmt::format("{}", fmt::join(s.shape, "x")))});

  // ---- sums -------------------------------------------------------------------------------
  f.sum_groups();
  const int64_t persistent_all = f.weights + f.gradients + f.optimizer() + f.other_persistent;
  const int64_t persistent_fwd_bwd = o.grads_persist ? persistent_all : persistent_all - f.gradients;

  // ---- phases -----------------------------------------------------------------------------
  const bool fsdp = o.zero == 3 && o.fsdp == 1;
  const int64_t layer_params = m.layer_param_count();
  const int64_t outside_params = m.outside_param_count();
  const int64_t TV = T * m.vocab;
  int64_t outside_freed_after_head = 0;  // freed once the LM head's backward has run
  for (const auto& s : f.outside_saved)
    if (s.role != SavedRole::TokenIds) outside_freed_after_head += s.bytes.total();

  Phase fwd{"forward_end", "end of forward: every saved tensor alive", persistent_fwd_bwd + f.activations_total, {}};
  const int64_t layer_casts = 2 * m.layer_linear_param_count();
  if (o.zero == 0 && o.checkpointing)
    fwd.temporaries.push_back({"autocast_layer_casts", "temporaries", m.layers * layer_casts,
                               "torch.autocast's cache of the checkpointed layers' bf16 weight casts, freed when "
                               "autocast exits"});
  if (fsdp)
    fwd.temporaries.push_back({"fsdp_root_params", "temporaries", outside_params * 2,
                               "FSDP root unit (embedding, final norm, LM head) gathered in bf16, kept from "
                               "forward to backward"});
  Phase loss{"backward_loss",
             "cross-entropy and LM-head backward: all activations still alive",
             persistent_fwd_bwd + f.activations_total,
             {}};
  loss.temporaries.push_back({"loss_grads", "temporaries", TV * 8,
                              "nll_loss's dense fp32 gradient + log_softmax's fp32 input gradient (tokens x vocab)"});
  if (fsdp) {
    loss.temporaries.push_back(fwd.temporaries.front());
    loss.temporaries.push_back({"fsdp_prefetch_layer", "temporaries", layer_params * 2,
                                "the last decoder layer prefetched (all-gathered in bf16) for its backward"});
  }
  Phase bwd{"backward_layers",
            "backward of the last decoder layer: logits and loss buffers freed",
            persistent_fwd_bwd + f.activations_total - outside_freed_after_head,
            {}};
  const Component recomputed{"recomputed_layer", "temporaries", f.layer_activation_bytes,
                             "the layer's saved tensors, recomputed for its backward"};
  if (o.checkpointing) bwd.temporaries.push_back(recomputed);
  if (fsdp) {
    bwd.temporaries.push_back(fwd.temporaries.front());
    bwd.temporaries.push_back({"fsdp_root_grads", "temporaries",
                               (m.tied_embeddings ? m.embedding_param_count() : m.head_param_count()) * 2,
                               "the root unit's unsharded bf16 LM-head gradient (reduce-scattered only at the end "
                               "of backward)"});
    bwd.temporaries.push_back({"fsdp_gathered_layers", "temporaries", 2 * layer_params * 2,
                               "current + prefetched decoder layer all-gathered in bf16 (BACKWARD_PRE prefetch)"});
    bwd.temporaries.push_back({"fsdp_layer_grads", "temporaries", layer_params * 2,
                               "one layer's unsharded bf16 weight gradients before reduce-scatter"});
  } else if (!o.grads_persist) {
    // Without persistent buffers the LM head's (and final norm's) gradients exist by now.
    const StorageBytes head = storage_bytes(r.grad, std::vector<int64_t>{outside_params});
    bwd.temporaries.push_back(
        {"grads_so_far", "temporaries", head.total(), "gradients allocated so far (LM head, final norm)"});
  }
  if (o.zero == 0 && o.checkpointing)
    bwd.temporaries.push_back(
        {"autocast_layer_casts", "temporaries", layer_casts, "the recomputed layer's bf16 weight casts (autocast)"});
  if (r.fp8_gemm)
    bwd.temporaries.push_back({"fp8_weight_cast", "temporaries", layer_params * 2,
                               "one layer's weights cast to FP8 just in time: codes + transposed codes for dgrad"});
  const int64_t ffn_branches = m.act == model::ActKind::SwiGLU ? 3 : 2;
  const Component working_set{"backward_working_set", "temporaries", (ffn_branches * m.ffn + 2 * m.hidden) * T * 2,
                              "MLP backward: grads of the (T, ffn) tensors and of the (T, hidden) residual stream, "
                              "bf16"};
  bwd.temporaries.push_back(working_set);

  // Under DDP (ZeRO-0) the bf16 working weights are torch.autocast's cached casts of the fp32
  // parameters, freed when the autocast region ends; ZeRO-1/2 keep bf16 parameters throughout.
  int64_t autocast_copies = 0;
  if (o.zero == 0)
    for (const auto& c : f.persistent)
      if (c.name == "working_weights") autocast_copies = c.bytes;
  Phase opt{
      "optimizer_step", "optimizer step: activations freed, gradients complete", persistent_all - autocast_copies, {}};
  if (r.foreach_adamw_temporary)
    opt.temporaries.push_back({"adamw_foreach_sqrt", "temporaries", param_elements(ps, opt_shards) * 4,
                               "torch.optim.AdamW (foreach) allocates sqrt(exp_avg_sq) for the whole shard, fp32"});
  f.phases = {fwd, loss, bwd, opt};
  if (fsdp2) {
    Fsdp2Steps st;
    st.persistent_fwd_bwd = persistent_fwd_bwd;
    st.persistent_all = persistent_all;
    st.working_set = working_set;
    if (o.checkpointing) st.layer_backward_extra.push_back(recomputed);
    add_fsdp2_phases(f, m, o, r, st);
  }
  f.pick_peak();
  return f;
}

int64_t max_batch(const ModelConfig& m, MemoryOptions o, bool pow2) {
  auto fits = [&](int64_t b) {
    o.batch = b;
    return compute_footprint(m, o).fits();
  };
  if (!fits(1)) return 0;
  // The search stays within the sizes fp8sim models (sizes.hpp); a budget that holds more reports
  // that limit.
  const int64_t cap = std::min<int64_t>(
      kMaxBatch, static_cast<int64_t>(kMaxTokensPerGpu / static_cast<double>(std::max<int64_t>(o.seq, 1))));
  if (cap <= 1) return 1;
  int64_t lo = 1, hi = 2;
  while (hi <= cap && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (pow2) return lo;
  if (hi > cap) {
    if (fits(cap)) return cap;
    hi = cap;
  }
  while (hi - lo > 1) {  // peak grows with batch: bisect between the last fit and the first miss
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

namespace {

Json component_json(const Component& c) {
  Json j = Json::object();
  j["name"] = c.name;
  j["group"] = c.group;
  j["bytes"] = c.bytes;
  j["gib"] = gib(c.bytes);
  j["what"] = c.what;
  return j;
}

Json saved_json(const SavedBytes& s) {
  Json j = Json::object();
  j["op"] = s.op;
  j["tensor"] = s.tensor;
  j["role"] = std::string(model::saved_role_name(s.role));
  j["table2_column"] = std::string(model::table2_column_name(s.column));
  Json shape = Json::array();
  for (int64_t d : s.shape) shape.push_back(d);
  j["shape"] = shape;
  j["storage"] = s.storage;
  j["data_bytes"] = s.bytes.data;
  j["meta_bytes"] = s.bytes.meta;
  return j;
}

Json components_json(const Footprint& f) {
  Json comps = Json::array();
  for (const auto& c : f.persistent) comps.push_back(component_json(c));
  for (const auto& c : f.activations) comps.push_back(component_json(c));
  return comps;
}

Json phases_json(const Footprint& f) {
  Json phases = Json::array();
  for (const auto& p : f.phases) {
    Json pj = Json::object();
    pj["name"] = p.name;
    pj["what"] = p.what;
    pj["resident_gib"] = gib(p.resident);
    Json t = Json::array();
    for (const auto& c : p.temporaries) t.push_back(component_json(c));
    pj["temporaries"] = t;
    pj["total_gib"] = gib(p.total());
    phases.push_back(pj);
  }
  return phases;
}

Json layer_json(const Footprint& f) {
  Json layer = Json::object();
  layer["u_bytes"] = f.unit_u_bytes;
  layer["bytes"] = f.layer_activation_bytes;
  layer["gib"] = gib(f.layer_activation_bytes);
  Json units = Json::object();
  for (model::Table2Column c : model::kTable2Columns)
    units[std::string(model::table2_column_name(c))] = f.table2_units(c);
  units["total"] = f.table2_total_units();
  layer["table2_units"] = units;
  Json saved = Json::array();
  for (const auto& s : f.layer_saved) saved.push_back(saved_json(s));
  layer["saved"] = saved;
  return layer;
}

}  // namespace

MemoryResult memory_result(const Footprint& f, bool with_max_batch) {
  const recipe::TrainingRecipe& r = find_recipe(f.opts.recipe);
  MemoryResult res{f, r.name, r.memory->description, sharding_name(f.opts.zero, f.opts.fsdp, f.opts.gpus), {}, {}};
  if (with_max_batch) {
    res.max_batch = max_batch(f.model, f.opts, false);
    res.max_batch_pow2 = max_batch(f.model, f.opts, true);
  }
  return res;
}

Json MemoryResult::to_json() const {
  const Footprint& f = footprint;
  const MemoryOptions& o = f.opts;
  Json j = Json::object();
  j["model"] = model::model_to_json(f.model);
  j["recipe"] = recipe;
  j["recipe_description"] = recipe_description;
  j["gpus"] = o.gpus;
  j["batch"] = o.batch;
  j["seq"] = o.seq;
  j["zero"] = o.zero;
  if (o.zero == 3) j["fsdp"] = o.fsdp;
  if (o.zero == 3 && o.fsdp == 2) j["fsdp_param_dtype"] = o.fsdp_gather_fp32 ? "fp32" : "bf16";
  j["sharding"] = sharding;
  j["checkpointing"] = o.checkpointing;
  j["grads_persist"] = o.grads_persist;
  if (o.framework != "torch") j["framework"] = o.framework;
  if (o.compiled) j["compiled"] = true;
  if (o.eager_norms) j["eager_norms"] = true;
  j["gpu_mem_gib"] = o.gpu_mem_gib;
  j["params"] = f.params;
  j["weights_gib"] = gib(f.weights);
  j["gradients_gib"] = gib(f.gradients);
  j["optimizer_gib"] = gib(f.optimizer());
  j["optimizer_states_gib"] = gib(f.optimizer_states);
  j["optimizer_metadata_gib"] = gib(f.optimizer_metadata);
  j["activations_gib"] = gib(f.activations_total);
  j["other_gib"] = gib(f.other_persistent);
  j["temporaries_gib"] = gib(f.temporaries_at_peak());
  j["peak_gib"] = gib(f.peak);
  j["peak_phase"] = f.peak_phase;
  j["fits"] = f.fits();
  if (max_batch) j["max_batch"] = *max_batch;
  if (max_batch_pow2) j["max_batch_pow2"] = *max_batch_pow2;
  j["components"] = components_json(f);
  j["phases"] = phases_json(f);
  j["activation_per_layer"] = layer_json(f);
  Json outside = Json::array();
  for (const auto& s : f.outside_saved) outside.push_back(saved_json(s));
  j["activation_outside"] = outside;
  return j;
}

MemoryResult memory_breakdown(const std::string& model_name_or_file, const MemoryOptions& o) {
  validate(o);
  return memory_breakdown(model::load_model(model_name_or_file), o);
}

MemoryResult memory_breakdown(const ModelConfig& m, const MemoryOptions& o) {
  validate(o);
  return memory_result(compute_footprint(m, o));
}

MemoryComparison memory_compare(const std::string& model_name_or_file, const MemoryOptions& o) {
  validate(o);
  return memory_compare(model::load_model(model_name_or_file), o);
}

void apply_framework_profile(MemoryOptions& o, bool recipe_given) {
  if (o.framework == "torch") return;
  if (!recipe_given) o.recipe = find_framework(o.framework).recipe;
  o.grads_persist = false;
  o.zero = o.fsdp == 2 ? 3 : 0;  // DDP over --gpus, or FSDP2
}

MemoryComparison memory_compare(const ModelConfig& m, const MemoryOptions& o) {
  validate(o);
  MemoryComparison c{m, {}, {}};
  MemoryOptions base = o;
  base.recipe = "bf16";
  const Footprint fb = compute_footprint(m, base);
  auto ratio = [](int64_t a, int64_t b) {
    return b == 0 ? std::nullopt : std::optional<double>(static_cast<double>(a) / b);
  };
  for (const auto& name : recipe_names()) {
    MemoryOptions oo = o;
    oo.recipe = name;
    const Footprint f = compute_footprint(m, oo);
    c.recipes.push_back(memory_result(f));
    c.ratios_vs_bf16.push_back({name, ratio(fb.optimizer(), f.optimizer()),
                                ratio(fb.activations_total, f.activations_total), ratio(fb.peak, f.peak)});
  }
  return c;
}

Json MemoryComparison::to_json() const {
  Json docs = Json::array();
  for (const auto& r : recipes) docs.push_back(r.to_json());
  Json ratios = Json::object();
  for (const auto& r : ratios_vs_bf16) {
    Json j = Json::object();
    j["optimizer"] = json_or_null(r.optimizer);
    j["activations"] = json_or_null(r.activations);
    j["peak"] = json_or_null(r.peak);
    ratios[r.recipe] = j;
  }
  Json j = Json::object();
  j["model"] = model::model_to_json(model);
  j["recipes"] = docs;
  j["ratios_vs_bf16"] = ratios;
  return j;
}

}  // namespace fp8sim::memory
