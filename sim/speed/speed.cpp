#include "sim/speed/speed.hpp"
#include "sim/common/paths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <set>

#include "sim/backend/backend.hpp"
#include "sim/common/build_info.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/sizes.hpp"

namespace fp8sim::speed {

namespace {

constexpr const char* kTorchSchema = "fp8sim-torch-times/1";

// COAT Table 7 (Xi et al., ICLR 2025): H100 80 GB, FSDP. Throughput is at each method's
// largest batch ("max batch" column); 0 = out of memory in the paper.
struct Table7PaperRow {
  const char* model;
  int64_t gpus;
  int64_t seq;
  int64_t batch[3];     // by kTable7Plans: the BF16, TE and COAT plans
  double paper_tps[3];  // tokens/s/GPU
};
const std::vector<Table7PaperRow>& table7_rows() {
  static const std::vector<Table7PaperRow> rows{
      {"llama2-7b", 1, 2048, {0, 0, 1}, {0, 0, 5906}},        {"llama2-7b", 2, 2048, {1, 1, 4}, {6130, 6842, 11351}},
      {"llama2-7b", 4, 2048, {2, 2, 4}, {7730, 9577, 11257}}, {"llama2-7b", 8, 2048, {4, 4, 8}, {8238, 11704, 11241}},
      {"llama2-13b", 2, 1024, {0, 0, 1}, {0, 0, 2137}},       {"llama2-13b", 4, 2048, {1, 1, 2}, {2345, 2851, 5295}},
      {"llama2-13b", 8, 2048, {2, 2, 4}, {3907, 5604, 5650}}, {"llama-30b", 8, 2048, {0, 0, 1}, {0, 0, 1363}},
  };
  return rows;
}

// Table 7's methods, in its column order (Table7PaperRow's batch and paper_tps index them).
constexpr std::array<Plan, 3> kTable7Plans{Plan::BF16, Plan::TE, Plan::COAT};

// The breakdown term a kernel's time adds to.
double SpeedBreakdown::*category(Kind k) {
  switch (k) {
    case Kind::Gemm:
      return &SpeedBreakdown::gemm;
    case Kind::Attention:
    case Kind::RopeFwd:
    case Kind::RopeBwd:
      return &SpeedBreakdown::attention;
    case Kind::CastTranspose:
    case Kind::Transpose:
    case Kind::QuantizeG16:
    case Kind::GroupMax:
    case Kind::ReduceMax:
    case Kind::Amax:
    case Kind::BlockQuantize:
    case Kind::Dequantize:
      return &SpeedBreakdown::quantize;
    case Kind::RmsNormFwd:
    case Kind::RmsNormBwd:
    case Kind::SiluMulFwd:
    case Kind::SiluMulBwd:
    case Kind::Add:
      return &SpeedBreakdown::nonlinear;
    case Kind::CrossEntropy:
    case Kind::EmbeddingFwd:
    case Kind::EmbeddingBwd:
      return &SpeedBreakdown::embedding_loss;
    case Kind::Optimizer:
      return &SpeedBreakdown::optimizer;
  }
  throw Error(fmt::format("kernel kind {} has no time category", static_cast<int>(k)));
}

Json dims_json(const std::vector<int64_t>& d) {
  Json a = Json::array();
  for (int64_t v : d) a.push_back(v);
  return a;
}

int64_t batch_for(const SpeedOptions& o, const std::string& recipe) {
  auto it = o.recipe_batch.find(recipe);
  return it == o.recipe_batch.end() ? o.batch : it->second;
}

// The plan under its own name (Table 7's methods, the BF16 baseline, the validation rows).
PlanRecipe plain(Plan p) { return {plan_name(p), p}; }

// The listed recipe speedups are taken against: the first that runs the BF16 plan, or none.
const PlanRecipe* listed_baseline(const SpeedOptions& o) {
  for (const PlanRecipe& r : o.recipes)
    if (r.plan == Plan::BF16) return &r;
  return nullptr;
}

PlanOptions plan_options(const SpeedOptions& o, int64_t batch, int64_t seq, int64_t gpus) {
  PlanOptions po;
  po.batch = batch;
  po.seq = seq;
  po.gpus = gpus;
  po.grad_accum = o.grad_accum;
  return po;
}

// The two collectives' prices: the fitted ones (comm_fit) or link_gbps without latency.
struct CommPrices {
  LinkFit all_gather, reduce_scatter;
  double all_gather_bytes, reduce_scatter_bytes;  // per parameter
};

// fp8: the recipe's weights are all-gathered as FP8 codes (--fp8-allgather, a recipe that runs FP8
// GEMMs); BF16 otherwise.
CommPrices comm_prices(const SpeedOptions& o, bool fp8) {
  CommPrices c{{0, o.link_gbps}, {0, o.link_gbps}, fp8 ? 1.0 : 2.0, o.reduce_dtype == "fp32" ? 4.0 : 2.0};
  if (o.comm_fit) {
    const CommFit& f = *o.comm_fit;
    const auto& ag = fp8 ? f.all_gather_u8 : f.all_gather_bf16;
    const auto& rs = o.reduce_dtype == "fp32" ? f.reduce_scatter_f32 : f.reduce_scatter_bf16;
    FP8SIM_REQUIRE(ag && rs, "--comm-fit {} has no fitted bandwidth for the {} all-gather or the {} reduce-scatter",
                   f.source, fp8 ? "uint8 (FP8)" : "bfloat16", o.reduce_dtype);
    c.all_gather = *ag;
    c.reduce_scatter = *rs;
  }
  return c;
}

// A collective over `params` parameters in all, moving `bytes_per_param` each, issued as `calls`
// calls (one per FSDP unit): a latency per call, the bytes at the bus bandwidth.
double collective_ms(const LinkFit& f, double bytes_per_param, double params, double frac, double calls) {
  return calls * f.latency_us * 1e-3 + bytes_per_param * params * frac / (f.bus_gbps * 1e9) * 1e3;
}

// Per micro-batch: every decoder layer's weights all-gathered for forward and again for backward,
// the root unit's (embedding, final norm, LM head: BF16 in every recipe) once, as FSDP keeps the
// root gathered from forward to backward; every unit's gradients reduce-scattered once. Overlapped,
// what cannot hide behind compute is the root's and the first layer's all-gathers before the
// first kernel and the first layer's and the root's reduce-scatters after the last.
double fsdp_comm_ms(const ModelShape& m, int64_t gpus, const SpeedOptions& o, bool fp8, double compute_ms,
                    double* raw_ms) {
  *raw_ms = 0;
  if (o.fsdp_comm == "none" || gpus <= 1) return 0;
  const double frac = static_cast<double>(gpus - 1) / static_cast<double>(gpus);
  const CommPrices layers = comm_prices(o, fp8), root = comm_prices(o, false);
  const double R = static_cast<double>(m.root_params), PL = static_cast<double>(m.params) - R;
  const double L = static_cast<double>(m.layers), accum = static_cast<double>(o.grad_accum);
  const double ag_layers = collective_ms(layers.all_gather, layers.all_gather_bytes, PL, frac, L);
  const double ag_root = collective_ms(root.all_gather, root.all_gather_bytes, R, frac, 1);
  const double rs_layers = collective_ms(layers.reduce_scatter, layers.reduce_scatter_bytes, PL, frac, L);
  const double rs_root = collective_ms(layers.reduce_scatter, layers.reduce_scatter_bytes, R, frac, 1);
  const double ms = accum * (2 * ag_layers + ag_root + rs_layers + rs_root);
  *raw_ms = ms;
  if (o.fsdp_comm == "serial") return ms;
  const double first_layer = PL / L;
  const double exposed =
      accum * (ag_root + collective_ms(layers.all_gather, layers.all_gather_bytes, first_layer, frac, 1) +
               collective_ms(layers.reduce_scatter, layers.reduce_scatter_bytes, first_layer, frac, 1) + rs_root);
  return exposed + std::max(0.0, ms - exposed - compute_ms);
}

}  // namespace

double attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool forward) {
  const double fwd = 2.0 * static_cast<double>(batch) * heads * static_cast<double>(seq) * seq * head_dim;
  return forward ? fwd : 2.5 * fwd;
}

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::filesystem::path default_calibration_path() {
  if (const char* e = std::getenv("FP8SIM_CALIBRATION"); e && *e) return e;
  return data_root() / "reports" / "h200" / "calibration.json";
}

