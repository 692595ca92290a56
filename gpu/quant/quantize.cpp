// Host side of the GPU quantizers: validation (the CPU's own checks), geometry, kernel choice,
// workspace, and the upload/run/download conveniences. Kernels are in quantize.cu.
#include "gpu/quant/quantize.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/common/check.hpp"
#include "sim/quant/packing.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu {

int dtype_code(InputDtype d) { return d == InputDtype::F32 ? 0 : (d == InputDtype::BF16 ? 1 : 2); }
size_t dtype_bytes(InputDtype d) { return d == InputDtype::F32 ? 4 : 2; }

namespace {

int format_code(Format f) {
  const int code = gpu_format_code(f);
  if (code < 0) throw UsageError(fmt::format("GPU quantize: unsupported storage format {}", format_name(f)));
  return code;
}

// The largest group a team of 32 lanes x 16 elements holds in registers.
constexpr int64_t kTeamMaxGroup = 512;
// Workspace words: chunk / block maxima (at least the delayed encode's grid), inf flag, 5 slot words
// (s_quant, s_stored, the stage-2 accumulator, its block counter, the fused encode's barrier flag).
size_t maxima_words(int64_t numel) {
  const int64_t chunks = (numel + detail::tensor_chunk_elements() - 1) / detail::tensor_chunk_elements();
  return static_cast<size_t>(std::max<int64_t>(chunks, 8192));
}

detail::QuantKernelParams make_params(const QuantSpec& spec, const GroupGeometry& g, uint64_t index_offset) {
  detail::QuantKernelParams P;
  P.rows = g.rows;
  P.cols = g.cols;
  P.group_rows = g.group_rows;
  P.group_cols = g.group_cols;
  P.grid_rows = g.grid_rows;
  P.grid_cols = g.grid_cols;
  P.format = format_code(spec.format);
  P.saturate = spec.saturation == Saturation::Finite;
  P.stochastic = spec.rounding == Rounding::Stochastic;
  P.seed = spec.seed;
  P.index_offset = index_offset;
  if (!spec.is_passthrough()) {
    P.scale = scale_consts(spec);
    P.fmax = spec.fmax();
    P.fmax_target = static_cast<float>(format_info(spec.expand_target).max);
    P.eps = spec.eps;
    P.eps_add_fp64 = spec.eps_add == EpsAdd::Fp64;
  }
  return P;
}

// The 4- and 6-bit formats and every rht spec go to gpu/quant/quantize_lowbit.cu.
bool lowbit_spec(const QuantSpec& spec) { return is_fp4_fp6(spec.format) || spec.rht != 0; }

// The segment kernels' plan for a lowbit spec over geometry g (UsageError where they do not apply).
detail::LowbitParams lowbit_plan(const QuantSpec& spec, const GroupGeometry& g, bool dequantize) {
  const std::string what = fmt::format("GPU {}: {} on a {} x {} view", dequantize ? "dequantize" : "quantize",
                                       spec.to_string(), g.rows, g.cols);
  if (spec.rht && g.cols % spec.rht != 0)
    throw UsageError(
        fmt::format("rht={} transforms rows in blocks of {} elements: the last dimension ({}) is not a "
                    "multiple of {}",
                    spec.rht, spec.rht, g.cols, spec.rht));
  if (g.cols % 16 != 0)
    throw UsageError(
        fmt::format("{}: the 4-bit, 6-bit and rht kernels take rows of whole 16-element segments "
                    "(the CPU quantizes any shape)",
                    what));
  detail::LowbitParams S;
  S.bits = spec.bits_per_code();
  S.rht = spec.rht;
  S.pow2_div = spec.apply == Apply::Div && (spec.scale == ScaleMode::E8M0 || spec.scale == ScaleMode::Pow2);
  if (spec.rht) S.signs = rht_signs(spec.rht, spec.rht_seeded, spec.rht_seed);
  const bool tensor = spec.granularity == Granularity::Tensor;
  if (spec.scale == ScaleMode::E4M3) S.mode = detail::kLowbitNvfp4;
  else if (spec.expand == ExpandMode::Coat) S.mode = detail::kLowbitCoat;
  else if (tensor) S.mode = detail::kLowbitTensor;
  else S.mode = detail::kLowbitPlain;
  if (tensor && spec.has_expand())
    throw UsageError(
        fmt::format("{}: per-tensor DE on the 4- and 6-bit kernels is not implemented (the CPU does it)", what));
  if (spec.de_min != DeMin::Nonzero)
    throw UsageError(
        fmt::format("{}: de_min=kernel on the 4- and 6-bit kernels is not implemented (the CPU does it)", what));
  const int64_t segs = g.numel() / 16;
  S.narrow = segs * 32 < (int64_t{1} << 31) && g.rows < (int64_t{1} << 31) && g.cols < (int64_t{1} << 31);
  if (dequantize || S.mode == detail::kLowbitTensor) {
    S.row_major = true;
    S.slots = segs;
    return S;
  }
  const int64_t R = g.group_rows, C = g.group_cols;
  if (C % 16 != 0 || R * (C / 16) > 32)
    throw UsageError(
        fmt::format("{}: the 4-bit, 6-bit and rht kernels take groups of R x C elements with C a "
                    "multiple of 16 and R * C / 16 <= 32 (1x16 .. 1x512, 16x16, 32x16), not {} x {}",
                    what, R, C));
  S.lanes_c = static_cast<int>(C / 16);
  S.lanes = static_cast<int>(R * (C / 16));
  while (S.team < S.lanes) {
    S.team <<= 1;
    ++S.team_shift;
  }
  if (spec.rht > 16 && (R != 1 || S.lanes != S.team))
    throw UsageError(
        fmt::format("{}: rht={} spans several segments of a row; the kernels take it with 1xC groups, "
                    "C / 16 a power of two",
                    what, spec.rht));
  S.slots = g.num_groups() * S.team;
  return S;
}

[[noreturn]] void throw_no_transpose(const QuantSpec& spec) {
  throw UsageError(
      fmt::format("GPU quantize: transposed codes (cast-transpose) are written for per-tensor FP8 scaling only, not {}",
                  spec.to_string()));
}

}  // namespace

