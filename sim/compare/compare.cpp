#include "sim/compare/compare.hpp"
#include "sim/common/paths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/gemm_ref.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/gemm/tc_model.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::compare {

namespace {

using trace::Role;
using trace::TensorInfo;

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

Json shape_json(const std::vector<int64_t>& s) {
  Json a = Json::array();
  for (auto d : s) a.push_back(d);
  return a;
}

using Entries = std::vector<CompareEntry>;

bool wanted(const CompareOptions& o, const std::string& op) {
  return o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
}

template <class T>
int64_t count_diff(const std::vector<T>& a, const std::vector<T>& b, int64_t* first = nullptr) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      if (d == 0 && first) *first = static_cast<int64_t>(i);
      ++d;
    }
  }
  return d;
}

uint64_t max_ulp(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return UINT64_MAX;
  uint64_t m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, ulp_distance(a[i], b[i]));
  return m;
}

// Codes, scales, k, c and the dequantized values of two quantizations of the same tensor (the
// entry's other members are the caller's).
QuantizeEntry compare_quantized(gpu::Backend& gpu, const QuantizedTensor& cq, const QuantizedTensor& gq) {
  QuantizeEntry e;
  e.elements = cq.numel();
  int64_t first = -1;
  e.differing_codes = count_diff(cq.codes, gq.codes, &first);
  if (first >= 0)
    e.first_difference = FirstDifference{.index = first / cq.spec.code_bytes_per_element(),
                                         .cpu = static_cast<int>(cq.codes[static_cast<size_t>(first)]),
                                         .gpu = static_cast<int>(gq.codes[static_cast<size_t>(first)])};
  e.groups = cq.num_groups();
  e.differing_scales = count_diff(cq.scales, gq.scales);
  if (f32_bits(cq.tensor_scale) != f32_bits(gq.tensor_scale)) ++e.differing_scales;  // NVFP4's per-tensor scale
  e.differing_k = count_diff(cq.expand_k, gq.expand_k);
  e.differing_c = count_diff(cq.expand_c, gq.expand_c);
  const std::vector<float> deq_cpu = dequantize(cq);
  const std::vector<float> deq_gpu = gpu.dequantize(gq);
  const std::vector<float> deq_gpu_of_cpu = gpu.dequantize(cq);  // the dequantize kernel alone
  e.max_ulp_dequantized = max_ulp(deq_cpu, deq_gpu);
  e.max_ulp_dequantize_kernel = max_ulp(deq_cpu, deq_gpu_of_cpu);
  e.passed = e.differing_codes == 0 && e.differing_scales == 0 && e.differing_k == 0 && e.differing_c == 0 &&
             e.max_ulp_dequantized == 0 && e.max_ulp_dequantize_kernel == 0;
  return e;
}

// ---- the op families ----------------------------------------------------------------------------------
// A tensor widened to fp32 in a std::vector (the comparisons' containers).
std::vector<float> widened_vector(const trace::TensorData& d) {
  std::vector<float> v(d.size());
  d.widen(v.data());
  return v;
}
std::vector<float> read_vector(const trace::TraceReader& r, const TensorInfo& t) { return widened_vector(r.read(t)); }

struct TensorRef {
  const TensorInfo* info;
  trace::TensorData data;
  std::vector<float> f32;  // widened
};

void run_casts(gpu::Backend& gpu, const TensorRef& t, Entries& ops) {
  struct CastCase {
    const char* name;
    Format f;
    Saturation s;
    Rounding r;
    bool bf16_input;
  };
  static const CastCase cases[] = {
      {"e4m3 rne sat", Format::E4M3, Saturation::Finite, Rounding::Nearest, false},
      {"e4m3 rne nosat", Format::E4M3, Saturation::None, Rounding::Nearest, false},
      {"e5m2 rne sat", Format::E5M2, Saturation::Finite, Rounding::Nearest, false},
      {"e4m3 stochastic", Format::E4M3, Saturation::Finite, Rounding::Stochastic, false},
      {"e5m2 stochastic", Format::E5M2, Saturation::Finite, Rounding::Stochastic, false},
      {"e4m3 rne sat (bf16 input)", Format::E4M3, Saturation::Finite, Rounding::Nearest, true},
      {"e2m1 rne", Format::E2M1, Saturation::Finite, Rounding::Nearest, false},
      {"e2m3 rne (bf16 input)", Format::E2M3, Saturation::Finite, Rounding::Nearest, true},
      {"e3m2 rne", Format::E3M2, Saturation::Finite, Rounding::Nearest, false},
      {"e2m1 stochastic", Format::E2M1, Saturation::Finite, Rounding::Stochastic, false},
  };
  const size_t n = t.f32.size();
  std::vector<uint16_t> b16;
  for (const auto& cc : cases) {
    CastOptions o;
    o.format = cc.f;
    o.saturation = cc.s;
    o.rounding = cc.r;
    o.seed = 0xC0FFEEull;
    std::vector<uint8_t> ref(n), got(n);
    if (cc.bf16_input) {
      if (t.info->dtype == trace::DType::BF16) b16.assign(t.data.bits.begin(), t.data.bits.end());
      else if (b16.empty()) {
        b16.resize(n);
        for (size_t i = 0; i < n; ++i) b16[i] = f32_to_bf16_rne(t.f32[i]);
      }
      cast_bf16_to_fp8(b16.data(), ref.data(), n, o);
      gpu.cast_bf16(b16.data(), n, o, got.data());
    } else {
      cast_f32_to_fp8(t.f32.data(), ref.data(), n, o);
      gpu.cast_f32(t.f32.data(), n, o, got.data());
    }
    CastEntry e;
    e.spec = cc.name;
    e.tensor = t.info->name;
    e.role = std::string(trace::role_name(t.info->role));
    e.shape = t.info->shape;
    e.elements = static_cast<int64_t>(n);
    int64_t first = -1;
    e.differing_codes = count_diff(ref, got, &first);
    if (first >= 0) {
      const auto i = static_cast<size_t>(first);
      e.first_difference = FirstDifference{.index = first,
                                           .input_bits = fmt::format("0x{:08X}", f32_bits(t.f32[i])),
                                           .cpu = static_cast<int>(ref[i]),
                                           .gpu = static_cast<int>(got[i])};
    }
    e.passed = e.differing_codes == 0;
    ops.push_back(std::move(e));
  }
}

