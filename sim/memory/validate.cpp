#include "sim/memory/validate.hpp"

#include <fmt/format.h>

#include <cmath>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/memory/memory.hpp"
#include "sim/model/model.hpp"

namespace fp8sim::memory {

namespace {

const Json& field(const Json& j, const std::string& origin, const char* key) {
  const Json* v = j.find(key);
  FP8SIM_REQUIRE(v != nullptr, "measurement {}: missing field '{}'", origin, key);
  return *v;
}

int64_t int_field(const Json& j, const std::string& origin, const char* key) {
  const Json& v = field(j, origin, key);
  FP8SIM_REQUIRE(v.is_number() && v.as_number() == std::floor(v.as_number()),
                 "measurement {}: field '{}' must be an integer", origin, key);
  return v.as_int();
}

double bytes_field(const Json& j, const std::string& origin, const char* key) {
  const Json& v = field(j, origin, key);
  FP8SIM_REQUIRE(v.is_number() && std::isfinite(v.as_number()) && v.as_number() >= 0,
                 "measurement {}: measured_bytes.{} must be a non-negative number", origin, key);
  return v.as_number();
}

}  // namespace

Json memory_validate(const Json& measured, const std::string& origin) {
  FP8SIM_REQUIRE(measured.is_object(), "measurement {}: expected a JSON object", origin);
  const Json* fmt_name = measured.find("format");
  FP8SIM_REQUIRE(fmt_name && fmt_name->is_string() && fmt_name->as_string() == "fp8sim-memory-measurement",
                 "measurement {}: not an fp8sim memory measurement (field 'format' must be "
                 "\"fp8sim-memory-measurement\"; see scripts/measure_memory.py)",
                 origin);
  const model::ModelConfig m = model::parse_model(field(measured, origin, "model_config"), origin + " model_config");
  MemoryOptions o;
  const Json& recipe = field(measured, origin, "recipe");
  FP8SIM_REQUIRE(recipe.is_string(), "measurement {}: field 'recipe' must be a string", origin);
  o.recipe = recipe.as_string();
  o.gpus = int_field(measured, origin, "gpus");
  o.zero = static_cast<int>(int_field(measured, origin, "zero"));
  o.batch = int_field(measured, origin, "batch");
  o.seq = int_field(measured, origin, "seq");
  const Json& gp = field(measured, origin, "grads_persist");
  FP8SIM_REQUIRE(gp.is_bool(), "measurement {}: field 'grads_persist' must be true or false", origin);
  o.grads_persist = gp.as_bool();
  validate(o);
  const Footprint f = compute_footprint(m, o);

  const Json& mb = field(measured, origin, "measured_bytes");
  FP8SIM_REQUIRE(mb.is_object(), "measurement {}: field 'measured_bytes' must be an object", origin);
  struct Row {
    const char* name;
    double measured;
    int64_t predicted;
  };
  const Row rows[] = {
      {"weights", bytes_field(mb, origin, "weights"), f.weights},
      {"gradients", bytes_field(mb, origin, "gradients"), f.gradients},
      {"optimizer", bytes_field(mb, origin, "optimizer"), f.optimizer()},
      {"activations", bytes_field(mb, origin, "activations"), f.activations_total},
      {"peak", bytes_field(mb, origin, "peak"), f.peak},
  };
  Json out = Json::object();
  Json cfg = Json::object();
  cfg["model"] = m.name;
  cfg["recipe"] = o.recipe;
  cfg["gpus"] = o.gpus;
  cfg["zero"] = o.zero;
  cfg["batch"] = o.batch;
  cfg["seq"] = o.seq;
  cfg["grads_persist"] = o.grads_persist;
  out["config"] = cfg;
  out["tolerance"] = kValidateTolerance;
  for (const char* k : {"device", "torch_version", "tool"})
    if (const Json* v = measured.find(k)) out[k] = *v;
  Json jr = Json::array();
  bool ok = true;
  for (const auto& r : rows) {
    Json j = Json::object();
    j["component"] = r.name;
    j["measured_gib"] = r.measured / kGiB;
    j["predicted_gib"] = static_cast<double>(r.predicted) / kGiB;
    const double rel = r.measured > 0 ? static_cast<double>(r.predicted) / r.measured - 1.0 : 0.0;
    j["rel"] = r.measured > 0 ? Json(rel) : Json(nullptr);
    const bool row_ok = r.measured > 0 ? std::fabs(rel) <= kValidateTolerance : r.predicted == 0;
    j["ok"] = row_ok;
    ok = ok && row_ok;
    jr.push_back(j);
  }
  out["rows"] = jr;
  out["ok"] = ok;
  out["prediction"] = footprint_to_json(f, false);
  return out;
}

Json memory_validate_file(const std::string& path) {
  Json j;
  try {
    j = Json::parse(read_text_file(path));
  } catch (const Error& e) {
    throw Error(fmt::format("measurement {}: {}", path, e.what()));
  }
  return memory_validate(j, path);
}

}  // namespace fp8sim::memory
