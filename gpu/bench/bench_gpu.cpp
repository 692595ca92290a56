// `fp8sim bench` on the GPU: every plan item timed with warm, L2-flushed CUDA-event repeats,
// against the same-run device copy bandwidth, on inputs generated on the device (never zeros).
#include "gpu/bench/bench_gpu.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <thread>

#include "gpu/bench/coat_agreement.hpp"
#include "gpu/bench/fill.hpp"
#include "gpu/bench/timer.hpp"
#include "gpu/common/buffer.hpp"
#include "gpu/common/device.hpp"
#include "gpu/formats/cast.hpp"
#include "gpu/gemm/cublaslt.hpp"
#include "gpu/optim/adamw.hpp"
#include "gpu/quant/quantize.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::gpu {

namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

struct Ctx {
  BenchTimer& timer;
  CublasLt& lt;
  const bench::BenchOptions& opts;
  double large_copy_gbps = 0;                 // the plan's first item: the 1 GiB (smoke: 256 MiB) copy
  std::map<int64_t, double> same_bytes_copy;  // bytes moved -> GB/s of a copy moving as many bytes
};

// The size of the copy that stands for `bytes` moved: half each way, rounded up to a whole 4 KiB
// (a copy of an odd size runs measurably slower than one of a round size, and the kernels' byte
// counts include a few bytes of scales).
int64_t copy_half_bytes(double bytes) { return (static_cast<int64_t>(bytes / 2.0 + 0.5) + 4095) / 4096 * 4096; }

// The bandwidth of a device copy that moves `bytes` (reads half, writes half), timed like every
// kernel (warm, L2-flushed repeats); measured once per byte count in a run.
double same_bytes_copy_gbps(Ctx& c, double bytes) {
  const int64_t half = copy_half_bytes(bytes);
  if (half <= 0) return 0;
  if (auto it = c.same_bytes_copy.find(half); it != c.same_bytes_copy.end()) return it->second;
  double gbps = 0;
  try {
    const Timing t = time_device_copy(c.timer, static_cast<size_t>(half), c.opts.warmup, c.opts.reps);
    gbps = 2.0 * static_cast<double>(half) / (t.median_ms * 1e-3) / 1e9;
  } catch (const std::exception&) {
    // No room for the two copy buffers next to the kernel's (a smaller GPU): the caller falls back
    // to the large copy. An allocation failure is not sticky; clear it.
    cudaGetLastError();
    gbps = 0;
  }
  c.same_bytes_copy[half] = gbps;
  return gbps;
}

// Fills the entry's timing and rate fields and, for memory-bound kernels (bytes > 0), the ceiling:
// a copy of the same number of bytes measured in this run (a kernel moving 96 MiB is held to what a
// 96 MiB copy reaches, not to a 1 GiB copy's steadier rate), with the large copy's rate beside it.
void put_timing(Ctx& c, bench::BenchKernel& e, const Timing& t, double bytes) {
  e.median_ms = t.median_ms;
  e.min_ms = t.min_ms;
  e.max_ms = t.max_ms;
  e.reps = t.reps;
  if (bytes > 0) {
    e.bytes = bytes;
    const double gbps = bytes / (t.median_ms * 1e-3) / 1e9;
    e.gbps = gbps;
    const double ceiling = same_bytes_copy_gbps(c, bytes);
    if (ceiling > 0) {
      e.ceiling_gbps = ceiling;
      e.ceiling_kind = bench::kSameBytesCeiling;
      e.fraction_of_ceiling = gbps / ceiling;
    } else if (c.large_copy_gbps > 0) {  // the same-bytes copy could not run: the large copy
      e.ceiling_gbps = c.large_copy_gbps;
      e.ceiling_kind = "large copy (no memory for a same-bytes copy)";
      e.fraction_of_ceiling = gbps / c.large_copy_gbps;
    }
    if (c.large_copy_gbps > 0) {
      e.large_copy_gbps = c.large_copy_gbps;
      e.fraction_of_large_copy = gbps / c.large_copy_gbps;
    }
  }
}

