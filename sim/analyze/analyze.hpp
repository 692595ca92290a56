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
// JSON document (AnalyzeResult::to_json, what --json writes):
//   {"trace", "step", "recipe" {name, description, rules}, "model" (model_config),
//    "tensors": [{"name", "role", "op", "module", "layer", "dtype", "shape", "spec" ("none" when
//                 the recipe keeps it), "rule" (the rule's note), "quantized",
//                 "nan_count", "inf_count" (values in the tensor), "stored_bytes" (bytes in
//                 the stored dtype),
//                 then the keys of `fp8sim quantize --json`: "numel", "groups",
//                 "bytes" {codes, metadata, total, bits_per_element}, "mse", "nmse", "snr_db",
//                 "max_abs_err", "max_rel_err", "cosine", "underflow_frac", "saturated_frac",
//                 "count", "nonzero", "nonfinite", "nonfinite_out", "underflow", "saturated",
//                 "tensor_amax", with `histograms` "histogram" {before, after}, with DE
//                 "expand" {k_min, k_max, k_mean, ...} (no per-group arrays)}],
//    "aggregates": {"by_role" | "by_op" | "by_layer": [{"key", "tensors", "quantized_tensors",
//                   "elements", "stored_bytes", "recipe_bytes", "specs" [...], + the
//                   ErrorStats keys merged over the quantized tensors}]},
//    "layers": [{"layer", + ErrorStats keys merged over the layer's GEMMs, "gemms": [{"module",
//                "input", "weight", "m", "n", "k", "spec_input", "spec_weight", + ErrorStats
//                keys of Y, "tensor_core": {"modelled", with it "config", "rows" (rows of Y it
//                computed), "ideal" / "promote" / "fast" {ErrorStats keys of those rows: the ideal
//                fp32 product, the tensor cores promoting to fp32 every 128 of K, and never
//                (per-tensor and row scales only)}, "promote_vs_ideal" / "fast_vs_ideal" (the
//                same against the ideal product: the accumulation's own error), without it
//                "why"}}], with "tensor_core" {"gemms", "ideal", "promote", "promote_vs_ideal",
//                "fast_gemms", "fast", "fast_vs_ideal"} merged over the layer's modelled GEMMs}],
//    "nonfinite_tensors": [names with NaN/Inf], "unmatched_tensors": [names no rule matched],
//    "skipped_gemms": [{"input", "module", "why"}],
//    "totals": {"tensors", "quantized_tensors", "elements", "stored_bytes", "recipe_bytes"}}
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/metrics/error_stats.hpp"
#include "sim/quant/quantize_report.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::analyze {

struct AnalyzeOptions {
  std::optional<int64_t> step;  // default: the step holding the most tensors (the full snapshot)
  bool gemm = true;             // per-layer GEMM output error
  // Rows of each GEMM's output the tensor-core model (sim/gemm/tc_gemm.hpp) computes, evenly
  // spaced (0: every row; -1: no tensor-core model).
  int64_t tensor_core_rows = 256;
  // Runs the tensor-core model (tc_gemm's arguments); empty: tc_gemm on the CPU. `fp8sim analyze
  // --tensor-core-device cuda` sets it to the model on the GPU (gpu::Backend::tensor_core_model).
  std::function<void(const uint8_t* x, const uint8_t* w, const float* x_scales, const float* w_scales, float* y,
                     int64_t m, int64_t n, int64_t k, const gemm::TcGemmConfig& config)>
      tensor_core_gemm;
  // Computes a tensor's numbers on a device (`fp8sim analyze --device cuda` sets it to
  // gpu::Backend::tensor_metrics, the same bits); nullopt, or empty: the CPU computes them.
  // Arguments: the stored values, their dtype, the shape quantized, the spec (null: kept).
  std::function<std::optional<TensorMetrics>(const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                             const QuantSpec* spec)>
      tensor_metrics;
  // Bytes one tensor's work may hold on the CPU (0: no limit): a larger tensor is read and measured
  // in slabs of rows (TraceReader::read_rows), with the same numbers. Tensors whose scale groups a
  // slab would cut (per-column scales, rht, DE over a whole tensor) and the device path read whole.
  double memory_budget = 0;
  bool histograms = false;  // keep the per-tensor scaled-magnitude histograms
  bool progress = true;     // progress bar on stderr (when it is a terminal)
  int threads = 0;          // 0: OpenMP default
};

// A tensor's bytes under the recipe (the quantizer's exact accounting; the stored bytes when kept).
struct TensorBytes {
  uint64_t codes = 0;
  uint64_t metadata = 0;
  uint64_t total = 0;
  double bits_per_element = 0;
  Json to_json() const;
};

// One tensor of the step under its rule.
struct TensorRecord {
  std::string name, role, op, module;
  int64_t layer = -1;  // -1: outside the blocks
  std::string dtype;
  std::vector<int64_t> shape;
  std::string spec;  // canonical spec text, "none" when the recipe keeps the tensor
  std::string rule;  // the rule's note ("no rule" when none matched)
  bool quantized = false;
  int64_t nan_count = 0, inf_count = 0;  // values in the tensor
  uint64_t stored_bytes = 0;             // in the stored dtype
  int64_t numel = 0;
  int64_t groups = 0;
  TensorBytes bytes;
  ErrorStats stats;                   // against the stored values (exact when kept)
  std::optional<double> tensor_amax;  // quantized tensors
  // Passed through from the quantizer's document, never read back: the scaled-magnitude
  // histograms {before, after} (AnalyzeOptions::histograms) and DE's summary without its
  // per-group arrays.
  std::optional<Json> histogram;
  std::optional<Json> expand;
  Json to_json() const;
};

