#pragma once
// `fp8sim speed`: predicted step time, tokens/s per GPU and speedup vs BF16 for the recipes of a
// model that name a plan (plan.hpp), from kernel times measured on a GPU (now, through the
// gpu::Backend the caller passes in, or earlier, through a calibration file).
//
// step = grad_accum x (layers x (layer forward + backward) + embedding/final norm/LM head/loss)
//        + layers x weight casts (FP8 recipes) + optimizer step on params / gpus
//        + FSDP communication (optional model, see SpeedOptions::fsdp_comm).
// Every term is a sum of per-kernel times; each kernel's time comes from its measurement at that
// exact shape, or is fitted from the nearest measurement of the same kernel (calibration.hpp),
// and the output says which.
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::model {
struct ModelConfig;  // sim/model/model.hpp
}
namespace fp8sim::gpu {
class Backend;  // sim/backend/backend.hpp
}

namespace fp8sim::speed {

// A recipe as the replay sees it: the name it is reported under and the plan it runs.
struct PlanRecipe {
  std::string name;
  Plan plan = Plan::BF16;
};

// One collective's time as scripts/bench_allgather.py fits it: latency_us + bus bytes / bus_gbps
// (bus bytes = N x a rank's shard x (N-1)/N, nccl-tests' convention).
struct LinkFit {
  double latency_us = 0;
  double bus_gbps = 0;
};

// The fits of a bench_allgather.py run (format "fp8sim-allgather-bench"): all-gather of bf16 and of
// uint8 (FP8 codes), reduce-scatter of bf16 and of fp32, on `gpus` GPUs of `device`.
struct CommFit {
  std::string source, device;
  int64_t gpus = 0;
  std::optional<LinkFit> all_gather_bf16, all_gather_u8, reduce_scatter_bf16, reduce_scatter_f32;
};
// Reads the fits; throws Error naming the file and field for anything else.
CommFit load_comm_fit(const std::filesystem::path& path);

struct SpeedOptions {
  std::string model = "llama2-7b";              // models/NAME.json or a path to a model JSON
  int64_t batch = 1;                            // micro-batch per GPU, every recipe
  std::map<std::string, int64_t> recipe_batch;  // per-recipe overrides, by recipe name
  int64_t seq = 2048;
  // The recipes to evaluate, in order (callers take them from the recipe registry, sim/recipe).
  // Speedups are against the first that runs the BF16 plan, else the BF16 plan at `batch`.
  std::vector<PlanRecipe> recipes;
  int64_t gpus = 1;        // FSDP data-parallel GPUs: shards the optimizer step
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  // FSDP communication per micro-batch: every layer's BF16 weights all-gathered for forward and
  // again for backward, the root unit's (embedding, final norm, LM head) once (FSDP keeps it
  // gathered), every gradient reduce-scattered once, x (gpus-1)/gpus per GPU at link_gbps (an
  // assumed bus bandwidth, default NCCL on H100 NVLink). "none": not modelled; "serial": added to
  // the step; "overlap": hidden behind compute except what exceeds it and what no kernel can hide
  // (the root's and the first layer's all-gathers, the root's reduce-scatter).
  std::string fsdp_comm = "none";
  double link_gbps = 360;
  // What the collectives move, and each one's time: an FP8 recipe's layer weights all-gathered as
  // FP8 codes (1 B per parameter; one fp32 scale per tensor, under 1e-6 of the bytes, is left out)
  // instead of BF16 (the root stays BF16);
  // the gradients reduce-scattered in "fp32" (FSDP2's reduce_dtype=float32) instead of "bf16"; with
  // comm_fit, every collective priced by its fit (a latency per FSDP unit -- each decoder layer and
  // the root -- plus its bytes at the fitted bus bandwidth) instead of link_gbps without latency.
  bool fp8_allgather = false;
  std::string reduce_dtype = "bf16";
  std::optional<CommFit> comm_fit;
  std::filesystem::path calibration;        // model from this file (even on a GPU machine)
  std::filesystem::path torch_times;        // measured run: scripts/torch_layer_time.py output
  std::filesystem::path write_calibration;  // measured run: merge the measurements into this file
  // When set, receives the merged calibration's text instead of it being written to
  // write_calibration (the command stages it with its other outputs).
  std::function<void(const std::string&)> calibration_sink;
  bool table7 = false;                                      // add COAT Table 7's rows (measures their shapes too)
  bool fig4b = true;                                        // add the Figure 4(b) table
  std::string command_line;                                 // recorded in the output
  std::function<void(double done, double total)> progress;  // measuring: kernels timed so far
  MeasureSettings measure;                                  // measuring: warm-up and repetitions per kernel
  // true: a recipe whose plan cannot run at this shape, or (modelled) whose kernels the calibration
  // cannot predict, is left out and listed under `skipped_recipes` with why, instead of failing the
  // run (the default recipe list and the report: a calibration older than a plan has no data for it).
  bool drop_unmodelled = false;
};

// The committed H200 calibration: $FP8SIM_CALIBRATION, else <source>/reports/h200/calibration.json.
std::filesystem::path default_calibration_path();

// Reads models/NAME.json (or a path) into the replay's dimensions.
ModelShape load_model_shape(const std::string& name_or_path);
// The replay's dimensions of a parsed model config (checked as load_model_shape checks them).
ModelShape model_shape(const model::ModelConfig& cfg);

// The PyTorch reference (scripts/torch_layer_time.py's JSON): checks it and turns its SDPA and
// fused AdamW times into measurements ("attention", "optimizer:adamw_fp32").
Json load_torch_times(const std::filesystem::path& p);
std::vector<Measurement> torch_measurements(const Json& torch_doc);

// Attention and the fp32 AdamW baseline are PyTorch's: added to `cal` from `torch_doc` (a checked
// load_torch_times document) when it is not null, else from the committed calibration (a line in
// `notes` says so); an Error when neither exists.
void add_torch_times(Calibration& cal, const Json& torch_doc, std::vector<std::string>& notes);

// The current time as the calibration records it, "2026-12-01T21:39:01Z".
std::string utc_timestamp();

// Causal attention flops (FlashAttention's convention: backward = 2.5 x forward).
double attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool forward);