std::vector<std::string> specs_for(Role r) {
  switch (r) {
    case Role::Weight:
      return {// NOT-RECIPES: quantizer specs and spec aliases, not training recipes.
              "e4m3:tensor:eps=1e-10",
              "e4m3:tensor:scale=pow2",
              "e4m3:b128x128",
              "e4m3:b128x128:scale=pow2",
              "e4m3:col",
              "e4m3:row:sat=none",
              "bf16:tensor",
              "deepseek-w",
              "te-current",
              "coat-w",
              "nvfp4-w",
              "mxfp4",
              "mxfp6-e2m3"};
    case Role::Activation:
      return {// NOT-RECIPES: quantizer specs and spec aliases, not training recipes.
              "e4m3:g16:scale=bf16:eps=1e-10",
              "e4m3:g128",
              "mxfp8",
              "e4m3:tensor",
              "e4m3:row",
              "e4m3:g16:round=stochastic:seed=7",
              "e4m3:g100",
              "e4m3:b16x48",
              "e4m3:tensor:sat=none",
              "coat-act",
              "deepseek-act",
              "deepseek-act-ue8m0",
              "torchao-mxfp8",
              "nvfp4",
              "nvfp4:rht=16",
              "mxfp4",
              "mxfp6-e3m2",
              "e4m3:g128:rht=16"};
    case Role::Grad:
    case Role::ActivationGrad:
      return {"e5m2:tensor",
              "e5m2:g128",
              "e5m2:g32:scale=e8m0",
              "e5m2:tensor:round=stochastic:seed=3",
              "e5m2:row:scale=pow2",
              "nvfp4:round=stochastic:seed=11",
              "nvfp4:rht=16:round=stochastic:seed=13"};
    case Role::ExpAvg:
    case Role::ExpAvgSq:
      return {"e4m3:g128:de=coat",
              "coat-opt",
              "e4m3:g128:de=robust",
              "e5m2:g128:de=coat",
              "e4m3:g128:eps=1e-20:eps_add=fp64",
              "e4m3:g128:de=coat:round=stochastic:seed=5",
              "e4m3:g100:de=robust",
              "e4m3:row:de=coat",
              "e4m3:tensor:de=robust",
              "fp16:tensor",
              "e2m1:g128:de=coat",
              "e3m2:g128:de=coat"};
  }
  return {};
}

// A per-tensor FP8 spec also runs through the cast-transpose kernel: the codes that differ from the
// CPU's, in its row-major output and in its transposed one against the transpose of the CPU's codes
// (nullopt for other specs). With delayed scaling it quantizes with a copy of the GPU's scaler as it
// stands before this tensor, so the scaler itself walks the sequence once (call it first).
std::optional<int64_t> transposed_differences(gpu::Backend& gpu, const void* x, InputDtype dt,
                                              const std::vector<int64_t>& shape, const QuantSpec& spec,
                                              QuantizeOptions qo, const QuantizedTensor& cq) {
  if (!spec.fp8_per_tensor()) return std::nullopt;
  std::optional<DelayedScaler> copy;
  if (qo.delayed) qo.delayed = &copy.emplace(*qo.delayed);
  std::vector<uint8_t> ct;
  const QuantizedTensor gt = gpu.quantize_transposed(x, dt, shape, spec, qo, ct);
  const std::vector<uint8_t> want = transpose_codes(cq.codes, shape.empty() ? 1 : shape.back());
  return count_diff(cq.codes, gt.codes) + count_diff(want, ct);
}

void run_quantize(gpu::Backend& gpu, const TensorRef& t, Entries& ops) {
  const bool state = t.info->role == Role::ExpAvg || t.info->role == Role::ExpAvgSq;
  for (const auto& text : specs_for(t.info->role)) {
    const QuantSpec spec = QuantSpec::parse(text);
    // Optimizer states are quantized flattened (groups along the whole parameter), except the
    // specs that name rows/blocks of the stored shape.
    std::vector<int64_t> shape = t.info->shape;
    if (state && spec.granularity == Granularity::Group) shape = {t.info->numel()};
    const bool b16 = t.info->dtype == trace::DType::BF16;
    const void* x = b16 ? static_cast<const void*>(t.data.bits.data()) : static_cast<const void*>(t.f32.data());
    const InputDtype dt = b16 ? InputDtype::BF16 : InputDtype::F32;
    QuantizeOptions qo;
    qo.index_offset = 0;
    const QuantizedTensor cq = quantize_any(x, dt, shape, spec, qo);
    const std::optional<int64_t> differing_t = transposed_differences(gpu, x, dt, shape, spec, qo, cq);
    const QuantizedTensor gq = gpu.quantize(x, dt, shape, spec, qo);
    QuantizeEntry e = compare_quantized(gpu, cq, gq);
    e.differing_transposed_codes = differing_t;
    e.passed = e.passed && differing_t.value_or(0) == 0;
    e.spec = spec.to_string();
    e.tensor = t.info->name;
    e.role = std::string(trace::role_name(t.info->role));
    e.shape = shape;
    ops.push_back(std::move(e));
  }
}