// ---------------------------------------------------------------------------- collective fits
CommFit load_comm_fit(const std::filesystem::path& path) {
  Json doc;
  try {
    doc = Json::parse(read_text_file(path));
  } catch (const Error& e) {
    throw Error(fmt::format("--comm-fit '{}': {}", path.string(), e.what()));
  }
  const std::string where = fmt::format("--comm-fit '{}'", path.string());
  const Json* format = doc.is_object() ? doc.find("format") : nullptr;
  FP8SIM_REQUIRE(format && format->is_string() && format->as_string() == "fp8sim-allgather-bench",
                 "{}: not a scripts/bench_allgather.py document (format \"fp8sim-allgather-bench\")", where);
  CommFit out;
  out.source = path.string();
  const Json* machine = doc.find("machine");
  FP8SIM_REQUIRE(machine && machine->is_object(), "{}: 'machine' must be an object", where);
  const Json* ws = machine->find("world_size");
  FP8SIM_REQUIRE(ws && ws->is_number() && ws->as_number() >= 2, "{}: 'machine.world_size' must be 2 or more", where);
  out.gpus = static_cast<int64_t>(ws->as_number());
  const Json* backend = machine->find("backend");
  const std::string be = backend && backend->is_string() ? backend->as_string() : "?";
  FP8SIM_REQUIRE(be == "nccl",
                 "{}: measured with the '{}' backend, not NCCL on GPUs: its fits price no GPU link (run "
                 "scripts/bench_allgather.py on the GPU machine)",
                 where, be);
  const Json* gpu = machine->find("gpu");
  const Json* dev = machine->find("device");
  out.device = gpu && gpu->is_string() ? gpu->as_string() : dev && dev->is_string() ? dev->as_string() : "?";
  const Json* fits = doc.find("fits");
  FP8SIM_REQUIRE(fits && fits->is_array(), "{}: 'fits' must be an array", where);
  for (const Json& f : fits->as_array()) {
    const Json* coll = f.is_object() ? f.find("collective") : nullptr;
    const Json* dt = f.is_object() ? f.find("dtype") : nullptr;
    FP8SIM_REQUIRE(coll && coll->is_string() && dt && dt->is_string(), "{}: every fit needs 'collective' and 'dtype'",
                   where);
    const Json* lat = f.find("latency_us");
    const Json* bw = f.find("bus_gbps");
    if (!bw || bw->is_null()) continue;  // the sweep did not show a bandwidth: not usable
    FP8SIM_REQUIRE(bw->is_number() && bw->as_number() > 0 && lat && lat->is_number() && lat->as_number() >= 0,
                   "{}: fit {}/{} needs latency_us >= 0 and bus_gbps > 0", where, coll->as_string(), dt->as_string());
    const LinkFit lf{lat->as_number(), bw->as_number()};
    const std::string key = coll->as_string() + "/" + dt->as_string();
    if (key == "all_gather/bfloat16") out.all_gather_bf16 = lf;
    else if (key == "all_gather/uint8") out.all_gather_u8 = lf;
    else if (key == "reduce_scatter/bfloat16") out.reduce_scatter_bf16 = lf;
    else if (key == "reduce_scatter/float32") out.reduce_scatter_f32 = lf;
  }
  return out;
}

// ------------------------------------------------------------------------------------ torch doc
Json load_torch_times(const std::filesystem::path& p) {
  Json doc;
  try {
    doc = Json::parse(read_text_file(p));
  } catch (const Error& e) {
    throw Error(fmt::format("torch times '{}': {}", p.string(), e.what()));
  }
  torch_measurements(doc);  // validates
  return doc;
}

std::vector<Measurement> torch_measurements(const Json& doc) {
  FP8SIM_REQUIRE(doc.is_object(), "torch times: the document must be a JSON object");
  const Json* schema = doc.find("schema");
  FP8SIM_REQUIRE(schema && schema->is_string() && schema->as_string() == kTorchSchema,
                 "torch times: 'schema' must be \"{}\" (written by scripts/torch_layer_time.py)", kTorchSchema);
  const std::string torch_version =
      doc.contains("torch_version") && doc.at("torch_version").is_string() ? doc.at("torch_version").as_string() : "?";
  std::vector<Measurement> out;
  const Json* configs = doc.find("configs");
  FP8SIM_REQUIRE(configs && configs->is_array(), "torch times: 'configs' must be an array");
  size_t i = 0;
  for (const Json& c : configs->as_array()) {
    const std::string where = fmt::format("torch times: configs[{}]", i++);
    FP8SIM_REQUIRE(c.is_object(), "{}: must be an object", where);
    if (c.contains("error")) continue;  // the script could not time this config (recorded why)
    auto integer = [&](const char* k) {
      const Json* v = c.find(k);
      FP8SIM_REQUIRE(v && v->is_number() && v->as_number() >= 1 && std::floor(v->as_number()) == v->as_number(),
                     "{}: '{}' must be a positive integer", where, k);
      return static_cast<int64_t>(v->as_number());
    };
    const int64_t batch = integer("batch"), seq = integer("seq"), heads = integer("heads"),
                  kv_heads = integer("kv_heads"), head_dim = integer("head_dim");
    // The pinned backend (FlashAttention: the plans' attention) and, where the script timed them,
    // SDPA's default backend choice (what the framework profiles run: variant suffix ",default")
    // and SDPA with an explicit causal mask, as transformers calls it under torch.compile (",masked").
    struct Sdpa {
      const char* key;
      bool fwd;
      const char* suffix;
    };
    for (const auto& [k, fwd, suffix] :
         {Sdpa{"sdpa_fwd_ms", true, ""}, Sdpa{"sdpa_bwd_ms", false, ""}, Sdpa{"sdpa_default_fwd_ms", true, ",default"},
          Sdpa{"sdpa_default_bwd_ms", false, ",default"}, Sdpa{"sdpa_masked_fwd_ms", true, ",masked"},
          Sdpa{"sdpa_masked_bwd_ms", false, ",masked"}}) {
      const bool default_backend = *suffix != '\0', masked = std::string(suffix) == ",masked";
      const Json* t = c.find(k);
      if (default_backend && !t) continue;  // older times lack the default backend's
      FP8SIM_REQUIRE(t && t->is_object(), "{}: '{}' must be an object {{median, min, max, reps}}", where, k);
      Json mj = Json::object();
      mj["kind"] = "attention";
      mj["variant"] = std::string(fwd ? "bf16,causal,fwd" : "bf16,causal,bwd") + suffix;
      mj["dims"] = dims_json({batch, heads, kv_heads, seq, head_dim});
      mj["median_ms"] = t->at("median").as_number();
      mj["min_ms"] = t->contains("min") ? t->at("min").as_number() : t->at("median").as_number();
      mj["max_ms"] = t->contains("max") ? t->at("max").as_number() : t->at("median").as_number();
      mj["reps"] = t->contains("reps") ? t->at("reps").as_number() : 1.0;
      mj["flops"] = attention_flops(batch, heads, seq, head_dim, fwd);
      const std::string backend = default_backend ? "default backend"
                                  : c.contains("sdpa_backend") && c.at("sdpa_backend").is_string()
                                      ? c.at("sdpa_backend").as_string()
                                      : "default backend";
      mj["impl"] =
          masked ? fmt::format(
                       "torch {} F.scaled_dot_product_attention(attn_mask=(B, 1, S, S) boolean causal "
                       "mask, K/V repeated), {}",
                       torch_version, backend)
                 : fmt::format("torch {} F.scaled_dot_product_attention(is_causal=True), {}", torch_version, backend);
      out.push_back(Measurement::from_json(mj, fmt::format("{}: {}", where, k)));
    }
  }
  if (const Json* a = doc.find("adamw_fused_fp32"); a && !a->is_null()) {
    FP8SIM_REQUIRE(a->is_object(), "torch times: 'adamw_fused_fp32' must be an object");
    const Json* p = a->find("params");
    FP8SIM_REQUIRE(p && p->is_number() && p->as_number() >= 1, "torch times: adamw_fused_fp32.params must be positive");
    Json mj = Json::object();
    mj["kind"] = "optimizer";
    mj["variant"] = "adamw_fp32";
    mj["dims"] = dims_json({static_cast<int64_t>(p->as_number())});
    mj["median_ms"] = a->at("median").as_number();
    mj["min_ms"] = a->contains("min") ? a->at("min").as_number() : a->at("median").as_number();
    mj["max_ms"] = a->contains("max") ? a->at("max").as_number() : a->at("median").as_number();
    mj["reps"] = a->contains("reps") ? a->at("reps").as_number() : 1.0;
    mj["bytes"] = 28.0 * p->as_number();
    mj["impl"] = fmt::format("torch {} torch.optim.AdamW(fused=True), fp32 params/grads/states", torch_version);
    out.push_back(Measurement::from_json(mj, "torch times: adamw_fused_fp32"));
  }
  return out;
}

