// The memory model (sim/memory): each term on its own, COAT's Table 2 exactly, Figure 1(c) and
// Table 7 within the stated tolerances (paper values typed here from
// the paper, never computed by fp8sim).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/common/check.hpp"
#include "sim/memory/memory.hpp"
#include "sim/model/model.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

using memory::compute_footprint;
using memory::Footprint;
using memory::kGiB;
using memory::MemoryOptions;
using model::ModelConfig;
using model::Table2Column;

// The idealised Llama layer of Table 2: ffn = 8/3 hidden exactly, multi-head attention.
ModelConfig ideal_llama() {
  Json j = Json::object();
  j["name"] = "ideal";
  j["hidden_size"] = 1536;
  j["intermediate_size"] = 4096;  // 8/3 x 1536
  j["num_hidden_layers"] = 2;
  j["num_attention_heads"] = 12;
  j["num_key_value_heads"] = 12;
  j["vocab_size"] = 1000;
  j["norm"] = "rmsnorm";
  j["activation"] = "swiglu";
  j["tie_word_embeddings"] = false;
  return model::parse_model(j, "ideal");
}

MemoryOptions opts(const std::string& recipe, int64_t gpus, int64_t batch, int64_t seq = 2048, int zero = 3) {
  MemoryOptions o;
  o.recipe = recipe;
  o.gpus = gpus;
  o.batch = batch;
  o.seq = seq;
  o.zero = zero;
  return o;
}

double gib(int64_t b) { return static_cast<double>(b) / kGiB; }

void expect_rel(double ours, double paper, double tol, const std::string& what) {
  EXPECT_LE(std::fabs(ours / paper - 1.0), tol)
      << what << ": fp8sim " << ours << " vs paper " << paper << " (" << 100 * (ours / paper - 1.0) << "%)";
}

// ---- Table 2: per-layer activation units, exactly ------------------------------------------------

struct Table2Row {
  const char* recipe;
  double rmsnorm, silu_mul, rope, flash, linear, total;
};
// COAT Table 2 (the paper prints 5.66, 3.33, 22.66, 18.33, 13.33: truncations of these thirds).
const Table2Row kTable2[] = {
    {"bf16", 4, 8, 2, 3, 17.0 / 3, 68.0 / 3},
    {"te", 2, 8, 2, 3, 10.0 / 3, 55.0 / 3},
    {"coat", 1, 4, 2, 3, 10.0 / 3, 40.0 / 3},
};

TEST(MemoryTable2, PerLayerUnitsAreExact) {
  const ModelConfig m = ideal_llama();
  for (const auto& row : kTable2) {
    for (int64_t batch : {1, 3}) {
      const Footprint f = compute_footprint(m, opts(row.recipe, 1, batch, 1000, 0));
      EXPECT_EQ(f.unit_u_bytes, batch * 1000 * 1536 * 2);
      EXPECT_NEAR(f.table2_units(Table2Column::RMSNorm), row.rmsnorm, 1e-12) << row.recipe;
      EXPECT_NEAR(f.table2_units(Table2Column::SiLUMul), row.silu_mul, 1e-12) << row.recipe;
      EXPECT_NEAR(f.table2_units(Table2Column::RoPE), row.rope, 1e-12) << row.recipe;
      EXPECT_NEAR(f.table2_units(Table2Column::FlashAttn), row.flash, 1e-12) << row.recipe;
      EXPECT_NEAR(f.table2_units(Table2Column::Linear), row.linear, 1e-12) << row.recipe;
      EXPECT_NEAR(f.table2_total_units(), row.total, 1e-12) << row.recipe;
    }
  }
}

TEST(MemoryTable2, ScaleMetadataIsCountedBesideTheUnits) {
  // COAT's 1x16 groups store one bf16 scale per 16 elements: 1/8 byte per element on top of the
  // FP8 code. Table 2 counts element bytes only; the footprint adds the scales.
  const ModelConfig m = ideal_llama();
  const Footprint f = compute_footprint(m, opts("coat", 1, 1, 1000, 0));
  int64_t norm_meta = 0, norm_data = 0;
  for (const auto& s : f.layer_saved)
    if (s.role == model::SavedRole::NormInput) {
      norm_meta += s.bytes.meta;
      norm_data += s.bytes.data;
    }
  EXPECT_EQ(norm_data, 2 * 1000 * 1536);             // two norms, 1 B per element
  EXPECT_EQ(norm_meta, 2 * (1000 * 1536 / 16) * 2);  // bf16 scale per 16 elements
}

