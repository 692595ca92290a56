#pragma once
// The work behind `fp8sim analyze TRACE --recipe R`: every tensor of one captured step through
// the QuantSpec its recipe's rules assign (sim/recipe/recipe.hpp), with the metrics of
// `fp8sim quantize`, aggregates per role, per op and per layer, and for every linear layer the
// error of its forward GEMM output when both operands are quantized (COAT Figure 4(a)).
//
// GEMM error, per linear layer with input X (T, K) (T = tokens of the capture micro-batch) and
// weight W (N, K):  Y_ref = X W^T and Y_q = deq(q(X)) deq(q(W))^T, both in fp32 with Eigen
// (same code path, so the difference is the quantization alone); the metrics are those of
// ErrorStats (sim/metrics/error_stats.hpp) between Y_ref and Y_q. An operand whose rule is
// "none" enters unquantized.
//
// JSON document (what --json writes):
//   {"trace", "step", "recipe" {name, description, rules}, "model" (model_config),
//    "tensors": [{"name", "role", "op", "module", "layer", "dtype", "shape", "spec" ("none" when
//                 the recipe keeps it), "rule" (the rule's note), "quantized",
//                 "nan_count", "inf_count" (values in the tensor), "stored_bytes" (bytes in
//                 the stored dtype),
//                 then the keys of `fp8sim quantize --json`: "numel", "groups",
//                 "bytes" {codes, metadata, total, bits_per_element}, "mse", "nmse", "snr_db",
//                 "max_abs_err", "max_rel_err", "cosine", "underflow_frac", "saturated_frac",
//                 "count", "nonzero", "nonfinite", "nonfinite_out", "underflow", "saturated",
//                 "tensor_amax", with DE "expand" {k_min, k_max, k_mean, ...} (no per-group
//                 arrays), and with `histograms` "histogram" {before, after}}],
//    "aggregates": {"by_role" | "by_op" | "by_layer": [{"key", "tensors", "quantized_tensors",
//                   "elements", "stored_bytes", "recipe_bytes", "specs" [...], + the
//                   ErrorStats keys merged over the quantized tensors}]},
//    "layers": [{"layer", "gemms": [{"module", "input", "weight", "m", "n", "k", "spec_input",
//                "spec_weight", + ErrorStats keys of Y}], + ErrorStats keys merged over the
//                layer's GEMMs}],
//    "nonfinite_tensors": [names with NaN/Inf], "unmatched_tensors": [names no rule matched],
//    "skipped_gemms": [{"input", "module", "why"}],
//    "totals": {"tensors", "quantized_tensors", "elements", "stored_bytes", "recipe_bytes"}}
#include <optional>
#include <string>

#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::analyze {

struct AnalyzeOptions {
  std::optional<int64_t> step;  // default: the step holding the most tensors (the full snapshot)
  bool gemm = true;             // per-layer GEMM output error
  bool histograms = false;      // keep the per-tensor scaled-magnitude histograms
  bool progress = true;         // progress bar on stderr (when it is a terminal)
  int threads = 0;              // 0: OpenMP default
};

Json analyze_trace(const trace::TraceReader& reader, const recipe::TrainingRecipe& recipe,
                   const AnalyzeOptions& opts = {});
// Opens the trace and finds the recipe (a registry name or a recipe file, recipe::get) first.
Json analyze_trace(const std::string& trace_path, const std::string& recipe, const AnalyzeOptions& opts = {});

}  // namespace fp8sim::analyze

namespace fp8sim::analyze {

// Human tables of an analysis document: per op (role:op), per layer (tensor error) and the
// per-layer GEMM output error. Each table is {header, rows}; used by the command's stdout and
// by analysis_markdown().
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
Table op_table(const Json& analysis);
Table layer_gemm_table(const Json& analysis);
Table tensor_table(const Json& analysis);
// The --md document: recipe, the three tables, and the warnings (NaN/Inf, unmatched, skipped).
std::string analysis_markdown(const Json& analysis);

}  // namespace fp8sim::analyze