void add_torch_times(Calibration& cal, const Json& torch_doc, std::vector<std::string>& notes) {
  const std::filesystem::path committed = default_calibration_path();
  if (!torch_doc.is_null()) {
    for (Measurement& m : torch_measurements(torch_doc)) cal.add(std::move(m));
    cal.torch = torch_doc;
  } else if (std::filesystem::exists(committed)) {
    Calibration old = Calibration::load(committed);
    for (const auto& [k, m] : old.measurements())
      if (m.kind == Kind::Attention || (m.kind == Kind::Optimizer && m.variant == "adamw_fp32")) cal.add(m);
    cal.torch = old.torch;
    notes.push_back(fmt::format("attention and fp32 AdamW times come from '{}' (no --torch-times given)",
                                source_relative(committed)));
  } else {
    throw Error(
        "attention is timed by PyTorch, not assumed: run scripts/torch_layer_time.py on this GPU at the same "
        "shapes and pass its JSON with --torch-times FILE");
  }
}

// ------------------------------------------------------------------------------- evaluation
namespace {

// Null for an absent value.

// One kernel of the plan priced by `p`, with what the calibration's measurement says of it.
SpeedOp speed_op(const KernelOp& op, const Prediction& p, const Calibration& cal) {
  SpeedOp s;
  s.name = op.name;
  s.phase = phase_name(op.phase);
  s.per_layer = op.per_layer;
  s.kind = kind_name(op.kind);
  s.variant = op.variant;
  s.dims = op.dims;
  s.key = op.key();
  s.count = op.count;
  s.ms = p.ms;
  s.step_ms = p.ms * op.count;
  if (op.flops > 0) s.tflops = op.flops / (p.ms * 1e9);
  else s.gbps = op.bytes / (p.ms * 1e6);
  s.flops = op.flops;
  s.bytes = op.bytes;
  s.source = p.source;
  if (const Measurement* meas = cal.find(op.key())) {
    if (!meas->impl.empty()) s.impl = meas->impl;
    if (!meas->note.empty()) s.measurement_note = meas->note;
  }
  if (!op.note.empty()) s.note = op.note;
  if (!op.deviation.empty()) s.deviation = op.deviation;
  return s;
}

}  // namespace

Json SpeedOp::to_json() const {
  Json j = Json::object();
  j["name"] = name;
  j["phase"] = phase;
  j["per_layer"] = per_layer;
  j["kind"] = kind;
  j["variant"] = variant;
  j["dims"] = dims_json(dims);
  j["key"] = key;
  j["count"] = count;
  j["ms"] = ms;
  j["step_ms"] = step_ms;
  if (tflops) j["tflops"] = *tflops;
  if (gbps) j["gbps"] = *gbps;
  j["flops"] = flops;
  j["bytes"] = bytes;
  j["source"] = source;
  if (impl) j["impl"] = *impl;
  if (measurement_note) j["measurement_note"] = *measurement_note;
  if (note) j["note"] = *note;
  if (deviation) j["deviation"] = *deviation;
  return j;
}

std::vector<std::pair<std::string, double>> SpeedBreakdown::items() const {
  return {{"gemm", gemm},           {"attention", attention},           {"quantize", quantize},
          {"nonlinear", nonlinear}, {"embedding_loss", embedding_loss}, {"optimizer", optimizer}};
}

Json SpeedBreakdown::to_json() const {
  Json j = Json::object();
  for (const auto& [k, v] : items()) j[k] = v;
  return j;
}

Json RecipeSpeed::to_json() const {
  Json j = Json::object();
  j["recipe"] = recipe;
  j["batch"] = batch;
  j["seq"] = seq;
  j["gpus"] = gpus;
  j["grad_accum"] = grad_accum;
  j["layer_fwd_ms"] = layer_fwd_ms;
  j["layer_bwd_ms"] = layer_bwd_ms;
  j["layer_ms"] = layer_ms;
  j["layers_ms"] = layers_ms;
  j["outside_ms"] = outside_ms;
  j["weight_cast_ms"] = weight_cast_ms;
  j["optimizer_ms"] = optimizer_ms;
  j["compute_ms"] = compute_ms;
  j["comm_ms"] = comm_ms;
  j["comm_unoverlapped_ms"] = comm_unoverlapped_ms;
  j["step_ms"] = step_ms;
  j["tokens_per_step"] = tokens_per_step;
  j["tokens_per_s_per_gpu"] = tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = model_tflops_per_gpu;
  j["measured_fraction"] = measured_fraction;
  j["breakdown_ms"] = breakdown_ms.to_json();
  if (ops) {
    Json a = Json::array();
    for (const SpeedOp& op : *ops) a.push_back(op.to_json());
    j["ops"] = std::move(a);
  }
  if (speedup_vs_bf16) j["speedup_vs_bf16"] = *speedup_vs_bf16;
  return j;
}

