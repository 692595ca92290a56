#include "gpu/analyze/tensor_metrics.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/analyze/tensor_metrics_launch.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/quant/quantize.hpp"
#include "sim/common/buffer.hpp"
#include "sim/common/check.hpp"
#include "sim/quant/packing.hpp"

namespace fp8sim::gpu {

namespace {

// FP8SIM_GPU_PHASES=1: where analyze's GPU calls spend their time (upload, kernels, results),
// with the stream synchronised at each boundary, summed over the process and printed at its end.
struct Phases {
  bool on = [] {
    const char* e = std::getenv("FP8SIM_GPU_PHASES");
    return e && std::string(e) == "1";
  }();
  double upload = 0, kernels = 0, results = 0;
  int64_t tensors = 0, bytes = 0;
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  void mark(double& into, cudaStream_t s) {
    if (!on) return;
    cudaStreamSynchronize(s);
    const auto now = std::chrono::steady_clock::now();
    into += std::chrono::duration<double>(now - t).count();
    t = now;
  }
  void start() {
    if (on) t = std::chrono::steady_clock::now();
  }
  ~Phases() {
    if (on && tensors)
      std::fprintf(stderr,
                   "fp8sim: GPU phases: %lld tensors, %.2f GB: upload %.2f s, quantize and error sums %.2f s, "
                   "saturation count and results %.2f s\n",
                   static_cast<long long>(tensors), static_cast<double>(bytes) / 1e9, upload, kernels, results);
  }
};
Phases g_phases;

// Page-locked host blocks. A tensor's values come in a pooled Buffer (sim/common/buffer.hpp),
// whose blocks are reused from tensor to tensor: each is page-locked once (cudaHostRegister), so
// that its uploads run at the link's DMA rate instead of through the driver's staging of pageable
// memory (measured on an H100: 4.1 GB in about 0.57 s pageable, half the GPU's time per tensor),
// and unlocked by the pool's return hook before it goes back to the system. Locked blocks cannot
// be swapped out: up to the pool's blocks plus the tensors in use per process. FP8SIM_PIN=0 turns
// it off; a refused registration turns it off for the process (the uploads stay pageable). The
// hook runs on the thread that frees the block; analyze frees uploaded tensors on its main thread,
// the one that selected the device.
struct Pinned {
  std::mutex mu;
  std::unordered_map<void*, size_t> blocks;
  bool failed = false;
};
Pinned& pinned() {
  static Pinned* p = new Pinned;  // outlives the pool's last return (never destroyed)
  return *p;
}

void unpin_block(void* p, size_t) {
  Pinned& P = pinned();
  const std::lock_guard<std::mutex> lock(P.mu);
  if (P.blocks.erase(p) != 0 && cudaHostUnregister(p) != cudaSuccess)
    cudaGetLastError();  // its own failure only: the block goes back to the system either way
}

void pin_for_upload(const void* host) {
  static const bool on = [] {
    const char* e = std::getenv("FP8SIM_PIN");
    return !(e && std::string(e) == "0");
  }();
  size_t bytes = 0;
  if (!on || !buffer_pool::block_of(host, &bytes)) return;
  Pinned& P = pinned();
  const std::lock_guard<std::mutex> lock(P.mu);
  void* const block = const_cast<void*>(host);
  if (P.failed || P.blocks.count(block) != 0) return;
  static std::once_flag hook;
  std::call_once(hook, [] { buffer_pool::set_return_hook(&unpin_block); });
  P.blocks.emplace(block, bytes);  // first: a throw here leaves nothing locked
  if (cudaHostRegister(block, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();  // its own failure: the upload goes the pageable way
    P.blocks.erase(block);
    P.failed = true;
  }
}

// ErrorStats from the per-chunk sums, merged in chunk order as ErrorAccumulator::add merges them.
ErrorStats merged(const DeviceBuffer<ErrorSums>& d_sums, size_t chunks, cudaStream_t stream) {
  std::vector<ErrorSums> sums(chunks);
  d_sums.download(sums.data(), chunks, stream);
  ErrorAccumulator acc;
  acc.add_chunk_sums(sums.data(), chunks);
  return acc.stats();
}

}  // namespace

void page_lock_for_upload(const void* host) { pin_for_upload(host); }

size_t pinned_blocks() {
  Pinned& P = pinned();
  const std::lock_guard<std::mutex> lock(P.mu);
  return P.blocks.size();
}

bool pinning_refused() {
  Pinned& P = pinned();
  const std::lock_guard<std::mutex> lock(P.mu);
  return P.failed;
}

TensorMetrics tensor_metrics_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                    const QuantSpec* spec, MetricsScratch& sc, cudaStream_t stream) {
  if (spec) {
    spec->validate();
    if (spec->rht) throw UsageError(fmt::format("'{}': rht is quantized on the CPU", spec->to_string()));
  }
  const int64_t n = shape_numel(shape);
  if (n == 0) throw UsageError("an empty tensor is measured on the CPU");
  const int dt = dtype_code(dtype);
  const size_t chunks = static_cast<size_t>((n + kErrorChunk - 1) / kErrorChunk);
  sc.x.reserve(static_cast<size_t>(n) * dtype_bytes(dtype));
  sc.sums.reserve(chunks);
  sc.counters.reserve(3);
  g_phases.start();
  g_phases.tensors += 1;
  g_phases.bytes += n * static_cast<int64_t>(dtype_bytes(dtype));
  pin_for_upload(host_x);
  sc.x.upload(static_cast<const unsigned char*>(host_x), static_cast<size_t>(n) * dtype_bytes(dtype), stream);
  g_phases.mark(g_phases.upload, stream);
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(sc.counters.get(), 0, 3 * sizeof(unsigned long long), stream));