// Tensors grouped by role, role:op or layer, with ErrorStats merged over the quantized ones.
struct Aggregate {
  std::string key;
  int64_t tensors = 0, quantized_tensors = 0, elements = 0;
  uint64_t stored_bytes = 0, recipe_bytes = 0;
  std::vector<std::string> specs;   // distinct spec texts, sorted
  std::optional<ErrorStats> stats;  // none when no tensor of the group is quantized
  Json to_json() const;
};

struct Aggregates {
  std::vector<Aggregate> by_role, by_op;  // in key order
  std::vector<Aggregate> by_layer;        // in numeric layer order (-1 first)
  Json to_json() const;
};

// The forward GEMM of one linear module: Y = X W^T against its quantized operands.
// The GEMM as Hopper's tensor cores compute it (cuBLASLt's FP8 GEMM, sim/gemm/tc_gemm.hpp), on a
// sample of Y's rows, beside the ideal fp32 product of the same rows.
struct TensorCoreErrors {
  bool modelled = false;
  std::string why;     // not modelled: which operand's scaling no sm_90 GEMM takes
  std::string config;  // modelled: tc_gemm's configuration (its promoted form)
  int64_t rows = 0;    // rows of Y computed
  ErrorStats ideal, promote;
  std::optional<ErrorStats> fast;  // per-tensor and row scales: fast accumulation (no promotion)
  // The accumulation's own error: the tensor cores' Y against the ideal fp32 product of the same
  // quantized operands.
  ErrorStats promote_vs_ideal;
  std::optional<ErrorStats> fast_vs_ideal;
  Json to_json() const;
};

struct GemmRecord {
  std::string module, input, weight;
  int64_t m = 0, n = 0, k = 0;
  std::string spec_input, spec_weight;  // "none" for an unquantized operand
  ErrorStats stats;                     // of Y
  TensorCoreErrors tensor_core;
  Json to_json() const;
};

struct LayerGemms {
  int64_t layer = -1;
  ErrorStats stats;  // merged over the layer's GEMMs
  std::vector<GemmRecord> gemms;
  // Merged over the layer's modelled GEMMs (count: how many); fast over those that have it.
  int64_t tc_gemms = 0, tc_fast_gemms = 0;
  ErrorStats tc_ideal, tc_promote, tc_fast, tc_promote_vs_ideal, tc_fast_vs_ideal;
  Json to_json() const;
};

struct SkippedGemm {
  std::string input, module, why;
  Json to_json() const;
};

struct Totals {
  int64_t tensors = 0, quantized_tensors = 0, elements = 0;
  uint64_t stored_bytes = 0, recipe_bytes = 0;
  Json to_json() const;
};

struct AnalyzeResult {
  std::string trace;  // source-relative path
  int64_t step = 0;
  recipe::TrainingRecipe recipe;  // written as its rules_json()
  Json model;                     // the trace's model_config, passed through
  std::vector<TensorRecord> tensors;
  Aggregates aggregates;
  std::vector<LayerGemms> layers;  // in layer order; empty without AnalyzeOptions::gemm
  std::vector<std::string> nonfinite_tensors, unmatched_tensors;
  std::vector<SkippedGemm> skipped_gemms;
  Totals totals;
  // Where each rank's time went (one entry per MPI rank); not part of the document, which is the
  // same for any number of ranks.
  struct RankTime {
    double work = 0;      // its items, from the first read to the last result
    double read = 0;      // reading tensors, on the read-ahead thread (overlapped with the computing)
    double wait = 0;      // the computing waiting for a read
    int64_t slabbed = 0;  // tensors read in slabs (over AnalyzeOptions::memory_budget)
    double began = 0;     // when its work began, in seconds since its process started (dist::process_age_seconds)
    double startup = 0;   // its job start-up (dist::startup_seconds)
  };
  std::vector<RankTime> rank_times;
  Json to_json() const;
};

AnalyzeResult analyze_trace(const trace::TraceReader& reader, const recipe::TrainingRecipe& recipe,
                            const AnalyzeOptions& opts = {});
// Opens the trace and finds the recipe (a registry name or a recipe file, recipe::get) first.
AnalyzeResult analyze_trace(const std::string& trace_path, const std::string& recipe, const AnalyzeOptions& opts = {});

}  // namespace fp8sim::analyze

namespace fp8sim::analyze {

// Human tables of an analysis: per op (role:op), per layer (tensor error) and the per-layer GEMM
// output error. Each table is {header, rows}; used by the command's stdout and by
// analysis_markdown().
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
Table op_table(const AnalyzeResult& analysis);
Table layer_gemm_table(const AnalyzeResult& analysis);
// Per layer: the GEMMs as Hopper's tensor cores compute them (TensorCoreErrors), beside the ideal.
Table tensor_core_table(const AnalyzeResult& analysis);
// Why no GEMM was modelled (empty when some was).
std::string tensor_core_absent(const AnalyzeResult& analysis);
Table tensor_table(const AnalyzeResult& analysis);
// The --md document: recipe, the three tables, and the warnings (NaN/Inf, unmatched, skipped).
std::string analysis_markdown(const AnalyzeResult& analysis);

}  // namespace fp8sim::analyze