RecipeSpeed evaluate_recipe(const ModelShape& m, const PlanRecipe& r, const PlanOptions& po, const Calibration& cal,
                            const SpeedOptions& opts, bool with_ops) {
  const std::vector<KernelOp> plan = build_plan(m, r.plan, po);
  RecipeSpeed e;
  double flops = 0, measured_ms = 0;
  if (with_ops) e.ops.emplace();
  for (const KernelOp& op : plan) {
    const Prediction p = cal.predict(op);
    const double step_ms = p.ms * op.count;
    e.compute_ms += step_ms;
    flops += op.flops * op.count;
    if (p.measured) measured_ms += step_ms;
    e.breakdown_ms.*category(op.kind) += step_ms;
    if (op.phase == Phase::Step) {
      if (op.kind == Kind::Optimizer) e.optimizer_ms += step_ms;
      else e.weight_cast_ms += step_ms;
    } else if (op.per_layer) {
      (op.phase == Phase::Forward ? e.layer_fwd_ms : e.layer_bwd_ms) += p.ms;
    } else {
      e.outside_ms += step_ms;
    }
    if (with_ops) e.ops->push_back(speed_op(op, p, cal));
  }
  e.comm_ms =
      fsdp_comm_ms(m, po.gpus, opts, opts.fp8_allgather && r.plan != Plan::BF16, e.compute_ms, &e.comm_unoverlapped_ms);
  e.step_ms = e.compute_ms + e.comm_ms;
  e.recipe = r.name;
  e.batch = po.batch;
  e.seq = po.seq;
  e.gpus = po.gpus;
  e.grad_accum = po.grad_accum;
  e.layer_ms = e.layer_fwd_ms + e.layer_bwd_ms;
  e.layers_ms = e.layer_ms * m.layers * po.grad_accum;
  e.tokens_per_step = static_cast<double>(po.batch) * po.seq * po.grad_accum;
  e.tokens_per_s_per_gpu = e.tokens_per_step / (e.step_ms * 1e-3);
  e.model_tflops_per_gpu = flops / (e.step_ms * 1e9);
  e.measured_fraction = e.compute_ms > 0 ? measured_ms / e.compute_ms : 0.0;
  return e;
}

