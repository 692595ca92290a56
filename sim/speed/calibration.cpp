#include "sim/speed/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "sim/common/build_info.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/speed/kernel_versions.hpp"

namespace fp8sim::speed {

namespace {

// Reads a required field, wrapping the json error with where it was.
const Json& field(const Json& j, const char* key, const std::string& where) {
  const Json* f = j.find(key);
  FP8SIM_REQUIRE(f != nullptr, "{}: missing '{}'", where, key);
  return *f;
}

double positive_number(const Json& j, const char* key, const std::string& where, bool allow_zero = false) {
  const Json& f = field(j, key, where);
  FP8SIM_REQUIRE(f.is_number(), "{}: '{}' must be a number", where, key);
  const double v = f.as_number();
  FP8SIM_REQUIRE(std::isfinite(v) && (allow_zero ? v >= 0 : v > 0), "{}: '{}' = {} must be a finite {} number", where,
                 key, v, allow_zero ? "non-negative" : "positive");
  return v;
}

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(d[i]);
  }
  return s;
}

// Distance between two shapes of the same kind: sum of |log ratio| over the dimensions that
// matter for it (all of them; mismatched lengths never match).
double log_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += std::fabs(std::log(static_cast<double>(std::max<int64_t>(a[i], 1)) / std::max<int64_t>(b[i], 1)));
  return d;
}

// GEMM variants share a fit when their operand types agree ("e4m3*e4m3>bf16" of
// "e4m3*e4m3>bf16,mk.nk,fast").
std::string gemm_types(const std::string& variant) { return variant.substr(0, variant.find(',')); }

}  // namespace

Json Measurement::to_json() const {
  Json j = Json::object();
  j["key"] = key;
  j["kind"] = kind_name(kind);
  j["variant"] = variant;
  Json d = Json::array();
  for (int64_t v : dims) d.push_back(v);
  j["dims"] = d;
  j["median_ms"] = median_ms;
  j["min_ms"] = min_ms;
  j["max_ms"] = max_ms;
  j["reps"] = reps;
  j["flops"] = flops;
  j["bytes"] = bytes;
  if (flops > 0) j["tflops"] = flops / (median_ms * 1e9);
  else j["gbps"] = bytes / (median_ms * 1e6);
  j["impl"] = impl;
  if (!note.empty()) j["note"] = note;
  if (version > 0) j["kernel_version"] = version;
  return j;
}