bool lowbit_fast_path(const QuantSpec& spec, std::span<const int64_t> shape, InputDtype dtype) {
  spec.validate();
  if (!lowbit_spec(spec)) return false;
  const GroupGeometry g = group_geometry(spec, shape);
  detail::LowbitParams S = lowbit_plan(spec, g, false);
  S.vec = S.codes_aligned = true;
  return detail::lowbit_fast_applies(make_params(spec, g, 0), S, dtype_code(dtype));
}

// Words: the maxima, the inf flag, the slot, then (de_min=kernel) one minimum per group.
size_t quantize_workspace_bytes(const QuantSpec& spec, std::span<const int64_t> shape) {
  const size_t minima =
      spec.de_min == DeMin::Kernel ? static_cast<size_t>(group_geometry(spec, shape).num_groups()) : 0;
  return (maxima_words(shape_numel(shape)) + 1 + detail::kSlotWords + minima) * sizeof(uint32_t);
}

void quantize_cuda(const void* d_x, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                   const QuantGpuOut& out, void* d_workspace, const QuantGpuOptions& opts, cudaStream_t stream) {
  spec.validate();
  if (out.codes_t && !spec.fp8_per_tensor()) throw_no_transpose(spec);
  const GroupGeometry g = group_geometry(spec, shape);
  const int64_t numel = g.numel();
  if (lowbit_spec(spec)) {
    const detail::LowbitParams plan = lowbit_plan(spec, g, false);  // shape errors before the empty check
    if (numel == 0) return;
    FP8SIM_REQUIRE(d_x && out.codes && out.scales && d_workspace, "GPU quantize: null pointer or workspace");
    if (spec.has_expand()) FP8SIM_REQUIRE(out.expand_k && out.expand_c, "GPU quantize: DE needs k and c outputs");
    if (opts.producer_maxima)
      FP8SIM_REQUIRE(plan.mode == detail::kLowbitTensor || (plan.mode == detail::kLowbitNvfp4 && !spec.rht),
                     "producer maxima (group scaling) stand for the tensor amax of per-tensor plain scaling and "
                     "NVFP4 (without rht), not {}",
                     spec.to_string());
    detail::QuantLaunch L;
    L.params = make_params(spec, g, opts.index_offset);
    L.dtype = dtype_code(dtype);
    L.x = d_x;
    L.codes = out.codes;
    L.scales = out.scales;
    L.k = out.expand_k;
    L.c = out.expand_c;
    L.tensor_amax = out.tensor_amax;
    L.producer_maxima = reinterpret_cast<const uint32_t*>(opts.producer_maxima);
    L.producer_maxima_count = opts.producer_maxima_count;
    detail::LowbitParams S = plan;
    S.vec = reinterpret_cast<uintptr_t>(d_x) % 16 == 0;
    S.codes_aligned = reinterpret_cast<uintptr_t>(out.codes) % 16 == 0;
    S.tensor_scale = out.tensor_scale;
    detail::launch_quantize_lowbit(L, S, static_cast<uint32_t*>(d_workspace), stream);
    return;
  }
  if (numel == 0) return;
  FP8SIM_REQUIRE(d_x && out.codes, "GPU quantize: null input or code pointer");
  FP8SIM_REQUIRE(d_workspace, "GPU quantize: no workspace (quantize_workspace_bytes)");
  detail::QuantLaunch L;
  L.params = make_params(spec, g, opts.index_offset);
  L.dtype = dtype_code(dtype);
  L.x = d_x;
  L.codes = out.codes;
  L.codes_t = out.codes_t;
  L.scales = out.scales;
  L.k = out.expand_k;
  L.c = out.expand_c;
  L.tensor_amax = out.tensor_amax;
  auto* ws = static_cast<uint32_t*>(d_workspace);
  const size_t mw = maxima_words(numel);
  L.chunk_maxima = ws;
  L.inf_flag = ws + mw;
  L.slot = ws + mw + 1;
  L.producer_maxima = reinterpret_cast<const uint32_t*>(opts.producer_maxima);
  L.producer_maxima_count = opts.producer_maxima_count;

  if (spec.is_passthrough()) {
    L.kind = detail::QuantLaunch::Kind::Passthrough;
  } else if (spec.is_16bit()) {
    FP8SIM_REQUIRE(spec.granularity == Granularity::Tensor && !spec.has_expand() && !spec.delayed.enabled(),
                   "GPU quantize: scaled 16-bit storage is implemented per-tensor only, not {}", spec.to_string());
    FP8SIM_REQUIRE(out.scales, "GPU quantize: null scales pointer");
    L.kind = detail::QuantLaunch::Kind::Scaled16;
  } else {
    FP8SIM_REQUIRE(out.scales, "GPU quantize: null scales pointer");
    if (spec.has_expand()) FP8SIM_REQUIRE(out.expand_k && out.expand_c, "GPU quantize: DE needs k and c outputs");
    if (spec.de_min == DeMin::Kernel)  // validate(): de=coat, 1x128 groups (the team kernels)
      L.params.group_min = reinterpret_cast<float*>(ws + mw + 1 + detail::kSlotWords);
    const bool team_fits = g.group_rows == 1 && g.group_cols <= kTeamMaxGroup;
    const bool plain_tensor = spec.granularity == Granularity::Tensor && !spec.delayed.enabled() && !spec.has_expand();
    if (spec.apply != Apply::Div && !plain_tensor) {
      // x * RN(1/s), x * m (TE) or div.full(x, s): the team and block kernels apply any form, and
      // so does the per-tensor encode (below).
      L.mode = 0;
      L.kind = team_fits ? detail::QuantLaunch::Kind::Team : detail::QuantLaunch::Kind::Block;
    } else if (spec.delayed.enabled()) {
      L.kind = detail::QuantLaunch::Kind::Tensor;
      L.mode = 1;
      L.params.delayed_scale = opts.delayed_scale;
      L.params.delayed_scale_inv = opts.delayed_scale_inv;
    } else if (spec.expand == ExpandMode::Coat || spec.expand == ExpandMode::Robust) {
      L.mode = spec.expand == ExpandMode::Coat ? 2 : 3;
      L.kind = (g.group_rows == 1 && g.group_cols <= kTeamMaxGroup) ? detail::QuantLaunch::Kind::Team
                                                                    : detail::QuantLaunch::Kind::Block;
    } else if (spec.granularity == Granularity::Tensor) {
      L.kind = detail::QuantLaunch::Kind::Tensor;
      L.mode = 0;
    } else {
      L.mode = 0;
      L.kind = (g.group_rows == 1 && g.group_cols <= kTeamMaxGroup) ? detail::QuantLaunch::Kind::Team
                                                                    : detail::QuantLaunch::Kind::Block;
    }
    if (L.kind == detail::QuantLaunch::Kind::Team) {
      const int64_t lanes = (g.group_cols + 15) / 16;
      int team = 1;
      while (team < lanes) team <<= 1;
      L.team = team;
    }
    if (L.producer_maxima)
      FP8SIM_REQUIRE(L.kind == detail::QuantLaunch::Kind::Tensor && L.mode == 0,
                     "producer maxima (group scaling) apply to per-tensor plain scaling only, not {}",
                     spec.to_string());
  }
  FP8SIM_CHECK(!L.codes_t || L.kind == detail::QuantLaunch::Kind::Tensor, "cast-transpose of {} on a {} kernel",
               spec.to_string(), static_cast<int>(L.kind));
  // The Inf flag and stage 2's accumulator, block counter and barrier flag (slot[2..4]) are used
  // only by the per-tensor paths: clear them there alone, in one memset (one launch less for the
  // group quantizers). The inf flag and the slot words are adjacent: inf_flag, slot[0..4].
  if (L.kind == detail::QuantLaunch::Kind::Tensor || L.kind == detail::QuantLaunch::Kind::Scaled16)
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(L.inf_flag, 0, (1 + detail::kSlotWords) * sizeof(uint32_t), stream));
  detail::launch_quantize(L, stream);
}