InputDtype dtype_of(const std::string& d) { return d == "f32" ? InputDtype::F32 : InputDtype::BF16; }
size_t dsize(const std::string& d) { return d == "f32" ? 4 : 2; }

void fill_input(void* x, const std::string& dtype, size_t n, bool lognormal, cudaStream_t s) {
  if (dtype == "f32") {
    if (lognormal) fill_lognormal_f32(static_cast<float*>(x), n, 7, 1e-4f, 6.0f, false, s);
    else fill_normal_f32(static_cast<float*>(x), n, 7, 1.0f, s);
  } else {
    fill_normal_bf16(static_cast<uint16_t*>(x), n, 7, 1.0f, s);
  }
}

// ---- per-op runners --------------------------------------------------------------------------------
void run_copy(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  const Timing t = time_device_copy(c.timer, static_cast<size_t>(it.n), c.opts.warmup, c.opts.reps);
  const double bytes = 2.0 * static_cast<double>(it.n);
  c.large_copy_gbps = bytes / (t.median_ms * 1e-3) / 1e9;
  c.same_bytes_copy[copy_half_bytes(bytes)] = c.large_copy_gbps;
  put_timing(c, e, t, bytes);
}

void run_cast(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  const size_t n = static_cast<size_t>(numel_of(it.shape));
  cudaStream_t s = c.timer.stream();
  if (it.variant == "decode") {
    DeviceBuffer<uint8_t> codes(n);
    DeviceBuffer<float> out(n);
    fill_normal_fp8(codes.get(), n, 3, 8.0f, true, s);
    const Timing t = c.timer.time([&](cudaStream_t st) { cast_fp8_to_f32_cuda(codes.get(), out.get(), n, true, st); },
                                  c.opts.warmup, c.opts.reps);
    put_timing(c, e, t, 5.0 * static_cast<double>(n));
    return;
  }
  CastParams p;
  p.e4m3 = it.spec == "e4m3";
  DeviceBuffer<unsigned char> x(n * dsize(it.dtype));
  DeviceBuffer<uint8_t> out(n);
  fill_input(x.get(), it.dtype, n, false, s);
  const Timing t = c.timer.time(
      [&](cudaStream_t st) {
        if (it.dtype == "f32") cast_f32_to_fp8_cuda(reinterpret_cast<const float*>(x.get()), out.get(), n, p, st);
        else cast_16_to_fp8_cuda(reinterpret_cast<const uint16_t*>(x.get()), true, out.get(), n, p, st);
      },
      c.opts.warmup, c.opts.reps);
  put_timing(c, e, t, static_cast<double>(n * (dsize(it.dtype) + 1)));
}

struct QuantBuffers {
  DeviceBuffer<unsigned char> x, codes, ws;
  DeviceBuffer<float> scales, k, c, amax, tensor_scale;
  QuantGpuOut out() {
    QuantGpuOut o;
    o.codes = codes.get();
    o.scales = scales.size() ? scales.get() : nullptr;
    o.expand_k = k.size() ? k.get() : nullptr;
    o.expand_c = c.size() ? c.get() : nullptr;
    o.tensor_scale = tensor_scale.size() ? tensor_scale.get() : nullptr;
    return o;
  }
};

QuantBuffers make_quant_buffers(const QuantSpec& spec, const std::vector<int64_t>& shape, const std::string& dtype) {
  const QuantizedSize qs = quantized_size(spec, shape);
  QuantBuffers b;
  b.x.allocate(static_cast<size_t>(qs.numel) * dsize(dtype));
  b.codes.allocate(static_cast<size_t>(qs.code_bytes));
  if (!spec.is_passthrough()) b.scales.allocate(static_cast<size_t>(qs.num_groups));
  if (spec.has_expand()) {
    b.k.allocate(static_cast<size_t>(qs.num_groups));
    b.c.allocate(static_cast<size_t>(qs.num_groups));
  }
  b.amax.allocate(1);
  if (spec.scale == ScaleMode::E4M3) b.tensor_scale.allocate(1);
  b.ws.allocate(quantize_workspace_bytes(spec, shape));
  return b;
}

