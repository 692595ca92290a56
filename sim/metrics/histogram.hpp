#pragma once
// Histogram of log2 magnitudes, e.g. of |x/s| over an FP8 format's range (COAT Figure 3: the
// distribution of scaled values before and after dynamic range expansion).
//
// Bins are [2^b, 2^(b+1)) for integer b in [lo, hi); values below 2^lo (but nonzero) fall in
// `below`, values >= 2^hi in `above`, exact zeros in `zeros`, NaN in `nan`. For a format F the
// natural range is lo = floor(log2(min_subnormal(F))) - 1 (flushed to zero on encode), hi =
// floor(log2(fmax(F))) + 2 (the bin holding fmax, plus one for saturated values).
// Binning is exact (from the fp32 exponent bits, never a libm log2), streaming and OpenMP-parallel.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/formats/format.hpp"

namespace fp8sim {

class Log2Histogram {
 public:
  Log2Histogram(int lo, int hi);
  static Log2Histogram for_format(Format f);  // the range described above
  void add(const float* values, size_t n, int threads = 0);
  void merge(const Log2Histogram& other);

  int lo() const { return lo_; }
  int hi() const { return hi_; }
  const std::vector<int64_t>& counts() const { return counts_; }  // hi - lo bins
  int64_t below() const { return below_; }
  int64_t above() const { return above_; }
  int64_t zeros() const { return zeros_; }
  int64_t nan() const { return nan_; }
  int64_t total() const;
  // {"log2_lo": lo, "log2_hi": hi, "counts": [...], "below": n, "above": n, "zeros": n, "nan": n}
  Json to_json() const;

 private:
  int lo_, hi_;
  std::vector<int64_t> counts_;
  int64_t below_ = 0, above_ = 0, zeros_ = 0, nan_ = 0;
};

}  // namespace fp8sim
