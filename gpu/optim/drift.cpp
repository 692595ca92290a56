// Host side of optim --device cuda's drift runs (drift.hpp).
#include "gpu/optim/drift.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpu/analyze/tensor_metrics.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/optim/adamw.hpp"
#include "gpu/optim/drift_launch.hpp"
#include "gpu/quant/quantize.hpp"
#include "sim/common/check.hpp"
#include "sim/optim/lowp_adamw.hpp"

namespace fp8sim::gpu {

namespace {

// The moment specs the device runs: fp32, FP8, or 16-bit storage unscaled or with one per-tensor
// scale (gpu/quant's kernels), without delayed scaling, RHT or two-level scales.
void require_device_moment(const optim::MomentSpec& ms) {
  if (ms.is_fp32()) return;
  const QuantSpec& s = *ms.spec;
  if (!is_fp8(s.format) && !s.is_16bit())
    throw UsageError(fmt::format("the GPU drift runs FP8 and 16-bit moments, not {}", s.to_string()));
  if (s.is_16bit() && !s.is_passthrough() && (s.granularity != Granularity::Tensor || s.has_expand()))
    throw UsageError(fmt::format("the GPU scales 16-bit moments per tensor only, not {}", s.to_string()));
  if (s.delayed.enabled() || s.rht != 0 || s.scale == ScaleMode::E4M3)
    throw UsageError(fmt::format("the GPU drift does not run the moment spec {}", s.to_string()));
}

// Device bytes the scratch holds now (reserve() frees a buffer before it reallocates it, so they count
// as free for the next parameter).
size_t held_bytes(const DriftScratch& S) {
  size_t b = S.m_codes.bytes() + S.v_codes.bytes() + S.step_scratch.bytes() + S.sums.bytes();
  for (const DeviceBuffer<float>* f :
       {&S.p0, &S.m0, &S.v0,     &S.grads,  &S.p,        &S.p_prev,   &S.b,   &S.b_prev, &S.mb,  &S.vb,
        &S.ms, &S.vs, &S.m_fp32, &S.v_fp32, &S.m_scales, &S.v_scales, &S.m_k, &S.m_c,    &S.v_k, &S.v_c})
    b += f->bytes();
  for (const auto& q : S.quantized) b += q.bytes();
  return b;
}

// Throws UsageError when `need` bytes exceed what the device has free plus what S holds.
void require_memory(size_t need, const DriftScratch& S, const std::string& what) {
  size_t free_b = 0, total_b = 0;
  FP8SIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t avail = free_b + held_bytes(S);
  if (need > avail)
    throw UsageError(fmt::format("{} needs {:.1f} GiB of GPU memory, {:.1f} GiB are free", what,
                                 need / double(1ull << 30), avail / double(1ull << 30)));
}

void copy_d2d(float* dst, const float* src, int64_t n, cudaStream_t s) {
  FP8SIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

// The host values come in pooled Buffers (the trace reader's), page-locked once per block as
// analyze's uploads are.
void upload(float* dst, const float* src, int64_t n, cudaStream_t s) {
  page_lock_for_upload(src);
  FP8SIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, s));
}

// One moment's device storage for a spec, in `scratch`'s buffers of that moment.
struct MomentBuffers {
  DeviceBuffer<float>*fp32, *scales, *k, *c;
  DeviceBuffer<unsigned char>* codes;
};

LowpMomentDev bind_moment(const optim::MomentSpec& ms, int64_t n, MomentBuffers b) {
  LowpMomentDev d;
  d.spec = ms;
  const size_t un = static_cast<size_t>(n);
  if (ms.is_fp32()) {
    d.fp32 = b.fp32->reserve(un);
    return d;
  }
  const QuantSpec& s = *ms.spec;
  const int64_t shape[1] = {n};
  const int64_t groups = quantized_size(s, shape).num_groups;
  d.codes = b.codes->reserve(un * static_cast<size_t>(s.code_bytes_per_element()));
  if (!s.is_passthrough()) d.scales = b.scales->reserve(static_cast<size_t>(std::max<int64_t>(groups, 1)));
  if (s.has_expand()) {
    d.k = b.k->reserve(static_cast<size_t>(groups));
    d.c = b.c->reserve(static_cast<size_t>(groups));
  }
  return d;
}

// Bytes of one parameter's device buffers under the request (an estimate good to a few percent:
// fp32 arrays, codes, the step's scratch and the chunk records).
size_t needed_bytes(const optim::DriftRequest& rq) {
  const size_t n = static_cast<size_t>(rq.n);
  size_t worst = 0;
  for (const auto& r : rq.recipes) worst = std::max(worst, lowp_scratch_bytes(r, rq.n));
  const size_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  return n * 4 * (13 + static_cast<size_t>(rq.steps)) + 4 * n + worst + chunks * optim::kDriftSums * 8;
}

}  // namespace