// ------------------------------------------------------------------------------- the report
namespace {

// What the run was given: sizes, the recipe list, the communication model.
void check_options(const SpeedOptions& opts) {
  validate_run_sizes({.batch = opts.batch, .seq = opts.seq, .gpus = opts.gpus, .grad_accum = opts.grad_accum});
  for (const auto& [r, b] : opts.recipe_batch)
    validate_run_sizes({.batch = b, .seq = opts.seq, .batch_option = fmt::format("--batch for {}", r)});
  FP8SIM_REQUIRE(!opts.recipes.empty(), "no recipes given");
  FP8SIM_REQUIRE(opts.fsdp_comm == "none" || opts.fsdp_comm == "serial" || opts.fsdp_comm == "overlap",
                 "--fsdp-comm must be none, serial or overlap (not '{}')", opts.fsdp_comm);
  FP8SIM_REQUIRE(std::isfinite(opts.link_gbps) && opts.link_gbps > 0, "--link-gbps must be a positive number");
  FP8SIM_REQUIRE(opts.reduce_dtype == "bf16" || opts.reduce_dtype == "fp32",
                 "--reduce-dtype must be bf16 or fp32 (not '{}')", opts.reduce_dtype);
  if (opts.fsdp_comm == "none")
    FP8SIM_REQUIRE(!opts.fp8_allgather && opts.reduce_dtype == "bf16" && !opts.comm_fit,
                   "--fp8-allgather, --reduce-dtype and --comm-fit describe the FSDP communication: add --fsdp-comm "
                   "serial or overlap");
  else
    for (const bool fp8 : {false, opts.fp8_allgather})
      comm_prices(opts, fp8);  // a fit without the collectives asked for fails here, before any GPU work
}

// Table 7's models by name, loaded up front so that a missing config fails before any GPU work;
// empty without --table7.
std::map<std::string, ModelShape> load_table7_models(const SpeedOptions& opts) {
  std::map<std::string, ModelShape> t7_models;
  if (opts.table7)
    for (const Table7PaperRow& row : table7_rows())
      if (!t7_models.count(row.model)) t7_models.emplace(row.model, load_model_shape(row.model));
  return t7_models;
}

// The kernel times the report is evaluated with, where they came from, and the notes gathered
// while obtaining them.
struct Timing {
  Calibration cal;
  std::string mode;  // "measured" or "modelled"
  std::vector<std::string> notes;
};

// Every kernel the report will evaluate, deduplicated: the requested recipes, Table 7's rows (each
// method at its batch, and COAT at BF16's batch), Figure 4(b)'s kernels and the BF16 layer at every
// shape PyTorch timed (`tdoc`, for the validation table). Attention and the fp32 AdamW baseline are
// PyTorch's and left out.
std::vector<KernelOp> kernels_to_measure(const SpeedOptions& opts, const ModelShape& shape,
                                         const std::map<std::string, ModelShape>& t7_models, const Json& tdoc,
                                         std::vector<std::string>& notes) {
  std::vector<KernelOp> wanted;
  std::set<std::string> seen;
  auto want = [&](const std::vector<KernelOp>& ops) {
    for (const KernelOp& op : ops) {
      if (op.kind == Kind::Attention || (op.kind == Kind::Optimizer && op.variant == "adamw_fp32")) continue;
      if (seen.insert(op.key()).second) wanted.push_back(op);
    }
  };
  for (const PlanRecipe& r : opts.recipes)
    want(build_plan(shape, r.plan, plan_options(opts, batch_for(opts, r.name), opts.seq, opts.gpus)));
  if (!listed_baseline(opts))  // speedup's base
    want(build_plan(shape, Plan::BF16, plan_options(opts, opts.batch, opts.seq, opts.gpus)));
  if (opts.table7)
    for (const Table7PaperRow& row : table7_rows())
      for (size_t i = 0; i < kTable7Plans.size(); ++i) {
        const Plan r = kTable7Plans[i];
        const int64_t b = row.batch[i];  // 0: out of memory in the paper, not evaluated
        if (b) want(build_plan(t7_models.at(row.model), r, plan_options(opts, b, row.seq, row.gpus)));
        if (r == Plan::COAT && row.batch[0])
          want(build_plan(t7_models.at(row.model), r, plan_options(opts, row.batch[0], row.seq, row.gpus)));
      }
  if (opts.fig4b)
    for (const Fig4bPaperRow& pr : fig4b_paper()) {
      const Fig4bOps f = fig4b_ops(pr.rows, pr.cols);
      want({f.jit_amax, f.stage2_reduce, f.producer_plain, f.producer_with_gmax});
    }
  if (!tdoc.is_null())
    for (const Json& c : tdoc.at("configs").as_array()) {
      if (!c.is_object() || c.contains("error") || !c.contains("model")) continue;
      try {
        const ModelShape ms = load_model_shape(c.at("model").as_string());
        want(build_plan(ms, Plan::BF16, plan_options(opts, c.at("batch").as_int(), c.at("seq").as_int(), 1)));
      } catch (const Error& e) {
        notes.push_back(fmt::format("PyTorch config '{}' not replayed: {}", c.at("model").as_string(), e.what()));
      }
    }
  return wanted;
}

// A modelled run: the calibration file the options name, else the committed one.
Timing load_timing(const SpeedOptions& opts) {
  const std::filesystem::path path = !opts.calibration.empty() ? opts.calibration : default_calibration_path();
  FP8SIM_REQUIRE(opts.calibration.empty() ? std::filesystem::exists(path) : true,
                 "no GPU here and no calibration exists at '{}': the figures cannot be modelled. Measure one on a "
                 "GPU machine (fp8sim calibrate, scripts/device/calibrate.sh) and pass it with --calibration FILE",
                 path.string());
  FP8SIM_REQUIRE(opts.write_calibration.empty() && opts.torch_times.empty(),
                 "--write-calibration and --torch-times need a measuring run (a GPU and no --calibration)");
  return {Calibration::load(path), "modelled", {}};
}

// --write-calibration: this run's measurements merged into the file (what an earlier run measured
// and this one did not is kept; this run's times win), handed to the sink or written atomically.
void write_merged_calibration(const SpeedOptions& opts, const Calibration& cal) {
  Calibration out;
  if (std::filesystem::exists(opts.write_calibration)) {
    const UnrecordedReads merged_into;  // the run's own output, read to be updated: not an input
    out = Calibration::load(opts.write_calibration);
  }
  out.merge(cal);
  out.device = cal.device;
  out.created = cal.created;
  out.command = cal.command;
  out.commit = cal.commit;
  out.copy_gbps = cal.copy_gbps;
  if (!cal.torch.is_null()) out.torch = cal.torch;
  const std::string text = out.to_json().dump(1) + "\n";
  if (opts.calibration_sink) opts.calibration_sink(text);
  else write_file_atomic(opts.write_calibration, text);
}

// A measuring run: every kernel the report needs, timed on the GPU now.
Timing measure_timing(const SpeedOptions& opts, gpu::Backend& gpu, const ModelShape& shape,
                      const std::map<std::string, ModelShape>& t7_models) {
  Timing t;
  const Json tdoc = opts.torch_times.empty() ? Json() : load_torch_times(opts.torch_times);
  const std::vector<KernelOp> wanted = kernels_to_measure(opts, shape, t7_models, tdoc, t.notes);
  t.cal =
      gpu.measure_kernels(wanted, opts.measure, opts.progress ? opts.progress : std::function<void(double, double)>{});
  t.cal.origin = "measured in this run";
  t.cal.created = utc_timestamp();
  t.cal.command = opts.command_line;
  t.cal.commit = build_commit();
  t.mode = "measured";
  add_torch_times(t.cal, tdoc, t.notes);
  if (!opts.write_calibration.empty()) write_merged_calibration(opts, t.cal);
  return t;
}

// The result's head: the command line, the model and the configuration.
SpeedResult header(const SpeedOptions& opts, const ModelShape& shape) {
  SpeedResult res;
  if (!opts.command_line.empty()) res.command_line = opts.command_line;
  res.model = shape;
  res.seq = opts.seq;
  res.gpus = opts.gpus;
  res.grad_accum = opts.grad_accum;
  return res;
}

// The kernel families whose calibrated times were measured at another version than this build's
// kernels, over every kernel the report evaluates.
std::vector<StaleKernels> stale_kernels(const SpeedOptions& opts, const ModelShape& shape,
                                        const std::map<std::string, ModelShape>& t7_models, const Calibration& cal) {
  std::vector<std::string> ignored;
  const Json tdoc = cal.torch.is_object() && cal.torch.contains("configs") ? cal.torch : Json();
  std::vector<StaleKernels> out;
  for (const StaleFamily& f : cal.stale_families(kernels_to_measure(opts, shape, t7_models, tdoc, ignored)))
    out.push_back(
        {f.family, f.calibration_versions, f.build_version, f.kernels, f.message(source_relative(cal.origin))});
  return out;
}

// Where the times come from, said in one statement, and the communication model.
SpeedTiming speed_timing(const SpeedOptions& opts, const Timing& t) {
  const Calibration& cal = t.cal;
  SpeedTiming timing;
  timing.mode = t.mode;
  timing.modelled = t.mode == "modelled";
  const std::string dev = cal.device.is_object() && cal.device.contains("name") && cal.device.at("name").is_string()
                              ? cal.device.at("name").as_string()
                              : std::string("an unnamed GPU");
  timing.device = dev;
  timing.calibration = source_relative(cal.origin);
  timing.calibration_created = cal.created;
  timing.statement =
      t.mode == "measured"
          ? fmt::format(
                "MEASURED: every kernel below was timed on this machine's {} just now (CUDA events, after "
                "warm-up, L2 flushed before each repetition); attention by PyTorch SDPA",
                dev)
          : fmt::format(
                "MODELLED, not measured on this machine: kernel times come from the calibration '{}' "
                "(measured on {} at {}); shapes it did not measure are fitted from the nearest measured one",
                source_relative(cal.origin), dev, cal.created.empty() ? "an unknown date" : cal.created);
  timing.fsdp_comm = opts.fsdp_comm;
  if (opts.fsdp_comm != "none") {
    const CommPrices c = comm_prices(opts, false), c8 = comm_prices(opts, opts.fp8_allgather);
    const auto price = [](const LinkFit& f) {
      return f.latency_us > 0 ? fmt::format("{:.1f} us + bytes at {:.0f} GB/s", f.latency_us, f.bus_gbps)
                              : fmt::format("{:.0f} GB/s", f.bus_gbps);
    };
    if (!opts.comm_fit) timing.link_gbps = opts.link_gbps;
    timing.comm_model = fmt::format(
        "FSDP: per micro-batch 2 all-gathers of each layer's weights ({}; the root unit's BF16 once, kept "
        "gathered from forward to backward) + 1 reduce-scatter of every unit's {} grads ({:g} B/param), x "
        "(gpus-1)/gpus per GPU; all-gather {}, reduce-scatter {} ({}); {}",
        opts.fp8_allgather ? fmt::format("BF16, 2 B/param; FP8 codes, 1 B/param, for the FP8 recipes, all-gather {}",
                                         price(c8.all_gather))
                           : std::string("BF16, 2 B/param"),
        opts.reduce_dtype == "fp32" ? "fp32" : "BF16", c.reduce_scatter_bytes, price(c.all_gather),
        price(c.reduce_scatter),
        opts.comm_fit ? fmt::format("fitted by scripts/bench_allgather.py on {} x {}, {}{}", opts.comm_fit->gpus,
                                    opts.comm_fit->device, source_relative(opts.comm_fit->source),
                                    opts.comm_fit->gpus == opts.gpus
                                        ? std::string()
                                        : fmt::format("; applied to {} GPUs, which it did not measure", opts.gpus))
                      : std::string("an assumed bus bandwidth, no latency"),
        opts.fsdp_comm == "serial" ? "added to the step"
                                   : "overlapped with compute except the excess, the root's and the first layer's "
                                     "all-gathers and reduce-scatters");
  }
  return timing;
}

// The requested configuration: every recipe with its kernels, and its speedup over BF16 (the first
// listed recipe that runs the BF16 plan, else that plan at the default micro-batch).
std::vector<RecipeSpeed> recipe_speeds(const SpeedOptions& opts, const ModelShape& shape, const Calibration& cal) {
  std::vector<RecipeSpeed> out;
  double bf16_tps = 0;
  const PlanRecipe* base = listed_baseline(opts);
  for (const PlanRecipe& r : opts.recipes) {
    out.push_back(
        evaluate_recipe(shape, r, plan_options(opts, batch_for(opts, r.name), opts.seq, opts.gpus), cal, opts, true));
    if (&r == base) bf16_tps = out.back().tokens_per_s_per_gpu;
  }
  if (!base) {
    // Speedups are always against BF16: evaluate it even when not listed.
    bf16_tps =
        evaluate_recipe(shape, plain(Plan::BF16), plan_options(opts, opts.batch, opts.seq, opts.gpus), cal, opts, false)
            .tokens_per_s_per_gpu;
  }
  for (RecipeSpeed& e : out) e.speedup_vs_bf16 = e.tokens_per_s_per_gpu / bf16_tps;
  return out;
}

// COAT's Figure 4(b): the per-tensor max just in time against Group Scaling, with PyTorch's eager
// amax where the calibration has it.
std::vector<Fig4bRow> fig4b_rows(const Calibration& cal) {
  std::vector<Fig4bRow> rows;
  for (const Fig4bPaperRow& pr : fig4b_paper()) {
    const Fig4bOps f = fig4b_ops(pr.rows, pr.cols);
    const Prediction jit = cal.predict(f.jit_amax), st2 = cal.predict(f.stage2_reduce),
                     plain = cal.predict(f.producer_plain), with = cal.predict(f.producer_with_gmax);
    const double stage1 = std::max(0.0, with.ms - plain.ms);
    Fig4bRow r;
    r.rows = pr.rows;
    r.cols = pr.cols;
    r.jit_amax_ms = jit.ms;
    r.jit_amax_gbps = f.jit_amax.bytes / (jit.ms * 1e6);
    r.group_stage1_overhead_ms = stage1;
    r.group_stage2_ms = st2.ms;
    r.group_scaling_ms = stage1 + st2.ms;
    r.speedup = jit.ms / (stage1 + st2.ms);
    r.paper_h100_jit_ms = pr.jit_ms;
    r.paper_h100_group_ms = pr.group_ms;
    r.source = jit.measured && st2.measured && plain.measured && with.measured ? "measured" : "fitted";
    if (cal.torch.is_object())
      if (const Json* am = cal.torch.find("amax"); am && am->is_array())
        for (const Json& a : am->as_array())
          if (a.is_object() && a.contains("rows") && a.at("rows").as_number() == pr.rows &&
              a.at("cols").as_number() == pr.cols && a.contains("median_ms"))
            r.torch_eager_amax_ms = a.at("median_ms").as_number();
    rows.push_back(r);
  }
  return rows;
}

// COAT's Table 7: each row's methods at the paper's batches beside the paper's throughput, and
// COAT at BF16's batch.
std::vector<Table7Row> table7_comparison(const SpeedOptions& opts, const Calibration& cal,
                                         const std::map<std::string, ModelShape>& t7_models) {
  std::vector<Table7Row> rows;
  for (const Table7PaperRow& row : table7_rows()) {
    const ModelShape& ms = t7_models.at(row.model);
    Table7Row r;
    r.model = row.model;
    r.gpus = row.gpus;
    r.seq = row.seq;
    double tps[3] = {0, 0, 0};
    for (size_t i = 0; i < kTable7Plans.size(); ++i) {
      const Plan rc = kTable7Plans[i];
      Table7Method m;
      m.recipe = plan_name(rc);
      m.batch = row.batch[i];
      if (row.paper_tps[i] > 0) m.paper_tokens_per_s_per_gpu = row.paper_tps[i];
      if (row.batch[i] > 0) {
        const RecipeSpeed ev =
            evaluate_recipe(ms, plain(rc), plan_options(opts, row.batch[i], row.seq, row.gpus), cal, opts, false);
        tps[i] = ev.tokens_per_s_per_gpu;
        m.tokens_per_s_per_gpu = tps[i];
        m.step_ms = ev.step_ms;
        m.measured_fraction = ev.measured_fraction;
      } else {
        m.oom_in_paper = true;
      }
      r.methods.push_back(m);
    }
    if (tps[0] > 0) {
      r.te_vs_bf16 = tps[1] / tps[0];
      r.coat_vs_bf16 = tps[2] / tps[0];
      r.paper_te_vs_bf16 = row.paper_tps[1] / row.paper_tps[0];
      r.paper_coat_vs_bf16 = row.paper_tps[2] / row.paper_tps[0];
      // COAT at BF16's batch separates the kernel speedup from the larger-batch effect.
      const RecipeSpeed same =
          evaluate_recipe(ms, plain(Plan::COAT), plan_options(opts, row.batch[0], row.seq, row.gpus), cal, opts, false);
      r.coat_vs_bf16_same_batch = same.tokens_per_s_per_gpu / tps[0];
    }
    rows.push_back(r);
  }
  return rows;
}

// fp8sim's BF16 layer against PyTorch's at every configuration the calibration's PyTorch document
// timed; none when it has none. A configuration whose model cannot be loaded is skipped with a note.
std::optional<SpeedValidation> layer_validation(const SpeedOptions& opts, const Calibration& cal,
                                                std::vector<std::string>& notes) {
  if (!cal.torch.is_object() || !cal.torch.contains("configs")) return std::nullopt;
  SpeedValidation v;
  for (const Json& c : cal.torch.at("configs").as_array()) {
    if (!c.is_object() || !c.contains("model") || !c.contains("layer_fwd_bwd_ms")) continue;
    ModelShape ms;
    try {
      ms = load_model_shape(c.at("model").as_string());
    } catch (const Error& e) {
      notes.push_back(fmt::format("validation row for '{}' skipped: {}", c.at("model").as_string(), e.what()));
      continue;
    }
    const int64_t b = c.at("batch").as_int(), s = c.at("seq").as_int();
    const RecipeSpeed ev = evaluate_recipe(ms, plain(Plan::BF16), plan_options(opts, b, s, 1), cal, opts, true);
    double gemm = 0, attn = 0, other = 0;
    for (const SpeedOp& op : *ev.ops) {
      if (!op.per_layer || op.phase == "step") continue;
      (op.kind == "gemm" ? gemm : op.kind == "attention" ? attn : other) += op.ms;
    }
    const double torch_ms = c.at("layer_fwd_bwd_ms").at("median").as_number();
    SpeedValidationRow r;
    r.model = ms.name;
    r.batch = b;
    r.seq = s;
    r.torch_layer_ms = torch_ms;
    r.fp8sim_bf16_layer_ms = ev.layer_ms;
    r.difference = ev.layer_ms / torch_ms - 1.0;
    r.within_15_percent = std::fabs(ev.layer_ms / torch_ms - 1.0) <= 0.15;
    r.fp8sim_gemm_ms = gemm;
    r.fp8sim_attention_ms = attn;
    r.fp8sim_other_ms = other;
    r.measured_fraction = ev.measured_fraction;
    if (const Json* g = c.find("gemm_ms_total"); g && g->is_number()) r.torch_gemm_ms = g->as_number();
    if (c.contains("sdpa_fwd_ms") && c.contains("sdpa_bwd_ms"))
      r.torch_sdpa_ms = c.at("sdpa_fwd_ms").at("median").as_number() + c.at("sdpa_bwd_ms").at("median").as_number();
    v.rows.push_back(r);
  }
  v.torch_version = cal.torch.contains("torch_version") ? cal.torch.at("torch_version") : Json();
  v.device = cal.torch.contains("device") ? cal.torch.at("device") : Json();
  return v;
}

// The run's notes, then what differs from the reference implementations per op (deviations,
// measurement notes, stand-in implementations), each once.
std::vector<std::string> run_notes(const std::vector<std::string>& notes, const std::vector<RecipeSpeed>& recipes) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const std::string& n : notes)
    if (seen.insert(n).second) out.push_back(n);
  for (const RecipeSpeed& r : recipes)
    for (const SpeedOp& op : *r.ops) {
      const std::string who = fmt::format("{} ({})", op.name, r.recipe);
      for (const std::optional<std::string>* n : {&op.deviation, &op.measurement_note})
        if (*n && seen.insert(**n).second) out.push_back(fmt::format("{}: {}", who, **n));
      if (op.impl && op.impl->find("stand-in") != std::string::npos && seen.insert(*op.impl).second)
        out.push_back(fmt::format("{}: {}", who, *op.impl));
    }
  return out;
}