void dequantize_cuda(const QuantSpec& spec, std::span<const int64_t> shape, const void* d_codes, const float* d_scales,
                     const float* d_k, const float* d_c, float* d_out, cudaStream_t stream) {
  spec.validate();
  const GroupGeometry g = group_geometry(spec, shape);
  if (lowbit_spec(spec)) {
    detail::LowbitParams S = lowbit_plan(spec, g, true);
    if (g.numel() == 0) return;
    FP8SIM_REQUIRE(d_codes && d_out && d_scales, "GPU dequantize: null pointer");
    if (spec.has_expand()) FP8SIM_REQUIRE(d_k && d_c, "GPU dequantize: DE needs k and c");
    S.out_aligned = reinterpret_cast<uintptr_t>(d_out) % 16 == 0;
    detail::launch_dequantize_lowbit(make_params(spec, g, 0), S, spec.has_expand(), d_codes, d_scales, d_k, d_c, d_out,
                                     stream);
    return;
  }
  if (g.numel() == 0) return;
  FP8SIM_REQUIRE(d_codes && d_out, "GPU dequantize: null pointer");
  if (!spec.is_passthrough()) FP8SIM_REQUIRE(d_scales, "GPU dequantize: null scales");
  if (spec.has_expand()) FP8SIM_REQUIRE(d_k && d_c, "GPU dequantize: DE needs k and c");
  if (spec.is_16bit() && !spec.is_passthrough())
    FP8SIM_REQUIRE(spec.granularity == Granularity::Tensor, "GPU dequantize: scaled 16-bit storage is per-tensor only");
  detail::launch_dequantize(make_params(spec, g, 0), spec.is_16bit(), spec.has_expand(), d_codes,
                            spec.is_passthrough() ? nullptr : d_scales, d_k, d_c, d_out, stream);
}