// Delayed scaling is stateful: the same scaler walks a sequence of tensors on each side.
void run_delayed(gpu::Backend& gpu, const std::vector<TensorRef>& seq, Entries& ops) {
  for (const char* text : {"e4m3:tensor:delayed=4,max", "e4m3:tensor:delayed=3,recent,margin=1"}) {
    const QuantSpec spec = QuantSpec::parse(text);
    DelayedScaler cpu_s(spec), gpu_s(spec);
    for (const auto& t : seq) {
      QuantizeOptions qc, qg;
      qc.delayed = &cpu_s;
      qg.delayed = &gpu_s;
      const QuantizedTensor cq = quantize_any(t.f32.data(), InputDtype::F32, t.info->shape, spec, qc);
      const std::optional<int64_t> differing_t =
          transposed_differences(gpu, t.f32.data(), InputDtype::F32, t.info->shape, spec, qg, cq);
      const QuantizedTensor gq = gpu.quantize(t.f32.data(), InputDtype::F32, t.info->shape, spec, qg);
      QuantizeEntry e = compare_quantized(gpu, cq, gq);
      e.differing_transposed_codes = differing_t;
      const bool same_state = f32_bits(cpu_s.scale()) == f32_bits(gpu_s.scale());
      e.spec = spec.to_string();
      e.tensor = t.info->name;
      e.role = std::string(trace::role_name(t.info->role));
      e.shape = t.info->shape;
      e.scaler_state_equal = same_state;
      e.passed = e.passed && same_state && differing_t.value_or(0) == 0;
      ops.push_back(std::move(e));
    }
  }
}

MomentComparison compare_moment(const optim::MomentState& a, const optim::MomentState& b) {
  if (a.spec.is_fp32()) return {.fp32 = true, .differing_values = count_diff(a.fp32, b.fp32)};
  return {.differing_codes = count_diff(a.q.codes, b.q.codes),
          .differing_scales = count_diff(a.q.scales, b.q.scales),
          .differing_k = count_diff(a.q.expand_k, b.q.expand_k),
          .differing_c = count_diff(a.q.expand_c, b.q.expand_c)};
}

bool identical(const MomentComparison& c) {
  return c.differing_values == 0 && c.differing_codes == 0 && c.differing_scales == 0 && c.differing_k == 0 &&
         c.differing_c == 0;
}

void run_adamw(gpu::Backend& gpu, const trace::TraceReader& r, int64_t step, Entries& ops, int max_tensors) {
  const trace::StepInfo* si = r.find_step(step);
  const auto& hdr = r.header();
  optim::AdamwHyper h;
  h.lr = si && si->lr ? *si->lr : hdr.optimizer.lr.value_or(1e-3);
  h.beta1 = hdr.optimizer.beta1.value_or(0.9);
  h.beta2 = hdr.optimizer.beta2.value_or(0.999);
  h.eps = hdr.optimizer.eps.value_or(1e-8);
  h.weight_decay = hdr.optimizer.weight_decay.value_or(0.01);
  const int64_t t_after = (si && si->adamw_step ? *si->adamw_step : 0) + 1;
  struct RecipeCase {
    std::string recipe;
    optim::UpdateRule rule;
    bool fused;
  };
  // NOT-RECIPES: optimizer-state presets (sim/optim/state_recipe.hpp), not training recipes.
  std::vector<RecipeCase> cases = {
      {"fp32", optim::UpdateRule::Torch, false},         {"bf16", optim::UpdateRule::Coat, false},
      {"coat", optim::UpdateRule::Coat, true},           {"coat", optim::UpdateRule::Coat, false},
      {"coat", optim::UpdateRule::Torch, true},          {"coat-noexpand", optim::UpdateRule::Coat, false},
      {"te-fp8", optim::UpdateRule::Coat, false},        {"fp8lm", optim::UpdateRule::Coat, false},
      {"coat+stochastic", optim::UpdateRule::Coat, true}};
  int done = 0;
  uint64_t param_index = 0;
  for (const TensorInfo* w : r.select(trace::Filter{.step = step, .role = Role::Weight})) {
    const TensorInfo* g = r.find(step, Role::Grad, w->name);
    const TensorInfo* m = r.find(step, Role::ExpAvg, w->name);
    const TensorInfo* v = r.find(step, Role::ExpAvgSq, w->name);
    if (!g || !m || !v) continue;
    if (max_tensors > 0 && done >= max_tensors) break;
    ++done;
    const std::vector<float> p0 = read_vector(r, *w), g0 = read_vector(r, *g), m0 = read_vector(r, *m),
                             v0 = read_vector(r, *v);
    const int64_t n = static_cast<int64_t>(p0.size());
    for (const auto& rc : cases) {
      optim::StateRecipe recipe = rc.recipe == "coat+stochastic"
                                      ? optim::StateRecipe::parse("coat").with_rounding(Rounding::Stochastic, 1234)
                                      : optim::StateRecipe::parse(rc.recipe);
      const optim::AdamwStepConsts consts = optim::make_step_consts(h, t_after, rc.rule);
      std::vector<float> pc = p0, pg = p0;
      AdamwEntry e;
      e.recipe = rc.recipe;
      e.rule = std::string(optim::update_rule_name(rc.rule));
      e.kernel = recipe.is_fp32()                            ? "fp32 elementwise"
                 : rc.fused                                  ? "fused one-pass"
                 : optim::elementwise_step_supported(recipe) ? "elementwise states"
                                                             : "three phases";
      e.tensor = w->name;
      e.shape = w->shape;
      e.elements = n;
      if (recipe.is_fp32()) {
        std::vector<float> mc = m0, vc = v0, mg = m0, vg = v0;
        optim::adamw_step_fp32(pc.data(), g0.data(), mc.data(), vc.data(), static_cast<size_t>(n), consts);
        gpu.adamw_fp32(pg.data(), g0.data(), mg.data(), vg.data(), static_cast<size_t>(n), consts);
        e.m = {.fp32 = true, .differing_values = count_diff(mc, mg)};
        e.v = {.fp32 = true, .differing_values = count_diff(vc, vg)};
      } else {
        if (rc.fused && !optim::grouped_step_supported(recipe)) continue;
        optim::ParamOptimState sc =
            optim::make_param_state(recipe, m0.data(), v0.data(), n, param_index, static_cast<uint64_t>(t_after - 1));
        optim::ParamOptimState sg = sc;
        optim::LowpScratch scratch;
        optim::lowp_adamw_step(pc.data(), g0.data(), sc, consts, param_index, static_cast<uint64_t>(t_after), scratch);
        gpu.adamw_lowp(pg.data(), g0.data(), sg, consts, param_index, static_cast<uint64_t>(t_after), rc.fused);
        e.m = compare_moment(sc.m, sg.m);
        e.v = compare_moment(sc.v, sg.v);
      }
      e.differing_params = count_diff(pc, pg);
      e.max_ulp_params = max_ulp(pc, pg);
      e.differing_codes = e.m.differing_codes + e.v.differing_codes;
      e.passed = identical(e.m) && identical(e.v) && e.differing_params == 0;
      ops.push_back(std::move(e));
    }
    ++param_index;
  }
}