// opts.drop_unmodelled: leaves out of `run` the recipes whose plan cannot run at this shape or, with
// `cal`, whose kernels the calibration cannot predict, each added to `skipped` with why. When none
// is left, the first recipe's error is thrown as it was (a usage error stays one).
void drop_recipes(SpeedOptions& run, const ModelShape& shape, const Calibration* cal,
                  std::vector<SkippedRecipe>& skipped) {
  std::vector<PlanRecipe> kept;
  std::exception_ptr first;
  for (const PlanRecipe& r : run.recipes) {
    try {
      const PlanOptions po = plan_options(run, batch_for(run, r.name), run.seq, run.gpus);
      for (const KernelOp& op : build_plan(shape, r.plan, po))
        if (cal) cal->predict(op);
      kept.push_back(r);
    } catch (const Error& e) {
      if (!first) first = std::current_exception();
      skipped.push_back({r.name, e.what()});
    }
  }
  if (kept.empty()) std::rethrow_exception(first);
  run.recipes = std::move(kept);
}

// The result from the timing: head, timing, recipes, Figure 4(b), Table 7, validation, notes.
SpeedResult assemble(const SpeedOptions& opts, const ModelShape& shape,
                     const std::map<std::string, ModelShape>& t7_models, Timing& t,
                     std::vector<SkippedRecipe> skipped) {
  SpeedResult res = header(opts, shape);
  res.timing = speed_timing(opts, t);
  res.timing.stale_kernels = stale_kernels(opts, shape, t7_models, t.cal);
  res.recipes = recipe_speeds(opts, shape, t.cal);
  if (opts.fig4b) res.fig4b = fig4b_rows(t.cal);
  if (opts.table7) res.table7 = table7_comparison(opts, t.cal, t7_models);
  res.validation = layer_validation(opts, t.cal, t.notes);
  res.notes = run_notes(t.notes, res.recipes);
  res.skipped_recipes = std::move(skipped);
  return res;
}

