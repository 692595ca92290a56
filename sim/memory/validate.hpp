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

#include "sim/common/json.hpp"

namespace fp8sim::memory {

inline constexpr double kValidateTolerance = 0.10;

// Returns {"config": ..., "rows": [{component, measured_gib, predicted_gib, rel, ok}], "ok": bool,
// "prediction": <the footprint document>}. Throws Error (one line, naming `origin`) when the
// document is not a measurement or lacks a field.
Json memory_validate(const Json& measured, const std::string& origin);
Json memory_validate_file(const std::string& path);

}  // namespace fp8sim::memory
