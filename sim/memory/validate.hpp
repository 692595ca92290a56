#pragma once
// Checks fp8sim's prediction against a real measurement written by scripts/measure_memory.py
// (a BF16 AdamW training step on a GPU, torch.cuda.max_memory_allocated and per-component bytes).
//
// Measurement JSON (format "fp8sim-memory-measurement", version 1):
//   model_config   the models/*.json document the script built its model from
//   recipe, gpus, zero, batch, seq, grads_persist     the configuration it ran
//   measured_bytes {weights, gradients, optimizer, activations, peak}
//                  weights = fp32 parameters + the bf16 copies autocast made for the GEMMs,
//                  activations = memory held after forward+loss minus what was held before
//                  and minus the bf16 weight copies, peak = torch.cuda.max_memory_allocated over
//                  one full step (forward, backward, optimizer) after a warm-up step
//   (anything else is carried along for the report)
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/common/step_measurements.hpp"
#include "sim/memory/memory.hpp"

namespace fp8sim::memory {

inline constexpr double kValidateTolerance = 0.10;

// The configuration a measurement ran.
struct ValidationConfig {
  std::string model, recipe;
  int64_t gpus;
  int zero;
  int64_t batch, seq;
  bool grads_persist;
};

// One measured component beside fp8sim's prediction; rel absent where nothing was measured (then
// ok says whether the prediction is 0 too).
struct ValidationRow {
  std::string component;  // weights | gradients | optimizer | activations | peak
  double measured_gib, predicted_gib;
  std::optional<double> rel;
  bool ok;  // within kValidateTolerance
};

struct MemoryValidation {
  ValidationConfig config;
  // Carried over from the measurement as they are, where it has them.
  std::optional<Json> device, torch_version, tool;
  std::vector<ValidationRow> rows;
  bool ok;
  MemoryResult prediction;  // without max batch
  // {"config", "tolerance", "device"?, "torch_version"?, "tool"?, "rows", "ok", "prediction"}.
  Json to_json() const;
};

// Throws Error (one line, naming `origin`) when the document is not a measurement or lacks a
// field.
MemoryValidation memory_validate(const Json& measured, const std::string& origin);
MemoryValidation memory_validate_file(const std::string& path);

// Step measurements (scripts/measure_step.py, format "fp8sim-step-measurement": one framework,
// compile and checkpointing setting, one or more micro-batches) against the framework profile
// (framework.hpp). Per run: the peak (torch.cuda.max_memory_allocated), what forward leaves
// allocated (activations + autocast's weight copies) and the reserved peak beside it. Targets:
// peak within kStepPeakTolerance, forward-retained within kStepActivationTolerance. Runs of a
// framework without a profile, compiled runs of a profile that does not model torch.compile, and
// eager torch-loop runs that do not record loop_holds_logits are listed as measured but not
// modelled; a compiled torch-loop run is modelled with the loop its file records
// (loop_holds_logits absent: a loop that freed its logits). `paths`: files, or directories whose
// *.json files of that format are all read (others are skipped), in name order. A measurement
// with a max-batch search (measure_step.py --max-batch CAP: the largest micro-batch whose step
// runs with the caching allocator capped at CAP GiB) is also judged against fp8sim's largest
// micro-batch whose peak fits in CAP: within kMaxBatchTolerance of the measured one, or 1,
// whichever is larger (the allocator's fragmentation makes the measured one the smaller, when
// they differ). A measurement with a max-batch check (measure_step.py --max-batch CAP
// --check-batches B1,B2,...: only those micro-batches tried, each as the search tries one;
// max_batch_check {"cap_gib", "tried": {"B": fits}}) is judged exactly: fp8sim's largest
// micro-batch P is confirmed when P fits and P + 1 does not. A data-parallel measurement
// (measure_step.py --dist ddp|fsdp2 under torchrun: gpus, zero, dist, and per run every rank's
// numbers in `ranks`) is modelled by the torch reference at its gpus and zero, every rank judged.
inline constexpr double kStepPeakTolerance = 0.05;
inline constexpr double kStepActivationTolerance = 0.10;
inline constexpr double kMaxBatchTolerance = 0.05;

// fp8sim's numbers for a modelled run, and the verdict.
struct StepPrediction {
  double predicted_peak_gib, predicted_retained_gib;
  std::string peak_phase;
  double peak_rel, retained_rel;
  bool ok;  // peak and forward-retained within their targets
};

// One run of a step measurement.
struct StepRun {
  std::string file, model, framework;
  std::optional<std::string> profile;  // the profile that models the framework, if one does
  bool compile, checkpointing;
  int64_t batch, seq;
  double measured_peak_gib, measured_reserved_gib, measured_retained_gib;
  std::optional<double> reserved_over_peak;  // absent for a zero peak
  std::optional<StepPrediction> prediction;  // absent: listed as measured, not modelled
  std::string why;                           // why it is not modelled (without a prediction)
  // Data parallel (measure_step.py --dist): the ranks, "ddp" or "fsdp2" ("" on one GPU). The
  // measured numbers are then the largest over the ranks and the prediction (one per-GPU footprint)
  // is judged against every rank: its differences are the rank farthest off, ok only if all are.
  int64_t gpus = 1;
  std::string parallel;
  bool modelled() const { return prediction.has_value(); }
};

// One max-batch search beside fp8sim's largest micro-batch under the same cap.
struct MaxBatchRow {
  std::string file, model, framework, profile;
  bool compile, checkpointing;
  int64_t seq;
  double cap_gib;
  int64_t measured_max_batch, predicted_max_batch;
  bool limit_reached;  // the search stopped at its limit: no answer, a miss
  bool ok;
};

// One max-batch check beside fp8sim's largest micro-batch P under the same cap.
struct MaxBatchCheckRow {
  std::string file, model, framework, profile;
  bool compile, checkpointing;
  int64_t seq;
  double cap_gib;
  std::vector<std::pair<int64_t, bool>> tried;  // each micro-batch tried and whether its step ran, ascending
  int64_t predicted_max_batch;
  // "confirmed P (P fits, P+1 OOM)", or the mismatch ("P OOM: ..." / "P+1 fits: ..."), or that the
  // check tried neither P nor P + 1 in a way that decides it.
  std::string verdict;
  bool ok;  // confirmed
};

struct StepValidation {
  std::vector<StepRun> rows;
  int64_t modelled, missed;  // runs modelled, and those of them outside the targets
  std::vector<MaxBatchRow> max_batch;
  int64_t max_batch_missed;
  std::vector<MaxBatchCheckRow> max_batch_checks;
  int64_t max_batch_checks_missed;  // checks not confirmed
  bool ok;
  // {"tolerance": {"peak", "retained"}, "rows", "modelled", "missed", "max_batch",
  // "max_batch_missed", "max_batch_checks", "max_batch_checks_missed", "ok"}.
  Json to_json() const;
};
StepValidation memory_validate_steps(const std::vector<std::string>& paths);

}  // namespace fp8sim::memory