size_t amax_workspace_bytes(size_t n) { return maxima_words(static_cast<int64_t>(n)) * sizeof(uint32_t); }

void tensor_amax_cuda(const void* d_x, InputDtype dtype, size_t n, float* d_amax, void* d_workspace,
                      cudaStream_t stream) {
  if (n == 0) {
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(d_amax, 0, sizeof(float), stream));
    return;
  }
  auto* ws = static_cast<uint32_t*>(d_workspace);
  const int64_t chunk = detail::tensor_chunk_elements();
  detail::launch_chunk_maxima(dtype_code(dtype), d_x, static_cast<int64_t>(n), chunk, ws, stream);
  detail::launch_reduce_maxima(ws, (static_cast<int64_t>(n) + chunk - 1) / chunk, d_amax, stream);
}

void reduce_maxima_cuda(const float* d_maxima, size_t m, float* d_amax, cudaStream_t stream) {
  detail::launch_reduce_maxima(reinterpret_cast<const uint32_t*>(d_maxima), static_cast<int64_t>(m), d_amax, stream);
}

void chunk_maxima_cuda(const void* d_x, InputDtype dtype, size_t n, size_t chunk, float* d_maxima,
                       cudaStream_t stream) {
  FP8SIM_REQUIRE(chunk > 0, "chunk must be positive");
  detail::launch_chunk_maxima(dtype_code(dtype), d_x, static_cast<int64_t>(n), static_cast<int64_t>(chunk),
                              reinterpret_cast<uint32_t*>(d_maxima), stream);
}