// ---- individual terms ----------------------------------------------------------------------------

TEST(MemoryTerms, WeightsGradientsOptimizerFollowTheZeroStage) {
  const ModelConfig m = model::load_model("llama2-7b");
  const double P = static_cast<double>(m.param_count());
  // 32000 and 4096 rows divide by 4 and 8, so every shard is exactly P/N elements.
  for (int64_t n : {1, 4, 8}) {
    const Footprint z3 = compute_footprint(m, opts("bf16", n, 1, 2048, 3));
    EXPECT_DOUBLE_EQ(static_cast<double>(z3.weights), 4 * P / n);  // fp32 master, sharded; no replica
    EXPECT_DOUBLE_EQ(static_cast<double>(z3.gradients), 4 * P / n);
    EXPECT_DOUBLE_EQ(static_cast<double>(z3.optimizer()), 8 * P / n);
  }
  const Footprint z0 = compute_footprint(m, opts("bf16", 4, 1, 2048, 0));
  // fp32 master + torch.autocast's bf16 copies of what F.linear reads: not the (untied) embedding
  // or the norms' weights
  const double cast = P - static_cast<double>(m.vocab * m.hidden + (2 * m.layers + 1) * m.hidden);
  EXPECT_DOUBLE_EQ(static_cast<double>(z0.weights), 4 * P + 2 * cast);
  EXPECT_DOUBLE_EQ(static_cast<double>(z0.gradients), 4 * P);
  EXPECT_DOUBLE_EQ(static_cast<double>(z0.optimizer()), 8 * P);
  const Footprint z1 = compute_footprint(m, opts("bf16", 4, 1, 2048, 1));
  EXPECT_DOUBLE_EQ(static_cast<double>(z1.weights), 4 * P / 4 + 2 * P);
  EXPECT_DOUBLE_EQ(static_cast<double>(z1.gradients), 4 * P);
  EXPECT_DOUBLE_EQ(static_cast<double>(z1.optimizer()), 8 * P / 4);
  const Footprint z2 = compute_footprint(m, opts("bf16", 4, 1, 2048, 2));
  EXPECT_DOUBLE_EQ(static_cast<double>(z2.gradients), 4 * P / 4);
  // DDP keeps a second copy of the gradients in its buckets; one GPU has none.
  EXPECT_DOUBLE_EQ(
      static_cast<double>(z0.other_persistent - compute_footprint(m, opts("bf16", 1, 1, 2048, 0)).other_persistent),
      4 * P);
}

TEST(MemoryTerms, CoatOptimizerMetadataIsExact) {
  // Per parameter (flattened, sharded) and per moment: ceil(n/128) groups x (fp32 scale + k + c).
  const ModelConfig m = model::load_model("tiny-llama");
  const Footprint f = compute_footprint(m, opts("coat", 3, 1, 64));
  int64_t codes = 0, meta = 0;
  auto add = [&](const std::vector<int64_t>& shape, int64_t count) {
    const int64_t rows = (shape[0] + 2) / 3;  // dim-0 shard on 3 GPUs
    int64_t n = rows;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    codes += 2 * n * count;
    meta += 2 * ((n + 127) / 128) * 12 * count;
  };
  for (const auto& p : model::layer_params(m)) add(p.shape, m.layers);
  for (const auto& p : model::outside_params(m)) add(p.shape, 1);
  EXPECT_EQ(f.optimizer_states, codes);
  EXPECT_EQ(f.optimizer_metadata, meta);
  // The same through the quantizer's own accounting for one tensor.
  const QuantSpec spec = QuantSpec::parse("e4m3:g128:de=coat");
  const std::vector<int64_t> shape = {1000};
  EXPECT_EQ(quantized_size(spec, shape).total_bytes(), 1000 + 8 * 12);
}

