#pragma once
// Framework speed profiles (`fp8sim speed --framework`): the step time of an eager BF16 training
// step as a real framework runs it, rather than the idealised fused pipeline of the plans.
//
//   torch  the project's plain PyTorch reference loop (scripts/measure_step.py --framework torch:
//          fp32 parameters + bf16 autocast, SDPA, cross-entropy on fp32 logits, AdamW(foreach=True))
//   hf     Hugging Face transformers LlamaForCausalLM, attn_implementation "sdpa", fp32 parameters
//          + bf16 autocast, loss from model(labels=...), AdamW(fused=True)
//   coat   COAT's own CoatLlamaForCausalLM and CoatAdamW (fp8-coat 1.0.11 under transformers
//          4.45.2), fp32 parameters + bf16 autocast, as scripts/measure_coat.py builds them
//   torchao-float8  the hf model with torchao's float8 training (convert_to_float8_training,
//          tensorwise dynamic scaling, every linear but the LM head) under torch.compile
//
// step = max(GPU time, host issue time), GPU time = GEMMs + attention + other ops + optimizer:
//  * GEMMs: the BF16 plan's GEMMs at their calibrated cuBLASLt times (plan.hpp);
//  * attention: PyTorch SDPA with its default backend choice (cuDNN's fused attention on the
//    H200) at the calibrated shapes (variant ",default"; the FlashAttention times when the
//    calibration has none, with a note);
//  * other ops: the framework's op inventory (scripts/count_step_ops.py, counted on the GPU: every
//    ATen op of one eager step with the bytes it reads and writes, fitted to the model's
//    dimensions) priced at the calibration's eager elementwise rate plus a per-kernel floor;
//  * optimizer: fused AdamW at the calibrated rate over a model's own parameter list; the
//    for-each AdamW from its inventory bytes like the other ops;
//  * host: every launch at the calibration's eager issue interval.
// With torch.compile (`--compile`) Inductor fuses every op between the extern kernels (GEMMs,
// attention) into Triton kernels, so the other ops cost what crosses those boundaries: the
// inventory's GEMM and attention operand bytes at the same rate, one fused kernel per extern
// kernel. transformers 5.17 passes SDPA an explicit causal mask while compiling (it skips the mask
// only in eager mode), so the kernels cannot skip the masked half: attention is priced from the
// calibration's masked SDPA times (twice the causal time where it has none). The optimizer step
// stays outside the graph, as in eager mode.
// COAT launches most of its work from Python (Triton kernels inside its autograd functions, one
// optimizer-extension call per parameter tensor), so its step is often host-bound. Its inventory
// carries what the host spends per phase (measured at small shapes, where every kernel is short)
// and its optimizer kernel's measured rate; its GEMMs are the coat plan's FP8 GEMMs; the step is
// max(host, max(host forward+backward, GPU forward+backward) + GPU optimizer).
// torchao's float8 training is the hf step with its linears' GEMMs in FP8 (the te plan's per-tensor
// scaled GEMMs; the LM head stays BF16) and, per linear, the casts torchao's autograd function
// makes (torchao/float8/float8_linear.py): the input, the weight and the output gradient each cast
// twice, once per layout a GEMM needs. Inductor fuses the amax of a tensor a fused kernel produces
// into that kernel, but not of a saved input or a parameter, so the bytes per element are
//   input (bf16, saved):  forward cast 2 + 1; backward amax 2 and transposed cast 2 + 1   = 8
//   output gradient (bf16, produced in the backward): two casts of 2 + 1                    = 6
//   weight (fp32 parameter): amax 4 and cast 4 + 1, in the forward and again in the backward = 18
// in nine kernels per linear, priced like the other fused kernels.
// Nothing here is fitted to the end-to-end steps it is validated against (docs/speed-model.md).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::speed {

// The frameworks `speed --framework` models, and a one-line description of each.
const std::vector<std::pair<std::string, std::string>>& speed_frameworks();

// A framework's op inventory ("fp8sim-step-ops/1"), with each total fitted by least squares to the
// inventory's features over its configurations.
struct StepOps {
  std::string framework, device, command;
  // The profile the inventory serves: `framework`, or one built on it (torchao-float8 on hf's).
  std::string profile;
  bool torchao_float8 = false;  // the profile swaps the linears for torchao's float8 ones
  Json versions;
  std::vector<std::string> features, kernel_features;
  std::map<std::string, std::vector<double>> coef;  // per total: one coefficient per feature
  std::map<std::string, double> max_residual;       // per total: largest |fit - count| / count
  size_t configs = 0;
  bool fused_optimizer = false;       // the inventory's optimizer is one fused AdamW launch
  bool foreach_optimizer = false;     // ... or torch.optim's multi-tensor (for-each) AdamW
  bool zero_grad_memset = false;      // zero_grad(set_to_none=False) zeroes every gradient
  bool masked_when_compiled = false;  // the framework passes SDPA an explicit mask under compile
  // The host time of each phase ("host_forward_backward_ms", "host_optimizer_ms") was measured.
  bool host_times = false;
  // The optimizer's GPU time per 2^28 parameters, measured on its own kernel where its bytes do
  // not give its time (COAT's DE AdamW); one launch per parameter tensor.
  std::optional<double> optimizer_ms_per_2p28;
  // The fitted total `key` ("elementwise_bytes", "elementwise_kernels", "optimizer_bytes",
  // "optimizer_kernels", "gemm_bytes", "attention_bytes": operands read and written) for one step of `m` at batch x
  // seq.
  double eval(const std::string& key, const ModelShape& m, int64_t batch, int64_t seq) const;
};
StepOps load_step_ops(const std::filesystem::path& p);
// The framework whose op inventory a profile reads: torchao-float8 runs the hf model and optimizer.
std::string inventory_framework(const std::string& profile);
// The inventory `ops` as the profile `profile` uses it (inventory_framework(profile) must be ops.framework).
StepOps for_profile(StepOps ops, const std::string& profile);
// reports/h200/step_ops/FRAMEWORK.json beside the default calibration, FRAMEWORK the profile's inventory.
std::filesystem::path default_step_ops_path(const std::string& profile);