// One kernel of a recipe's step as the replay prices it.
struct SpeedOp {
  std::string name, phase;
  bool per_layer = false;
  std::string kind, variant;
  std::vector<int64_t> dims;
  std::string key;
  double count = 0;              // launches per step
  double ms = 0;                 // one launch
  double step_ms = 0;            // count x ms
  std::optional<double> tflops;  // a kernel with flops
  std::optional<double> gbps;    // one without
  double flops = 0, bytes = 0;
  std::string source;                           // Prediction::source
  std::optional<std::string> impl;              // the measurement's, where it names one
  std::optional<std::string> measurement_note;  // the same
  std::optional<std::string> note;              // the plan's
  std::optional<std::string> deviation;         // the same
  Json to_json() const;
};

// Milliseconds per step by kind of kernel.
struct SpeedBreakdown {
  double gemm = 0, attention = 0, quantize = 0, nonlinear = 0, embedding_loss = 0, optimizer = 0;
  // The categories by name, in the document's order.
  std::vector<std::pair<std::string, double>> items() const;
  Json to_json() const;
};

// One recipe at one configuration (milliseconds per optimizer step unless named otherwise).
struct RecipeSpeed {
  std::string recipe;
  int64_t batch = 0, seq = 0, gpus = 0, grad_accum = 0;
  double layer_fwd_ms = 0, layer_bwd_ms = 0;  // one layer, one micro-batch
  double layer_ms = 0;                        // layer_fwd_ms + layer_bwd_ms
  double layers_ms = 0;                       // every layer of every micro-batch
  double outside_ms = 0;                      // embedding, final norm, LM head and loss
  double weight_cast_ms = 0, optimizer_ms = 0;
  double compute_ms = 0;            // every kernel
  double comm_ms = 0;               // the FSDP communication the step pays
  double comm_unoverlapped_ms = 0;  // all of it
  double step_ms = 0;               // compute_ms + comm_ms
  double tokens_per_step = 0, tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0;
  double measured_fraction = 0;  // share of compute_ms from measurements at the exact shape
  SpeedBreakdown breakdown_ms;
  std::optional<std::vector<SpeedOp>> ops;  // evaluated with its ops
  std::optional<double> speedup_vs_bf16;    // a recipe of the report
  Json to_json() const;
};

// A kernel family whose calibrated times were measured at another version than this build's.
struct StaleKernels {
  std::string family;
  std::vector<int> calibration_versions;
  int build_version = 0;
  int kernels = 0;
  std::string message;
  Json to_json() const;
};

// Where the kernel times come from, and the communication model.
struct SpeedTiming {
  std::string mode;  // "measured" or "modelled"
  bool modelled = false;
  std::string device, calibration, calibration_created;
  std::string statement;  // the times' provenance in one sentence
  std::string fsdp_comm;
  std::optional<double> link_gbps;          // with a communication model
  std::optional<std::string> comm_model;    // the same, in words
  std::vector<StaleKernels> stale_kernels;  // written when not empty
  Json to_json() const;
};

