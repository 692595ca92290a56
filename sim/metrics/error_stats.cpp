#include "sim/metrics/error_stats.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8sim {

namespace {
constexpr size_t kChunk = static_cast<size_t>(kErrorChunk);
constexpr double kInf = std::numeric_limits<double>::infinity();

// One sequential pass in double over a chunk (error_sums_add, as the GPU adds them).
ErrorSums accumulate(const float* x, const float* y, size_t n) {
  ErrorSums e;
  for (size_t i = 0; i < n; ++i) error_sums_add(e, x[i], y[i]);
  return e;
}
}  // namespace

double ErrorStats::mse() const { return count ? sum_sq_err / static_cast<double>(count) : 0.0; }

double ErrorStats::nmse() const {
  if (sum_sq_err == 0.0) return 0.0;
  if (sum_sq_ref == 0.0) return kInf;
  return std::sqrt(sum_sq_err / sum_sq_ref);
}

double ErrorStats::snr_db() const {
  if (sum_sq_err == 0.0) return kInf;
  if (sum_sq_ref == 0.0) return -kInf;
  return 10.0 * std::log10(sum_sq_ref / sum_sq_err);
}

double ErrorStats::cosine() const {
  if (sum_sq_ref == 0.0 && sum_sq_approx == 0.0) return 1.0;
  if (sum_sq_ref == 0.0 || sum_sq_approx == 0.0) return 0.0;
  return sum_dot / std::sqrt(sum_sq_ref * sum_sq_approx);
}

double ErrorStats::underflow_frac() const {
  return nonzero ? static_cast<double>(underflow) / static_cast<double>(nonzero) : 0.0;
}

double ErrorStats::saturated_frac() const {
  return scaled_count ? static_cast<double>(saturated) / static_cast<double>(scaled_count) : 0.0;
}

Json ErrorStats::to_json() const {
  Json j = Json::object();
  j["mse"] = mse();
  j["nmse"] = nmse();
  j["snr_db"] = snr_db();
  j["max_abs_err"] = max_abs_err;
  j["max_rel_err"] = max_rel_err;
  j["cosine"] = cosine();
  j["underflow_frac"] = underflow_frac();
  j["saturated_frac"] = saturated_frac();
  j["count"] = count;
  j["nonzero"] = nonzero;
  j["nonfinite"] = nonfinite;
  j["nonfinite_out"] = nonfinite_out;
  j["underflow"] = underflow;
  j["saturated"] = saturated;
  return j;
}

void ErrorStats::merge(const ErrorStats& o) {
  count += o.count;
  nonzero += o.nonzero;
  nonfinite += o.nonfinite;
  nonfinite_out += o.nonfinite_out;
  underflow += o.underflow;
  saturated += o.saturated;
  scaled_count += o.scaled_count;
  sum_sq_ref += o.sum_sq_ref;
  sum_sq_approx += o.sum_sq_approx;
  sum_sq_err += o.sum_sq_err;
  sum_dot += o.sum_dot;
  max_abs_err = std::max(max_abs_err, o.max_abs_err);
  max_rel_err = std::max(max_rel_err, o.max_rel_err);
}

void ErrorStats::add_sums(const ErrorSums& e) {
  ErrorStats p;
  p.count = e.count;
  p.nonzero = e.nonzero;
  p.nonfinite = e.nonfinite;
  p.nonfinite_out = e.nonfinite_out;
  p.underflow = e.underflow;
  p.sum_sq_ref = e.sum_sq_ref;
  p.sum_sq_approx = e.sum_sq_approx;
  p.sum_sq_err = e.sum_sq_err;
  p.sum_dot = e.sum_dot;
  p.max_abs_err = e.max_abs_err;
  p.max_rel_err = e.max_rel_err;
  merge(p);
}

void ErrorAccumulator::add_chunk_sums(const ErrorSums* sums, size_t chunks) {
  for (size_t c = 0; c < chunks; ++c) stats_.add_sums(sums[c]);
}

void ErrorAccumulator::add(const float* x, const float* y, size_t n) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<ErrorSums> part(chunks);
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b = c * kChunk;
    part[c] = accumulate(x + b, y + b, std::min(n, b + kChunk) - b);
  }
  add_chunk_sums(part.data(), chunks);  // fixed order: independent of the thread count
}

void ErrorAccumulator::add_scaled(const float* scaled, size_t n, double fmax) {
  int64_t sat = 0, cnt = 0;
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) reduction(+ : sat, cnt) if (n > kChunk)
  for (size_t i = 0; i < n; ++i) {
    const double v = scaled[i];
    if (std::isnan(v)) continue;
    ++cnt;
    sat += std::fabs(v) > fmax ? 1 : 0;
  }
  stats_.saturated += sat;
  stats_.scaled_count += cnt;
}

ErrorStats compute_error_stats(const float* x, const float* y, size_t n, int threads) {
  ErrorAccumulator acc(threads);
  acc.add(x, y, n);
  return acc.stats();
}

}  // namespace fp8sim
