// Host side of the GPU AdamW steps: validation, the choice between the elementwise-state step and
// the three-phase path for any recipe, and the upload/run/download convenience that mirrors
// optim::lowp_adamw_step.
#include "gpu/optim/adamw.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/formats/format_code.hpp"
#include "gpu/optim/adamw_launch.hpp"
#include "sim/common/check.hpp"

namespace fp8sim::gpu {

void adamw_fp32_cuda(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                     cudaStream_t stream) {
  detail::launch_adamw_fp32(p, g, m, v, n, c, stream);
}

namespace {

detail::ElemMoment elem_moment(const QuantSpec& s, void* codes, float* scale, uint64_t key) {
  detail::ElemMoment e;
  e.codes = codes;
  e.scale = scale;
  e.kind = s.is_passthrough() ? detail::ElemKind::Pass16
                              : (s.is_16bit() ? detail::ElemKind::Scaled16 : detail::ElemKind::Fp8);
  e.format = gpu_format_code(s.format);
  e.saturate = s.saturation == Saturation::Finite;
  e.stochastic = s.rounding == Rounding::Stochastic && e.kind == detail::ElemKind::Fp8;
  e.seed = e.stochastic ? key : 0;  // as optim::store_moment keys the spec
  if (!s.is_passthrough()) e.sc = scale_consts(s);
  return e;
}

bool g_elementwise = true;  // test hook: adamw_lowp_cuda may take the elementwise-state step

}  // namespace

void adamw_bf16_moments_cuda(float* p, const float* g, uint16_t* m, uint16_t* v, size_t n,
                             const optim::AdamwStepConsts& c, const optim::StateRecipe& recipe, cudaStream_t stream) {
  auto bf16_spec = [](const optim::MomentSpec& ms) {
    return ms.spec && ms.spec->format == Format::BF16 && ms.spec->is_passthrough();
  };
  if (!bf16_spec(recipe.m) || !bf16_spec(recipe.v))
    throw UsageError(fmt::format("the BF16-moment AdamW kernel needs bf16 moments, not {}", recipe.to_string()));
  detail::launch_adamw_elementwise(p, g, elem_moment(*recipe.m.spec, m, nullptr, 0),
                                   elem_moment(*recipe.v.spec, v, nullptr, 0), n, c, nullptr, stream);
}

void adamw_elementwise_fused(bool on) { g_elementwise = on; }

void adamw_fp8_grouped_cuda(float* p, const float* g, const Fp8MomentDev& m, const Fp8MomentDev& v, size_t n,
                            int group_size, const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                            const optim::GroupMomentConsts& cv, cudaStream_t stream) {
  FP8SIM_REQUIRE(group_size >= 1 && group_size <= kFusedMaxGroup,
                 "the fused FP8 AdamW kernel holds groups of at most {} elements, not {}", kFusedMaxGroup, group_size);
  FP8SIM_REQUIRE(m.codes && m.scales && v.codes && v.scales, "fused FP8 AdamW: null state pointer");
  FP8SIM_REQUIRE((m.k == nullptr) == (cm.expand == false) && (v.k == nullptr) == (cv.expand == false) &&
                     (m.k == nullptr) == (m.c == nullptr) && (v.k == nullptr) == (v.c == nullptr),
                 "fused FP8 AdamW: k and c pointers must be given exactly for DE moments");
  detail::launch_adamw_fp8_grouped(p, g, detail::Fp8MomentPtrs{m.codes, m.scales, m.k, m.c},
                                   detail::Fp8MomentPtrs{v.codes, v.scales, v.k, v.c}, n, group_size, c, cm, cv,
                                   stream);
}

optim::GroupMomentConsts group_moment_consts(const QuantSpec& s, uint64_t key) {
  return optim::group_moment_consts(s, key);  // the CPU loop's own mapping
}

namespace {

QuantSpec keyed_spec(const optim::MomentSpec& ms, uint64_t key) {
  QuantSpec spec = *ms.spec;
  if (spec.rounding == Rounding::Stochastic) spec.seed = key;  // as optim::store_moment
  return spec;
}

size_t ws_bytes(const optim::MomentSpec& ms, int64_t n) {
  if (ms.is_fp32()) return 0;
  const int64_t shape[1] = {n};
  return quantize_workspace_bytes(*ms.spec, shape);
}

}  // namespace

size_t lowp_scratch_bytes(const optim::StateRecipe& r, int64_t n) {
  const size_t floats = 2 * static_cast<size_t>(n) * sizeof(float);
  const size_t ws = std::max(ws_bytes(r.m, n), ws_bytes(r.v, n));
  return (floats + 255) / 256 * 256 + ws;
}

void adamw_lowp_cuda(float* p, const float* g, LowpMomentDev& m, LowpMomentDev& v, int64_t n,
                     const optim::AdamwStepConsts& c, uint64_t param_index, uint64_t step, void* d_scratch,
                     cudaStream_t stream, const float** new_m, const float** new_v) {
  FP8SIM_CHECK((new_m == nullptr) == (new_v == nullptr), "adamw_lowp_cuda: ask for both new moments or neither");
  if (n == 0) return;
  for (const LowpMomentDev* ms : {&m, &v})
    if (!ms->spec.is_fp32())
      FP8SIM_REQUIRE(!ms->spec.spec->delayed.enabled(),
                     "GPU AdamW: delayed scaling of optimizer states ({}) is not supported",
                     ms->spec.spec->to_string());
  optim::StateRecipe r;
  r.m = m.spec;
  r.v = v.spec;
  if (g_elementwise && !new_m && optim::elementwise_step_supported(r)) {
    auto key = [&](const LowpMomentDev& ms, int moment) {
      return optim::state_rounding_key(ms.spec.spec->seed, param_index, step, moment);
    };
    detail::launch_adamw_elementwise(p, g, elem_moment(*m.spec.spec, m.codes, m.scales, key(m, 0)),
                                     elem_moment(*v.spec.spec, v.codes, v.scales, key(v, 1)), static_cast<size_t>(n), c,
                                     static_cast<uint32_t*>(d_scratch), stream);
    return;
  }
  auto* base = static_cast<unsigned char*>(d_scratch);
  float* sm = reinterpret_cast<float*>(base);
  float* sv = sm + n;
  void* ws = base + (2 * static_cast<size_t>(n) * sizeof(float) + 255) / 256 * 256;
  const int64_t shape[1] = {n};
  // 1. dequantize (fp32 moments are updated in place)
  auto load = [&](LowpMomentDev& ms, float* scratch) -> float* {
    if (ms.spec.is_fp32()) return ms.fp32;
    dequantize_cuda(*ms.spec.spec, shape, ms.codes, ms.scales, ms.k, ms.c, scratch, stream);
    return scratch;
  };
  float* mm = load(m, sm);
  float* vv = load(v, sv);
  // 2. update
  detail::launch_adamw_fp32(p, g, mm, vv, static_cast<size_t>(n), c, stream);
  // 3. requantize with this step's rounding keys
  auto store = [&](LowpMomentDev& ms, const float* x, int moment) {
    if (ms.spec.is_fp32()) return;
    const uint64_t key = optim::state_rounding_key(ms.spec.spec->seed, param_index, step, moment);
    QuantGpuOut out;
    out.codes = ms.codes;
    out.scales = ms.scales;
    out.expand_k = ms.k;
    out.expand_c = ms.c;
    quantize_cuda(x, InputDtype::F32, shape, keyed_spec(ms.spec, key), out, ws, QuantGpuOptions{}, stream);
  };
  store(m, mm, 0);
  store(v, vv, 1);
  if (new_m) {
    *new_m = mm;
    *new_v = vv;
  }
}

void lowp_adamw_step_on_gpu(float* p, const float* g, optim::ParamOptimState& st, const optim::AdamwStepConsts& c,
                            uint64_t param_index, uint64_t step, bool fused, cudaStream_t stream) {
  const int64_t n = st.numel;
  if (n == 0) return;
  DeviceBuffer<float> d_p(static_cast<size_t>(n)), d_g(static_cast<size_t>(n));
  d_p.upload(p, static_cast<size_t>(n), stream);
  d_g.upload(g, static_cast<size_t>(n), stream);

  struct MomentBuffers {
    DeviceBuffer<float> fp32, scales, k, c;
    DeviceBuffer<unsigned char> codes;
  } bm, bv;
  auto upload_moment = [&](optim::MomentState& ms, MomentBuffers& b, LowpMomentDev& d) {
    d.spec = ms.spec;
    if (ms.spec.is_fp32()) {
      b.fp32 = to_device(ms.fp32, stream);
      d.fp32 = b.fp32.get();
      return;
    }
    b.codes = to_device(ms.q.codes, stream);
    d.codes = b.codes.get();
    if (!ms.q.scales.empty()) {
      b.scales = to_device(ms.q.scales, stream);
      d.scales = b.scales.get();
    }
    if (!ms.q.expand_k.empty()) {
      b.k = to_device(ms.q.expand_k, stream);
      b.c = to_device(ms.q.expand_c, stream);
      d.k = b.k.get();
      d.c = b.c.get();
    }
  };
  LowpMomentDev dm, dv;
  upload_moment(st.m, bm, dm);
  upload_moment(st.v, bv, dv);

  optim::StateRecipe r;
  r.m = st.m.spec;
  r.v = st.v.spec;
  if (fused) {
    FP8SIM_REQUIRE(optim::grouped_step_supported(r), "recipe {} cannot run the fused per-group step", r.to_string());
    const QuantSpec& sm = *st.m.spec.spec;
    const QuantSpec& sv = *st.v.spec.spec;
    const auto cm = group_moment_consts(sm, optim::state_rounding_key(sm.seed, param_index, step, 0));
    const auto cv = group_moment_consts(sv, optim::state_rounding_key(sv.seed, param_index, step, 1));
    adamw_fp8_grouped_cuda(d_p.get(), d_g.get(), Fp8MomentDev{static_cast<uint8_t*>(dm.codes), dm.scales, dm.k, dm.c},
                           Fp8MomentDev{static_cast<uint8_t*>(dv.codes), dv.scales, dv.k, dv.c}, static_cast<size_t>(n),
                           static_cast<int>(sm.group_size), c, cm, cv, stream);
  } else {
    DeviceBuffer<unsigned char> scratch(lowp_scratch_bytes(r, n));
    adamw_lowp_cuda(d_p.get(), d_g.get(), dm, dv, n, c, param_index, step, scratch.get(), stream);
    FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream));
  d_p.download(p, static_cast<size_t>(n), stream);
  auto download_moment = [&](optim::MomentState& ms, MomentBuffers& b) {
    if (ms.spec.is_fp32()) {
      b.fp32.download(ms.fp32.data(), ms.fp32.size(), stream);
      return;
    }
    b.codes.download(ms.q.codes.data(), ms.q.codes.size(), stream);
    if (!ms.q.scales.empty()) b.scales.download(ms.q.scales.data(), ms.q.scales.size(), stream);
    if (!ms.q.expand_k.empty()) {
      b.k.download(ms.q.expand_k.data(), ms.q.expand_k.size(), stream);
      b.c.download(ms.q.expand_c.data(), ms.q.expand_c.size(), stream);
    }
  };
  download_moment(st.m, bm);
  download_moment(st.v, bv);
}

}  // namespace fp8sim::gpu
