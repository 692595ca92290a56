// FSDP2's buffers in the memory model (`--zero 3 --fsdp 2`, sim/memory/memory.cpp): the bytes of
// every all-gather, unsharded parameter and gradient and reduce-scatter buffer alive at each
// phase, against what torch 2.11's fully_shard allocated on the CPU (gloo, ranks 0 of 2 and of 4)
// for a small Llama whose rows do not divide by 4, tracked tensor by tensor
// (docs/dev-notes/fsdp2-memory.md says how). Activations are not compared: CPU kernels save other
// tensors than CUDA's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/memory/memory.hpp"
#include "sim/model/model.hpp"

namespace fp8sim {
namespace {

using memory::compute_footprint;
using memory::Footprint;
using memory::MemoryOptions;

// H 70, 5 heads, SwiGLU 186, vocabulary 301 (odd: dim-0 padding at 2 and 4 ranks), untied head.
model::ModelConfig tiny(int64_t vocab = 301, int64_t layers = 3) {
  Json j = Json::object();
  j["name"] = "fsdp2-cpu";
  j["hidden_size"] = 70;
  j["intermediate_size"] = 186;
  j["num_hidden_layers"] = layers;
  j["num_attention_heads"] = 5;
  j["num_key_value_heads"] = 5;
  j["vocab_size"] = vocab;
  j["norm"] = "rmsnorm";
  j["activation"] = "swiglu";
  j["tie_word_embeddings"] = false;
  return model::parse_model(j, "test");
}

Footprint fsdp2(const model::ModelConfig& m, int64_t gpus, bool fp32 = false) {
  MemoryOptions o;
  o.gpus = gpus;
  o.zero = 3;
  o.fsdp = 2;
  o.fsdp_gather_fp32 = fp32;
  o.batch = 2;
  o.seq = 16;
  o.grads_persist = false;  // zero_grad(set_to_none=True), as the CPU run
  return compute_footprint(m, o);
}

// The FSDP buffers of a phase: its temporaries named fsdp_* (and autocast's casts when asked),
// without the previous layer's sharded gradient, which the CPU run counts among the gradients.
int64_t fsdp_bytes(const Footprint& f, const std::string& phase, bool with_casts = false) {
  for (const auto& p : f.phases)
    if (p.name == phase) {
      int64_t b = 0;
      for (const auto& c : p.temporaries)
        if ((c.name.rfind("fsdp_", 0) == 0 && c.name != "fsdp_layer_shard_grads") ||
            (with_casts && c.name == "autocast_weight_copies"))
          b += c.bytes;
      return b;
    }
  ADD_FAILURE() << "no phase " << phase;
  return -1;
}

TEST(MemoryFsdp2, ForwardHoldsTheRootAndThreeLayerBuffersAtACopyOut) {
  // The root's unsharded parameters, the previous layer's all-gather output, this layer's output
  // and its copied-out parameters: measured 437,500 bytes at 2 ranks, 445,360 at 4 (padded rows).
  EXPECT_EQ(fsdp_bytes(fsdp2(tiny(), 2), "forward_copy_out"), 437500);
  EXPECT_EQ(fsdp_bytes(fsdp2(tiny(), 4), "forward_copy_out"), 445360);
  // With a large vocabulary the first layer's copy-out, beside the root's own all-gather output, is
  // the larger: 2,476,600 bytes measured (vocabulary 4001, two layers, two ranks).
  EXPECT_EQ(fsdp_bytes(fsdp2(tiny(4001, 2), 2), "forward_first_copy_out"), 2476600);
}

TEST(MemoryFsdp2, BackwardHoldsThePreviousLayersReduceScatterInput) {
  // Root parameters, LM-head and final-norm gradients, the previous layer's fp32 reduce-scatter
  // input, this layer and the prefetched one, this layer's bf16 gradients: 714,980 and 725,272
  // bytes measured.
  EXPECT_EQ(fsdp_bytes(fsdp2(tiny(), 2), "backward_next_layer"), 714980);
  EXPECT_EQ(fsdp_bytes(fsdp2(tiny(), 4), "backward_next_layer"), 725272);
}

TEST(MemoryFsdp2, TheRootsReduceScatterEndsTheBackward) {
  // Vocabulary 4001: the root's fp32 reduce-scatter input (2,241,400), the LM head's unsharded
  // gradient (560,140) and the root's new sharded gradient (1,120,700) at the step's peak.
  const Footprint f = fsdp2(tiny(4001, 2), 2);
  EXPECT_EQ(fsdp_bytes(f, "backward_end"), 2241400 + 560140 + 1120700);
  EXPECT_EQ(f.peak_phase, "backward_end");
}

TEST(MemoryFsdp2, GatheringFp32DoublesTheBuffersAndAddsAutocastsCasts) {
  // No MixedPrecisionPolicy: 4-byte all-gathers, gradients and reduce-scatters, and autocast's
  // bf16 casts of the layers already run: 1,109,640 bytes measured at the last layer's copy-out,
  // 1,312,080 at the second-to-last layer's backward.
  const Footprint f = fsdp2(tiny(), 2, true);
  EXPECT_EQ(fsdp_bytes(f, "forward_copy_out", true), 1109640);
  EXPECT_EQ(fsdp_bytes(f, "backward_next_layer", true), 1312080);
}

int64_t component_bytes(const std::vector<memory::Component>& cs, const std::string& name) {
  for (const auto& c : cs)
    if (c.name == name) return c.bytes;
  return -1;
}

int64_t temporary(const Footprint& f, const std::string& phase, const std::string& name) {
  for (const auto& p : f.phases)
    if (p.name == phase)
      for (const auto& c : p.temporaries)
        if (c.name == name) return c.bytes;
  return -1;
}

TEST(MemoryFsdp2, CheckpointedCastsLiveOnlyWhileAutocastRuns) {
  // Gathering fp32 under checkpointing: autocast's cache holds every layer's bf16 cast through
  // forward; after it exits (before the loss's backward) only the LM head's, saved by F.linear, lives.
  const model::ModelConfig m = tiny();
  MemoryOptions o;
  o.gpus = 2;
  o.zero = 3;
  o.fsdp = 2;
  o.fsdp_gather_fp32 = true;
  o.checkpointing = true;
  o.batch = 2;
  o.seq = 16;
  const Footprint f = compute_footprint(m, o);
  const int64_t layer = 2 * m.layer_linear_param_count(), head = 2 * m.vocab * m.hidden;
  EXPECT_EQ(temporary(f, "forward_end", "autocast_weight_copies"), m.layers * layer + head);
  EXPECT_EQ(temporary(f, "backward_loss", "autocast_weight_copies"), head);
  EXPECT_EQ(temporary(f, "backward_next_layer", "autocast_weight_copies"), layer);  // the recomputed layer's
}

TEST(MemoryFsdp2, ATiedRootEndsItsReduceScatterHoldingTheFinalNormsGradient) {
  // Tied embeddings: the root's parameters are the embedding and the final norm, the norm last, so
  // the reduce-scatter's loop holds the norm's unsharded gradient beside the new shard.
  Json j = Json::object();
  j["name"] = "tied";
  j["hidden_size"] = 64;
  j["intermediate_size"] = 128;
  j["num_hidden_layers"] = 2;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 4;
  j["vocab_size"] = 4000;
  j["norm"] = "rmsnorm";
  j["activation"] = "swiglu";
  j["tie_word_embeddings"] = true;
  const model::ModelConfig m = model::parse_model(j, "test");
  const Footprint f = fsdp2(m, 2);
  const int64_t P_r = m.outside_param_count(), shard_r = (4000 * 64 + 64) / 2;  // rows divide by 2
  EXPECT_EQ(temporary(f, "backward_end", "fsdp_root_unsharded_grads"), std::max(2 * P_r, 2 * 64 + 4 * shard_r));
}

TEST(MemoryFsdp2, ALoopComputingTheLossFreesTheLastGatherBeforeIt) {
  // The torch loop computes the loss on the returned logits: the root's post-forward has freed the
  // last layer's all-gather output by then, which the LM head's moment still holds.
  const Footprint f = fsdp2(tiny(), 2);
  EXPECT_EQ(temporary(f, "forward_lm_head", "fsdp_last_layer_gather"), 2 * 58800);
  EXPECT_EQ(temporary(f, "forward_end", "fsdp_last_layer_gather"), -1);
  EXPECT_EQ(temporary(f, "backward_loss", "fsdp_prefetched_layer"), -1);  // prefetched after the logits' gradient
  // transformers computes the loss in the model's forward: the gather lives through it and the
  // prefetch comes before the loss's backward.
  MemoryOptions o;
  o.framework = "hf";
  o.recipe = "bf16";
  o.gpus = 2;
  o.zero = 3;
  o.fsdp = 2;
  o.batch = 2;
  o.seq = 16;
  o.grads_persist = false;
  const Footprint hf = compute_footprint(tiny(), o);
  EXPECT_EQ(temporary(hf, "forward_loss", "fsdp_last_layer_gather"), 2 * 58800);
  EXPECT_EQ(temporary(hf, "backward_loss", "fsdp_prefetched_layer"), 2 * 58800);
  EXPECT_EQ(fsdp_bytes(hf, "backward_next_layer"), fsdp_bytes(f, "backward_next_layer"));  // the same buffers
  // Gathering fp32, autocast's copies of the gathered weights follow the layers (FSDP2's phases),
  // not a persistent term: all of them through forward and the loss, one layer fewer per layer of
  // backward, none once backward ends.
  o.fsdp_gather_fp32 = true;
  const Footprint hf32 = compute_footprint(tiny(), o);
  const int64_t layer = 2 * tiny().layer_linear_param_count(), head = 2 * 301 * 70;
  EXPECT_EQ(component_bytes(hf32.persistent, "autocast_weight_copies"), 0);
  EXPECT_EQ(temporary(hf32, "forward_loss", "autocast_weight_copies"), 3 * layer + head);
  EXPECT_EQ(temporary(hf32, "backward_next_layer", "autocast_weight_copies"), 1 * layer);
  EXPECT_EQ(temporary(hf32, "backward_end", "autocast_weight_copies"), -1);
}

TEST(MemoryFsdp2, OptionsThatDoNotDescribeFsdp2AreRefused) {
  MemoryOptions o;
  o.gpus = 2;
  o.zero = 2;
  o.fsdp = 2;
  EXPECT_THROW(memory::validate(o), UsageError);
  o.zero = 3;
  o.fsdp = 3;
  EXPECT_THROW(memory::validate(o), UsageError);
  o.fsdp = 1;
  o.fsdp_gather_fp32 = true;
  EXPECT_THROW(memory::validate(o), UsageError);
}

}  // namespace
}  // namespace fp8sim
