#pragma once
// The COAT paper's memory numbers (Xi et al., ICLR 2025: Table 2, Figure 1(c), Table 7, typed
// from the paper) and fp8sim's predictions beside them. The paper's "GB"
// are GiB (6.74e9 params x 4 B / 4 GPUs = 6.28 GiB = Fig. 1(c)'s 6.3).
//
// memory_paper_comparison() is what `fp8sim memory --paper` prints and what docs/memory-model.md and
// the fidelity tests use. Every row carries fp8sim's value, the paper's, the relative difference
// and whether it is within the tolerance (optimizer 5%, activations 10%, peak 10%,
// Fig. 1(c) components 3%, max batch equal, OOM where the paper says OOM).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::memory {

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// Table 7: end-to-end per-GPU memory on H100 80 GB, FSDP (ZeRO-3) over `gpus`.
struct PaperTable7Entry {
  const char* model;  // models/ name
  int64_t gpus, batch, seq;
  const char* recipe;                               // bf16 | te | coat
  double optimizer_gib, activations_gib, peak_gib;  // NaN where the paper reports OOM / "-"
  bool oom;                                         // the paper reports OOM at this batch
  int64_t max_batch;                                // the paper's max-batch column (0 = OOM even at batch 1)
};
const std::vector<PaperTable7Entry>& paper_table7();

// Figure 1(c): Llama-2-7B on 4 GPUs, GiB per GPU.
struct PaperFig1cEntry {
  const char* recipe;  // bf16 | te | fp8lm | coat
  double weights_gib, gradients_gib, activations_gib, optimizer_gib, total_gib;
};
const std::vector<PaperFig1cEntry>& paper_fig1c();

// Table 2: per-layer activation memory in units of U = batch * seq * hidden * 2 bytes.
struct PaperTable2Entry {
  const char* recipe;  // bf16 | te | coat
  double rmsnorm, silu_mul, rope, flash_attn, linear, total;
};
const std::vector<PaperTable2Entry>& paper_table2();

// Table 2's columns in units of U.
struct Table2Units {
  double rmsnorm, silu_mul, rope, flash_attn, linear, total;  // "RMSNorm", "SiLU&Mul", ... "total"
  Json to_json() const;
};

// One recipe's layer in Table 2's accounting.
struct Table2Row {
  std::string recipe;
  Table2Units units;      // fp8sim's (the row's own keys in the document)
  double metadata_units;  // scales, norm statistics and the log-sum-exp: outside Table 2's count
  std::optional<Table2Units> paper;
  std::optional<bool> match;  // the total equals the paper's
};

struct Table2Comparison {
  std::string model;                      // the idealised layer's display name
  std::vector<Table2Row> rows;            // with the paper's values
  std::vector<Table2Row> llama2_7b_rows;  // Llama-2-7B's real shapes, no paper values
};

// Figure 1(c)'s components; *_rel absent where the paper has no value, *_match within 3%.
struct Fig1cRow {
  std::string recipe;
  double weights_gib, gradients_gib, optimizer_gib, optimizer_states_gib, activations_gib_batch2;
  PaperFig1cEntry paper;
  std::optional<double> weights_rel, gradients_rel, optimizer_rel, optimizer_states_rel;
  bool weights_match, gradients_match, optimizer_match, optimizer_states_match;
};

// One Table 7 row; *_rel absent where the paper has no value, *_match absent where the paper
// reports OOM (optimizer within 5%, activations and peak within 10%).
struct Table7Row {
  std::string model;
  int64_t gpus, batch, seq;
  std::string recipe;
  double optimizer_gib, optimizer_states_gib, activations_gib, peak_gib;
  bool fits;
  int64_t max_batch, max_batch_pow2;
  PaperTable7Entry paper;
  std::optional<double> optimizer_rel, optimizer_states_rel, activations_rel, peak_rel;
  std::optional<bool> optimizer_match, optimizer_states_match, activations_match, peak_match;
  bool oom_match;             // OOM exactly where the paper reports OOM
  bool max_batch_pow2_match;  // the power-of-two max batch equals the paper's
};

struct PaperComparison {
  Table2Comparison table2;
  std::vector<Fig1cRow> fig1c;
  std::vector<Table7Row> table7;
  // {"table2": {"model", "rows", "llama2_7b_rows"}, "fig1c": [...], "table7": [...]}: each row
  // with its fields under their names (Table2Units' as "RMSNorm" ... "total"); an absent *_rel or
  // *_match and a NaN paper value are null, an absent Table 2 paper or match is left out.
  Json to_json() const;
};
PaperComparison memory_paper_comparison();

}  // namespace fp8sim::memory