template <class T>
Json array_json(const std::vector<T>& items) {
  Json a = Json::array();
  for (const T& x : items) a.push_back(x.to_json());
  return a;
}

}  // namespace

SpeedResult speed_report(const SpeedOptions& opts, gpu::Backend* gpu) {
  check_options(opts);
  const ModelShape shape = load_model_shape(opts.model);
  const std::map<std::string, ModelShape> t7_models = load_table7_models(opts);
  SpeedOptions run = opts;
  std::vector<SkippedRecipe> skipped;
  if (opts.drop_unmodelled) drop_recipes(run, shape, nullptr, skipped);
  Timing t = !run.calibration.empty() || !gpu ? load_timing(run) : measure_timing(run, *gpu, shape, t7_models);
  if (opts.drop_unmodelled && t.mode == "modelled") drop_recipes(run, shape, &t.cal, skipped);
  return assemble(run, shape, t7_models, t, std::move(skipped));
}

// ------------------------------------------------------------------------------- the document
Json StaleKernels::to_json() const {
  Json j = Json::object();
  j["family"] = family;
  Json v = Json::array();
  for (int x : calibration_versions) v.push_back(x);
  j["calibration_versions"] = v;
  j["build_version"] = build_version;
  j["kernels"] = kernels;
  j["message"] = message;
  return j;
}

Json SpeedTiming::to_json() const {
  Json j = Json::object();
  j["mode"] = mode;
  j["modelled"] = modelled;
  j["device"] = device;
  j["calibration"] = calibration;
  j["calibration_created"] = calibration_created;
  j["statement"] = statement;
  j["fsdp_comm"] = fsdp_comm;
  if (link_gbps) j["link_gbps"] = *link_gbps;
  if (comm_model) j["comm_model"] = *comm_model;
  if (!stale_kernels.empty()) j["stale_kernels"] = array_json(stale_kernels);
  return j;
}

Json Fig4bRow::to_json() const {
  Json j = Json::object();
  j["rows"] = rows;
  j["cols"] = cols;
  j["jit_amax_ms"] = jit_amax_ms;
  j["jit_amax_gbps"] = jit_amax_gbps;
  j["group_stage1_overhead_ms"] = group_stage1_overhead_ms;
  j["group_stage2_ms"] = group_stage2_ms;
  j["group_scaling_ms"] = group_scaling_ms;
  j["speedup"] = speedup;
  j["paper_h100_jit_ms"] = paper_h100_jit_ms;
  j["paper_h100_group_ms"] = paper_h100_group_ms;
  j["source"] = source;
  if (torch_eager_amax_ms) j["torch_eager_amax_ms"] = *torch_eager_amax_ms;
  return j;
}

Json Table7Method::to_json() const {
  Json j = Json::object();
  j["recipe"] = recipe;
  j["batch"] = batch;
  j["paper_tokens_per_s_per_gpu"] = json_or_null(paper_tokens_per_s_per_gpu);
  j["tokens_per_s_per_gpu"] = json_or_null(tokens_per_s_per_gpu);
  if (step_ms) j["step_ms"] = *step_ms;
  if (measured_fraction) j["measured_fraction"] = *measured_fraction;
  if (oom_in_paper) j["oom_in_paper"] = true;
  return j;
}

Json Table7Row::to_json() const {
  Json j = Json::object();
  j["model"] = model;
  j["gpus"] = gpus;
  j["seq"] = seq;
  j["methods"] = array_json(methods);
  if (te_vs_bf16) j["te_vs_bf16"] = *te_vs_bf16;
  if (coat_vs_bf16) j["coat_vs_bf16"] = *coat_vs_bf16;
  if (paper_te_vs_bf16) j["paper_te_vs_bf16"] = *paper_te_vs_bf16;
  if (paper_coat_vs_bf16) j["paper_coat_vs_bf16"] = *paper_coat_vs_bf16;
  if (coat_vs_bf16_same_batch) j["coat_vs_bf16_same_batch"] = *coat_vs_bf16_same_batch;
  return j;
}

Json SpeedValidationRow::to_json() const {
  Json j = Json::object();
  j["model"] = model;
  j["batch"] = batch;
  j["seq"] = seq;
  j["torch_layer_ms"] = torch_layer_ms;
  j["fp8sim_bf16_layer_ms"] = fp8sim_bf16_layer_ms;
  j["difference"] = difference;
  j["within_15_percent"] = within_15_percent;
  j["fp8sim_gemm_ms"] = fp8sim_gemm_ms;
  j["fp8sim_attention_ms"] = fp8sim_attention_ms;
  j["fp8sim_other_ms"] = fp8sim_other_ms;
  j["measured_fraction"] = measured_fraction;
  if (torch_gemm_ms) j["torch_gemm_ms"] = *torch_gemm_ms;
  if (torch_sdpa_ms) j["torch_sdpa_ms"] = *torch_sdpa_ms;
  return j;
}

Json SpeedValidation::to_json() const {
  Json j = Json::object();
  j["torch_version"] = torch_version;
  j["device"] = device;
  j["rows"] = array_json(rows);
  return j;
}

Json SkippedRecipe::to_json() const {
  Json j = Json::object();
  j["recipe"] = recipe;
  j["why"] = why;
  return j;
}

Json SpeedResult::to_json() const {
  Json doc = Json::object();
  doc["command"] = "speed";
  if (command_line) doc["command_line"] = *command_line;
  Json m = Json::object();
  m["name"] = model.name;
  m["hidden"] = model.hidden;
  m["ffn"] = model.ffn;
  m["layers"] = model.layers;
  m["heads"] = model.heads;
  m["kv_heads"] = model.kv_heads;
  m["vocab"] = model.vocab;
  m["params"] = model.params;
  doc["model"] = m;
  doc["seq"] = seq;
  doc["gpus"] = gpus;
  doc["grad_accum"] = grad_accum;
  doc["timing"] = timing.to_json();
  doc["recipes"] = array_json(recipes);
  if (fig4b) doc["fig4b"] = array_json(*fig4b);
  if (table7) doc["table7"] = array_json(*table7);
  if (validation) doc["validation"] = validation->to_json();
  Json n = Json::array();
  for (const std::string& s : notes) n.push_back(s);
  doc["notes"] = n;
  if (!skipped_recipes.empty()) doc["skipped_recipes"] = array_json(skipped_recipes);
  return doc;
}

