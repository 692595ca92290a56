#pragma once
// The step measurements of scripts/measure_step.py (format "fp8sim-step-measurement"), read once
// for the commands that check a model against them (`memory --validate`, `speed --framework
// --validate`).
#include <filesystem>
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim {

bool is_step_measurement(const Json& doc);

struct StepMeasurement {
  std::filesystem::path file;
  Json doc;
  bool in_dir = false;  // found in a folder given as a path (rather than named itself)
};

// Every step measurement the paths name, in order: a folder stands for its *.json files (sorted by
// name), whose other documents are skipped; a file named itself must be a step measurement. An
// unreadable or unparsable file is an Error naming it.
std::vector<StepMeasurement> read_step_measurements(const std::vector<std::string>& paths);

}  // namespace fp8sim