// Quantized operand of a GEMM on the CPU: codes, scales in the request's layout, and the
// dequantized fp32 values the reference multiplies.
struct Operand {
  QuantizedTensor q;
  std::vector<float> deq;
};
Operand quantize_operand(const std::vector<float>& x, int64_t rows, int64_t cols, const std::string& spec) {
  Operand o;
  const std::vector<int64_t> shape = {rows, cols};
  o.q = quantize(x.data(), shape, QuantSpec::parse(spec));
  o.deq = dequantize(o.q);
  return o;
}

void check_gemm_request(gpu::Backend& gpu, const std::string& layer, const std::string& config,
                        const gpu::GemmRequest& req, const std::vector<float>& xd, const std::vector<float>& wd,
                        Entries& ops);

void run_gemm_case(gpu::Backend& gpu, const std::string& layer, const std::string& config, const std::vector<float>& x,
                   const std::vector<float>& w, int64_t M, int64_t N, int64_t K, Format xf, Format wf, int scaling,
                   bool fast, Entries& ops) {
  gpu::GemmRequest req;
  req.m = M;
  req.n = N;
  req.k = K;
  req.x_format = xf;
  req.w_format = wf;
  req.scaling = scaling;
  req.fast_accum = fast;
  req.no_split_k = true;  // an algorithm the tensor-core model reproduces bit for bit, where one exists
  std::vector<float> xd, wd;
  if (scaling == 0) {  // BF16: the reference multiplies the bf16-rounded values
    req.x_bf16.resize(x.size());
    req.w_bf16.resize(w.size());
    xd.resize(x.size());
    wd.resize(w.size());
    for (size_t i = 0; i < x.size(); ++i) {
      req.x_bf16[i] = f32_to_bf16_rne(x[i]);
      xd[i] = bf16_to_f32(req.x_bf16[i]);
    }
    for (size_t i = 0; i < w.size(); ++i) {
      req.w_bf16[i] = f32_to_bf16_rne(w[i]);
      wd[i] = bf16_to_f32(req.w_bf16[i]);
    }
  } else {
    const std::string xs(format_name(xf)), ws(format_name(wf));
    const std::string xspec = scaling == 1 ? xs + ":tensor" : (scaling == 2 ? xs + ":row" : xs + ":g128");
    const std::string wspec = scaling == 1 ? ws + ":tensor" : (scaling == 2 ? ws + ":row" : ws + ":b128x128");
    Operand ox = quantize_operand(x, M, K, xspec), ow = quantize_operand(w, N, K, wspec);
    req.x_codes = ox.q.codes;
    req.w_codes = ow.q.codes;
    req.x_scales = ox.q.scales;
    req.w_scales = ow.q.scales;
    xd = std::move(ox.deq);
    wd = std::move(ow.deq);
  }
  check_gemm_request(gpu, layer, config, req, xd, wd, ops);
}

// |v| of a GEMM operand (rows x K, dequantized values `v`), each nonzero FP8 element raised to
// 2^emin of its format times its scale; BF16 operands unchanged.
std::vector<float> aligned_magnitudes(const gpu::GemmRequest& r, const std::vector<float>& v, bool is_w) {
  std::vector<float> a(v.size());
  const int64_t K = r.k, rows = is_w ? r.n : r.m, kb = (K + 127) / 128;
  const float* scales = r.scaling == 0 ? nullptr : (is_w ? r.w_scales.data() : r.x_scales.data());
  const Format f = is_w ? r.w_format : r.x_format;
  const std::vector<uint8_t>& codes = is_w ? r.w_codes : r.x_codes;
  const float min_normal = static_cast<float>(format_info(f).min_normal);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const size_t e = static_cast<size_t>(i * K + k);
      a[e] = std::fabs(v[e]);
      if (r.scaling == 0 || (codes[e] & 0x7F) == 0) continue;
      const float s = gemm::tc_operand_scale(scales, r.scaling, is_w, i, k, kb);
      a[e] = std::max(a[e], min_normal * std::fabs(s));
    }
  return a;
}

