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
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/common/step_measurements.hpp"

namespace fp8sim::memory {

inline constexpr double kValidateTolerance = 0.10;

// Returns {"config": ..., "rows": [{component, measured_gib, predicted_gib, rel, ok}], "ok": bool,
// "prediction": <the footprint document>}. Throws Error (one line, naming `origin`) when the
// document is not a measurement or lacks a field.
Json memory_validate(const Json& measured, const std::string& origin);
Json memory_validate_file(const std::string& path);

// Step measurements (scripts/measure_step.py, format "fp8sim-step-measurement": one framework,
// compile and checkpointing setting, one or more micro-batches) against the framework profile
// (framework.hpp). Per run: the peak (torch.cuda.max_memory_allocated), what forward leaves
// allocated (activations + autocast's weight copies) and the reserved peak beside it. Targets:
// peak within kStepPeakTolerance, forward-retained within kStepActivationTolerance. Compiled runs
// are listed as measured but not modelled. `paths`: files, or directories whose *.json files of
// that format are all read (others are skipped), in name order. A measurement with a max-batch
// search (measure_step.py --max-batch CAP: the largest micro-batch whose step runs with the
// caching allocator capped at CAP GiB) is also judged against fp8sim's largest micro-batch whose
// peak fits in CAP: within kMaxBatchTolerance of the measured one, or 1, whichever is larger
// (the allocator's fragmentation makes the measured one the smaller, when they differ). Returns
// {"rows": [...], "max_batch": [...], "ok", "modelled", "missed", "max_batch_missed",
// "tolerance": {...}}.
inline constexpr double kStepPeakTolerance = 0.05;
inline constexpr double kStepActivationTolerance = 0.10;
inline constexpr double kMaxBatchTolerance = 0.05;
Json memory_validate_steps(const std::vector<std::string>& paths);

}  // namespace fp8sim::memory
