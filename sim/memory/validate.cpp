#include "sim/memory/validate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/memory/framework.hpp"
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

MemoryValidation memory_validate(const Json& measured, const std::string& origin) {
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
  auto carried = [&](const char* key) {
    const Json* v = measured.find(key);
    return v ? std::optional<Json>(*v) : std::nullopt;
  };
  MemoryValidation out{{m.name, o.recipe, o.gpus, o.zero, o.batch, o.seq, o.grads_persist},
                       carried("device"),
                       carried("torch_version"),
                       carried("tool"),
                       {},
                       true,
                       memory_result(f, false)};
  for (const auto& r : rows) {
    const double rel = r.measured > 0 ? static_cast<double>(r.predicted) / r.measured - 1.0 : 0.0;
    const bool row_ok = r.measured > 0 ? std::fabs(rel) <= kValidateTolerance : r.predicted == 0;
    out.rows.push_back({r.name, r.measured / kGiB, static_cast<double>(r.predicted) / kGiB,
                        r.measured > 0 ? std::optional<double>(rel) : std::nullopt, row_ok});
    out.ok = out.ok && row_ok;
  }
  return out;
}

Json MemoryValidation::to_json() const {
  Json out = Json::object();
  Json cfg = Json::object();
  cfg["model"] = config.model;
  cfg["recipe"] = config.recipe;
  cfg["gpus"] = config.gpus;
  cfg["zero"] = config.zero;
  cfg["batch"] = config.batch;
  cfg["seq"] = config.seq;
  cfg["grads_persist"] = config.grads_persist;
  out["config"] = cfg;
  out["tolerance"] = kValidateTolerance;
  if (device) out["device"] = *device;
  if (torch_version) out["torch_version"] = *torch_version;
  if (tool) out["tool"] = *tool;
  Json jr = Json::array();
  for (const auto& r : rows) {
    Json j = Json::object();
    j["component"] = r.component;
    j["measured_gib"] = r.measured_gib;
    j["predicted_gib"] = r.predicted_gib;
    j["rel"] = json_or_null(r.rel);
    j["ok"] = r.ok;
    jr.push_back(j);
  }
  out["rows"] = jr;
  out["ok"] = ok;
  out["prediction"] = prediction.to_json();
  return out;
}