// ------------------------------------------------------------------------------- markdown
namespace {
std::string f2(double v) { return fmt::format("{:.2f}", v); }
std::string f3(double v) { return fmt::format("{:.3f}", v); }
std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out;
  for (int64_t d : dims) {
    if (!out.empty()) out += 'x';
    out += std::to_string(d);
  }
  return out;
}
void md_table(std::string& out, const std::vector<std::string>& header,
              const std::vector<std::vector<std::string>>& rows) {
  out += "|";
  for (const auto& h : header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += i ? "---:|" : "---|";
  out += "\n";
  for (const auto& r : rows) {
    out += "|";
    for (const auto& c : r) out += " " + c + " |";
    out += "\n";
  }
  out += "\n";
}

// The per-recipe table and each recipe's kernels.
void recipes_markdown(std::string& out, const std::vector<RecipeSpeed>& recipes) {
  std::vector<std::vector<std::string>> rows;
  for (const RecipeSpeed& r : recipes) {
    const SpeedBreakdown& b = r.breakdown_ms;
    rows.push_back({r.recipe, std::to_string(r.batch), f2(r.layer_fwd_ms), f2(r.layer_bwd_ms), f2(b.gemm),
                    f2(b.attention), f2(b.quantize), f2(b.nonlinear), f2(r.optimizer_ms + r.weight_cast_ms),
                    f2(r.comm_ms), f2(r.step_ms), fmt::format("{:.0f}", r.tokens_per_s_per_gpu),
                    fmt::format("{:.3f}x", r.speedup_vs_bf16.value()),
                    fmt::format("{:.0f}%", 100 * r.measured_fraction)});
  }
  md_table(out,
           {"recipe", "batch", "layer fwd ms", "layer bwd ms", "GEMM ms/step", "attention ms/step", "quantize ms/step",
            "non-linear ms/step", "optimizer+casts ms", "comm ms", "step ms", "tokens/s/GPU", "speedup vs BF16",
            "time from exact-shape measurements"},
           rows);

  for (const RecipeSpeed& r : recipes) {
    out += fmt::format("### Kernels of one layer and one step: {} (batch {})\n\n", r.recipe, r.batch);
    std::vector<std::vector<std::string>> kr;
    for (const SpeedOp& op : r.ops.value())
      kr.push_back({op.name, op.phase, op.kind, op.variant, dims_text(op.dims), f3(op.ms),
                    fmt::format("{:g}", op.count),
                    op.tflops ? fmt::format("{:.0f} TFLOP/s", *op.tflops) : fmt::format("{:.0f} GB/s", op.gbps.value()),
                    op.source});
    md_table(out, {"op", "phase", "kernel", "variant", "dims", "ms", "count/step", "achieved", "source"}, kr);
  }
}

void fig4b_markdown(std::string& out, const std::vector<Fig4bRow>& fig4b) {
  out += "### Figure 4(b): per-tensor max, just-in-time vs Group Scaling\n\n";
  std::vector<std::vector<std::string>> fr;
  for (const Fig4bRow& r : fig4b)
    fr.push_back({fmt::format("{}x{}", r.rows, r.cols), f3(r.jit_amax_ms), fmt::format("{:.0f}", r.jit_amax_gbps),
                  f3(r.group_stage1_overhead_ms), f3(r.group_stage2_ms), f3(r.group_scaling_ms),
                  fmt::format("{:.1f}x", r.speedup), num_or_dash(r.torch_eager_amax_ms, "{:.3f}"),
                  fmt::format("{:.2f} -> {:.2f}", r.paper_h100_jit_ms, r.paper_h100_group_ms), r.source});
  md_table(out,
           {"tensor", "JIT amax ms", "JIT GB/s", "group stage 1 extra ms", "group stage 2 ms", "group total ms",
            "JIT / group", "torch eager amax ms", "paper H100 JIT -> group ms", "source"},
           fr);
}

void validation_markdown(std::string& out, const SpeedValidation& v) {
  out += "### Validation: fp8sim's BF16 layer vs a real PyTorch BF16 Llama layer (forward + backward)\n\n";
  std::vector<std::vector<std::string>> vr;
  for (const SpeedValidationRow& r : v.rows)
    vr.push_back({fmt::format("{} b{} s{}", r.model, r.batch, r.seq), f3(r.torch_layer_ms), f3(r.fp8sim_bf16_layer_ms),
                  fmt::format("{:+.1f}%", 100 * r.difference), r.within_15_percent ? "yes" : "NO",
                  num_or_dash(r.torch_gemm_ms, "{:.3f}"), f3(r.fp8sim_gemm_ms), num_or_dash(r.torch_sdpa_ms, "{:.3f}"),
                  f3(r.fp8sim_other_ms)});
  md_table(out,
           {"config", "PyTorch layer ms", "fp8sim BF16 layer ms", "difference", "within 15%", "PyTorch GEMMs ms",
            "fp8sim GEMMs ms", "SDPA fwd+bwd ms", "fp8sim other ms"},
           vr);
}

}  // namespace

std::vector<std::vector<std::string>> table7_cells(const std::vector<Table7Row>& table7, const std::string& sep,
                                                   bool long_labels) {
  std::vector<std::vector<std::string>> rows;
  for (const Table7Row& r : table7) {
    std::string batches, pred, paper;
    for (const Table7Method& m : r.methods) {
      if (!batches.empty()) {
        batches += sep;
        pred += sep;
        paper += sep;
      }
      batches += m.batch ? std::to_string(m.batch) : std::string("OOM");
      pred += num_or_dash(m.tokens_per_s_per_gpu, "{:.0f}");
      paper += num_or_dash(m.paper_tokens_per_s_per_gpu, "{:.0f}");
    }
    const std::string label = long_labels ? fmt::format("{}, {} GPU, seq {}", r.model, r.gpus, r.seq)
                                          : fmt::format("{} {}GPU s{}", r.model, r.gpus, r.seq);
    rows.push_back({label, batches, pred, paper, num_or_dash(r.te_vs_bf16, "{:.2f}x"),
                    num_or_dash(r.paper_te_vs_bf16, "{:.2f}x"), num_or_dash(r.coat_vs_bf16, "{:.2f}x"),
                    num_or_dash(r.paper_coat_vs_bf16, "{:.2f}x"), num_or_dash(r.coat_vs_bf16_same_batch, "{:.2f}x")});
  }
  return rows;
}

std::string speed_markdown(const SpeedResult& res) {
  std::string out;
  out += fmt::format("## Step time: {} ({} layers), seq {}, {} GPU(s), grad-accum {}\n\n", res.model.name,
                     res.model.layers, res.seq, res.gpus, res.grad_accum);
  out += "**" + res.timing.statement + ".**\n\n";
  if (res.timing.comm_model) out += *res.timing.comm_model + ".\n\n";
  recipes_markdown(out, res.recipes);
  if (res.fig4b) fig4b_markdown(out, *res.fig4b);
  if (res.table7) {
    out += "### COAT Table 7 rows: predicted throughput beside the paper's (H100, FSDP)\n\n";
    const std::vector<std::vector<std::string>> tr = table7_cells(*res.table7, " / ", true);
    md_table(out,
             {"row", "batch BF16 / TE / COAT", "predicted tok/s/GPU", "paper tok/s/GPU", "TE/BF16", "paper TE/BF16",
              "COAT/BF16", "paper COAT/BF16", "COAT/BF16 same batch"},
             tr);
  }
  if (res.validation) validation_markdown(out, *res.validation);
  if (!res.notes.empty()) {
    out += "### Notes: where the replay differs from the reference implementations\n\n";
    for (const std::string& s : res.notes) out += "- " + s + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace fp8sim::speed