// A quantizer; with `transposed` (op cast-transpose, per-tensor FP8 specs) it also writes the codes
// transposed in the same pass (QuantGpuOut::codes_t), and those bytes count too.
void run_quantize(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e, bool transposed = false) {
  const QuantSpec spec = QuantSpec::parse(it.spec);
  const QuantizedSize qs = quantized_size(spec, it.shape);
  cudaStream_t s = c.timer.stream();
  QuantBuffers b = make_quant_buffers(spec, it.shape, it.dtype);
  fill_input(b.x.get(), it.dtype, static_cast<size_t>(qs.numel), spec.has_expand(), s);
  QuantGpuOptions go;
  DeviceBuffer<float> producer;
  if (it.variant == "group-scaling") {
    // The producing kernel's by-product: the max |x| of every 1x128 segment, computed outside the timing.
    const size_t chunk = 128;
    producer.allocate((static_cast<size_t>(qs.numel) + chunk - 1) / chunk);
    chunk_maxima_cuda(b.x.get(), dtype_of(it.dtype), static_cast<size_t>(qs.numel), chunk, producer.get(), s);
    go.producer_maxima = producer.get();
    go.producer_maxima_count = producer.size();
    e.note = "per-group maxima emitted by the producing kernel (computed outside the timing); one pass";
  } else if (it.variant == "delayed") {
    go.delayed_scale = 64.0f;  // a scale from the amax history (the value does not change the cost)
    go.delayed_scale_inv = 1.0f / 64.0f;
    e.note = "scale from the amax history; the tensor amax for the history is emitted in the same pass";
  } else if (it.variant == "jit") {
    e.note = "just-in-time amax: stage-1 maxima pass + encode pass (reads the input twice)";
  }
  QuantGpuOut out = b.out();
  DeviceBuffer<uint8_t> codes_t;
  if (transposed) {
    codes_t.allocate(static_cast<size_t>(qs.code_bytes));
    out.codes_t = codes_t.get();
    e.note = (e.note ? *e.note + "; " : std::string()) + "codes written row-major and transposed";
  }
  const Timing t = c.timer.time(
      [&](cudaStream_t st) { quantize_cuda(b.x.get(), dtype_of(it.dtype), it.shape, spec, out, b.ws.get(), go, st); },
      c.opts.warmup, c.opts.reps);
  const double written_t = transposed ? static_cast<double>(qs.code_bytes) : 0.0;
  put_timing(c, e, t,
             static_cast<double>(qs.numel) * dsize(it.dtype) + static_cast<double>(qs.total_bytes()) + written_t);
}

void run_dequantize(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  const QuantSpec spec = QuantSpec::parse(it.spec);
  const QuantizedSize qs = quantized_size(spec, it.shape);
  cudaStream_t s = c.timer.stream();
  QuantBuffers b = make_quant_buffers(spec, it.shape, it.dtype);
  fill_input(b.x.get(), it.dtype, static_cast<size_t>(qs.numel), spec.has_expand(), s);
  QuantGpuOut out = b.out();
  quantize_cuda(b.x.get(), dtype_of(it.dtype), it.shape, spec, out, b.ws.get(), QuantGpuOptions{}, s);
  DeviceBuffer<float> y(static_cast<size_t>(qs.numel));
  const Timing t = c.timer.time(
      [&](cudaStream_t st) {
        dequantize_cuda(spec, it.shape, b.codes.get(), out.scales, out.expand_k, out.expand_c, y.get(), st);
      },
      c.opts.warmup, c.opts.reps);
  put_timing(c, e, t, static_cast<double>(qs.total_bytes()) + 4.0 * static_cast<double>(qs.numel));
}

