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

// The whole comparison as JSON: {"table2": [...], "fig1c": [...], "table7": [...], "notes": [...]}.
Json memory_paper_comparison();

}  // namespace fp8sim::memory
