#include "sim/trace/synth.hpp"
#include "sim/common/mix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/model/model.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::trace {

namespace {

using model::ActKind;
using model::ModelConfig;
using model::NormKind;

constexpr int64_t kStep = 100;  // the step the trace holds (AdamW's count before it: 99)
constexpr int64_t kMaxTokens = int64_t{1} << 24;
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 40;

enum class Dist {
  LinearWeight,  // a: 1/sqrt(in)
  NormWeight,
  Embedding,
  Grad,
  ExpAvg,
  ExpAvgSq,
  Residual,  // the residual stream and the branches added to it
  LinearIn,  // a norm's output or the attention output
  SiluIn,    // the gate projection's output
  SiluOut,   // silu(N(0, 1))
  Normal,    // N(0, 1)
  DownIn,    // silu(N) x N
  OutputGrad,
};

struct Item {
  TensorInfo meta;
  Dist dist;
  double a = 0;
};

uint64_t name_key(const std::string& s, uint64_t seed) {  // FNV-1a, then mixed with the seed
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return splitmix64_mix(h ^ splitmix64_mix(seed));
}
// The i-th pair of standard normals of a stream (Box-Muller on two 32-bit uniforms).
void normals(uint64_t key, uint64_t i, double& z0, double& z1) {
  const uint64_t r = splitmix64_mix(key + 0x9e3779b97f4a7c15ull * (i + 1));
  const double u1 = (static_cast<double>(r >> 32) + 0.5) * 0x1p-32;
  const double u2 = (static_cast<double>(r & 0xffffffffu) + 0.5) * 0x1p-32;
  const double m = std::sqrt(-2.0 * std::log(u1));
  z0 = m * std::cos(6.283185307179586 * u2);
  z1 = m * std::sin(6.283185307179586 * u2);
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }

// Element i of a tensor with `cols` columns.
float value(const Item& it, uint64_t key, int64_t i, int64_t cols) {
  double z, w;
  normals(key, static_cast<uint64_t>(i), z, w);
  const int64_t col = i % cols, row = i / cols;
  auto outlier = [&](double factor) {
    return splitmix64_mix(key ^ static_cast<uint64_t>(col)) % 256 == 0 ? factor : 1.0;
  };
  switch (it.dist) {
    case Dist::LinearWeight: {
      double r, unused;
      normals(key ^ 0x5555, static_cast<uint64_t>(row), r, unused);
      return static_cast<float>(z * it.a * std::exp(0.25 * r));
    }
    case Dist::NormWeight:
      return static_cast<float>(1.0 + 0.05 * z);
    case Dist::Embedding:
      return static_cast<float>(0.02 * z);
    case Dist::Grad:
      return static_cast<float>(1e-4 * z * std::exp(w));
    case Dist::ExpAvg:
      return static_cast<float>(3e-5 * z * std::exp(w));
    case Dist::ExpAvgSq:
      return static_cast<float>(1e-8 * std::exp(2.0 * z));
    case Dist::Residual:
      return static_cast<float>(z * outlier(20.0));
    case Dist::LinearIn:
      return static_cast<float>(z * outlier(8.0));
    case Dist::SiluIn:
      return static_cast<float>(-0.5 + 1.5 * z);
    case Dist::SiluOut:
      return static_cast<float>(silu(z));
    case Dist::Normal:
      return static_cast<float>(z);
    case Dist::DownIn:
      return static_cast<float>(silu(z) * w);
    case Dist::OutputGrad:
      return static_cast<float>(1e-5 * z * std::exp(w));
  }
  return 0.0f;
}

std::vector<Item> plan_items(const ModelConfig& m, int64_t layers, int64_t tokens) {
  std::vector<Item> items;
  const int64_t H = m.hidden, I = m.ffn, Q = m.q_dim(), KV = m.kv_dim(), V = m.vocab;
  auto param = [&](const std::string& name, const std::string& module, const char* op, int layer,
                   std::vector<int64_t> shape, Dist d, double a = 0) {
    const Role roles[] = {Role::Weight, Role::Grad, Role::ExpAvg, Role::ExpAvgSq};
    const Dist dists[] = {d, Dist::Grad, Dist::ExpAvg, Dist::ExpAvgSq};
    for (int k = 0; k < 4; ++k) {
      Item it;
      it.meta.name = name;
      it.meta.param = name;
      it.meta.role = roles[k];
      it.meta.op = op;
      it.meta.module = module;
      it.meta.layer = layer;
      it.meta.shape = shape;
      it.meta.dtype = DType::F32;
      if (name == "embed_tokens.weight" && m.tied_embeddings) it.meta.aliases = {"lm_head.weight"};
      it.dist = dists[k];
      it.a = a;
      items.push_back(std::move(it));
    }
  };
  auto act = [&](const std::string& module, const std::string& what, const char* op, int layer, int64_t width, Dist d,
                 std::vector<std::string> consumers = {}, Role role = Role::Activation) {
    Item it;
    it.meta.name = module + "." + what;
    it.meta.role = role;
    it.meta.op = op;
    it.meta.module = module;
    it.meta.layer = layer;
    it.meta.modules = std::move(consumers);
    it.meta.shape = {1, tokens, width};
    it.meta.dtype = DType::BF16;
    it.dist = d;
    items.push_back(std::move(it));
  };
  param("embed_tokens.weight", "embed_tokens", "embedding", -1, {V, H}, Dist::Embedding);
  for (int l = 0; l < static_cast<int>(layers); ++l) {
    const std::string p = fmt::format("layers.{}.", l), at = p + "self_attn.", mlp = p + "mlp.";
    param(p + "input_layernorm.weight", p + "input_layernorm", "norm", l, {H}, Dist::NormWeight);
    param(at + "q_proj.weight", at + "q_proj", "linear", l, {Q, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
    param(at + "k_proj.weight", at + "k_proj", "linear", l, {KV, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
    param(at + "v_proj.weight", at + "v_proj", "linear", l, {KV, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
    param(at + "o_proj.weight", at + "o_proj", "linear", l, {H, Q}, Dist::LinearWeight, 1.0 / std::sqrt(Q));
    param(p + "post_attention_layernorm.weight", p + "post_attention_layernorm", "norm", l, {H}, Dist::NormWeight);
    param(mlp + "gate_proj.weight", mlp + "gate_proj", "linear", l, {I, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
    param(mlp + "up_proj.weight", mlp + "up_proj", "linear", l, {I, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
    param(mlp + "down_proj.weight", mlp + "down_proj", "linear", l, {H, I}, Dist::LinearWeight, 1.0 / std::sqrt(I));

    act(p + "input_layernorm", "input", "norm_input", l, H, Dist::Residual);
    act(at + "q_proj", "input", "linear_input", l, H, Dist::LinearIn, {at + "q_proj", at + "k_proj", at + "v_proj"});
    act(at + "o_proj", "input", "attn_output", l, Q, Dist::LinearIn, {at + "o_proj"});
    act(p + "attn_residual", "branch", "residual_add", l, H, Dist::Residual);
    act(p + "post_attention_layernorm", "input", "norm_input", l, H, Dist::Residual);
    act(mlp + "gate_proj", "input", "linear_input", l, H, Dist::LinearIn, {mlp + "gate_proj", mlp + "up_proj"});
    act(mlp + "act_fn", "input", "silu_input", l, I, Dist::SiluIn);
    act(mlp + "mul", "input0", "mul_input", l, I, Dist::SiluOut);
    act(mlp + "mul", "input1", "mul_input", l, I, Dist::Normal);
    act(mlp + "down_proj", "input", "linear_input", l, I, Dist::DownIn, {mlp + "down_proj"});
    act(p + "mlp_residual", "branch", "residual_add", l, H, Dist::Residual);
    for (const auto& [mod, width] : std::vector<std::pair<std::string, int64_t>>{{at + "q_proj", Q},
                                                                                 {at + "k_proj", KV},
                                                                                 {at + "v_proj", KV},
                                                                                 {at + "o_proj", H},
                                                                                 {mlp + "gate_proj", I},
                                                                                 {mlp + "up_proj", I},
                                                                                 {mlp + "down_proj", H}})
      act(mod, "output_grad", "linear_output_grad", l, width, Dist::OutputGrad, {}, Role::ActivationGrad);
  }
  param("norm.weight", "norm", "norm", -1, {H}, Dist::NormWeight);
  if (!m.tied_embeddings)
    param("lm_head.weight", "lm_head", "linear", -1, {V, H}, Dist::LinearWeight, 1.0 / std::sqrt(H));
  act("norm", "input", "norm_input", -1, H, Dist::Residual);
  act("lm_head", "input", "linear_input", -1, H, Dist::LinearIn, {"lm_head"});
  act("lm_head", "output_grad", "linear_output_grad", -1, V, Dist::OutputGrad, {}, Role::ActivationGrad);
  for (Item& it : items) it.meta.step = kStep;
  return items;
}

constexpr int64_t kMaxWindow = 1000;

// The grads of window step kStep + s (s >= 1): every parameter's, drawn afresh.
std::vector<Item> window_items(const std::vector<Item>& items, int64_t s) {
  std::vector<Item> out;
  for (const Item& it : items)
    if (it.meta.role == Role::Grad) {
      Item g = it;
      g.meta.step = kStep + s;
      out.push_back(std::move(g));
    }
  return out;
}

ModelConfig checked_model(const SynthOptions& o, int64_t& layers) {
  if (o.tokens <= 0 || o.tokens > kMaxTokens)
    throw UsageError(fmt::format("--tokens must be 1..{}, got {}", kMaxTokens, o.tokens));
  if (o.seed >= (uint64_t{1} << 53)) throw UsageError(fmt::format("--seed must be below 2^53, got {}", o.seed));
  if (o.layers < 0) throw UsageError(fmt::format("--layers must be >= 0, got {}", o.layers));
  if (o.window < 0 || o.window > kMaxWindow)
    throw UsageError(fmt::format("--window must be 0..{} steps, got {}", kMaxWindow, o.window));
  if (o.deflate_level < 0 || o.deflate_level > 9)
    throw UsageError(fmt::format("--deflate must be 0..9, got {}", o.deflate_level));
  const ModelConfig m = model::load_model(o.model);
  if (m.norm != NormKind::RMSNorm || m.act != ActKind::SwiGLU)
    throw UsageError(fmt::format("synthetic traces follow the Llama family (RMSNorm, SwiGLU); '{}' has {} and {}",
                                 m.name, model::norm_kind_name(m.norm), model::act_kind_name(m.act)));
  layers = o.layers == 0 ? m.layers : o.layers;
  if (layers > m.layers)
    throw UsageError(fmt::format("--layers {} exceeds the {} layers of {}", layers, m.layers, m.name));
  // The largest tensors: the embedding (vocab x hidden) and the widest activation (tokens x width).
  const uint64_t widest = static_cast<uint64_t>(std::max({m.hidden, m.ffn, m.q_dim(), m.vocab}));
  if (static_cast<uint64_t>(m.vocab) * static_cast<uint64_t>(m.hidden) > kMaxTensorElements ||
      static_cast<uint64_t>(o.tokens) * widest > kMaxTensorElements)
    throw UsageError(fmt::format("a tensor of {} at {} tokens would exceed 2^40 elements", m.name, o.tokens));
  return m;
}

}  // namespace

SynthSummary synth_plan(const SynthOptions& opts) {
  int64_t layers = 0;
  const ModelConfig m = checked_model(opts, layers);
  SynthSummary s;
  const std::vector<Item> items = plan_items(m, layers, opts.tokens);
  for (int64_t w = 0; w < std::max<int64_t>(opts.window, 1); ++w)
    for (const Item& it : w == 0 ? items : window_items(items, w)) {
      ++s.tensors;
      s.bytes += it.meta.bytes();
    }
  return s;
}

SynthSummary write_synthetic_trace(const SynthOptions& opts) {
  int64_t layers = 0;
  const ModelConfig m = checked_model(opts, layers);
  const std::vector<Item> items = plan_items(m, layers, opts.tokens);

  TraceHeader h;
  h.producer = "fp8sim synth";
  h.command = opts.command;
  h.model_kind = "llama";
  if (!m.origin.empty()) h.model_config = Json::parse(read_text_file(m.origin));
  if (h.model_config.is_object()) h.model_config["num_hidden_layers"] = layers;
  h.optimizer.name = "torch.optim.AdamW";
  h.optimizer.lr = 3e-4;
  h.optimizer.beta1 = 0.9;
  h.optimizer.beta2 = 0.95;
  h.optimizer.eps = 1e-8;
  h.optimizer.weight_decay = 0.1;
  Json training = Json::object();
  training["synthetic"] = true;
  training["seed"] = static_cast<int64_t>(opts.seed);
  training["activation_tokens"] = opts.tokens;
  h.training = training;
  if (opts.window > 0) h.grad_window = std::make_pair(kStep, kStep + opts.window - 1);
  {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    h.created = buf;
  }
  WriterOptions wo;
  wo.deflate_level = opts.deflate_level;
  TraceWriter w(opts.out, h, wo);
  StepInfo si;
  si.step = kStep;
  si.contents = "full";
  si.lr = 3e-4;
  si.adamw_step = kStep - 1;
  w.set_step(si);

  const uint64_t total = synth_plan(opts).bytes;
  SynthSummary s;
  Progress progress("synth", static_cast<double>(total));
  uint64_t done = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  for (int64_t wstep = 0; wstep < std::max<int64_t>(opts.window, 1); ++wstep) {
    if (wstep > 0) {
      StepInfo ws;
      ws.step = kStep + wstep;
      ws.contents = "window";
      ws.lr = 3e-4;
      ws.adamw_step = kStep - 1 + wstep;
      w.set_step(ws);
    }
    // The full step's keys are role/name; a window step's grads add the step.
    const std::string prefix = wstep == 0 ? "" : fmt::format("step{}:", kStep + wstep);
    for (const Item& it : wstep == 0 ? items : window_items(items, wstep)) {
      const uint64_t key = name_key(prefix + std::string(role_name(it.meta.role)) + "/" + it.meta.name, opts.seed);
      const int64_t n = it.meta.numel(), cols = it.meta.cols();
      const bool bf16 = it.meta.dtype == DType::BF16;
      if (bf16) bits.resize(static_cast<size_t>(n));
      else f32.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const float v = value(it, key, i, cols);
        if (bf16) bits[static_cast<size_t>(i)] = f32_to_bf16_rne(v);
        else f32[static_cast<size_t>(i)] = v;
      }
      w.write(it.meta, bf16 ? static_cast<const void*>(bits.data()) : static_cast<const void*>(f32.data()));
      ++s.tensors;
      s.bytes += it.meta.bytes();
      done += it.meta.bytes();
      progress.update(static_cast<double>(done));
    }
  }
  progress.finish();
  w.commit();
  return s;
}

}  // namespace fp8sim::trace