Measurement Measurement::from_json(const Json& j, const std::string& where) {
  FP8SIM_REQUIRE(j.is_object(), "{}: a measurement must be an object", where);
  Measurement m;
  const Json& kind = field(j, "kind", where);
  FP8SIM_REQUIRE(kind.is_string(), "{}: 'kind' must be a string", where);
  try {
    m.kind = parse_kind(kind.as_string());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  const Json& variant = field(j, "variant", where);
  FP8SIM_REQUIRE(variant.is_string() && !variant.as_string().empty(), "{}: 'variant' must be a non-empty string",
                 where);
  m.variant = variant.as_string();
  const Json& dims = field(j, "dims", where);
  FP8SIM_REQUIRE(dims.is_array() && !dims.as_array().empty(), "{}: 'dims' must be a non-empty array", where);
  for (const Json& d : dims.as_array()) {
    FP8SIM_REQUIRE(d.is_number() && std::floor(d.as_number()) == d.as_number() && d.as_number() > 0,
                   "{}: 'dims' must hold positive integers", where);
    m.dims.push_back(static_cast<int64_t>(d.as_number()));
  }
  m.key = fmt::format("{}:{}:{}", kind_name(m.kind), m.variant, dims_string(m.dims));
  if (const Json* k = j.find("key")) {
    FP8SIM_REQUIRE(k->is_string() && k->as_string() == m.key, "{}: 'key' does not match kind/variant/dims ({})", where,
                   m.key);
  }
  m.median_ms = positive_number(j, "median_ms", where);
  m.min_ms = j.contains("min_ms") ? positive_number(j, "min_ms", where) : m.median_ms;
  m.max_ms = j.contains("max_ms") ? positive_number(j, "max_ms", where) : m.median_ms;
  FP8SIM_REQUIRE(m.min_ms <= m.median_ms && m.median_ms <= m.max_ms, "{}: need min_ms <= median_ms <= max_ms", where);
  m.reps = j.contains("reps") ? static_cast<int64_t>(positive_number(j, "reps", where)) : 1;
  m.flops = j.contains("flops") ? positive_number(j, "flops", where, true) : 0;
  m.bytes = j.contains("bytes") ? positive_number(j, "bytes", where, true) : 0;
  FP8SIM_REQUIRE(m.flops > 0 || m.bytes > 0 || m.kind == Kind::ReduceMax,
                 "{}: a measurement needs 'flops' or 'bytes' to be fitted from", where);
  if (const Json* s = j.find("impl"); s && s->is_string()) m.impl = s->as_string();
  if (const Json* s = j.find("note"); s && s->is_string()) m.note = s->as_string();
  if (const Json* v = j.find("kernel_version")) {
    FP8SIM_REQUIRE(
        v->is_number() && v->as_number() >= 1 && v->as_number() <= 1e6 && std::floor(v->as_number()) == v->as_number(),
        "{}: 'kernel_version' must be a positive integer", where);
    m.version = static_cast<int>(v->as_number());
  }
  return m;
}

Calibration Calibration::from_json(const Json& doc, const std::string& origin) {
  FP8SIM_REQUIRE(doc.is_object(), "calibration '{}': the document must be a JSON object", origin);
  const Json* schema = doc.find("schema");
  FP8SIM_REQUIRE(schema && schema->is_string() && schema->as_string() == kCalibrationSchema,
                 "calibration '{}': 'schema' must be \"{}\" (is this a calibration file?)", origin, kCalibrationSchema);
  Calibration c;
  c.origin = origin;
  if (const Json* d = doc.find("device"); d && d->is_object()) c.device = *d;
  if (const Json* s = doc.find("created"); s && s->is_string()) c.created = s->as_string();
  if (const Json* s = doc.find("command"); s && s->is_string()) c.command = s->as_string();
  if (const Json* f = doc.find("fp8sim"); f && f->is_object())
    if (const Json* s = f->find("commit"); s && s->is_string()) c.commit = s->as_string();
  if (const Json* s = doc.find("copy_gbps"); s && s->is_number()) c.copy_gbps = s->as_number();
  if (const Json* t = doc.find("torch")) c.torch = *t;
  if (const Json* u = doc.find("updates")) {
    FP8SIM_REQUIRE(u->is_array(), "calibration '{}': 'updates' must be an array", origin);
    c.updates = *u;
  }
  const Json* ms = doc.find("measurements");
  FP8SIM_REQUIRE(ms && ms->is_array(), "calibration '{}': 'measurements' must be an array", origin);
  FP8SIM_REQUIRE(!ms->as_array().empty(), "calibration '{}': 'measurements' is empty", origin);
  size_t i = 0;
  for (const Json& m : ms->as_array()) {
    c.add(Measurement::from_json(m, fmt::format("calibration '{}': measurements[{}]", origin, i)));
    ++i;
  }
  return c;
}

Calibration Calibration::load(const std::filesystem::path& p) {
  const std::string text = read_text_file(p);
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("calibration '{}': {}", p.string(), e.what()));
  }
  return from_json(doc, p.string());
}

Json Calibration::to_json() const {
  Json j = Json::object();
  j["schema"] = kCalibrationSchema;
  j["device"] = device;
  j["created"] = created;
  j["command"] = command;
  Json build = Json::object();
  build["commit"] = commit;
  Json versions = Json::object();
  for (const KernelFamily& f : kernel_families()) versions[f.name] = f.version;
  build["kernel_versions"] = versions;
  j["fp8sim"] = build;
  if (updates.is_array() && !updates.as_array().empty()) j["updates"] = updates;
  if (copy_gbps > 0) j["copy_gbps"] = copy_gbps;
  Json arr = Json::array();
  for (const auto& [k, m] : by_key_) arr.push_back(m.to_json());
  j["measurements"] = arr;
  j["torch"] = torch;
  // Informational: the best rate seen per kind and variant (prediction re-derives from the
  // measurements, never from this).
  Json summary = Json::object();
  for (const auto& [k, m] : by_key_) {
    const std::string name = fmt::format("{}:{}", kind_name(m.kind), m.variant);
    const bool f = m.flops > 0;
    const double rate = f ? m.flops / (m.median_ms * 1e9) : m.bytes / (m.median_ms * 1e6);
    Json& s = summary[name];
    if (s.is_null() || rate > s.at(f ? "best_tflops" : "best_gbps").as_number()) {
      s = Json::object();
      s[f ? "best_tflops" : "best_gbps"] = rate;
      s["at"] = m.key;
    }
  }
  j["summary"] = summary;
  return j;
}

void Calibration::add(Measurement m) { by_key_[m.key] = std::move(m); }

void Calibration::merge(const Calibration& other) {
  for (const auto& [k, m] : other.by_key_) by_key_[k] = m;
  if (device.is_null() || (device.is_object() && device.as_object().empty())) device = other.device;
  if (torch.is_null()) torch = other.torch;
  if (copy_gbps <= 0) copy_gbps = other.copy_gbps;
}