TEST(MemoryTerms, ActivationsScaleWithTokensAndCheckpointingKeepsLayerInputs) {
  const ModelConfig m = model::load_model("llama2-7b");
  const Footprint b1 = compute_footprint(m, opts("bf16", 8, 1));
  const Footprint b4 = compute_footprint(m, opts("bf16", 8, 4));
  const Footprint s4 = compute_footprint(m, opts("bf16", 8, 1, 8192));
  // Everything saved is per token (FlashAttention keeps O(seq) statistics, not O(seq^2)).
  EXPECT_EQ(b4.activations_total, 4 * b1.activations_total);
  EXPECT_EQ(s4.activations_total, b4.activations_total);
  MemoryOptions ck = opts("bf16", 8, 1);
  ck.checkpointing = true;
  const Footprint c = compute_footprint(m, ck);
  int64_t outside = 0;
  for (const auto& s : c.outside_saved) outside += s.bytes.total();
  const int64_t layer_input = 2048 * 4096 * 2;
  // Forward keeps each layer's input; the recomputed layer is a temporary of backward.
  EXPECT_EQ(c.activations_total, m.layers * layer_input + outside);
  int64_t recomputed = -1;
  for (const auto& p : c.phases)
    for (const auto& t : p.temporaries)
      if (p.name == "backward_layers" && t.name == "recomputed_layer") recomputed = t.bytes;
  EXPECT_EQ(recomputed, c.layer_activation_bytes);
  EXPECT_LT(c.activations_total, b1.activations_total / 5);
}

TEST(MemoryTerms, PeakIsTheLargestPhaseAndFitsMatchesTheBudget) {
  const ModelConfig m = model::load_model("llama2-7b");
  const Footprint f = compute_footprint(m, opts("coat", 4, 2));
  int64_t best = 0;
  for (const auto& p : f.phases) best = std::max(best, p.total());
  EXPECT_EQ(f.peak, best);
  EXPECT_GE(f.peak, f.weights + f.gradients + f.optimizer() + f.activations_total);
  MemoryOptions small = opts("coat", 4, 2);
  small.gpu_mem_gib = gib(f.peak) * 0.999;
  EXPECT_FALSE(compute_footprint(m, small).fits());
  small.gpu_mem_gib = gib(f.peak) * 1.001;
  EXPECT_TRUE(compute_footprint(m, small).fits());
  // Freed gradients lower the forward/backward phases by exactly the gradient bytes.
  MemoryOptions fg = opts("coat", 4, 2);
  fg.grads_persist = false;
  const Footprint g = compute_footprint(m, fg);
  EXPECT_EQ(g.phases[0].total(), f.phases[0].total() - f.gradients);
}

TEST(MemoryTerms, MaxBatchIsTheLargestThatFits) {
  const ModelConfig m = model::load_model("llama2-7b");
  MemoryOptions o = opts("coat", 4, 1);
  const int64_t b = memory::max_batch(m, o);
  ASSERT_GT(b, 0);
  o.batch = b;
  EXPECT_TRUE(compute_footprint(m, o).fits());
  o.batch = b + 1;
  EXPECT_FALSE(compute_footprint(m, o).fits());
  const int64_t p2 = memory::max_batch(m, opts("coat", 4, 1), true);
  EXPECT_EQ(p2 & (p2 - 1), 0);
  EXPECT_LE(p2, b);
  EXPECT_GT(2 * p2, b);
  MemoryOptions tiny = opts("bf16", 1, 1);
  tiny.gpu_mem_gib = 1.0;
  EXPECT_EQ(memory::max_batch(m, tiny), 0);
}

TEST(MemoryTerms, FourRecipesOrderAsExpected) {
  const ModelConfig m = model::load_model("llama2-7b");
  const Footprint bf = compute_footprint(m, opts("bf16", 4, 2));
  const Footprint te = compute_footprint(m, opts("te", 4, 2));
  const Footprint co = compute_footprint(m, opts("coat", 4, 2));
  const Footprint ds = compute_footprint(m, opts("deepseek", 4, 2));
  const Footprint lm = compute_footprint(m, opts("fp8lm", 4, 2));
  EXPECT_LT(co.activations_total, te.activations_total);
  EXPECT_LT(te.activations_total, bf.activations_total);
  EXPECT_LT(co.optimizer(), lm.optimizer());
  EXPECT_LT(lm.optimizer(), ds.optimizer());
  EXPECT_LT(ds.optimizer(), bf.optimizer());
  EXPECT_LT(lm.weights, bf.weights);
  EXPECT_LT(co.peak, te.peak);
}

