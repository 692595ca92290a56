#include "sim/quant/quantize_report.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim {

namespace {

// Elements [b, e) of the input as stored, widened exactly, into out[0, e - b).
void widen_range(const void* data, InputDtype dtype, size_t b, size_t e, float* out) {
  if (dtype == InputDtype::F32) {
    std::copy(static_cast<const float*>(data) + b, static_cast<const float*>(data) + e, out);
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(data);
  const bool bf = dtype == InputDtype::BF16;
  for (size_t i = b; i < e; ++i) out[i - b] = bf ? bf16_to_f32(p[i]) : fp16_to_f32(p[i]);
}

std::vector<float> widen(const void* data, InputDtype dtype, int64_t n, int threads) {
  std::vector<float> x(static_cast<size_t>(n));
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  constexpr int64_t kBlock = int64_t{1} << 16;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t b = 0; b < n; b += kBlock)
    widen_range(data, dtype, static_cast<size_t>(b), static_cast<size_t>(std::min(n, b + kBlock)), x.data() + b);
  return x;
}

// quantization_error_stats' fields that come from the quantizer rather than the elements.
ErrorStats with_quantizer_counts(ErrorStats s, const QuantizedTensor& q) {
  // The quantizer counted |x/s| > fmax over the finite elements while encoding.
  s.saturated = q.saturated_count;
  // With rht the output is transformed back, so an exact zero there is not a flushed code: the
  // quantizer's count of nonzero (transformed) values encoded as zero is.
  if (q.spec.rht) s.underflow = q.underflow_count;
  s.scaled_count = s.count;
  return s;
}

}  // namespace

ErrorStats quantization_error_stats(const float* x, const QuantizedTensor& q, const float* deq, int threads) {
  ErrorAccumulator acc(threads);
  acc.add(x, deq, static_cast<size_t>(q.numel()));
  return with_quantizer_counts(acc.stats(), q);
}

ErrorStats quantization_error_stats(const void* values, InputDtype dtype, const QuantizedTensor& q, int threads) {
  // A finite tensor stored unscaled as its own format (bf16 as bf16, fp16 as fp16) dequantizes to
  // itself: its sums are the tensor compared with itself, the same bits with one read of the values.
  if (input_in_format(dtype, q.spec.format) && q.spec.is_passthrough() && q.nonfinite_count == 0)
    return with_quantizer_counts(self_error_stats(values, dtype, static_cast<size_t>(q.numel()), threads), q);
  // dequantize_range's checks of q (no rht, consistent sizes) on this thread: an exception must not
  // leave the parallel region of add_filled.
  dequantize_range(q, 0, 0, nullptr);
  ErrorAccumulator acc(threads);
  acc.add_filled(static_cast<size_t>(q.numel()), [&](size_t b, size_t e, float* x, float* y) {
    widen_range(values, dtype, b, e, x);
    dequantize_range(q, static_cast<int64_t>(b), static_cast<int64_t>(e), y);
  });
  return with_quantizer_counts(acc.stats(), q);
}

ScaledHistograms scaled_histograms(const float* x, const QuantizedTensor& q, int threads) {
  const Format f = q.spec.format;
  ScaledHistograms h{Log2Histogram::for_format(f), Log2Histogram::for_format(f)};
  std::vector<float> mags(static_cast<size_t>(q.numel()));
  scaled_magnitudes(x, q, mags.data(), true, threads);
  h.after.add(mags.data(), mags.size(), threads);
  if (q.spec.has_expand()) {
    scaled_magnitudes(x, q, mags.data(), false, threads);
    h.before.add(mags.data(), mags.size(), threads);
  } else {
    h.before = h.after;
  }
  return h;
}

Json histogram_document(const ScaledHistograms& h) {
  Json hist = Json::object();
  hist["before"] = h.before.to_json();
  hist["after"] = h.after.to_json();
  return hist;
}

Json expand_document(const QuantizedTensor& q) {
  Json ex = Json::object();
  Json ks = Json::array();
  double kmin = INFINITY, kmax = -INFINITY, ksum = 0;
  int64_t finite = 0, fallback = 0;
  std::map<float, int64_t> kcount;
  for (size_t g = 0; g < q.expand_k.size(); ++g) {
    const float k = q.expand_k[g];
    ks.push_back(k);
    if (!std::isnan(k)) ++kcount[k];  // NaN would break the map's ordering
    if (std::isfinite(k)) {
      kmin = std::min(kmin, static_cast<double>(k));
      kmax = std::max(kmax, static_cast<double>(k));
      ksum += k;
      ++finite;
    }
    if (q.spec.expand == ExpandMode::Robust && k == 1.0f && q.expand_c[g] == 1.0f) ++fallback;
  }
  ex["mode"] = std::string(expand_mode_name(q.spec.expand));
  ex["k_min"] = finite ? kmin : NAN;
  ex["k_max"] = finite ? kmax : NAN;
  ex["k_mean"] = finite ? ksum / static_cast<double>(finite) : NAN;
  ex["nonfinite_k_groups"] = static_cast<int64_t>(q.expand_k.size()) - finite;
  ex["fallback_groups"] = fallback;
  Json dist = Json::array();
  for (const auto& [k, c] : kcount) {
    Json e = Json::object();
    e["k"] = k;
    e["groups"] = c;
    dist.push_back(std::move(e));
  }
  ex["k_distribution"] = std::move(dist);
  ex["k"] = std::move(ks);
  return ex;
}

QuantizeResult run_quantize(const void* data, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                            const QuantizeOptions& opts) {
  QuantizeResult r;
  const int64_t n = shape_numel(shape);
  // Quantize from the stored dtype (never round twice); the fp32 copy is only for the metrics.
  r.q = quantize_any(data, dtype, shape, spec, opts);
  r.x = widen(data, dtype, n, opts.threads);
  r.dequantized = dequantize(r.q, opts.threads);
  r.stats = quantization_error_stats(r.x.data(), r.q, r.dequantized.data(), opts.threads);

  Json j = Json::object();
  j["spec"] = spec.to_string();
  Json shp = Json::array();
  for (int64_t d : shape) shp.push_back(d);
  j["shape"] = std::move(shp);
  j["numel"] = n;
  j["groups"] = r.groups();
  Json bytes = Json::object();
  bytes["codes"] = r.q.code_bytes();
  bytes["metadata"] = r.q.metadata_bytes();
  bytes["total"] = r.q.total_bytes();
  bytes["bits_per_element"] = r.bits_per_element();
  j["bytes"] = std::move(bytes);
  const Json metrics = r.stats.to_json();
  for (const auto& [k, v] : metrics.as_object()) j[k] = v;
  j["tensor_amax"] = r.q.tensor_amax;
  if (!r.q.spec.is_passthrough() && n > 0)
    j["histogram"] = histogram_document(scaled_histograms(r.x.data(), r.q, opts.threads));
  if (r.q.spec.has_expand()) j["expand"] = expand_document(r.q);
  r.json = std::move(j);
  return r;
}

}  // namespace fp8sim