void run_amax(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  const size_t n = static_cast<size_t>(numel_of(it.shape));
  cudaStream_t s = c.timer.stream();
  DeviceBuffer<uint16_t> x(n);
  fill_normal_bf16(x.get(), n, 5, 1.0f, s);
  DeviceBuffer<float> amax(1);
  if (it.variant == "stage2") {
    const size_t chunk = 128, m = (n + chunk - 1) / chunk;
    DeviceBuffer<float> maxima(m);
    chunk_maxima_cuda(x.get(), InputDtype::BF16, n, chunk, maxima.get(), s);
    const Timing t = c.timer.time([&](cudaStream_t st) { reduce_maxima_cuda(maxima.get(), m, amax.get(), st); },
                                  c.opts.warmup, c.opts.reps);
    put_timing(c, e, t, 4.0 * static_cast<double>(m));
    e.note = fmt::format("group scaling: max of {} per-1x128-group maxima emitted by the producer", m);
    return;
  }
  DeviceBuffer<unsigned char> ws(amax_workspace_bytes(n));
  const Timing t =
      c.timer.time([&](cudaStream_t st) { tensor_amax_cuda(x.get(), InputDtype::BF16, n, amax.get(), ws.get(), st); },
                   c.opts.warmup, c.opts.reps);
  put_timing(c, e, t, 2.0 * static_cast<double>(n));
  e.note = "just-in-time: one full read of the tensor";
}

