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
#include <string>
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
  // FSDP communication per micro-batch: all-gather the BF16 weights for forward and again for
  // backward, reduce-scatter the BF16 gradients: 6 x params x (gpus-1)/gpus bytes per GPU at
  // link_gbps (an assumed bus bandwidth, default NCCL on H100 NVLink). "none": not modelled;
  // "serial": added to the step; "overlap": hidden behind compute except what exceeds it plus
  // the first layer's all-gather.
  std::string fsdp_comm = "none";
  double link_gbps = 360;
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

// The whole `fp8sim speed` document (the same JSON --json writes). With a GPU (`gpu` non-null and
// opts.calibration empty) every kernel is timed on it now; otherwise the times are modelled from a
// calibration file. Throws Error/UsageError.
Json speed_report(const SpeedOptions& opts, gpu::Backend* gpu = nullptr);

// Human renderings of a speed document.
std::string speed_markdown(const Json& doc);
// The cells of the Table 7 comparison (doc["table7"]), one row per model/GPU configuration:
// label, batches, predicted and paper tokens/s per GPU (BF16 / TE / COAT joined by `sep`), then
// TE/BF16, paper, COAT/BF16, paper, COAT/BF16 at the same batch. Shared by the terminal table
// (`fp8sim speed`) and the Markdown report.
std::vector<std::vector<std::string>> table7_cells(const Json& table7, const std::string& sep, bool long_labels);

// Per-recipe evaluation of one configuration against a calibration (used by speed_report and
// tests): the kernels with their predicted times and the sums.
Json evaluate_recipe(const ModelShape& m, const PlanRecipe& r, const PlanOptions& po, const Calibration& cal,
                     const SpeedOptions& opts, bool with_ops);

}  // namespace fp8sim::speed
