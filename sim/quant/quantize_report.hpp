#pragma once
// The work behind `fp8sim quantize` as a library call (so `fp8sim report` and `fp8sim analyze`
// can run it in-process): quantize a tensor through a spec, dequantize it, and measure the error.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/metrics/error_stats.hpp"
#include "sim/metrics/histogram.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {

// Error statistics of a quantization: x (fp32, the widened input) against deq =
// dequantize(q), plus saturated_frac from the scaled magnitudes.
ErrorStats quantization_error_stats(const float* x, const QuantizedTensor& q, const float* deq, int threads = 0);
// The same from the input as stored (`values`, `dtype`, as quantize_any takes it) and q alone: the
// widened input and the dequantized values are made a few error chunks at a time, in cache, never
// whole. Error for an rht spec (dequantize_range).
ErrorStats quantization_error_stats(const void* values, InputDtype dtype, const QuantizedTensor& q, int threads = 0);

// Histograms of the scaled magnitudes handed to the encoder over the storage format's range:
// `after` is |x/s| (|x'/s| with DE); `before` is |x| / (amax/fmax) of plain absmax scaling
// at the same granularity (COAT Figure 3). Without DE both are the same histogram.
struct ScaledHistograms {
  Log2Histogram before;
  Log2Histogram after;
};
ScaledHistograms scaled_histograms(const float* x, const QuantizedTensor& q, int threads = 0);

struct QuantizeResult {
  QuantizedTensor q;
  std::vector<float> x;            // the input widened to fp32 (exactly)
  std::vector<float> dequantized;  // dequantize(q)
  ErrorStats stats;
  Json json;  // the document `fp8sim quantize --json` writes
  // Scale groups (0 for unscaled 16-bit storage, which has none).
  int64_t groups() const { return q.spec.is_passthrough() ? 0 : q.num_groups(); }
  // Storage bits per element, codes and metadata together (0 for an empty tensor).
  double bits_per_element() const {
    return q.numel() ? 8.0 * static_cast<double>(q.total_bytes()) / static_cast<double>(q.numel()) : 0.0;
  }
};

// One tensor's numbers as analyze reports them, from the CPU (run_quantize) or a device
// (gpu::Backend::tensor_metrics: analyze --device cuda), the same bits either way.
struct TensorMetrics {
  uint64_t nan = 0, inf = 0;  // non-finite values of the tensor
  ErrorStats stats;           // quantization_error_stats; without a spec, the tensor against itself
  // With a spec: the quantized tensor's scales, DE's k and c, amaxes and saturated_count; the
  // codes are not kept (empty).
  std::optional<QuantizedTensor> q;
};

// "histogram" {before, after} of run_quantize's document.
Json histogram_document(const ScaledHistograms& h);
// "expand" of run_quantize's document (DE specs): k and c per group with their summary.
Json expand_document(const QuantizedTensor& q);

// Runs quantize -> dequantize -> metrics. The JSON holds: "spec" (canonical text), "shape",
// "numel", "groups", "bytes" {codes, metadata, total, bits_per_element}, the metric keys of
// ErrorStats::to_json() at top level (mse, nmse, snr_db, max_abs_err, max_rel_err, cosine,
// underflow_frac, saturated_frac, ...), "tensor_amax", and with DE: "histogram" {"before",
// "after"} and "expand" {"k": [per-group k], "c": [per-group c], "k_min", "k_max", "k_mean",
// "fallback_groups" (robust: groups that kept plain scaling)}.
QuantizeResult run_quantize(const void* data, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                            const QuantizeOptions& opts = {});

}  // namespace fp8sim