TEST(MemoryTerms, BadOptionsAreUsageErrors) {
  const ModelConfig m = model::load_model("tiny-llama");
  EXPECT_THROW(compute_footprint(m, opts("bf16", 0, 1)), UsageError);
  EXPECT_THROW(compute_footprint(m, opts("bf16", 1, 0)), UsageError);
  EXPECT_THROW(compute_footprint(m, opts("bf16", 1, 1, -1)), UsageError);
  EXPECT_THROW(compute_footprint(m, opts("bf16", 1, 1, 64, 4)), UsageError);
  EXPECT_THROW(compute_footprint(m, opts("fp4", 1, 1)), UsageError);
  MemoryOptions o = opts("bf16", 1, 1);
  o.gpu_mem_gib = std::nan("");
  EXPECT_THROW(compute_footprint(m, o), UsageError);
}

// ---- Figure 1(c): Llama-2-7B on 4 GPUs, within 3% --------------------------------------------------

TEST(MemoryFig1c, WeightsGradientsAndOptimizerWithin3Percent) {
  const ModelConfig m = model::load_model("llama2-7b");
  struct Row {
    const char* recipe;
    double weights, grads, optimizer;
  } rows[] = {{"bf16", 6.3, 6.3, 12.6}, {"te", 6.3, 6.3, 12.6}, {"fp8lm", 3.2, 6.3, 4.8}, {"coat", 6.3, 6.3, 3.2}};
  for (const auto& r : rows) {
    const Footprint f = compute_footprint(m, opts(r.recipe, 4, 2));
    expect_rel(gib(f.weights), r.weights, 0.03, std::string(r.recipe) + " weights");
    expect_rel(gib(f.gradients), r.grads, 0.03, std::string(r.recipe) + " gradients");
    // The paper's COAT optimizer (3.2) is exactly a quarter of BF16's: FP8 codes only. fp8sim also
    // counts DE's per-group fp32 scale, k and centre (+9.4%), reported separately as metadata.
    expect_rel(gib(f.optimizer_states), r.optimizer, 0.03, std::string(r.recipe) + " optimizer states");
    if (std::string(r.recipe) != "coat") expect_rel(gib(f.optimizer()), r.optimizer, 0.03, r.recipe);
  }
}

// ---- Table 7 (FSDP, H100 80 GB): rows fp8sim matches -----------------------------------------------

struct T7 {
  const char* model;
  int64_t gpus, batch, seq;
  const char* recipe;
  double optimizer, activations, peak;  // paper, GiB per GPU
  int64_t max_batch;                    // paper's column
};
const T7 kTable7[] = {
    {"llama2-7b", 1, 1, 2048, "coat", 13.1, 8.1, 79.3, 1},   {"llama2-7b", 2, 2, 2048, "coat", 6.5, 16.9, 52.8, 4},
    {"llama2-7b", 4, 2, 2048, "bf16", 13.1, 25.8, 55.1, 2},  {"llama2-7b", 4, 2, 2048, "te", 13.1, 21.9, 51.1, 2},
    {"llama2-7b", 4, 2, 2048, "coat", 3.2, 16.9, 35.6, 4},   {"llama2-7b", 8, 2, 2048, "bf16", 6.5, 25.8, 41.2, 4},
    {"llama2-7b", 8, 2, 2048, "te", 6.5, 21.9, 37.2, 4},     {"llama2-7b", 8, 2, 2048, "coat", 1.6, 16.9, 27.0, 8},
    {"llama2-13b", 2, 1, 1024, "coat", 12.6, 10.1, 73.2, 1}, {"llama2-13b", 4, 1, 2048, "bf16", 25.1, 20.1, 76.1, 1},
    {"llama2-13b", 4, 1, 2048, "te", 25.1, 17.2, 73.0, 1},   {"llama2-13b", 4, 1, 2048, "coat", 6.3, 13.2, 49.1, 2},
    {"llama2-13b", 8, 1, 2048, "bf16", 12.6, 20.1, 49.4, 2}, {"llama2-13b", 8, 1, 2048, "te", 12.6, 17.2, 46.5, 2},
    {"llama2-13b", 8, 1, 2048, "coat", 3.1, 13.2, 32.5, 4},  {"llama-30b", 8, 1, 2048, "coat", 7.8, 24.2, 70.5, 1},
};

std::string label(const T7& r) {
  return std::string(r.model) + " " + std::to_string(r.gpus) + " GPUs b" + std::to_string(r.batch) + " " + r.recipe;
}