// Runs a GEMM request on the GPU and checks it against the tensor-core model (bit for bit) and the
// ideal fp32 product of the dequantized operands xd, wd (within the derived tolerance).
void check_gemm_request(gpu::Backend& gpu, const std::string& layer, const std::string& config,
                        const gpu::GemmRequest& req, const std::vector<float>& xd, const std::vector<float>& wd,
                        Entries& ops) {
  const int64_t M = req.m, N = req.n, K = req.k;
  const Format xf = req.x_format, wf = req.w_format;
  const int scaling = req.scaling;
  const bool fast = req.fast_accum;
  std::vector<float> yref(static_cast<size_t>(M * N)), sabs(static_cast<size_t>(M * N));
  gemm::gemm_ref_f32(xd.data(), wd.data(), yref.data(), M, N, K);
  // The tolerance's S = sum |x w| with each nonzero FP8 operand raised to its format's smallest
  // normal magnitude (times its scale): a product of subnormal codes aligns in the tensor core at
  // the smallest normal exponent (gemm_ref.cpp).
  const std::vector<float> xa = aligned_magnitudes(req, xd, false), wa = aligned_magnitudes(req, wd, true);
  gemm::gemm_abs_f32(xa.data(), wa.data(), sabs.data(), M, N, K);
  const gpu::GemmOutcome out = gpu.gemm(req);
  GemmEntry e;
  e.config = config;
  e.tensor = layer;
  e.m = M;
  e.n = N;
  e.k = K;
  e.elements = M * N;
  e.plan = out.plan;
  if (!out.supported) {
    e.status = "unsupported on this device: " + out.status;
    e.passed = true;  // reported, not faked: an unsupported mode is not a mismatch
    ops.push_back(std::move(e));
    return;
  }
  e.supported = true;
  e.padded = out.padded;
  gemm::GemmNumerics num;
  num.x_format = xf;
  num.w_format = wf;
  num.y_format = req.y_bf16 ? Format::BF16 : Format::FP32;
  num.fp8 = scaling != 0;
  num.fast_accum = fast;
  num.block_scaled = scaling >= 3;
  e.tolerance = gemm::gemm_tolerance(K, num);
  e.check = gemm::check_gemm(out.y.data(), yref.data(), sabs.data(), M, N, e.tolerance);
  const Json* algo = out.plan.find("algo");
  const double splitk = algo && algo->contains("splitk") ? algo->at("splitk").as_number() : 1;
  // Padding adds zero products only, which change no step of the model: padded GEMMs compare too.
  if (splitk > 1) {
    e.model_note = fmt::format("not compared: cuBLASLt offered only algorithms that split K ({} pieces) here", splitk);
  } else {
    gemm::TcGemmConfig tc;
    tc.x_format = xf;
    tc.w_format = wf;
    tc.scaling = scaling;
    tc.fast_accum = fast;
    tc.y_format = req.y_bf16 ? Format::BF16 : Format::FP32;
    std::vector<float> ytc(static_cast<size_t>(M * N));
    const auto* xb = scaling == 0 ? reinterpret_cast<const uint8_t*>(req.x_bf16.data()) : req.x_codes.data();
    const auto* wb = scaling == 0 ? reinterpret_cast<const uint8_t*>(req.w_bf16.data()) : req.w_codes.data();
    gemm::tc_gemm(xb, wb, req.x_scales.data(), req.w_scales.data(), ytc.data(), M, N, K, tc);
    e.model_compared = true;
    for (size_t i = 0; i < ytc.size(); ++i) e.model_differing += f32_bits(ytc[i]) != f32_bits(out.y[i]);
  }
  e.differing_codes = e.model_differing;
  e.passed = e.check.passed() && e.model_differing == 0;
  ops.push_back(std::move(e));
}

void run_gemms(gpu::Backend& gpu, const trace::TraceReader& r, int64_t step, Entries& ops, int max_tensors) {
  int done = 0;
  for (const TensorInfo* a : r.select(trace::Filter{.step = step, .role = Role::Activation, .op = "linear_input"})) {
    const std::vector<float> x = read_vector(r, *a);
    const int64_t K = a->cols(), M = a->rows();
    for (const auto& mod : a->modules) {
      if (max_tensors > 0 && done >= max_tensors) return;
      const TensorInfo* w = r.find(step, Role::Weight, mod + ".weight");
      if (!w || w->shape.size() != 2 || w->shape[1] != K) continue;
      ++done;
      const int64_t N = w->shape[0];
      const std::vector<float> wv = read_vector(r, *w);
      run_gemm_case(gpu, mod, "bf16", x, wv, M, N, K, Format::BF16, Format::BF16, 0, false, ops);
      run_gemm_case(gpu, mod, "e4m3 tensor split", x, wv, M, N, K, Format::E4M3, Format::E4M3, 1, false, ops);
      run_gemm_case(gpu, mod, "e4m3 tensor fast", x, wv, M, N, K, Format::E4M3, Format::E4M3, 1, true, ops);
      run_gemm_case(gpu, mod, "e4m3 row split", x, wv, M, N, K, Format::E4M3, Format::E4M3, 2, false, ops);
      run_gemm_case(gpu, mod, "e4m3 block1x128x128x128", x, wv, M, N, K, Format::E4M3, Format::E4M3, 3, false, ops);
      // dgrad: dX (M, K) = dY (M, N) * W (N, K) = dY * (W^T stored (K, N))^T, E5M2 x E4M3.
      if (const TensorInfo* dy = r.find(step, Role::ActivationGrad, mod + ".output_grad");
          dy && dy->cols() == N && dy->rows() == M) {
        const std::vector<float> dyv = read_vector(r, *dy);
        run_gemm_case(gpu, mod + " (dgrad)", "e5m2xe4m3 tensor split", dyv, transpose_rows<float>(wv, K), M, K, N,
                      Format::E5M2, Format::E4M3, 1, false, ops);
      }
    }
  }
}