namespace {

// quantize_on_gpu, with the transposed codes too where codes_t is given.
QuantizedTensor quantize_on_gpu_impl(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                     const QuantSpec& spec, const QuantizeOptions& opts, cudaStream_t stream,
                                     std::vector<uint8_t>* codes_t) {
  spec.validate();
  QuantizedTensor q;
  q.spec = spec;
  q.shape.assign(shape.begin(), shape.end());
  q.geometry = group_geometry(spec, shape);
  const int64_t numel = shape_numel(shape);
  q.codes.resize(static_cast<size_t>(numel) * spec.code_bytes_per_element());
  if (spec.delayed.enabled())
    FP8SIM_REQUIRE(opts.delayed != nullptr, "spec {} uses delayed scaling: pass a DelayedScaler in QuantizeOptions",
                   spec.to_string());
  if (opts.tensor_amax)
    FP8SIM_REQUIRE(spec.granularity == Granularity::Tensor,
                   "QuantizeOptions::tensor_amax needs per-tensor granularity");
  if (codes_t) {
    if (!spec.fp8_per_tensor()) throw_no_transpose(spec);
    codes_t->clear();
  }
  if (numel == 0) return q;
  const int64_t ng = q.geometry.num_groups();

  DeviceBuffer<unsigned char> d_x(static_cast<size_t>(numel) * dtype_bytes(dtype));
  d_x.upload(static_cast<const unsigned char*>(host_x), d_x.size(), stream);
  // Device codes are packed (sim/quant/packing.hpp): 4- and 6-bit codes take less than a byte.
  const bool packed = lowbit_spec(spec) && spec.bits_per_code() < 8;
  const size_t device_code_bytes =
      packed ? static_cast<size_t>(packed_bytes(numel, spec.bits_per_code())) : q.codes.size();
  DeviceBuffer<unsigned char> d_codes(device_code_bytes);
  DeviceBuffer<float> d_scales(spec.is_passthrough() ? 0 : static_cast<size_t>(ng));
  DeviceBuffer<float> d_k(spec.has_expand() ? static_cast<size_t>(ng) : 0);
  DeviceBuffer<float> d_c(spec.has_expand() ? static_cast<size_t>(ng) : 0);
  DeviceBuffer<float> d_amax(1);
  DeviceBuffer<unsigned char> d_ws(quantize_workspace_bytes(spec, shape));
  DeviceBuffer<float> d_given(1);
  d_codes.fill_bytes(0xA5, stream);  // poison: every code must be written
  DeviceBuffer<unsigned char> d_codes_t(codes_t ? q.codes.size() : 0);
  if (codes_t) d_codes_t.fill_bytes(0xA5, stream);

  QuantGpuOut out;
  out.codes = d_codes.get();
  out.scales = spec.is_passthrough() ? nullptr : d_scales.get();
  out.expand_k = spec.has_expand() ? d_k.get() : nullptr;
  out.expand_c = spec.has_expand() ? d_c.get() : nullptr;
  out.tensor_amax = d_amax.get();
  out.codes_t = codes_t ? d_codes_t.get() : nullptr;
  DeviceBuffer<float> d_tscale(spec.scale == ScaleMode::E4M3 ? 1 : 0);
  out.tensor_scale = spec.scale == ScaleMode::E4M3 ? d_tscale.get() : nullptr;
  QuantGpuOptions go;
  go.index_offset = opts.index_offset;
  if (spec.delayed.enabled()) {
    go.delayed_scale = opts.delayed->scale();
    go.delayed_scale_inv = opts.delayed->scale_inv();
  }
  if (opts.tensor_amax && !spec.delayed.enabled() && !spec.has_expand()) {
    // The given amax stands for the tensor's: a one-element list of producer maxima.
    const float a = *opts.tensor_amax;
    d_given.upload(&a, 1, stream);
    go.producer_maxima = d_given.get();
    go.producer_maxima_count = 1;
  }
  quantize_cuda(d_x.get(), dtype, shape, spec, out, d_ws.get(), go, stream);
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream));

  if (packed) {
    std::vector<unsigned char> p(device_code_bytes);
    d_codes.download(p.data(), p.size(), stream);
    q.codes = unpack_codes(p.data(), numel, spec.bits_per_code());
  } else {
    d_codes.download(q.codes.data(), q.codes.size(), stream);
  }
  if (codes_t) {
    codes_t->resize(q.codes.size());
    d_codes_t.download(codes_t->data(), codes_t->size(), stream);
  }
  if (!spec.is_passthrough()) q.scales = d_scales.download(stream);
  if (spec.has_expand()) {
    q.expand_k = d_k.download(stream);
    q.expand_c = d_c.download(stream);
  }
  if (spec.scale == ScaleMode::E4M3) d_tscale.download(&q.tensor_scale, 1, stream);
  float amax = 0;
  d_amax.download(&amax, 1, stream);
  q.tensor_amax = opts.tensor_amax && spec.granularity == Granularity::Tensor ? *opts.tensor_amax : amax;
  if (spec.delayed.enabled()) {
    uint32_t inf = 0;
    const size_t mw = maxima_words(numel);
    FP8SIM_CUDA_CHECK(cudaMemcpy(&inf, d_ws.get() + mw * sizeof(uint32_t), sizeof(uint32_t), cudaMemcpyDeviceToHost));
    q.delayed_scale = opts.delayed->scale();
    opts.delayed->update(inf ? std::numeric_limits<float>::infinity() : q.tensor_amax);
  }
  return q;
}

}  // namespace