TEST(MemoryTable7, PeakWithin10PercentOnEveryRow) {
  for (const auto& r : kTable7) {
    const Footprint f = compute_footprint(model::load_model(r.model), opts(r.recipe, r.gpus, r.batch, r.seq));
    expect_rel(gib(f.peak), r.peak, 0.10, label(r) + " peak");
    EXPECT_TRUE(f.fits()) << label(r);
  }
}

TEST(MemoryTable7, OptimizerWithin5Percent) {
  for (const auto& r : kTable7) {
    const Footprint f = compute_footprint(model::load_model(r.model), opts(r.recipe, r.gpus, r.batch, r.seq));
    if (std::string(r.recipe) == "coat") {
      // As in Fig. 1(c), the paper's COAT optimizer is 1/4 of BF16's: the FP8 codes without DE's
      // metadata. The codes match on every row; codes + metadata is +4.8% to +7.2% (docs/memory-model.md).
      expect_rel(gib(f.optimizer_states), r.optimizer, 0.05, label(r) + " optimizer codes");
    } else {
      expect_rel(gib(f.optimizer()), r.optimizer, 0.05, label(r) + " optimizer");
    }
  }
}

TEST(MemoryTable7, ActivationsWithin10PercentOnTheRowsFp8simMatches) {
  // Matched: every BF16 row, COAT on 1 GPU and Llama-30B. Not matched (docs/memory-model.md explains): TE and
  // COAT on 2-8 GPUs are 12-14% below the paper, whose Table 7 exceeds its own Table 2 accounting
  // by ~3.5U per layer for these recipes; Llama-2-13B at context 1024 (paper 10.1 GiB is 1.8x the
  // per-token accounting of the same model at context 2048 halved).
  for (const auto& r : kTable7) {
    const std::string rec = r.recipe;
    const bool matched = rec == "bf16" || (rec == "coat" && (r.gpus == 1 || std::string(r.model) == "llama-30b"));
    if (!matched) continue;
    const Footprint f = compute_footprint(model::load_model(r.model), opts(r.recipe, r.gpus, r.batch, r.seq));
    expect_rel(gib(f.activations_total), r.activations, 0.10, label(r) + " activations");
  }
}

TEST(MemoryTable7, OutOfMemoryWhereThePaperSaysSo) {
  // BF16 and TE cannot train Llama-2-7B on 1 GPU, Llama-2-13B on 2 GPUs (context 1024) or
  // Llama-30B on 8 GPUs at batch 1. (Llama-2-7B on 2 GPUs at batch 2: the paper reports OOM,
  // fp8sim predicts 75.7 / 71.4 GiB, which fits: not matched, see docs/memory-model.md.)
  struct Oom {
    const char* model;
    int64_t gpus, seq;
  } rows[] = {{"llama2-7b", 1, 2048}, {"llama2-13b", 2, 1024}, {"llama-30b", 8, 2048}};
  for (const auto& r : rows)
    for (const char* rec : {"bf16", "te"}) {
      const Footprint f = compute_footprint(model::load_model(r.model), opts(rec, r.gpus, 1, r.seq));
      EXPECT_FALSE(f.fits()) << r.model << " " << r.gpus << " GPUs " << rec << ": " << gib(f.peak) << " GiB";
      EXPECT_EQ(memory::max_batch(model::load_model(r.model), opts(rec, r.gpus, 1, r.seq), true), 0);
    }
}

TEST(MemoryTable7, MaxBatchEqualsThePapersColumnOnTheRowsFp8simMatches) {
  // The paper's column holds powers of two (1, 2, 4, 8), so fp8sim's power-of-two search is
  // compared. Not matched (docs/memory-model.md): Llama-2-7B on 4 GPUs, BF16 and TE (fp8sim 4, paper 2), on 2
  // GPUs BF16 and TE (fp8sim 2, paper 1), and Llama-2-13B on 2 GPUs at context 1024 (2 vs 1).
  for (const auto& r : kTable7) {
    const std::string rec = r.recipe;
    if (std::string(r.model) == "llama2-7b" && r.gpus == 4 && rec != "coat") continue;
    if (std::string(r.model) == "llama2-13b" && r.gpus == 2) continue;
    const ModelConfig m = model::load_model(r.model);
    EXPECT_EQ(memory::max_batch(m, opts(r.recipe, r.gpus, r.batch, r.seq), true), r.max_batch) << label(r);
  }
}

}  // namespace
}  // namespace fp8sim