// The random and adversarial suite of sim/gemm/tc_cases.hpp (tc_gemm_suite), every case with the
// same checks as a trace's layers.
void run_gemm_suite(gpu::Backend& gpu, Entries& ops) {
  const std::vector<gemm::TcGemmCase> suite = gemm::tc_gemm_suite();
  Progress progress("compare --gemm-suite", static_cast<double>(suite.size()));
  for (size_t i = 0; i < suite.size(); ++i) {
    const gemm::TcGemmCase& c = suite[i];
    const gemm::TcGemmOperands o = gemm::make_tc_gemm_operands(c);
    const gpu::GemmRequest req = gemm_suite_request(c, o);
    check_gemm_request(gpu, fmt::format("suite {} K={}", gemm::tc_family_name(c.family), c.k), c.config.describe(), req,
                       o.x_f32, o.w_f32, ops);
    progress.update(static_cast<double>(i + 1));
  }
}

// What summary_rows adds up for an entry.
struct Facts {
  std::string what{};  // spec, config, or recipe (kernel, rule)
  int64_t elements = 0, codes = 0;
  int64_t meta = 0;  // differing scales, k, c, parameters and fp32 moment values
  uint64_t ulp = 0;
  std::optional<double> err_over_tol{};
  bool unsupported = false;
};

Facts facts(const CastEntry& e) { return {.what = e.spec, .elements = e.elements, .codes = e.differing_codes}; }

Facts facts(const QuantizeEntry& e) {
  return {.what = e.spec,
          .elements = e.elements,
          .codes = e.differing_codes + e.differing_transposed_codes.value_or(0),
          .meta = e.differing_scales + e.differing_k + e.differing_c,
          .ulp = std::max(e.max_ulp_dequantized, e.max_ulp_dequantize_kernel)};
}

Facts facts(const AdamwEntry& e) {
  int64_t meta = e.differing_params;
  for (const MomentComparison* c : {&e.m, &e.v})
    meta += c->differing_scales + c->differing_k + c->differing_c + c->differing_values;
  return {.what = fmt::format("{} ({}, {})", e.recipe, e.kernel, e.rule),
          .elements = e.elements,
          .codes = e.differing_codes,
          .meta = meta,
          .ulp = e.max_ulp_params};
}

Facts facts(const GemmEntry& e) {
  Facts f{.what = e.config, .elements = e.elements, .codes = e.differing_codes, .unsupported = !e.supported};
  if (e.supported) f.err_over_tol = e.check.max_err_over_tol;
  return f;
}

CompareSummary summarize(const Entries& ops) {
  CompareSummary s;
  for (const auto& e : ops) {
    OpCount& c = s.ops[entry_op(e)];
    ++c.entries;
    ++s.entries;
    if (!entry_passed(e)) {
      ++c.failed;
      ++s.failed;
    }
  }
  s.passed = s.failed == 0;
  return s;
}

// A moment's members of an AdamW entry, named "<name>_...".
void put_moment(Json& j, const char* name, const MomentComparison& c) {
  if (c.fp32) {
    j[fmt::format("{}_differing_values", name)] = c.differing_values;
    return;
  }
  j[fmt::format("{}_differing_codes", name)] = c.differing_codes;
  j[fmt::format("{}_differing_scales", name)] = c.differing_scales;
  j[fmt::format("{}_differing_k", name)] = c.differing_k;
  j[fmt::format("{}_differing_c", name)] = c.differing_c;
}

}  // namespace

Json FirstDifference::to_json() const {
  Json j = Json::object();
  j["index"] = index;
  if (input_bits) j["input_bits"] = *input_bits;
  j["cpu"] = cpu;
  j["gpu"] = gpu;
  return j;
}

Json CastEntry::to_json() const {
  Json j = Json::object();
  j["op"] = "cast";
  j["spec"] = spec;
  j["tensor"] = tensor;
  j["role"] = role;
  j["shape"] = shape_json(shape);
  j["elements"] = elements;
  j["differing_codes"] = differing_codes;
  if (first_difference) j["first_difference"] = first_difference->to_json();
  j["passed"] = passed;
  return j;
}

Json QuantizeEntry::to_json() const {
  Json j = Json::object();
  j["elements"] = elements;
  j["differing_codes"] = differing_codes;
  if (first_difference) j["first_difference"] = first_difference->to_json();
  j["groups"] = groups;
  j["differing_scales"] = differing_scales;
  j["differing_k"] = differing_k;
  j["differing_c"] = differing_c;
  j["max_ulp_dequantized"] = max_ulp_dequantized;
  j["max_ulp_dequantize_kernel"] = max_ulp_dequantize_kernel;
  j["passed"] = passed;
  j["op"] = "quantize";
  j["spec"] = spec;
  j["tensor"] = tensor;
  j["role"] = role;
  j["shape"] = shape_json(shape);
  if (scaler_state_equal) j["scaler_state_equal"] = *scaler_state_equal;
  if (differing_transposed_codes) j["differing_transposed_codes"] = *differing_transposed_codes;
  return j;
}