namespace {

// How one step measurement ran, and which profile models it.
struct StepSetting {
  model::ModelConfig model;
  std::string framework, profile;
  bool compiled, checkpointing;
  bool known;  // a profile of that name exists
  // known, not compiled unless the profile models it, and for an eager torch-loop run, a loop that
  // held its logits
  bool modelled;
  bool loop_holds_logits;    // the file's loop_holds_logits (absent: false)
  int64_t gpus = 1;          // data-parallel ranks
  int zero = 0;              // 0 DDP (or one GPU), 3 FSDP
  std::string parallel;      // the file's dist: "ddp", "fsdp2", or "" (one GPU)
  bool gather_fp32 = false;  // FSDP2 without a MixedPrecisionPolicy (fsdp_param_dtype "fp32")
};

StepSetting step_setting(const Json& d, const std::string& origin) {
  const model::ModelConfig m = model::parse_model(field(d, origin, "model_config"), origin + " model_config");
  const Json& fw = field(d, origin, "framework");
  FP8SIM_REQUIRE(fw.is_string(), "measurement {}: field 'framework' must be a string", origin);
  const Json& compiled = field(d, origin, "compile");
  const Json& ckpt = field(d, origin, "checkpointing");
  FP8SIM_REQUIRE(compiled.is_bool() && ckpt.is_bool(),
                 "measurement {}: 'compile' and 'checkpointing' must be "
                 "true or false",
                 origin);
  // The profile that models this framework ("torchao-float8" and compiled runs have none).
  std::string profile = fw.as_string();
  if (profile == "hf") {
    const Json* v = d.find("versions");
    const Json* t = v && v->is_object() ? v->find("transformers") : nullptr;
    if (t && t->is_string() && t->as_string().rfind("4.", 0) == 0) profile = "hf-4.45";
  }
  bool known = false;
  for (const auto& f : frameworks()) known = known || f.name == profile;
  // The eager torch reference accounting keeps the bf16 logits alive through backward, as the
  // reference loop does (scripts/measure_memory.py); an eager measurement judged by it must say its
  // loop did too. The compiled reference models either loop, as the file records it (the field
  // was added when the loop began to hold them: absent means it did not).
  const Json* holds = d.find("loop_holds_logits");
  const bool holds_logits = holds && holds->is_bool() && holds->as_bool();
  // Data parallel: measure_step.py --dist records the ranks, the sharding and the wrapper.
  const Json* gj = d.find("gpus");
  const int64_t gpus = gj ? int_field(d, origin, "gpus") : 1;
  std::string parallel;
  if (const Json* dj = d.find("dist")) {
    FP8SIM_REQUIRE(dj->is_string() && (dj->as_string() == "ddp" || dj->as_string() == "fsdp2"),
                   "measurement {}: field 'dist' must be \"ddp\" or \"fsdp2\"", origin);
    parallel = dj->as_string();
  }
  FP8SIM_REQUIRE(gpus >= 1 && (gpus == 1 || !parallel.empty()),
                 "measurement {}: 'gpus' must be 1, or the ranks of a 'dist' run (measure_step.py --dist)", origin);
  const bool modelled = known && (!compiled.as_bool() || models_compile(profile)) &&
                        (profile != "torch" || compiled.as_bool() || holds_logits) &&
                        (parallel.empty() || profile == "torch" ||
                         (!compiled.as_bool() && (parallel == "ddp" ? models_ddp(profile) : models_fsdp2(profile))));
  const Json* pd = d.find("fsdp_param_dtype");
  FP8SIM_REQUIRE(!pd || (pd->is_string() && (pd->as_string() == "bf16" || pd->as_string() == "fp32")),
                 "measurement {}: field 'fsdp_param_dtype' must be \"bf16\" or \"fp32\"", origin);
  return {
      m,        fw.as_string(), profile, compiled.as_bool(),          ckpt.as_bool(), known,
      modelled, holds_logits,   gpus,    parallel == "fsdp2" ? 3 : 0, parallel,       pd && pd->as_string() == "fp32"};
}

// The options of the profile for one micro-batch of the measurement.
MemoryOptions step_options(const Json& d, const std::string& origin, const StepSetting& s, int64_t batch) {
  MemoryOptions o;
  o.framework = s.profile;
  o.recipe = find_framework(s.profile).recipe;
  if (o.recipe.empty()) {
    const Json& rec = field(d, origin, "recipe");
    FP8SIM_REQUIRE(rec.is_string(), "measurement {}: field 'recipe' must be a string", origin);
    o.recipe = rec.as_string();
  }
  o.gpus = s.gpus;
  o.zero = s.zero;
  o.fsdp = s.parallel == "fsdp2" ? 2 : 1;
  o.fsdp_gather_fp32 = s.gather_fp32;
  o.batch = batch;
  o.seq = int_field(d, origin, "seq");
  o.checkpointing = s.checkpointing;
  o.compiled = s.compiled;
  o.grads_persist = s.profile == "torch";
  o.loop_holds_logits = s.profile != "torch" || s.loop_holds_logits;
  // The measured reference loop's RMSNorm and RoPE are eager PyTorch ops.
  o.eager_norms = s.profile == "torch" && !s.compiled;
  return o;
}

// The max-batch search `mx` of a modelled measurement beside fp8sim's.
MaxBatchRow max_batch_row(const Json& d, const Json& mx, const std::string& origin, const StepSetting& s) {
  const std::string where = origin + " max_batch";
  const Json& cap = field(mx, where, "cap_gib");
  FP8SIM_REQUIRE(cap.is_number() && cap.as_number() > 0, "measurement {}: 'cap_gib' must be a positive number", where);
  MemoryOptions o = step_options(d, origin, s, 1);
  o.gpu_mem_gib = cap.as_number();
  const int64_t measured = int_field(mx, where, "max_batch");
  const int64_t predicted = max_batch(s.model, o, false);
  const Json* lim = mx.find("limit_reached");
  const bool limit_reached = lim && lim->is_bool() && lim->as_bool();
  const double allowed = std::max(1.0, kMaxBatchTolerance * static_cast<double>(measured));
  return {std::filesystem::path(origin).filename().string(),
          s.model.name,
          s.framework,
          s.profile,
          s.compiled,
          s.checkpointing,
          o.seq,
          cap.as_number(),
          measured,
          predicted,
          limit_reached,
          !limit_reached && std::fabs(static_cast<double>(predicted - measured)) <= allowed};
}

// The max-batch check `mx` of a modelled measurement beside fp8sim's largest micro-batch.
MaxBatchCheckRow max_batch_check_row(const Json& d, const Json& mx, const std::string& origin, const StepSetting& s) {
  const std::string where = origin + " max_batch_check";
  FP8SIM_REQUIRE(mx.is_object(), "measurement {}: expected an object", where);
  const Json& cap = field(mx, where, "cap_gib");
  FP8SIM_REQUIRE(cap.is_number() && cap.as_number() > 0, "measurement {}: 'cap_gib' must be a positive number", where);
  const Json& tried = field(mx, where, "tried");
  FP8SIM_REQUIRE(tried.is_object() && !tried.as_object().empty(),
                 "measurement {}: 'tried' must be a non-empty object of micro-batch: fits", where);
  std::vector<std::pair<int64_t, bool>> rows;
  for (const auto& [key, fits] : tried.as_object()) {
    int64_t b = 0;
    const bool number = !key.empty() && key.size() < 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (number) b = std::stoll(key);
    FP8SIM_REQUIRE(number && b >= 1 && fits.is_bool(),
                   "measurement {}: 'tried' maps micro-batches (integers >= 1) to true or false, not \"{}\"", where,
                   key);
    rows.emplace_back(b, fits.as_bool());
  }
  std::sort(rows.begin(), rows.end());
  MemoryOptions o = step_options(d, origin, s, 1);
  o.gpu_mem_gib = cap.as_number();
  const int64_t p = max_batch(s.model, o, false);
  auto result = [&](int64_t b) -> std::optional<bool> {
    if (b == 0) return true;  // the empty batch always runs
    for (const auto& [tb, fits] : rows)
      if (tb == b) return fits;
    return std::nullopt;
  };
  const std::optional<bool> at = result(p), above = result(p + 1);
  std::string verdict;
  if (at && !*at) verdict = fmt::format("{} OOM: the largest micro-batch is below fp8sim's {}", p, p);
  else if (above && *above) verdict = fmt::format("{} fits: the largest micro-batch is above fp8sim's {}", p + 1, p);
  else if (at && above) verdict = fmt::format("confirmed {} ({} fits, {} OOM)", p, p, p + 1);
  else verdict = fmt::format("undecided: fp8sim's {} and {} were not both tried", p, p + 1);
  const bool ok = at && above && *at && !*above;
  return {std::filesystem::path(origin).filename().string(),
          s.model.name,
          s.framework,
          s.profile,
          s.compiled,
          s.checkpointing,
          o.seq,
          cap.as_number(),
          rows,
          p,
          verdict,
          ok};
}

// fp8sim's prediction for one modelled run: the peak, and what forward leaves allocated
// (activations, plus the weight copies made during forward).
StepPrediction step_prediction(const Footprint& f, double peak, double retained) {
  int64_t copies = 0;
  for (const auto& c : f.persistent)
    if (c.name == "autocast_weight_copies" || c.name == "working_weights") copies = c.bytes;
  // What forward leaves beside the activations, once the loop's autocast has exited: FSDP's root
  // parameters (not resharded after forward; the phase that ends forward holds them) and,
  // gathering fp32, autocast's casts still saved (the loss's backward phase holds what is left).
  for (const auto& ph : f.phases)
    for (const auto& c : ph.temporaries)
      if (((ph.name == "forward_end" || ph.name == "forward_loss") && c.name == "fsdp_root_params") ||
          (ph.name == "backward_loss" && c.name == "autocast_weight_copies"))
        copies += c.bytes;
  const double pred_retained = static_cast<double>(f.activations_total + copies);
  const double rp = peak > 0 ? static_cast<double>(f.peak) / peak - 1 : 0;
  const double ra = retained > 0 ? pred_retained / retained - 1 : 0;
  return {static_cast<double>(f.peak) / kGiB,
          pred_retained / kGiB,
          f.peak_phase,
          rp,
          ra,
          std::fabs(rp) <= kStepPeakTolerance && std::fabs(ra) <= kStepActivationTolerance};
}

// One rank's measured peak, reserved peak and forward-retained bytes.
struct RankBytes {
  double peak, reserved, retained;
};

RankBytes rank_bytes(const Json& rec, const std::string& where) {
  const Json& mb = field(rec, where, "measured_bytes");
  const Json& db = field(rec, where, "detail_bytes");
  return {
      bytes_field(mb, where, "peak"), bytes_field(mb, where, "reserved"),
      bytes_field(db, where, "allocated_after_forward_and_loss") - bytes_field(db, where, "allocated_before_forward")};
}

// Every rank's bytes: the run's own (one GPU), or its `ranks` (data parallel, one per rank).
std::vector<RankBytes> run_ranks(const Json& r, const std::string& where, const StepSetting& s) {
  if (s.parallel.empty()) return {rank_bytes(r, where)};
  const Json& ranks = field(r, where, "ranks");
  FP8SIM_REQUIRE(ranks.is_array() && static_cast<int64_t>(ranks.as_array().size()) == s.gpus,
                 "measurement {}: 'ranks' must hold one record per GPU ({})", where, s.gpus);
  std::vector<RankBytes> out;
  for (const auto& rec : ranks.as_array()) out.push_back(rank_bytes(rec, where + " ranks[]"));
  return out;
}

StepRun step_run(const Json& d, const Json& r, const std::string& origin, const StepSetting& s) {
  const std::string where = origin + " runs[]";
  const int64_t batch = int_field(r, where, "batch");
  const int64_t seq = int_field(d, origin, "seq");
  const std::vector<RankBytes> ranks = run_ranks(r, where, s);
  double peak = 0, reserved = 0, retained = 0;
  for (const auto& x : ranks) {
    peak = std::max(peak, x.peak);
    reserved = std::max(reserved, x.reserved);
    retained = std::max(retained, x.retained);
  }
  StepRun run{std::filesystem::path(origin).filename().string(),
              s.model.name,
              s.framework,
              s.known ? std::optional<std::string>(s.profile) : std::nullopt,
              s.compiled,
              s.checkpointing,
              batch,
              seq,
              peak / kGiB,
              reserved / kGiB,
              retained / kGiB,
              peak > 0 ? std::optional<double>(reserved / peak) : std::nullopt,
              std::nullopt,
              "",
              s.gpus,
              s.parallel};
  if (!s.modelled) {
    run.why = s.compiled ? "torch.compile: measured, not modelled for this framework"
              : !s.parallel.empty() && s.known
                  ? fmt::format(
                        "{} {} over {} GPUs: the framework profiles model one GPU and, for transformers' "
                        "eager model, DDP and FSDP2 (the torch reference models DDP and FSDP)",
                        s.framework, s.parallel, s.gpus)
              : s.profile == "torch" ? "torch loop that does not hold the logits (no loop_holds_logits)"
                                     : "no profile for this framework";
    return run;
  }
  const Footprint f = compute_footprint(s.model, step_options(d, origin, s, batch));
  // One per-GPU footprint against every rank: the rank farthest off speaks for the run.
  for (const auto& x : ranks) {
    StepPrediction p = step_prediction(f, x.peak, x.retained);
    if (!run.prediction) {
      run.prediction = p;
      continue;
    }
    StepPrediction& w = *run.prediction;
    if (std::fabs(p.peak_rel) > std::fabs(w.peak_rel)) w.peak_rel = p.peak_rel;
    if (std::fabs(p.retained_rel) > std::fabs(w.retained_rel)) w.retained_rel = p.retained_rel;
    w.ok = w.ok && p.ok;
  }
  return run;
}

// The runs of one step measurement, into `max_rows` its max-batch search and into `check_rows`
// its max-batch check, when it has them.
std::vector<StepRun> step_rows(const Json& d, const std::string& origin, std::vector<MaxBatchRow>& max_rows,
                               std::vector<MaxBatchCheckRow>& check_rows) {
  const StepSetting s = step_setting(d, origin);
  const Json& runs = field(d, origin, "runs");
  FP8SIM_REQUIRE(runs.is_array() && !runs.as_array().empty(), "measurement {}: 'runs' must be a non-empty array",
                 origin);
  if (const Json* mx = d.find("max_batch"); mx && s.modelled) max_rows.push_back(max_batch_row(d, *mx, origin, s));
  if (const Json* mx = d.find("max_batch_check"); mx && s.modelled)
    check_rows.push_back(max_batch_check_row(d, *mx, origin, s));
  std::vector<StepRun> rows;
  for (const auto& r : runs.as_array()) rows.push_back(step_run(d, r, origin, s));
  return rows;
}

Json step_run_json(const StepRun& r) {
  Json row = Json::object();
  row["file"] = r.file;
  row["model"] = r.model;
  row["framework"] = r.framework;
  row["profile"] = json_or_null(r.profile);
  row["compile"] = r.compile;
  row["checkpointing"] = r.checkpointing;
  row["batch"] = r.batch;
  row["seq"] = r.seq;
  row["gpus"] = r.gpus;
  if (!r.parallel.empty()) row["dist"] = r.parallel;
  row["measured_peak_gib"] = r.measured_peak_gib;
  row["measured_reserved_gib"] = r.measured_reserved_gib;
  row["measured_retained_gib"] = r.measured_retained_gib;
  row["reserved_over_peak"] = json_or_null(r.reserved_over_peak);
  row["modelled"] = r.modelled();
  if (!r.prediction) {
    row["why"] = r.why;
    return row;
  }
  const StepPrediction& p = *r.prediction;
  row["predicted_peak_gib"] = p.predicted_peak_gib;
  row["predicted_retained_gib"] = p.predicted_retained_gib;
  row["peak_phase"] = p.peak_phase;
  row["peak_rel"] = p.peak_rel;
  row["retained_rel"] = p.retained_rel;
  row["ok"] = p.ok;
  return row;
}

// The fields that name a max-batch run (MaxBatchRow and MaxBatchCheckRow share them).
template <class Row>
Json max_batch_run_json(const Row& r) {
  Json row = Json::object();
  row["file"] = r.file;
  row["model"] = r.model;
  row["framework"] = r.framework;
  row["profile"] = r.profile;
  row["compile"] = r.compile;
  row["checkpointing"] = r.checkpointing;
  row["seq"] = r.seq;
  row["cap_gib"] = r.cap_gib;
  return row;
}

Json max_batch_json(const MaxBatchRow& r) {
  Json row = max_batch_run_json(r);
  row["measured_max_batch"] = r.measured_max_batch;
  row["predicted_max_batch"] = r.predicted_max_batch;
  row["limit_reached"] = r.limit_reached;
  row["ok"] = r.ok;
  return row;
}

Json max_batch_check_json(const MaxBatchCheckRow& r) {
  Json row = max_batch_run_json(r);
  Json tried = Json::object();
  for (const auto& [b, fits] : r.tried) tried[std::to_string(b)] = fits;
  row["tried"] = tried;
  row["predicted_max_batch"] = r.predicted_max_batch;
  row["verdict"] = r.verdict;
  row["ok"] = r.ok;
  return row;
}

}  // namespace

