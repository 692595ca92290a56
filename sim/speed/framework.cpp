#include "sim/speed/framework.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/common/step_measurements.hpp"
#include "sim/model/model.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim::speed {

namespace {

constexpr const char* kStepOpsFormat = "fp8sim-step-ops/1";
// Elements one multi-tensor launch of a for-each optimizer op covers (PyTorch's multi_tensor_apply:
// 320 blocks of 65536 elements); scripts/count_step_ops.py counts launches the same way.
constexpr double kForeachChunk = 320.0 * 65536.0;

// The dimensions the inventory's features are products of (scripts/count_step_ops.py's names).
struct Dims {
  double L, B, S, T, H, NH, KV, d, F, V, W;
};

Dims dims_of(const ModelShape& m, int64_t batch, int64_t seq) {
  const double H = static_cast<double>(m.hidden), kv = static_cast<double>(m.kv_heads * m.head_dim),
               F = static_cast<double>(m.ffn);
  return {static_cast<double>(m.layers),
          static_cast<double>(batch),
          static_cast<double>(seq),
          static_cast<double>(batch * seq),
          H,
          static_cast<double>(m.heads),
          kv,
          static_cast<double>(m.head_dim),
          F,
          static_cast<double>(m.vocab),
          2 * H * H + 2 * H * kv + 3 * H * F};
}

const std::map<std::string, std::function<double(const Dims&)>>& feature_table() {
  static const std::map<std::string, std::function<double(const Dims&)>> t{
      {"L*T*H", [](const Dims& c) { return c.L * c.T * c.H; }},
      {"L*T*KV", [](const Dims& c) { return c.L * c.T * c.KV; }},
      {"L*T*F", [](const Dims& c) { return c.L * c.T * c.F; }},
      {"L*T*NH", [](const Dims& c) { return c.L * c.T * c.NH; }},
      {"L*T*d", [](const Dims& c) { return c.L * c.T * c.d; }},
      {"L*T", [](const Dims& c) { return c.L * c.T; }},
      {"T*H", [](const Dims& c) { return c.T * c.H; }},
      {"T*V", [](const Dims& c) { return c.T * c.V; }},
      {"S*d", [](const Dims& c) { return c.S * c.d; }},
      {"T", [](const Dims& c) { return c.T; }},
      {"L*W", [](const Dims& c) { return c.L * c.W; }},
      {"L*H", [](const Dims& c) { return c.L * c.H; }},
      {"V*H", [](const Dims& c) { return c.V * c.H; }},
      {"H", [](const Dims& c) { return c.H; }},
      {"L", [](const Dims& c) { return c.L; }},
      {"1", [](const Dims&) { return 1.0; }},
  };
  return t;
}

double feature(const std::string& name, const Dims& d) { return feature_table().at(name)(d); }

const Json& need(const Json& j, const std::string& where, const char* key) {
  const Json* v = j.find(key);
  FP8SIM_REQUIRE(v != nullptr, "{}: missing field '{}'", where, key);
  return *v;
}

double number(const Json& j, const std::string& where, const char* key) {
  const Json& v = need(j, where, key);
  FP8SIM_REQUIRE(v.is_number() && std::isfinite(v.as_number()), "{}: '{}' must be a number", where, key);
  return v.as_number();
}

std::vector<std::string> names(const Json& j, const std::string& where, const char* key) {
  const Json& a = need(j, where, key);
  FP8SIM_REQUIRE(a.is_array() && a.size() > 0, "{}: '{}' must be a non-empty array", where, key);
  std::vector<std::string> out;
  for (const Json& n : a.as_array()) {
    FP8SIM_REQUIRE(n.is_string() && feature_table().count(n.as_string()),
                   "{}: '{}' names an unknown feature (this build knows the features of count_step_ops.py)", where,
                   key);
    out.push_back(n.as_string());
  }
  return out;
}

// Least squares with the columns scaled to unit maximum (the features span many decades).
std::vector<double> least_squares(const Eigen::MatrixXd& a, const Eigen::VectorXd& y, double& max_rel) {
  Eigen::VectorXd scale = a.cwiseAbs().colwise().maxCoeff().transpose();
  for (Eigen::Index i = 0; i < scale.size(); ++i)
    if (scale(i) == 0) scale(i) = 1;
  const Eigen::MatrixXd as = a * scale.cwiseInverse().asDiagonal();
  Eigen::VectorXd c = as.colPivHouseholderQr().solve(y);
  c = c.cwiseQuotient(scale);
  const Eigen::VectorXd fit = a * c;
  max_rel = 0;
  for (Eigen::Index i = 0; i < y.size(); ++i)
    max_rel = std::max(max_rel, std::abs(fit(i) - y(i)) / std::max(std::abs(y(i)), 1.0));
  return {c.data(), c.data() + c.size()};
}

// Kernel counts and host times are fitted to the per-layer and per-step features only.
bool per_layer_total(const std::string& key) { return key.ends_with("_kernels") || key.ends_with("_ms"); }

double calibration_number(const Calibration& cal, const char* section, const char* key) {
  const Json* s = cal.torch.find(section);
  if (!s || !s->is_object()) return 0;
  const Json* v = s->find(key);
  return v && v->is_number() ? v->as_number() : 0;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& speed_frameworks() {
  static const std::vector<std::pair<std::string, std::string>> f{
      {"torch", "the project's plain PyTorch loop: fp32 params + bf16 autocast, SDPA, AdamW(foreach=True)"},
      {"hf", "Hugging Face transformers LlamaForCausalLM (sdpa), fp32 params + bf16 autocast, AdamW(fused=True)"},
      {"coat",
       "COAT's own CoatLlamaForCausalLM and CoatAdamW (fp8-coat 1.0.11, transformers 4.45.2): FP8 linears and "
       "activations, fp32 params + bf16 autocast, FP8 optimizer states with dynamic range expansion"},
      {"torchao-float8",
       "the hf model with torchao 0.16's float8 training (tensorwise dynamic scaling, every linear but the LM head) "
       "under torch.compile, AdamW(fused=True)"},
  };
  return f;
}

std::string inventory_framework(const std::string& profile) { return profile == "torchao-float8" ? "hf" : profile; }

StepOps for_profile(StepOps ops, const std::string& profile) {
  FP8SIM_REQUIRE(inventory_framework(profile) == ops.framework, "profile '{}' does not read the inventory of '{}'",
                 profile, ops.framework);
  ops.profile = profile;
  ops.torchao_float8 = profile == "torchao-float8";
  return ops;
}

std::filesystem::path default_step_ops_path(const std::string& profile) {
  return default_calibration_path().parent_path() / "step_ops" / (inventory_framework(profile) + ".json");
}

StepOps load_step_ops(const std::filesystem::path& p) {
  const std::string where = fmt::format("step ops '{}'", source_relative(p));
  Json doc;
  try {
    doc = Json::parse(read_text_file(p));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  FP8SIM_REQUIRE(doc.is_object(), "{}: expected a JSON object", where);
  const Json& format = need(doc, where, "format");
  FP8SIM_REQUIRE(format.is_string() && format.as_string() == kStepOpsFormat,
                 "{}: 'format' must be \"{}\" (written by scripts/count_step_ops.py)", where, kStepOpsFormat);
  StepOps s;
  s.framework = need(doc, where, "framework").as_string();
  s.profile = s.framework;
  s.device = doc.contains("device_name") ? doc.at("device_name").as_string() : "";
  s.command = doc.contains("command") ? doc.at("command").as_string() : "";
  s.versions = doc.contains("versions") ? doc.at("versions") : Json::object();
  s.features = names(doc, where, "features");
  s.kernel_features = names(doc, where, "kernel_features");
  s.masked_when_compiled = s.framework == "hf";  // transformers' mask under torch.compile (framework.hpp)
  if (const Json* co = doc.find("coat_optimizer")) s.optimizer_ms_per_2p28 = number(*co, where, "ms_per_2p28_params");
  const Json& configs = need(doc, where, "configs");
  FP8SIM_REQUIRE(configs.is_array() && configs.size() >= s.features.size() + 2,
                 "{}: 'configs' needs at least {} rows (features + 2) for the fit", where, s.features.size() + 2);
  s.configs = configs.size();
  std::vector<std::string> totals{"elementwise_bytes", "elementwise_kernels", "optimizer_bytes",
                                  "optimizer_kernels", "gemm_bytes",          "attention_bytes"};
  // Host times of the two phases, where the inventory measured them (fitted like the kernel counts).
  if (const Json* t0 = configs.as_array().front().find("totals"); t0 && t0->contains("host_forward_backward_ms")) {
    totals.insert(totals.end(), {"host_forward_backward_ms", "host_optimizer_ms"});
    s.host_times = true;
  }
  std::vector<Dims> dims;
  std::map<std::string, std::vector<double>> y;
  size_t i = 0;
  for (const Json& row : configs.as_array()) {
    const std::string rw = fmt::format("{}: configs[{}]", where, i++);
    const Json& d = need(row, rw, "dims");
    dims.push_back({number(d, rw, "L"), number(d, rw, "B"), number(d, rw, "S"), number(d, rw, "T"), number(d, rw, "H"),
                    number(d, rw, "NH"), number(d, rw, "KV"), number(d, rw, "d"), number(d, rw, "F"),
                    number(d, rw, "V"), number(d, rw, "W")});
    const Json& t = need(row, rw, "totals");
    for (const std::string& k : totals) {
      if (k == "gemm_bytes" || k == "attention_bytes") {  // operands read and written, from the groups
        const Json& groups = need(row, rw, "groups");
        const Json* g = groups.find(k == "gemm_bytes" ? "gemm" : "attention");
        y[k].push_back(g ? number(*g, rw, "read") + number(*g, rw, "written") : 0.0);
      } else {
        y[k].push_back(number(t, rw, k.c_str()));
      }
    }
    if (i == 1) {
      const Json* ops = row.find("ops");
      const bool table = ops && ops->is_object();
      s.fused_optimizer = table && ops->contains("optimizer:_fused_adamw_");
      s.foreach_optimizer = table && ops->contains("optimizer:_foreach_addcdiv_");
      s.zero_grad_memset = table && ops->contains("optimizer:_foreach_zero_");
    }
  }
  for (const std::string& k : totals) {
    const std::vector<std::string>& fs = per_layer_total(k) ? s.kernel_features : s.features;
    Eigen::MatrixXd a(static_cast<Eigen::Index>(dims.size()), static_cast<Eigen::Index>(fs.size()));
    for (size_t r = 0; r < dims.size(); ++r)
      for (size_t c = 0; c < fs.size(); ++c)
        a(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = feature(fs[c], dims[r]);
    const Eigen::VectorXd yv = Eigen::Map<const Eigen::VectorXd>(y[k].data(), static_cast<Eigen::Index>(y[k].size()));
    s.coef[k] = least_squares(a, yv, s.max_residual[k]);
  }
  return s;
}

double StepOps::eval(const std::string& key, const ModelShape& m, int64_t batch, int64_t seq) const {
  const auto it = coef.find(key);
  FP8SIM_REQUIRE(it != coef.end(), "step ops: no fitted total '{}'", key);
  const std::vector<std::string>& fs = per_layer_total(key) ? kernel_features : features;
  const Dims d = dims_of(m, batch, seq);
  double v = 0;
  for (size_t i = 0; i < fs.size(); ++i) v += it->second[i] * feature(fs[i], d);
  return std::max(v, 0.0);
}

Json FrameworkStep::to_json() const {
  Json j = Json::object();
  j["batch"] = batch;
  j["seq"] = seq;
  j["compiled"] = compiled;
  j["gemm_ms"] = gemm_ms;
  j["attention_ms"] = attention_ms;
  j["other_ms"] = other_ms;
  j["optimizer_ms"] = optimizer_ms;
  j["gpu_ms"] = gpu_ms;
  j["host_ms"] = host_ms;
  j["step_ms"] = step_ms;
  j["tokens_per_s"] = tokens_per_s;
  j["other_bytes"] = other_bytes;
  j["other_kernels"] = other_kernels;
  j["optimizer_bytes"] = optimizer_bytes;
  j["optimizer_kernels"] = optimizer_kernels;
  j["kernels"] = kernels;
  if (cast_kernels > 0) {
    j["cast_bytes"] = cast_bytes;
    j["cast_kernels"] = cast_kernels;
  }
  return j;
}

FrameworkStep framework_step(const ModelShape& m, int64_t batch, int64_t seq, const Calibration& cal,
                             const StepOps& ops, std::vector<std::string>& notes, bool compiled) {
  auto note = [&notes](std::string n) {
    if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(std::move(n));
  };
  // The inventories are counted on Llama blocks (RMSNorm, SwiGLU, rotary attention).
  if (m.norm != "rmsnorm" || m.activation != "swiglu")
    throw UsageError(fmt::format("--framework {} models Llama-style models (rmsnorm + swiglu); {} has {} + {}",
                                 ops.framework, m.name, m.norm, m.activation));
  if (m.tied)
    note(
        fmt::format("{} ties its embedding and LM head; the inventory was counted with separate ones, so its "
                    "per-weight traffic (casts, gradient accumulation, a for-each optimizer) includes one extra "
                    "vocabulary x hidden matrix",
                    m.name));
  FrameworkStep s;
  s.batch = batch;
  s.seq = seq;
  s.compiled = compiled;
  PlanOptions po;
  po.batch = batch;
  po.seq = seq;
  double launches = 0;
  bool default_attention = true, masked_attention = true;
  // COAT's linears run FP8 GEMMs (per-tensor scaled, E4M3 forward, E5M2 x E4M3 backward): the coat
  // plan's GEMMs at the calibrated cuBLASLt times stand in for COAT's own Triton GEMM kernel.
  const bool coat = ops.framework == "coat";
  if (coat && compiled)
    throw UsageError("--framework coat: COAT's published training does not compile; drop --compile");
  if (coat) note("GEMMs: cuBLASLt's FP8 times stand in for COAT's own Triton FP8 GEMM kernel");
  if (ops.torchao_float8 && !compiled)
    throw UsageError(
        "--framework torchao-float8 is modelled as torchao's float8 training runs, under torch.compile: "
        "pass --compile");
  const Plan plan = coat ? Plan::COAT : ops.torchao_float8 ? Plan::TE : Plan::BF16;
  for (const KernelOp& op : build_plan(m, plan, po)) {
    if (op.kind == Kind::Gemm) {
      s.gemm_ms += cal.predict(op).ms * op.count;
      launches += op.count;
    } else if (op.kind == Kind::Attention) {
      // Under torch.compile transformers passes an explicit causal mask (framework.hpp): the
      // calibration's masked SDPA times where it has them, else twice the causal kernel's (the
      // mask makes it compute every block).
      double factor = 1;
      KernelOp priced = op;
      if (compiled && ops.masked_when_compiled && cal.has_variant(Kind::Attention, op.variant + ",masked")) {
        priced.variant += ",masked";
      } else {
        if (compiled && ops.masked_when_compiled) {
          factor = 2;
          masked_attention = false;
        }
        if (cal.has_variant(Kind::Attention, op.variant + ",default")) {
          priced.variant += ",default";
        } else {  // a calibration without the default backend's times
          default_attention = false;
        }
      }
      const Prediction p = cal.predict(priced);
      s.attention_ms += factor * p.ms * op.count;
      launches += op.count;
    }
  }
  if (!default_attention)
    note("attention: the calibration has no times of SDPA's default backend; FlashAttention's stand in");
  if (!masked_attention)
    note(
        "attention: the calibration has no masked SDPA times; twice the causal kernel's time stands in for the "
        "explicit mask transformers passes under torch.compile");
  const double extern_launches = launches;

  const double gbps = calibration_number(cal, "elementwise", "gbps_median");
  FP8SIM_REQUIRE(gbps > 0,
                 "the calibration has no eager elementwise rate (torch.elementwise.gbps_median: "
                 "scripts/torch_layer_time.py --elementwise, run by scripts/device/calibrate.sh)");
  const double floor_ms = cal.launch_floor_ms();
  if (compiled) {  // fused between the extern kernels: their operands cross memory once each
    s.other_bytes = ops.eval("gemm_bytes", m, batch, seq) + ops.eval("attention_bytes", m, batch, seq);
    s.other_kernels = extern_launches;
  } else {
    s.other_bytes = ops.eval("elementwise_bytes", m, batch, seq);
    s.other_kernels = ops.eval("elementwise_kernels", m, batch, seq);
  }
  if (ops.torchao_float8) {  // the casts of each linear's operands (framework.hpp)
    const double T = static_cast<double>(batch * seq), L = static_cast<double>(m.layers),
                 H = static_cast<double>(m.hidden), Q = static_cast<double>(m.heads * m.head_dim),
                 KV = static_cast<double>(m.kv_heads * m.head_dim), F = static_cast<double>(m.ffn);
    const double inputs = 5 * H + Q + F;              // q, k, v, gate, up read H; o reads Q; down reads F
    const double grads = Q + 2 * KV + H + 2 * F + H;  // their outputs
    const double weights = dims_of(m, batch, seq).W;
    s.cast_bytes = L * (T * (8 * inputs + 6 * grads) + 18 * weights);
    s.cast_kernels = L * 7 * 9;
    s.other_bytes += s.cast_bytes;
    s.other_kernels += s.cast_kernels;
  }
  s.other_ms = s.other_bytes / (gbps * 1e6) + s.other_kernels * floor_ms;

  const double params = static_cast<double>(m.params);
  s.optimizer_bytes = ops.eval("optimizer_bytes", m, batch, seq);
  // The inventory counts each optimizer op once at its small sizes; at the model's size each
  // multi-tensor op launches once per chunk of the parameters.
  s.optimizer_kernels = ops.eval("optimizer_kernels", m, batch, seq);
  if (!ops.optimizer_ms_per_2p28) s.optimizer_kernels *= std::max(1.0, std::ceil(params / kForeachChunk));
  if (ops.optimizer_ms_per_2p28) {  // one launch per tensor at the framework's measured rate
    s.optimizer_ms = params * *ops.optimizer_ms_per_2p28 / 268435456.0;
  } else if (ops.fused_optimizer) {
    double rate = calibration_number(cal, "adamw_fused_fp32_model", "gparams_per_s");
    if (rate <= 0) {
      rate = calibration_number(cal, "adamw_fused_fp32", "gparams_per_s");
      note("optimizer: the calibration has no fused AdamW over a model's parameter list; one tensor's rate stands in");
    }
    FP8SIM_REQUIRE(rate > 0, "the calibration has no fused AdamW rate (torch.adamw_fused_fp32)");
    s.optimizer_ms = params / (rate * 1e6);
  } else if (const double rate = calibration_number(cal, "adamw_foreach_fp32_model", "gparams_per_s");
             ops.foreach_optimizer && rate > 0 && cal.copy_gbps > 0) {
    // The for-each AdamW at its rate over a model's parameter list: its fp32 streams run near the
    // copy rate, which the elementwise median (mostly bf16 ops) understates. zero_grad's memset
    // writes each 4-byte gradient once.
    s.optimizer_ms = params / (rate * 1e6) + (ops.zero_grad_memset ? params * 4.0 / (cal.copy_gbps * 1e6) : 0.0);
  } else {
    if (ops.foreach_optimizer)
      note(
          "optimizer: the calibration has no for-each AdamW over a model's parameter list; its bytes at the "
          "elementwise rate stand in");
    s.optimizer_ms = s.optimizer_bytes / (gbps * 1e6) + s.optimizer_kernels * floor_ms;
  }
  launches += s.other_kernels + s.optimizer_kernels;
  s.kernels = launches;
  s.gpu_ms = s.gemm_ms + s.attention_ms + s.other_ms + s.optimizer_ms;
  if (ops.host_times) {
    // The inventory's measured host time per phase. The optimizer's kernels queue behind the
    // backward's, so the step ends when the host has issued everything or when the GPU has run
    // the forward and backward (started no earlier than the host issued them) and then the
    // optimizer.
    const double h_fb = ops.eval("host_forward_backward_ms", m, batch, seq),
                 h_opt = ops.eval("host_optimizer_ms", m, batch, seq);
    s.host_ms = h_fb + h_opt;
    s.step_ms = std::max(s.host_ms, std::max(h_fb, s.gpu_ms - s.optimizer_ms) + s.optimizer_ms);
  } else {
    const double issue_ms = calibration_number(cal, "elementwise", "issue_interval_ms");
    if (issue_ms > 0) s.host_ms = launches * issue_ms;
    else note("host: the calibration has no eager issue interval; the host side is not modelled");
    s.step_ms = std::max(s.gpu_ms, s.host_ms);
  }
  s.tokens_per_s = static_cast<double>(batch * seq) / (s.step_ms / 1e3);
  return s;
}

FrameworkValidation framework_validate(const std::vector<std::string>& paths, const Calibration& cal,
                                       const StepOps& ops, std::vector<std::string>& notes, bool compiled) {
  FrameworkValidation v;
  size_t chosen = 0;
  for (const StepMeasurement& sm : read_step_measurements(paths)) {
    const std::filesystem::path& path = sm.file;
    const Json& d = sm.doc;
    const std::string where = fmt::format("measurement '{}'", source_relative(path));
    if (sm.in_dir) {  // a folder holds every framework's runs: take this profile's
      const Json *fw = d.find("framework"), *comp = d.find("compile"), *ckpt = d.find("checkpointing");
      const bool mine = fw && fw->is_string() && fw->as_string() == ops.profile &&
                        (comp && comp->is_bool() && comp->as_bool()) == compiled &&
                        !(ckpt && ckpt->is_bool() && ckpt->as_bool());
      if (!mine) continue;
    }
    ++chosen;
    const std::string fw = need(d, where, "framework").as_string();
    if (fw != ops.profile)
      throw UsageError(
          fmt::format("{} is framework '{}', the profile is '{}' (pass --framework {})", where, fw, ops.profile, fw));
    if (need(d, where, "checkpointing").as_bool())
      throw UsageError(fmt::format("{}: a checkpointed run; the profile models steps without checkpointing", where));
    if (need(d, where, "compile").as_bool() != compiled)
      throw UsageError(fmt::format("{}: a{} run; {}", where, compiled ? "n eager" : " compiled",
                                   compiled ? "drop --compile" : "pass --compile"));
    // The inventory is one framework version's code: a measurement of another version is left out.
    if (const Json* mv = d.find("versions"); mv && mv->is_object() && ops.versions.is_object()) {
      std::string differs;
      for (const auto& [lib, v] : ops.versions.as_object())
        if (const Json* w = mv->find(lib); w && w->is_string() && v.is_string() && w->as_string() != v.as_string())
          differs += fmt::format("{}{} {} (the inventory's: {})", differs.empty() ? "" : ", ", lib, w->as_string(),
                                 v.as_string());
      if (!differs.empty()) {
        notes.push_back(fmt::format("left out {}: {}", source_relative(path), differs));
        continue;
      }
    }
    const ModelShape m = model_shape(model::parse_model(need(d, where, "model_config"), where + " model_config"));
    const int64_t seq = static_cast<int64_t>(number(d, where, "seq"));
    for (const Json& r : need(d, where, "runs").as_array()) {
      const Json* step = r.find("step_ms");
      if (!step || !step->is_object()) continue;  // a memory-only run
      const int64_t batch = static_cast<int64_t>(number(r, where, "batch"));
      const FrameworkStep p = framework_step(m, batch, seq, cal, ops, notes, compiled);
      const double measured = number(*step, where, "median");
      FrameworkValidationRow row{p, m.name, source_relative(path), measured, p.step_ms / measured - 1, {}, {}, {}};
      if (const Json* h = r.find("host_issue_ms"); h && h->is_number()) row.measured_host_ms = h->as_number();
      if (const Json* prof = r.find("profile"); prof && prof->is_object()) {
        row.profiled_ms_by_class.emplace();
        if (const Json* bc = prof->find("by_class"); bc && bc->is_object())
          for (const auto& [k, c] : bc->as_object()) row.profiled_ms_by_class->emplace_back(k, c.at("ms").as_number());
        row.profiled_kernels = number(*prof, where, "kernels");
      }
      v.within_10_percent += std::abs(row.difference) <= 0.10;
      v.max_abs_difference = std::max(v.max_abs_difference, std::abs(row.difference));
      v.rows.push_back(std::move(row));
    }
  }
  if (chosen == 0)
    throw Error(fmt::format("no {} step measurement of framework '{}' in {}", compiled ? "compiled" : "eager",
                            ops.profile, fmt::join(paths, ", ")));
  FP8SIM_REQUIRE(!v.rows.empty(), "no timed run in the measurements given (measure_step.py --steps N)");
  return v;
}

Json FrameworkValidationRow::to_json() const {
  Json j = FrameworkStep::to_json();
  j["model"] = model;
  j["file"] = file;
  j["measured_step_ms"] = measured_step_ms;
  j["difference"] = difference;
  if (profiled_ms_by_class) {
    Json classes = Json::object();
    for (const auto& [k, ms] : *profiled_ms_by_class) classes[k] = ms;
    j["profiled_ms_by_class"] = classes;
  }
  if (profiled_kernels) j["profiled_kernels"] = *profiled_kernels;
  if (measured_host_ms) j["measured_host_ms"] = *measured_host_ms;
  return j;
}

std::string speedup_baseline(const std::string& profile) { return profile == "torchao-float8" ? "hf" : ""; }

void add_speedups(FrameworkValidation& v, const FrameworkValidation& base, const std::string& baseline) {
  v.baseline = baseline;
  for (const FrameworkValidationRow& r : v.rows)
    for (const FrameworkValidationRow& b : base.rows)
      if (b.model == r.model && b.batch == r.batch && b.seq == r.seq) {
        const double predicted = b.step_ms / r.step_ms, measured = b.measured_step_ms / r.measured_step_ms;
        v.speedups.push_back({r.model, r.batch, predicted, measured, predicted / measured - 1});
        break;  // the first baseline run of the pair (the folder's order)
      }
}

Json FrameworkValidation::to_json() const {
  Json j = Json::object();
  Json a = Json::array();
  for (const FrameworkValidationRow& r : rows) a.push_back(r.to_json());
  j["rows"] = a;
  j["within_10_percent"] = within_10_percent;
  j["max_abs_difference"] = max_abs_difference;
  if (!baseline.empty()) {
    j["baseline"] = baseline;
    Json sp = Json::array();
    for (const SpeedupRow& r : speedups) {
      Json o = Json::object();
      o["model"] = r.model;
      o["batch"] = r.batch;
      o["predicted"] = r.predicted;
      o["measured"] = r.measured;
      o["difference"] = r.difference;
      sp.push_back(o);
    }
    j["speedups"] = sp;
  }
  return j;
}

Json FrameworkInventory::to_json() const {
  Json j = Json::object();
  j["file"] = file;
  j["device"] = device;
  j["versions"] = versions;
  j["configs"] = configs;
  j["max_residual_bytes"] = max_residual_bytes;
  j["max_residual_kernels"] = max_residual_kernels;
  return j;
}

Json FrameworkResult::to_json() const {
  Json doc = Json::object();
  doc["framework"] = framework;
  doc["compiled"] = compiled;
  doc["framework_description"] = framework_description;
  doc["statement"] = statement;
  doc["step_ops"] = step_ops.to_json();
  doc["command"] = command;
  if (validation) doc["validation"] = validation->to_json();
  if (model) {
    Json m = Json::object();
    m["name"] = model->name;
    m["layers"] = model->layers;
    m["params"] = model->params;
    doc["model"] = m;
  }
  if (seq) doc["seq"] = *seq;
  if (predictions) {
    Json a = Json::array();
    for (const FrameworkStep& p : *predictions) a.push_back(p.to_json());
    doc["predictions"] = a;
  }
  Json n = Json::array();
  for (const std::string& s : notes) n.push_back(s);
  doc["notes"] = n;
  return doc;
}

}  // namespace fp8sim::speed