  TensorMetrics m;
  unsigned long long counts[3] = {0, 0, 0};
  if (!spec) {
    detail::launch_error_sums(sc.x.get(), dt, nullptr, n, sc.sums.get(), sc.counters.get(), stream);
    sc.counters.download(counts, 3, stream);
    m.nan = counts[0];
    m.inf = counts[1];
    m.stats = merged(sc.sums, chunks, stream);
    return m;
  }

  QuantizedTensor q;
  q.spec = *spec;
  q.shape.assign(shape.begin(), shape.end());
  q.geometry = group_geometry(*spec, shape);
  const int64_t ng = q.geometry.num_groups();
  const bool packed = is_fp4_fp6(spec->format) && spec->bits_per_code() < 8;
  const size_t code_bytes = packed ? static_cast<size_t>(packed_bytes(n, spec->bits_per_code()))
                                   : static_cast<size_t>(n) * spec->code_bytes_per_element();
  sc.codes.reserve(code_bytes);
  sc.dequantized.reserve(static_cast<size_t>(n));
  sc.scales.reserve(static_cast<size_t>(ng));
  sc.k.reserve(static_cast<size_t>(ng));
  sc.c.reserve(static_cast<size_t>(ng));
  sc.amax.reserve(1);
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(sc.amax.get(), 0, sizeof(float), stream));
  sc.tensor_scale.reserve(1);
  sc.workspace.reserve(std::max(quantize_workspace_bytes(*spec, shape), amax_workspace_bytes(static_cast<size_t>(n))));

  QuantGpuOut out;
  out.codes = sc.codes.get();
  out.scales = spec->is_passthrough() ? nullptr : sc.scales.get();
  out.expand_k = spec->has_expand() ? sc.k.get() : nullptr;
  out.expand_c = spec->has_expand() ? sc.c.get() : nullptr;
  out.tensor_amax = sc.amax.get();
  out.tensor_scale = spec->scale == ScaleMode::E4M3 ? sc.tensor_scale.get() : nullptr;
  QuantGpuOptions go;
  if (spec->delayed.enabled()) {
    // The history holds this tensor's own amax (analyze's convention for one captured step).
    float amax = 0;
    tensor_amax_cuda(sc.x.get(), dtype, static_cast<size_t>(n), sc.amax.get(), sc.workspace.get(), stream);
    sc.amax.download(&amax, 1, stream);
    DelayedScaler scaler(*spec);
    scaler.update(amax);
    go.delayed_scale = scaler.scale();
    go.delayed_scale_inv = scaler.scale_inv();
    q.delayed_scale = scaler.scale();
  }
  quantize_cuda(sc.x.get(), dtype, shape, *spec, out, sc.workspace.get(), go, stream);
  dequantize_cuda(*spec, shape, sc.codes.get(), out.scales, out.expand_k, out.expand_c, sc.dequantized.get(), stream);
  detail::launch_error_sums(sc.x.get(), dt, sc.dequantized.get(), n, sc.sums.get(), sc.counters.get(), stream);
  g_phases.mark(g_phases.kernels, stream);

  // What the host keeps of the quantized tensor (no codes).
  if (!spec->is_passthrough()) {
    q.scales.resize(static_cast<size_t>(ng));
    sc.scales.download(q.scales.data(), q.scales.size(), stream);
  }
  if (spec->has_expand()) {
    q.expand_k.resize(static_cast<size_t>(ng));
    q.expand_c.resize(static_cast<size_t>(ng));
    sc.k.download(q.expand_k.data(), q.expand_k.size(), stream);
    sc.c.download(q.expand_c.data(), q.expand_c.size(), stream);
  }
  if (spec->scale == ScaleMode::E4M3) sc.tensor_scale.download(&q.tensor_scale, 1, stream);
  sc.amax.download(&q.tensor_amax, 1, stream);

  // The saturated count, from the value each element handed the encoder (scaled_magnitudes').
  const GroupGeometry& g = q.geometry;
  const detail::MetricsGeometry mg{g.rows, g.cols, g.group_rows, g.group_cols, g.grid_cols};
  detail::SaturationArgs sa;
  sa.bound = saturation_bound(spec->format);
  std::vector<float> mult;  // multipliers: delayed scaling's one, NVFP4's per group
  if (spec->is_passthrough()) {
    sa.by = detail::ScaledBy::None;
  } else if (spec->has_expand()) {
    sa.by = detail::ScaledBy::Expand;
    sa.k = sc.k.get();
    sa.c = sc.c.get();
    sa.s = sc.scales.get();
  } else if (spec->delayed.enabled()) {
    mult = {q.delayed_scale};
  } else if (spec->scale == ScaleMode::E4M3) {
    for (float stored : q.scales) mult.push_back(nvfp4_multiplier(stored));
  } else {
    sa.by = detail::ScaledBy::Plain;
    sa.consts = scale_consts(*spec);
    if (ng == 1 && spec->granularity == Granularity::Tensor) {
      sa.tensor_amax = sc.amax.get();
    } else {
      sc.group_amax.reserve(static_cast<size_t>(ng));
      detail::launch_group_amax(sc.x.get(), dt, mg, sc.group_amax.get(), stream);
      sa.amax_bits = sc.group_amax.get();
    }
  }
  if (!mult.empty()) {
    sa.by = detail::ScaledBy::Multiply;
    sc.mult.upload(mult, stream);
    sa.mult = sc.mult.get();
    sa.mult_count = static_cast<int64_t>(mult.size());
  }
  detail::launch_saturated_count(sc.x.get(), dt, mg, sa, sc.counters.get() + 2, stream);
  sc.counters.download(counts, 3, stream);

  m.nan = counts[0];
  m.inf = counts[1];
  m.stats = merged(sc.sums, chunks, stream);
  // As quantization_error_stats: the saturated count over the finite elements, all of them seen.
  m.stats.saturated = static_cast<int64_t>(counts[2]);
  m.stats.scaled_count = m.stats.count;
  g_phases.mark(g_phases.results, stream);
  q.nonfinite_count = static_cast<int64_t>(counts[0] + counts[1]);
  q.saturated_count = static_cast<int64_t>(counts[2]);
  m.q = std::move(q);
  return m;
}

}  // namespace fp8sim::gpu