namespace {
// f(), whose errors are about the measurement file `path`: a value there that the model refuses
// (a batch of 0, say, which on the command line would be bad usage) is bad data in that file.
template <class F>
auto in_measurement(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;  // already names the file
    // "--batch must be >= 1": the checks' messages name options; here the value is a field
    throw Error(fmt::format("measurement {}: {}", path, what.starts_with("--") ? what.substr(2) : what));
  }
}
}  // namespace

StepValidation memory_validate_steps(const std::vector<std::string>& paths) {
  StepValidation out{{}, 0, 0, {}, 0, {}, 0, false};
  for (const StepMeasurement& m : read_step_measurements(paths))
    for (StepRun& r : in_measurement(
             m.file.string(), [&] { return step_rows(m.doc, m.file.string(), out.max_batch, out.max_batch_checks); })) {
      if (r.prediction) {
        ++out.modelled;
        out.missed += r.prediction->ok ? 0 : 1;
      }
      out.rows.push_back(std::move(r));
    }
  FP8SIM_REQUIRE(!out.rows.empty(), "no step measurements in {}", fmt::join(paths, ", "));
  for (const auto& r : out.max_batch) out.max_batch_missed += r.ok ? 0 : 1;
  for (const auto& r : out.max_batch_checks) out.max_batch_checks_missed += r.ok ? 0 : 1;
  out.ok = out.missed == 0 && out.max_batch_missed == 0 && out.max_batch_checks_missed == 0;
  return out;
}

Json StepValidation::to_json() const {
  Json out = Json::object();
  Json tol = Json::object();
  tol["peak"] = kStepPeakTolerance;
  tol["retained"] = kStepActivationTolerance;
  out["tolerance"] = tol;
  Json jr = Json::array(), jm = Json::array();
  for (const auto& r : rows) jr.push_back(step_run_json(r));
  for (const auto& r : max_batch) jm.push_back(max_batch_json(r));
  out["rows"] = jr;
  out["modelled"] = modelled;
  out["missed"] = missed;
  out["max_batch"] = jm;
  out["max_batch_missed"] = max_batch_missed;
  Json jc = Json::array();
  for (const auto& r : max_batch_checks) jc.push_back(max_batch_check_json(r));
  out["max_batch_checks"] = jc;
  out["max_batch_checks_missed"] = max_batch_checks_missed;
  out["ok"] = ok;
  return out;
}

MemoryValidation memory_validate_file(const std::string& path) {
  Json j;
  try {
    j = Json::parse(read_text_file(path));
  } catch (const Error& e) {
    throw Error(fmt::format("measurement {}: {}", path, e.what()));
  }
  return in_measurement(path, [&] { return memory_validate(j, path); });
}

}  // namespace fp8sim::memory