optim::DriftResult drift_on_gpu(const optim::DriftRequest& rq, DriftScratch& S, cudaStream_t stream) {
  for (const auto& r : rq.recipes) {
    require_device_moment(r.m);
    require_device_moment(r.v);
  }
  FP8SIM_CHECK(rq.n > 0 && rq.steps >= 0 && rq.grads.size() >= static_cast<size_t>(rq.steps) &&
                   rq.lr.size() >= static_cast<size_t>(rq.steps),
               "drift request of {} elements, {} steps, {} grads, {} lrs", rq.n, rq.steps, rq.grads.size(),
               rq.lr.size());
  require_memory(needed_bytes(rq), S, fmt::format("the drift of a parameter of {} elements", rq.n));
  const int64_t n = rq.n;
  const size_t un = static_cast<size_t>(n);
  const int64_t shape[1] = {n};
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  const int steps = rq.steps;

  float* p0 = S.p0.reserve(un);
  float* m0 = S.m0.reserve(un);
  float* v0 = S.v0.reserve(un);
  float* grads = S.grads.reserve(un * static_cast<size_t>(std::max(steps, 1)));
  upload(p0, rq.p0, n, stream);
  upload(m0, rq.m0, n, stream);
  upload(v0, rq.v0, n, stream);
  for (int k = 0; k < steps; ++k)
    upload(grads + static_cast<size_t>(k) * un, rq.grads[static_cast<size_t>(k)], n, stream);
  float* p = S.p.reserve(un);
  float* p_prev = S.p_prev.reserve(un);
  float* b = S.b.reserve(un);
  float* b_prev = S.b_prev.reserve(un);
  float* mb = S.mb.reserve(un);
  float* vb = S.vb.reserve(un);
  float* ms_buf = S.ms.reserve(un);
  float* vs_buf = S.vs.reserve(un);
  double* sums = S.sums.reserve(static_cast<size_t>(chunks) * optim::kDriftSums);
  S.host_sums.resize(static_cast<size_t>(chunks) * optim::kDriftSums);

  optim::DriftResult out(rq.recipes.size() * static_cast<size_t>(steps));
  for (size_t r = 0; r < rq.recipes.size(); ++r) {
    const optim::StateRecipe& recipe = rq.recipes[r];
    LowpMomentDev dm = bind_moment(recipe.m, n, {&S.m_fp32, &S.m_scales, &S.m_k, &S.m_c, &S.m_codes});
    LowpMomentDev dv = bind_moment(recipe.v, n, {&S.v_fp32, &S.v_scales, &S.v_k, &S.v_c, &S.v_codes});
    void* step_ws = S.step_scratch.reserve(lowp_scratch_bytes(recipe, n));
    // The window start's state, as make_param_state stores it (the step's quantizer and keys).
    auto store = [&](LowpMomentDev& d, const float* x, int moment) {
      if (d.spec.is_fp32()) {
        copy_d2d(d.fp32, x, n, stream);
        return;
      }
      QuantSpec spec = *d.spec.spec;
      if (spec.rounding == Rounding::Stochastic)
        spec.seed = optim::state_rounding_key(spec.seed, rq.index, static_cast<uint64_t>(rq.step0), moment);
      QuantGpuOut o;
      o.codes = d.codes;
      o.scales = d.scales;
      o.expand_k = d.k;
      o.expand_c = d.c;
      quantize_cuda(x, InputDtype::F32, shape, spec, o, step_ws, QuantGpuOptions{}, stream);
    };
    store(dm, m0, 0);
    store(dv, v0, 1);
    copy_d2d(p, p0, n, stream);
    copy_d2d(b, p0, n, stream);
    copy_d2d(mb, m0, n, stream);
    copy_d2d(vb, v0, n, stream);
    optim::AdamwHyper h = rq.hyper;
    for (int k = 0; k < steps; ++k) {
      h.lr = rq.lr[static_cast<size_t>(k)];
      const int64_t t = rq.step0 + k + 1;
      const auto c = optim::make_step_consts(h, t, rq.rule);
      const float* g = grads + static_cast<size_t>(k) * un;
      copy_d2d(b_prev, b, n, stream);
      adamw_fp32_cuda(b, g, mb, vb, un, c, stream);
      copy_d2d(p_prev, p, n, stream);
      const float *mn = nullptr, *vn = nullptr;
      adamw_lowp_cuda(p, g, dm, dv, n, c, rq.index, static_cast<uint64_t>(t), step_ws, stream, &mn, &vn);
      auto stored = [&](const LowpMomentDev& d, float* buf) -> const float* {
        if (d.spec.is_fp32()) return d.fp32;
        dequantize_cuda(*d.spec.spec, shape, d.codes, d.scales, d.k, d.c, buf, stream);
        return buf;
      };
      const float* ms = stored(dm, ms_buf);
      const float* vs = stored(dv, vs_buf);
      detail::launch_drift_sums({p, p_prev, b, b_prev, p0, ms, vs, mn, vn, mb, vb}, n, sums, stream);
      FP8SIM_CUDA_CHECK(cudaMemcpyAsync(S.host_sums.data(), sums, S.host_sums.size() * sizeof(double),
                                        cudaMemcpyDeviceToHost, stream));
      FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream));
      optim::DriftSums& dst = out[r * static_cast<size_t>(steps) + static_cast<size_t>(k)];
      dst.fill(0.0);
      for (int64_t ch = 0; ch < chunks; ++ch)
        for (size_t q = 0; q < optim::kDriftSums; ++q)
          dst[q] += S.host_sums[static_cast<size_t>(ch) * optim::kDriftSums + q];
    }
  }
  return out;
}