Json AdamwEntry::to_json() const {
  Json j = Json::object();
  j["op"] = "adamw";
  j["recipe"] = recipe;
  j["rule"] = rule;
  j["kernel"] = kernel;
  j["tensor"] = tensor;
  j["shape"] = shape_json(shape);
  j["elements"] = elements;
  put_moment(j, "m", m);
  put_moment(j, "v", v);
  j["differing_params"] = differing_params;
  j["max_ulp_params"] = max_ulp_params;
  j["differing_codes"] = differing_codes;
  j["passed"] = passed;
  return j;
}

Json GemmEntry::to_json() const {
  Json j = Json::object();
  j["op"] = "gemm";
  j["config"] = config;
  j["tensor"] = tensor;
  j["m"] = m;
  j["n"] = n;
  j["k"] = k;
  j["elements"] = elements;
  j["differing_codes"] = differing_codes;
  j["plan"] = plan;
  if (!supported) {
    j["status"] = status;
    j["passed"] = passed;
    j["supported"] = false;
    return j;
  }
  j["supported"] = true;
  j["padded"] = padded;
  j["tolerance"] = tolerance.to_json();
  j["check"] = check.to_json();
  Json tc = Json::object();
  tc["compared"] = model_compared;
  if (model_compared) tc["differing_outputs"] = model_differing;
  if (!model_note.empty()) tc["note"] = model_note;
  j["tensor_core_model"] = tc;
  j["max_err_over_tol"] = check.max_err_over_tol;
  j["rel_fro_err"] = check.rel_fro_err;
  j["passed"] = passed;
  return j;
}

Json entry_json(const CompareEntry& e) {
  return std::visit([](const auto& x) { return x.to_json(); }, e);
}

const char* entry_op(const CompareEntry& e) {
  static constexpr const char* kOps[] = {"cast", "quantize", "adamw", "gemm"};  // the variant's order
  return kOps[e.index()];
}

bool entry_passed(const CompareEntry& e) {
  return std::visit([](const auto& x) { return x.passed; }, e);
}

Json CompareSummary::to_json() const {
  Json j = Json::object();
  for (const auto& [op, c] : ops) {
    Json o = Json::object();
    o["entries"] = c.entries;
    o["failed"] = c.failed;
    j[op] = std::move(o);
  }
  j["entries"] = entries;
  j["failed"] = failed;
  j["passed"] = passed;
  return j;
}

Json CompareResult::to_json() const {
  Json j = Json::object();
  j["command"] = command;
  j["date"] = date;
  j["machine"] = machine;
  j["trace"] = trace;
  j["step"] = step;
  j["summary"] = summary.to_json();
  Json a = Json::array();
  for (const auto& e : ops) a.push_back(entry_json(e));
  j["ops"] = std::move(a);
  return j;
}

uint64_t ulp_distance(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  auto ord = [](float f) -> uint64_t {
    const uint32_t u = f32_bits(f);
    return (u & 0x80000000u) ? static_cast<uint64_t>(~u) : static_cast<uint64_t>(u | 0x80000000u);
  };
  const uint64_t x = ord(a), y = ord(b);
  return x > y ? x - y : y - x;
}

const std::vector<std::string>& known_ops() {
  static const std::vector<std::string> ops = {"cast", "quantize", "adamw", "gemm"};
  return ops;
}

void validate_ops(const std::vector<std::string>& ops) {
  for (const auto& o : ops) {
    if (std::find(known_ops().begin(), known_ops().end(), o) == known_ops().end())
      throw UsageError(fmt::format("unknown op '{}' (valid: cast, quantize, adamw, gemm)", o));
  }
}

CompareResult compare_trace(const CompareOptions& opts, gpu::Backend& gpu) {
  validate_ops(opts.ops);
  trace::TraceReader r(opts.trace_path);  // validates before any work
  int64_t step = opts.step;
  if (step < 0) {
    size_t best = 0;
    for (const auto& s : r.steps())
      if (s.tensors.size() > best) {
        best = s.tensors.size();
        step = s.step;
      }
  }
  FP8SIM_REQUIRE(r.find_step(step), "trace '{}' has no step {}", opts.trace_path, step);

  CompareResult res;
  res.command = opts.command_line;
  res.date = now_text();
  res.machine = gpu.machine();
  res.trace = source_relative(opts.trace_path);
  res.step = step;
  Entries& ops = res.ops;

  const auto infos = r.select(trace::Filter{.step = step});
  Progress progress("compare", static_cast<double>(infos.size()) + 2);
  size_t done = 0;
  std::vector<TensorRef> activations;
  std::map<std::string, int> count_by_role;
  for (const TensorInfo* ti : infos) {
    const std::string role(trace::role_name(ti->role));
    if (opts.max_tensors > 0 && count_by_role[role] >= opts.max_tensors) continue;
    ++count_by_role[role];
    TensorRef t{ti, r.read(*ti), {}};
    t.f32 = widened_vector(t.data);
    if (wanted(opts, "cast")) run_casts(gpu, t, ops);
    if (wanted(opts, "quantize")) run_quantize(gpu, t, ops);
    if (ti->role == Role::Activation && ti->op == "linear_input") activations.push_back(std::move(t));
    progress.update(static_cast<double>(++done));
  }
  if (wanted(opts, "quantize")) run_delayed(gpu, activations, ops);
  if (wanted(opts, "adamw")) run_adamw(gpu, r, step, ops, opts.max_tensors);
  progress.update(static_cast<double>(++done));
  if (wanted(opts, "gemm")) run_gemms(gpu, r, step, ops, opts.max_tensors);
  progress.finish();
  if (opts.gemm_suite) run_gemm_suite(gpu, ops);

  res.summary = summarize(ops);
  return res;
}

