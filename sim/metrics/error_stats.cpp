#include "sim/metrics/error_stats.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8sim {

namespace {
constexpr size_t kChunk = size_t{1} << 16;  // elements per work item; partials merge in chunk order
constexpr double kInf = std::numeric_limits<double>::infinity();

// One sequential pass in double over a chunk.
void accumulate(const float* x, const float* y, size_t n, ErrorStats& s) {
  for (size_t i = 0; i < n; ++i) {
    const double xv = x[i];
    if (!std::isfinite(xv)) {
      ++s.nonfinite;
      continue;
    }
    ++s.count;
    const double yv = y[i];
    if (xv != 0.0) ++s.nonzero;
    if (!std::isfinite(yv)) {
      ++s.nonfinite_out;
      s.sum_sq_err = kInf;
      s.max_abs_err = kInf;
      if (xv != 0.0) s.max_rel_err = kInf;
      continue;
    }
    const double d = xv - yv;
    const double ad = std::fabs(d);
    s.sum_sq_ref += xv * xv;
    s.sum_sq_approx += yv * yv;
    s.sum_sq_err += d * d;
    s.sum_dot += xv * yv;
    s.max_abs_err = std::max(s.max_abs_err, ad);
    if (xv != 0.0) {
      s.max_rel_err = std::max(s.max_rel_err, ad / std::fabs(xv));
      if (yv == 0.0) ++s.underflow;
    }
  }
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

void ErrorAccumulator::add(const float* x, const float* y, size_t n) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<ErrorStats> part(chunks);
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b = c * kChunk;
    accumulate(x + b, y + b, std::min(n, b + kChunk) - b, part[c]);
  }
  for (const auto& p : part) stats_.merge(p);  // fixed order: independent of the thread count
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