// COAT's Figure 4(b) at one tensor size: the per-tensor max just in time against Group Scaling.
struct Fig4bRow {
  int64_t rows = 0, cols = 0;
  double jit_amax_ms = 0, jit_amax_gbps = 0;
  double group_stage1_overhead_ms = 0, group_stage2_ms = 0, group_scaling_ms = 0;
  double speedup = 0;  // jit_amax_ms / group_scaling_ms
  double paper_h100_jit_ms = 0, paper_h100_group_ms = 0;
  std::string source;                         // "measured" or "fitted"
  std::optional<double> torch_eager_amax_ms;  // where the calibration has PyTorch's
  Json to_json() const;
};

// One method of a Table 7 row at the paper's batch (0: out of memory in the paper, not evaluated).
struct Table7Method {
  std::string recipe;
  int64_t batch = 0;
  std::optional<double> paper_tokens_per_s_per_gpu;  // null when out of memory in the paper
  std::optional<double> tokens_per_s_per_gpu;        // null when not evaluated
  std::optional<double> step_ms, measured_fraction;  // evaluated
  bool oom_in_paper = false;                         // written when true
  Json to_json() const;
};

// One model/GPU configuration of COAT's Table 7: the methods and, where the paper has BF16, the
// ratios beside the paper's.
struct Table7Row {
  std::string model;
  int64_t gpus = 0, seq = 0;
  std::vector<Table7Method> methods;  // BF16, TE, COAT
  std::optional<double> te_vs_bf16, coat_vs_bf16, paper_te_vs_bf16, paper_coat_vs_bf16;
  std::optional<double> coat_vs_bf16_same_batch;  // COAT at BF16's batch
  Json to_json() const;
};

// fp8sim's BF16 layer against PyTorch's at one configuration the calibration's PyTorch document timed.
struct SpeedValidationRow {
  std::string model;
  int64_t batch = 0, seq = 0;
  double torch_layer_ms = 0, fp8sim_bf16_layer_ms = 0;
  double difference = 0;  // fp8sim_bf16_layer_ms / torch_layer_ms - 1
  bool within_15_percent = false;
  double fp8sim_gemm_ms = 0, fp8sim_attention_ms = 0, fp8sim_other_ms = 0, measured_fraction = 0;
  std::optional<double> torch_gemm_ms, torch_sdpa_ms;  // where PyTorch's document has them
  Json to_json() const;
};

struct SpeedValidation {
  Json torch_version, device;  // the PyTorch document's, passed through as it has them (null when absent)
  std::vector<SpeedValidationRow> rows;
  Json to_json() const;
};

// A recipe left out of the run (SpeedOptions::drop_unmodelled), and why.
struct SkippedRecipe {
  std::string recipe, why;
  Json to_json() const;
};

// The whole `fp8sim speed` result; to_json is the document --json writes.
struct SpeedResult {
  std::optional<std::string> command_line;
  ModelShape model;  // the document names name, hidden, ffn, layers, heads, kv_heads, vocab and params
  int64_t seq = 0, gpus = 0, grad_accum = 0;
  SpeedTiming timing;
  std::vector<RecipeSpeed> recipes;  // with their ops and speedups
  std::optional<std::vector<Fig4bRow>> fig4b;
  std::optional<std::vector<Table7Row>> table7;
  std::optional<SpeedValidation> validation;  // when the calibration has PyTorch layer times
  std::vector<std::string> notes;
  std::vector<SkippedRecipe> skipped_recipes;  // written when not empty
  Json to_json() const;
};

// The whole `fp8sim speed` result. With a GPU (`gpu` non-null and opts.calibration empty) every
// kernel is timed on it now; otherwise the times are modelled from a calibration file. Throws
// Error/UsageError.
SpeedResult speed_report(const SpeedOptions& opts, gpu::Backend* gpu = nullptr);

// Human renderings of a speed result.
std::string speed_markdown(const SpeedResult& res);
// The cells of the Table 7 comparison, one row per model/GPU configuration: label, batches,
// predicted and paper tokens/s per GPU (BF16 / TE / COAT joined by `sep`), then TE/BF16, paper,
// COAT/BF16, paper, COAT/BF16 at the same batch. Shared by the terminal table (`fp8sim speed`)
// and the Markdown report.
std::vector<std::vector<std::string>> table7_cells(const std::vector<Table7Row>& table7, const std::string& sep,
                                                   bool long_labels);

// Per-recipe evaluation of one configuration against a calibration (used by speed_report and
// tests): the sums and, with_ops, the kernels with their predicted times.
RecipeSpeed evaluate_recipe(const ModelShape& m, const PlanRecipe& r, const PlanOptions& po, const Calibration& cal,
                            const SpeedOptions& opts, bool with_ops);

}  // namespace fp8sim::speed