const std::vector<std::string>& summary_header() {
  static const std::vector<std::string> h = {"op",         "spec / recipe / config", "entries", "elements",
                                             "diff codes", "diff scales/k/c",        "max ulp", "worst err/tol",
                                             "result"};
  return h;
}

std::vector<std::vector<std::string>> summary_rows(const CompareResult& r) {
  struct Agg {
    int64_t entries = 0, elements = 0, codes = 0, meta = 0, failed = 0, unsupported = 0;
    uint64_t ulp = 0;
    double worst = 0;
    bool has_worst = false;
  };
  std::vector<std::string> order;
  std::map<std::string, Agg> agg;
  for (const auto& e : r.ops) {
    const Facts f = std::visit([](const auto& x) { return facts(x); }, e);
    const std::string key = entry_op(e) + std::string("\x1f") + f.what;
    if (!agg.count(key)) order.push_back(key);
    Agg& a = agg[key];
    ++a.entries;
    a.elements += f.elements;
    a.codes += f.codes;
    a.meta += f.meta;
    a.ulp = std::max(a.ulp, f.ulp);
    if (f.err_over_tol) {
      a.worst = std::max(a.worst, *f.err_over_tol);
      a.has_worst = true;
    }
    if (f.unsupported) ++a.unsupported;
    if (!entry_passed(e)) ++a.failed;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& key : order) {
    const Agg& a = agg.at(key);
    const auto sep = key.find('\x1f');
    std::string result = a.failed ? fmt::format("FAIL ({})", a.failed) : "pass";
    if (a.unsupported) result = fmt::format("unsupported ({})", a.unsupported);
    rows.push_back({key.substr(0, sep), key.substr(sep + 1), std::to_string(a.entries), std::to_string(a.elements),
                    std::to_string(a.codes), std::to_string(a.meta), std::to_string(a.ulp),
                    a.has_worst ? fmt::format("{:.3f}", a.worst) : "-", result});
  }
  return rows;
}

std::string render_markdown(const CompareResult& r) {
  std::string md = "# fp8sim compare: GPU kernels vs. the CPU reference\n\n";
  md += fmt::format("- command: `{}`\n- date: {}\n- trace: `{}`, step {}\n", r.command, r.date, r.trace, r.step);
  for (const auto& [k, v] : r.machine.as_object())
    md += fmt::format("- {}: {}\n", k, v.is_string() ? v.as_string() : v.dump(-1));
  const CompareSummary& s = r.summary;
  md += fmt::format("- result: {} of {} comparisons passed{}\n\n", s.entries - s.failed, s.entries,
                    s.passed ? " (all)" : "");
  md +=
      "Casts, quantizers (incl. DE), dequantization and the optimizer step must be bit-identical: 0 differing\n"
      "codes, scales, k, c and parameter bits, 0 ulp between dequantized values. GEMMs must match the\n"
      "tensor-core model (sim/gemm/tc_gemm.hpp) output bit for output bit (codes = differing outputs) on\n"
      "cuBLASLt's first algorithm that keeps K in one piece, and the Eigen fp32 reference of the dequantized\n"
      "operands within the tolerance derived in sim/gemm/gemm_ref.cpp (worst err/tol <= 1 passes).\n"
      "`unsupported` means cuBLASLt refused the mode on this device (reported, not emulated).\n\n|";
  for (const auto& h : summary_header()) md += " " + h + " |";
  md += "\n|";
  for (size_t i = 0; i < summary_header().size(); ++i) md += i < 2 ? "---|" : "---:|";
  md += "\n";
  for (const auto& row : summary_rows(r)) {
    md += "|";
    for (const auto& c : row) md += " " + c + " |";
    md += "\n";
  }
  int shown = 0;
  for (const auto& e : r.ops) {
    if (entry_passed(e)) continue;
    if (shown == 0) md += "\n## Failures (first 20)\n\n```\n";
    if (++shown > 20) break;
    md += entry_json(e).dump(-1) + "\n";
  }
  if (shown) md += "```\n";
  // GEMM detail: every unsupported mode with cuBLASLt's message.
  bool head = false;
  std::map<std::string, int> refused;  // config -> layers
  std::map<std::string, std::string> why;
  for (const auto& e : r.ops) {
    const GemmEntry* g = std::get_if<GemmEntry>(&e);
    if (!g || g->supported) continue;
    ++refused[g->config];
    why[g->config] = g->status;
  }
  for (const auto& [config, layers] : refused) {
    if (!head) md += "\n## GEMM modes cuBLASLt refused\n\n";
    head = true;
    md += fmt::format("- {} ({} layers): {}\n", config, layers, why[config]);
  }
  return md;
}

gpu::GemmRequest gemm_suite_request(const gemm::TcGemmCase& c, const gemm::TcGemmOperands& o) {
  gpu::GemmRequest req;
  req.m = c.m;
  req.n = c.n;
  req.k = c.k;
  req.x_format = c.config.x_format;
  req.w_format = c.config.w_format;
  req.scaling = c.config.scaling;
  req.fast_accum = c.config.fast_accum;
  req.y_bf16 = c.config.y_format == Format::BF16;
  req.no_split_k = true;
  if (c.config.scaling == 0) {
    req.x_bf16.resize(o.x.size() / 2);
    req.w_bf16.resize(o.w.size() / 2);
    std::memcpy(req.x_bf16.data(), o.x.data(), o.x.size());
    std::memcpy(req.w_bf16.data(), o.w.data(), o.w.size());
  } else {
    req.x_codes = o.x;
    req.w_codes = o.w;
    req.x_scales = o.x_scales;
    req.w_scales = o.w_scales;
  }
  return req;
}

}  // namespace fp8sim::compare