const Measurement* Calibration::find(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

double Calibration::launch_floor_ms() const {
  double floor = std::numeric_limits<double>::infinity();
  for (const auto& [k, m] : by_key_) floor = std::min(floor, m.median_ms);
  // A floor above 10 us would mean the file holds no small kernel; do not let it dominate.
  return std::min(floor, 0.010);
}

bool Calibration::has_variant(Kind kind, const std::string& variant) const {
  for (const auto& [k, m] : by_key_)
    if (m.kind == kind && m.variant == variant) return true;
  return false;
}

Prediction Calibration::predict(const KernelOp& op) const {
  const std::string key = op.key();
  if (const Measurement* m = find(key)) return {m->median_ms, true, "measured", m};

  // Candidates: same kind and variant first, then same kind (GEMM: same operand types).
  const Measurement* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < 2 && !best; ++pass) {
    for (const auto& [k, m] : by_key_) {
      if (m.kind != op.kind) continue;
      const bool same_variant = m.variant == op.variant;
      if (pass == 0 && !same_variant) continue;
      if (pass == 1 && op.kind == Kind::Gemm && gemm_types(m.variant) != gemm_types(op.variant)) continue;
      if (pass == 1 && (op.kind == Kind::Optimizer || op.kind == Kind::Attention)) continue;  // never across variants
      const double d = op.kind == Kind::Gemm || op.kind == Kind::Attention || op.kind == Kind::Optimizer
                           ? log_distance(m.dims, op.dims)
                           : std::fabs(std::log(std::max(m.bytes, 1.0) / std::max(op.bytes, 1.0)));
      if (d < best_d) {
        best_d = d;
        best = &m;
      }
    }
  }
  FP8SIM_REQUIRE(best != nullptr,
                 "no calibration data for kernel '{}' (nothing measured of kind '{}' with variant '{}' in {}); "
                 "re-measure with `fp8sim calibrate` on a GPU (scripts/device/calibrate.sh)",
                 key, kind_name(op.kind), op.variant,
                 origin.empty() ? std::string("the calibration") : source_relative(origin));

  Prediction p;
  p.source = "fitted from " + best->key;
  p.from = best;
  switch (op.kind) {
    case Kind::Gemm:
    case Kind::Attention: {
      FP8SIM_CHECK(best->flops > 0 && op.flops > 0, "flop-bound kernel '{}' without flops", key);
      p.ms = op.flops / (best->flops / best->median_ms);
      break;
    }
    case Kind::Optimizer: {
      // Linear in parameters (a bandwidth-bound stream over the flat state).
      p.ms = best->median_ms * static_cast<double>(op.dims.at(0)) / static_cast<double>(best->dims.at(0));
      break;
    }
    default: {
      const double t0 = launch_floor_ms();
      const double net = std::max(best->median_ms - t0, best->median_ms * 0.05);
      p.ms = best->bytes > 0 ? t0 + op.bytes * net / best->bytes : best->median_ms;
      break;
    }
  }
  return p;
}

std::vector<StaleFamily> Calibration::stale_families(const std::vector<KernelOp>& ops) const {
  std::map<std::string, StaleFamily> by_family;
  std::set<std::string> seen;
  for (const KernelOp& op : ops) {
    if (!seen.insert(op.key()).second) continue;
    const KernelFamily* f = kernel_family(op.kind, op.variant);
    if (!f) continue;  // PyTorch's
    const Prediction p = predict(op);
    if (!p.from || p.from->version == f->version) continue;
    StaleFamily& s = by_family[f->name];
    s.family = f->name;
    s.build_version = f->version;
    if (std::find(s.calibration_versions.begin(), s.calibration_versions.end(), p.from->version) ==
        s.calibration_versions.end())
      s.calibration_versions.push_back(p.from->version);
    ++s.kernels;
  }
  std::vector<StaleFamily> out;
  for (const KernelFamily& f : kernel_families())
    if (auto it = by_family.find(f.name); it != by_family.end()) {
      std::sort(it->second.calibration_versions.begin(), it->second.calibration_versions.end());
      out.push_back(std::move(it->second));
    }
  return out;
}

std::string StaleFamily::message(const std::string& calibration) const {
  std::string when;
  if (calibration_versions == std::vector<int>{0}) {
    when = "before kernel versions were recorded";
  } else {
    for (int v : calibration_versions)
      when += (when.empty() ? "" : ", ") + (v ? std::to_string(v) : std::string("unrecorded"));
    when = (calibration_versions.size() > 1 ? "at versions " : "at version ") + when;
  }
  return fmt::format(
      "{} {} kernel time(s) of the calibration '{}' were measured {}, and this build's {} kernels are version {}: "
      "re-measure with `fp8sim calibrate` (scripts/device/calibrate.sh)",
      kernels, family, calibration, when, family, build_version);
}

}  // namespace fp8sim::speed