void run_adamw(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  const int64_t n = it.n;
  cudaStream_t s = c.timer.stream();
  const optim::StateRecipe r = optim::StateRecipe::parse(it.spec);
  optim::AdamwHyper h;
  const optim::UpdateRule rule = it.spec == "fp32" ? optim::UpdateRule::Torch : optim::UpdateRule::Coat;
  const optim::AdamwStepConsts consts = optim::make_step_consts(h, 100, rule);
  DeviceBuffer<float> p(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  fill_normal_f32(p.get(), static_cast<size_t>(n), 11, 0.02f, s);
  fill_normal_f32(g.get(), static_cast<size_t>(n), 12, 1e-3f, s);
  const int64_t shape[1] = {n};
  // Moments: signed ~1e-4 (m) and positive ~1e-8 (v), several decades, like real AdamW states.
  auto make_moment = [&](const optim::MomentSpec& ms, bool is_v, DeviceBuffer<float>& f32, QuantBuffers& qb,
                         LowpMomentDev& d) {
    d.spec = ms;
    DeviceBuffer<float> raw(static_cast<size_t>(n));
    fill_lognormal_f32(raw.get(), static_cast<size_t>(n), is_v ? 14 : 13, is_v ? 1e-8f : 1e-4f, 4.0f, is_v, s);
    if (ms.is_fp32()) {
      f32 = std::move(raw);
      d.fp32 = f32.get();
      return;
    }
    const QuantSpec& spec = *ms.spec;
    const QuantizedSize qs = quantized_size(spec, shape);
    qb.codes.allocate(static_cast<size_t>(qs.code_bytes));
    if (!spec.is_passthrough()) qb.scales.allocate(static_cast<size_t>(qs.num_groups));
    if (spec.has_expand()) {
      qb.k.allocate(static_cast<size_t>(qs.num_groups));
      qb.c.allocate(static_cast<size_t>(qs.num_groups));
    }
    qb.ws.allocate(quantize_workspace_bytes(spec, shape));
    QuantGpuOut o = qb.out();
    quantize_cuda(raw.get(), InputDtype::F32, shape, spec, o, qb.ws.get(), QuantGpuOptions{}, s);
    FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
    d.codes = qb.codes.get();
    d.scales = o.scales;
    d.k = o.expand_k;
    d.c = o.expand_c;
  };
  DeviceBuffer<float> fm, fv;
  QuantBuffers qm, qv;
  LowpMomentDev dm, dv;
  make_moment(r.m, false, fm, qm, dm);
  make_moment(r.v, true, fv, qv, dv);
  const double state_bytes = static_cast<double>(optim::state_bytes(r, n));
  // Bytes: p read + written, g read, each moment (codes + metadata) read + written.
  const double bytes = 12.0 * static_cast<double>(n) + 2.0 * state_bytes;
  Timing t;
  if (r.is_fp32()) {
    t = c.timer.time(
        [&](cudaStream_t st) {
          adamw_fp32_cuda(p.get(), g.get(), dm.fp32, dv.fp32, static_cast<size_t>(n), consts, st);
        },
        c.opts.warmup, c.opts.reps);
    e.kernel_path = "fp32 elementwise";
  } else if (optim::grouped_step_supported(r) && r.m.spec->group_size <= kFusedMaxGroup) {
    const auto cm = group_moment_consts(*r.m.spec, optim::state_rounding_key(r.m.spec->seed, 0, 100, 0));
    const auto cv = group_moment_consts(*r.v.spec, optim::state_rounding_key(r.v.spec->seed, 0, 100, 1));
    const Fp8MomentDev m8{static_cast<uint8_t*>(dm.codes), dm.scales, dm.k, dm.c};
    const Fp8MomentDev v8{static_cast<uint8_t*>(dv.codes), dv.scales, dv.k, dv.c};
    t = c.timer.time(
        [&](cudaStream_t st) {
          adamw_fp8_grouped_cuda(p.get(), g.get(), m8, v8, static_cast<size_t>(n),
                                 static_cast<int>(r.m.spec->group_size), consts, cm, cv, st);
        },
        c.opts.warmup, c.opts.reps);
    e.kernel_path = "fused one-pass (warp per group)";
  } else {
    DeviceBuffer<unsigned char> scratch(lowp_scratch_bytes(r, n));
    t = c.timer.time(
        [&](cudaStream_t st) { adamw_lowp_cuda(p.get(), g.get(), dm, dv, n, consts, 0, 100, scratch.get(), st); },
        c.opts.warmup, c.opts.reps);
    const bool scaled = !r.m.spec->is_passthrough() || !r.v.spec->is_passthrough();
    if (!optim::elementwise_step_supported(r)) {
      e.kernel_path = "three phases (dequantize, update, quantize)";
    } else if (!scaled) {
      e.kernel_path = "fused one-pass (elementwise states)";
    } else {
      e.kernel_path = "amax pass + fused step (elementwise states)";
      // The per-tensor scale needs the new moments' amax before the first code: the amax pass
      // reads g and both moments once more, beyond the bytes the step must move.
      e.note = fmt::format("the amax pass reads {:.0f} more bytes per parameter (g and both moments)",
                           4.0 + state_bytes / static_cast<double>(n));
    }
  }
  put_timing(c, e, t, bytes);
  e.params = n;
  e.gparams_per_s = static_cast<double>(n) / (t.median_ms * 1e-3) / 1e9;
  e.state_bytes_per_param = state_bytes / static_cast<double>(n);
}

void run_gemm(Ctx& c, const bench::BenchItem& it, bench::BenchKernel& e) {
  cudaStream_t s = c.timer.stream();
  GemmShape sh{it.m, it.gn, it.k};
  GemmConfig cfg;
  const bool bf16 = it.x_format == "bf16";
  cfg.x_format = parse_format(it.x_format);
  cfg.w_format = parse_format(it.w_format);
  cfg.y_format = Format::BF16;
  cfg.scaling = bf16 ? GemmScaling::None
                     : (it.scaling == "tensor" ? GemmScaling::Tensor
                                               : (it.scaling == "row" ? GemmScaling::Row : GemmScaling::Block));
  cfg.fast_accum = it.accum == "fast";
  const size_t es = bf16 ? 2 : 1;
  DeviceBuffer<unsigned char> x(static_cast<size_t>(it.m * it.k) * es), w(static_cast<size_t>(it.gn * it.k) * es);
  DeviceBuffer<uint16_t> y(static_cast<size_t>(it.m * it.gn));
  if (bf16) {
    fill_normal_bf16(reinterpret_cast<uint16_t*>(x.get()), static_cast<size_t>(it.m * it.k), 21, 1.0f, s);
    fill_normal_bf16(reinterpret_cast<uint16_t*>(w.get()), static_cast<size_t>(it.gn * it.k), 22, 1.0f, s);
  } else {
    // N(0, 1) rounded to FP8, as scripts/bench_peers.py feeds torch._scaled_mm (randn cast to
    // float8): the tensor cores' power, and so their clock, depends on the operand bits.
    fill_normal_fp8(x.get(), static_cast<size_t>(it.m * it.k), 21, 1.0f, cfg.x_format == Format::E4M3, s);
    fill_normal_fp8(w.get(), static_cast<size_t>(it.gn * it.k), 22, 1.0f, cfg.w_format == Format::E4M3, s);
  }
  const int64_t kb = (it.k + 127) / 128;
  size_t xs_n = 1, ws_n = 1;
  if (cfg.scaling == GemmScaling::Row) {
    xs_n = static_cast<size_t>(it.m);
    ws_n = static_cast<size_t>(it.gn);
  } else if (cfg.scaling == GemmScaling::Block) {
    xs_n = static_cast<size_t>(it.m * kb);
    ws_n = static_cast<size_t>((it.gn + 127) / 128 * ((kb + 3) / 4 * 4));
  }
  DeviceBuffer<float> xs(xs_n), wsc(ws_n);
  fill_value_f32(xs.get(), xs_n, 0.0625f, s);
  fill_value_f32(wsc.get(), ws_n, 0.03125f, s);
  GemmArgs a;
  a.x = x.get();
  a.w = w.get();
  a.y = y.get();
  a.x_scale = bf16 ? nullptr : xs.get();
  a.w_scale = bf16 ? nullptr : wsc.get();
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  GemmPlan plan = c.lt.plan(sh, cfg, a, s, 8, 5, c.opts.gemm_search);
  e.gemm = plan.to_json();
  if (!plan.supported()) {
    e.status = "unsupported: " + plan.status();
    return;
  }
  // Idle first (bench_peers.py does the same before each GEMM peer): the tensor cores' clock
  // depends on the heat left by what ran just before.
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  if (c.opts.gemm_cooldown_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(c.opts.gemm_cooldown_s));
  const Timing t = c.timer.time([&](cudaStream_t st) { c.lt.run(plan, a, st); }, c.opts.warmup, c.opts.reps);
  put_timing(c, e, t, 0);
  const double flops = 2.0 * static_cast<double>(it.m) * static_cast<double>(it.gn) * static_cast<double>(it.k);
  e.flops = flops;
  e.tflops = flops / (t.median_ms * 1e-3) / 1e12;
}

// A plan item's entry before it runs: what it is, no timing yet.
bench::BenchKernel kernel_entry(const bench::BenchItem& it) {
  bench::BenchKernel e;
  e.kernel = it.label;
  e.key = it.key;
  e.op = it.op;
  if (!it.spec.empty()) e.spec = it.spec;
  e.dtype = it.dtype;
  if (!it.variant.empty()) e.variant = it.variant;
  if (!it.shape.empty()) e.shape = it.shape;
  if (it.op == "gemm") {
    e.m = it.m;
    e.n = it.gn;
    e.k = it.k;
    e.x_format = it.x_format;
    e.w_format = it.w_format;
    e.scaling = it.scaling;
    e.accum = it.accum;
  }
  if (!it.extra_peer_keys.empty()) e.extra_peer_keys = it.extra_peer_keys;
  return e;
}

}  // namespace