QuantizedTensor quantize_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                const QuantSpec& spec, const QuantizeOptions& opts, cudaStream_t stream) {
  return quantize_on_gpu_impl(host_x, dtype, shape, spec, opts, stream, nullptr);
}

QuantizedTensor quantize_transposed_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                           const QuantSpec& spec, std::vector<uint8_t>& codes_t,
                                           const QuantizeOptions& opts, cudaStream_t stream) {
  return quantize_on_gpu_impl(host_x, dtype, shape, spec, opts, stream, &codes_t);
}

std::vector<float> dequantize_on_gpu(const QuantizedTensor& q, cudaStream_t stream) {
  const int64_t n = q.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  FP8SIM_REQUIRE(static_cast<int64_t>(q.codes.size()) == n * q.spec.code_bytes_per_element(),
                 "quantized tensor holds {} code bytes for {} elements", q.codes.size(), n);
  const bool packed = lowbit_spec(q.spec) && q.spec.bits_per_code() < 8;
  DeviceBuffer<unsigned char> d_codes =
      packed ? to_device(pack_codes(q.codes.data(), n, q.spec.bits_per_code()), stream) : to_device(q.codes, stream);
  DeviceBuffer<float> d_scales, d_k, d_c;
  if (!q.spec.is_passthrough()) d_scales = to_device(q.scales, stream);
  if (q.spec.has_expand()) {
    d_k = to_device(q.expand_k, stream);
    d_c = to_device(q.expand_c, stream);
  }
  DeviceBuffer<float> d_out(static_cast<size_t>(n));
  d_out.fill_bytes(0xFF, stream);
  dequantize_cuda(q.spec, q.shape, d_codes.get(), d_scales.get(), d_k.get(), d_c.get(), d_out.get(), stream);
  d_out.download(out.data(), out.size(), stream);
  return out;
}

}  // namespace fp8sim::gpu
