#include "sim/metrics/histogram.hpp"

#include <omp.h>

#include <cmath>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim {

Log2Histogram::Log2Histogram(int lo, int hi) : lo_(lo), hi_(hi) {
  FP8SIM_REQUIRE(lo < hi, "histogram range [{}, {}) is empty", lo, hi);
  counts_.assign(static_cast<size_t>(hi - lo), 0);
}

Log2Histogram Log2Histogram::for_format(Format f) {
  const FormatInfo& fi = format_info(f);
  const double lo_val = fi.min_subnormal > 0 ? fi.min_subnormal : fi.min_normal;
  const int lo = static_cast<int>(std::floor(std::log2(lo_val))) - 1;
  const int hi = static_cast<int>(std::floor(std::log2(fi.max))) + 2;
  return Log2Histogram(lo, hi);
}

void Log2Histogram::add(const float* values, size_t n, int threads) {
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const int nb = hi_ - lo_;
#pragma omp parallel num_threads(nt) if (n > (size_t{1} << 16))
  {
    std::vector<int64_t> local(static_cast<size_t>(nb), 0);
    int64_t below = 0, above = 0, zeros = 0, nans = 0;
#pragma omp for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      const uint32_t a = f32_bits(values[i]) & 0x7FFFFFFFu;
      if (a > 0x7F800000u) {
        ++nans;
      } else if (a == 0) {
        ++zeros;
      } else if (a == 0x7F800000u) {
        ++above;
      } else {
        const int b = floor_log2_f32(f32_from_bits(a));  // exact, from the exponent bits
        if (b < lo_) ++below;
        else if (b >= hi_) ++above;
        else ++local[static_cast<size_t>(b - lo_)];
      }
    }
#pragma omp critical
    {
      for (int i = 0; i < nb; ++i) counts_[static_cast<size_t>(i)] += local[static_cast<size_t>(i)];
      below_ += below;
      above_ += above;
      zeros_ += zeros;
      nan_ += nans;
    }
  }
}

void Log2Histogram::merge(const Log2Histogram& o) {
  FP8SIM_REQUIRE(o.lo_ == lo_ && o.hi_ == hi_, "cannot merge histograms over different ranges");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  below_ += o.below_;
  above_ += o.above_;
  zeros_ += o.zeros_;
  nan_ += o.nan_;
}

int64_t Log2Histogram::total() const {
  int64_t t = below_ + above_ + zeros_ + nan_;
  for (int64_t c : counts_) t += c;
  return t;
}

Json Log2Histogram::to_json() const {
  Json j = Json::object();
  j["log2_lo"] = lo_;
  j["log2_hi"] = hi_;
  Json c = Json::array();
  for (int64_t v : counts_) c.push_back(v);
  j["counts"] = std::move(c);
  j["below"] = below_;
  j["above"] = above_;
  j["zeros"] = zeros_;
  j["nan"] = nan_;
  return j;
}

}  // namespace fp8sim