Json machine_json() {
  const DeviceInfo& d = device_info();
  Json m = Json::object();
  m["device"] = d.available ? d.name : std::string("none: ") + d.why_not;
  if (d.available) {
    m["compute_capability"] = fmt::format("{}.{}", d.cc_major, d.cc_minor);
    m["sm_count"] = d.sm_count;
    m["memory_gib"] = static_cast<double>(d.total_mem) / (1u << 30);
    m["l2_mib"] = static_cast<double>(d.l2_bytes) / (1u << 20);
  }
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  cudaGetLastError();
  m["cuda_driver"] = fmt::format("{}.{}", drv / 1000, (drv % 1000) / 10);
  m["cuda_runtime"] = fmt::format("{}.{}", rt / 1000, (rt % 1000) / 10);
  m["cublaslt"] = d.available ? CublasLt::version_string() : std::string("-");
  return m;
}

bench::BenchDoc run_bench(const bench::BenchOptions& opts) {
  const DeviceInfo& dev = device_info();
  FP8SIM_REQUIRE(dev.available, "no usable CUDA device: {}", dev.why_not);
  FP8SIM_CUDA_CHECK(cudaSetDevice(0));
  Stream stream;
  BenchTimer timer(stream.get(), opts.flush_write, opts.launch_lead_us);
  CublasLt lt;
  Ctx ctx{timer, lt, opts, 0.0, {}};

  bench::BenchDoc doc;
  doc.command = opts.command_line;
  doc.date = now_text();
  doc.machine = machine_json();
  doc.warmup = opts.warmup;
  doc.reps = opts.reps;
  doc.l2_flush = opts.flush_write ? "256 MiB write" : "256 MiB read";
  doc.gemm_search = opts.gemm_search;
  doc.gemm_cooldown_s = opts.gemm_cooldown_s;
  doc.launch_lead_us = opts.launch_lead_us;
  doc.launch_lead_flushes = timer.lead_flushes();
  doc.smoke = opts.smoke;
  const auto plan = bench::make_plan(opts);
  Progress progress("bench", static_cast<double>(plan.size()));
  size_t done = 0;
  bool device_lost = false;
  for (const auto& it : plan) {
    bench::BenchKernel e = kernel_entry(it);
    if (device_lost) {
      e.status = "skipped: the device reported a fatal error earlier in this run";
    } else {
      try {
        e.status = "ok";
        if (it.op == "copy") run_copy(ctx, it, e);
        else if (it.op == "cast") run_cast(ctx, it, e);
        else if (it.op == "quantize") run_quantize(ctx, it, e);
        else if (it.op == "dequantize") run_dequantize(ctx, it, e);
        else if (it.op == "amax") run_amax(ctx, it, e);
        else if (it.op == "cast-transpose") run_quantize(ctx, it, e, true);
        else if (it.op == "adamw") run_adamw(ctx, it, e);
        else if (it.op == "gemm") run_gemm(ctx, it, e);
        else e.status = "error: unknown op";
      } catch (const std::exception& ex) {
        e.status = std::string("error: ") + ex.what();
        // A sticky error (illegal address, ...) poisons the context: stop timing, keep the report.
        const cudaError_t err = cudaDeviceSynchronize();
        if (err != cudaSuccess && cudaGetLastError() != cudaSuccess) device_lost = true;
        if (err != cudaSuccess) device_lost = true;
      }
    }
    doc.kernels.push_back(std::move(e));
    progress.update(static_cast<double>(++done));
  }
  progress.finish();
  if (!doc.kernels.empty() && doc.kernels[0].ceiling_gbps) {
    const bench::BenchKernel& k0 = doc.kernels[0];
    bench::Ceiling c;
    c.what = "cudaMemcpyAsync device to device, bytes read + written";
    c.bytes = k0.bytes.value_or(NAN);
    c.median_ms = k0.median_ms.value_or(NAN);
    c.gbps = *k0.ceiling_gbps;
    doc.ceiling = c;
  }
  // (cmd_bench warns before timing when the peers' settings differ from this run's)
  if (!opts.peers_path.empty()) bench::attach_peers(doc, opts.peers, opts.peers_path);
  if (!opts.coat_states_dir.empty()) {
    try {
      doc.coat_agreement = coat_agreement(opts.coat_states_dir);
    } catch (const std::exception& ex) {
      bench::CoatAgreement a;
      a.detail["status"] = std::string("error: ") + ex.what();
      doc.coat_agreement = std::move(a);
    }
  }
  bench::evaluate_targets(doc);
  return doc;
}

}  // namespace fp8sim::gpu