std::vector<double> direction_on_gpu(const optim::DirectionRequest& rq, DriftScratch& S, cudaStream_t stream) {
  const size_t F = rq.specs.size();
  FP8SIM_CHECK(F >= 1 && F <= optim::kMaxDirectionFormats && rq.n > 0, "direction request of {} formats, {} elements",
               F, rq.n);
  const int64_t n = rq.n;
  const size_t un = static_cast<size_t>(n);
  const int64_t shape[1] = {n};
  // What quantize_cuda needs for each format, and what it would refuse, asked before any work: FP8
  // in groups, or the 4- and 6-bit formats on whole 16-element segments (their kernels' rule for a
  // flattened moment; Table 1's groups of 128 meet the rest of it).
  size_t ws_bytes = 0, code_bytes = 0;
  int64_t groups = 1;
  for (const QuantSpec& s : rq.specs) {
    const bool fp8 = is_fp8(s.format), lowbit = is_fp4_fp6(s.format);
    if ((!fp8 && !lowbit) || s.granularity != Granularity::Group || s.rht != 0 || s.scale == ScaleMode::E4M3 ||
        s.delayed.enabled() || s.rounding == Rounding::Stochastic || s.expand == ExpandMode::Robust ||
        s.de_min != DeMin::Nonzero)
      throw UsageError(fmt::format("the GPU's Table 1 does not run {}", s.to_string()));
    if (lowbit && (n % 16 != 0 || s.group_size % 16 != 0 || s.group_size > 512))
      throw UsageError(
          fmt::format("the GPU's 4- and 6-bit kernels take {} over {} elements in whole 16-element "
                      "segments only",
                      s.to_string(), n));
    ws_bytes = std::max(ws_bytes, quantize_workspace_bytes(s, shape));
    const QuantizedSize qs = quantized_size(s, shape);
    code_bytes = std::max(code_bytes, static_cast<size_t>(qs.code_bytes));
    groups = std::max(groups, qs.num_groups);
  }
  const size_t chunks = (un + optim::kDriftChunk - 1) / optim::kDriftChunk;
  const size_t K = optim::DirectionLayout(F).K;
  require_memory(un * 4 * (2 + 2 * F) + code_bytes + ws_bytes + static_cast<size_t>(groups) * 12 + chunks * K * 8, S,
                 fmt::format("Table 1 of a parameter of {} elements", n));
  float* m = S.m0.reserve(un);
  float* v = S.v0.reserve(un);
  upload(m, rq.m, n, stream);
  upload(v, rq.v, n, stream);
  if (S.quantized.size() < 2 * F) S.quantized.resize(2 * F);
  unsigned char* codes = S.m_codes.reserve(std::max<size_t>(code_bytes, 1));
  float* scales = S.m_scales.reserve(static_cast<size_t>(groups));
  float* k = S.m_k.reserve(static_cast<size_t>(groups));
  float* c = S.m_c.reserve(static_cast<size_t>(groups));
  void* ws = S.step_scratch.reserve(std::max<size_t>(ws_bytes, 1));
  detail::DirectionArrays arr{};
  arr.m = m;
  arr.v = v;
  arr.F = static_cast<int>(F);
  arr.bc1 = rq.bc1;
  arr.bc2 = rq.bc2;
  arr.eps = rq.eps;
  for (size_t a = 0; a < F; ++a) {
    const QuantSpec& spec = rq.specs[a];
    QuantGpuOut o;
    o.codes = codes;
    o.scales = spec.is_passthrough() ? nullptr : scales;
    o.expand_k = spec.has_expand() ? k : nullptr;
    o.expand_c = spec.has_expand() ? c : nullptr;
    for (int which = 0; which < 2; ++which) {
      float* out = S.quantized[2 * a + static_cast<size_t>(which)].reserve(un);
      quantize_cuda(which ? v : m, InputDtype::F32, shape, spec, o, ws, QuantGpuOptions{}, stream);
      dequantize_cuda(spec, shape, codes, o.scales, o.expand_k, o.expand_c, out, stream);
      (which ? arr.vq : arr.mq)[a] = out;
    }
  }
  double* sums = S.sums.reserve(chunks * K);
  S.host_sums.resize(chunks * K);
  detail::launch_direction_sums(arr, n, sums, stream);
  FP8SIM_CUDA_CHECK(
      cudaMemcpyAsync(S.host_sums.data(), sums, S.host_sums.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> out(K, 0.0);
  for (size_t ch = 0; ch < chunks; ++ch)
    for (size_t q = 0; q < K; ++q) out[q] += S.host_sums[ch * K + q];
  return out;
}

}  // namespace fp8sim::gpu