// One predicted step and its terms (milliseconds unless named otherwise).
struct FrameworkStep {
  int64_t batch = 0, seq = 0;
  bool compiled = false;
  double gemm_ms = 0, attention_ms = 0, other_ms = 0, optimizer_ms = 0, gpu_ms = 0, host_ms = 0, step_ms = 0;
  double other_bytes = 0, other_kernels = 0, optimizer_bytes = 0, optimizer_kernels = 0, kernels = 0;
  double cast_bytes = 0, cast_kernels = 0;  // torchao-float8: its casts (part of other_*)
  double tokens_per_s = 0;
  Json to_json() const;
};

// The prediction for `m` at batch x seq from a calibration and the framework's inventory; `notes`
// receives what the calibration lacked and what stood in for it.
FrameworkStep framework_step(const ModelShape& m, int64_t batch, int64_t seq, const Calibration& cal,
                             const StepOps& ops, std::vector<std::string>& notes, bool compiled = false);

// One measured step beside its prediction: the predicted terms, then the measurement.
struct FrameworkValidationRow : FrameworkStep {
  std::string model, file;
  double measured_step_ms = 0;  // CUDA events, median
  double difference = 0;        // step_ms / measured_step_ms - 1
  // The profiled step, where the run has one: milliseconds per kernel class in the file's order,
  // and the kernels launched.
  std::optional<std::vector<std::pair<std::string, double>>> profiled_ms_by_class;
  std::optional<double> profiled_kernels;
  // The host time to issue one step (measure_step.py's host_issue_ms, median), where recorded.
  std::optional<double> measured_host_ms;
  Json to_json() const;
};

// A profile's step against its BF16 baseline's at the same model and batch: step_ms(baseline) /
// step_ms(profile), predicted and measured.
struct SpeedupRow {
  std::string model;
  int64_t batch = 0;
  double predicted = 0, measured = 0, difference = 0;  // difference = predicted / measured - 1
};

struct FrameworkValidation {
  std::vector<FrameworkValidationRow> rows;
  int64_t within_10_percent = 0;  // rows with |difference| <= 0.10
  double max_abs_difference = 0;
  // torchao-float8: the speedup over the hf model compiled in BF16, for every run whose baseline
  // was measured too (same model and batch).
  std::string baseline;
  std::vector<SpeedupRow> speedups;
  Json to_json() const;
};

// The profile a profile's speedup is measured against ("" where none: only torchao-float8 has one,
// hf under torch.compile), and the speedup rows of `v` over the baseline's validation `base`.
std::string speedup_baseline(const std::string& profile);
void add_speedups(FrameworkValidation& v, const FrameworkValidation& base, const std::string& baseline);

// Checks measurements (scripts/measure_step.py, "fp8sim-step-measurement", one framework, eager
// or compiled as `compiled` says) against the prediction: per run, the measured step (CUDA events,
// median) and the profiled step's kernel classes beside the predicted terms. `paths` as
// read_step_measurements takes them; in a folder, the measurements of other frameworks, of the
// other compile setting and with checkpointing are passed over; a file named itself must match.
FrameworkValidation framework_validate(const std::vector<std::string>& paths, const Calibration& cal,
                                       const StepOps& ops, std::vector<std::string>& notes, bool compiled = false);

// The op inventory a `speed --framework` result was computed with.
struct FrameworkInventory {
  std::string file, device;
  Json versions;  // the inventory's library versions, passed through as it has them
  int64_t configs = 0;
  double max_residual_bytes = 0, max_residual_kernels = 0;  // the elementwise fits' (StepOps::max_residual)
  Json to_json() const;
};

// The whole `fp8sim speed --framework` result; to_json is the document --json writes. Either
// `validation` (--validate) or the model, the sequence and one prediction per batch.
struct FrameworkResult {
  std::string framework;
  bool compiled = false;
  std::string framework_description, statement;
  FrameworkInventory step_ops;
  std::string command;
  std::optional<FrameworkValidation> validation;
  std::optional<ModelShape> model;  // the document names name, layers and params
  std::optional<int64_t> seq;
  std::optional<std::vector<FrameworkStep>> predictions;
  std::vector<std::string> notes;
  Json to_json() const;
};

}  // namespace fp8sim::speed
