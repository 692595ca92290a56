#include "sim/common/step_measurements.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

namespace fp8sim {

bool is_step_measurement(const Json& doc) {
  const Json* f = doc.is_object() ? doc.find("format") : nullptr;
  return f && f->is_string() && f->as_string() == "fp8sim-step-measurement";
}

std::vector<StepMeasurement> read_step_measurements(const std::vector<std::string>& paths) {
  std::vector<std::pair<std::filesystem::path, bool>> files;  // (file, found in a folder)
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".json") in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      for (auto& f : in_dir) files.emplace_back(std::move(f), true);
    } else {
      files.emplace_back(p, false);
    }
  }
  std::vector<StepMeasurement> out;
  for (auto& [file, in_dir] : files) {
    Json d;
    try {
      const UnrecordedReads only_if_a_measurement;  // noted below when it is one
      d = Json::parse(read_text_file(file.string()));
    } catch (const Error& e) {
      throw Error(fmt::format("measurement {}: {}", file.string(), e.what()));
    }
    if (!is_step_measurement(d)) {
      FP8SIM_REQUIRE(in_dir,
                     "measurement {}: not a step measurement (field 'format' must be \"fp8sim-step-measurement\"; "
                     "see scripts/measure_step.py)",
                     file.string());
      continue;  // another document in a folder
    }
    note_input_read(file);
    out.push_back({std::move(file), std::move(d), in_dir});
  }
  return out;
}

}  // namespace fp8sim
