#pragma once
// Error statistics between a reference tensor x and its approximation y (e.g. dequantize(
// quantize(x))). Accumulated in double, streaming (add() any number of chunks, merge() partial
// accumulators), multi-threaded (OpenMP over chunks, merged in a fixed order so results do not
// depend on the thread count).
//
// Definitions, over the N elements where x is finite (pairs with a non-finite x are counted in
// `nonfinite` and skipped; a finite x whose y is not finite counts in `nonfinite_out` and makes
// the error metrics Inf):
//   mse            = sum (x - y)^2 / N
//   nmse           = sqrt( sum (x - y)^2 / sum x^2 )   relative L2 error (0 when x == y == 0)
//   snr_db         = 10 log10( sum x^2 / sum (x - y)^2 )  (+Inf when exact; JSON writes null)
//   max_abs_err    = max |x - y|
//   max_rel_err    = max |x - y| / |x| over x != 0
//   cosine         = sum x y / sqrt(sum x^2 * sum y^2)   (1 when both are all-zero)
//   underflow_frac = #(x != 0 and y == 0) / #(x != 0)   nonzeros flushed to zero
//   saturated_frac = #(|x/s| > bound) / N   with the scaled magnitudes handed to the encoder and
//                    bound = saturation_bound(format) (E4M3: 464; values up to it round to
//                    448 unclamped); the quantizer counts it while encoding; 0 when not given
#include <cstddef>
#include <cstdint>
#include <functional>

#include "sim/common/json.hpp"
#include "sim/formats/format.hpp"
#include "sim/metrics/error_step.hpp"

namespace fp8sim {

struct ErrorStats {
  int64_t count = 0;          // finite reference elements compared
  int64_t nonzero = 0;        // of which x != 0
  int64_t nonfinite = 0;      // reference elements that are NaN / Inf (skipped)
  int64_t nonfinite_out = 0;  // finite x whose approximation is NaN / Inf
  int64_t underflow = 0;      // x != 0, y == 0
  int64_t saturated = 0;      // |x/s| > saturation bound
  int64_t scaled_count = 0;   // elements whose scaled magnitude was seen
  double sum_sq_ref = 0;      // sum x^2
  double sum_sq_approx = 0;   // sum y^2
  double sum_sq_err = 0;      // sum (x - y)^2
  double sum_dot = 0;         // sum x y
  double max_abs_err = 0;
  double max_rel_err = 0;

  double mse() const;
  double nmse() const;
  double snr_db() const;
  double cosine() const;
  double underflow_frac() const;
  double saturated_frac() const;
  // {"mse", "nmse", "snr_db", "max_abs_err", "max_rel_err", "cosine", "underflow_frac",
  //  "saturated_frac", "count", "nonzero", "nonfinite", "nonfinite_out", "underflow", "saturated"}
  Json to_json() const;
  // Combines two accumulations (sums add, maxima max).
  void merge(const ErrorStats& other);
  // merge() of the element sums of a chunk.
  void add_sums(const ErrorSums& e);
};

class ErrorAccumulator {
 public:
  explicit ErrorAccumulator(int threads = 0) : threads_(threads) {}
  // x: reference, y: approximation, n elements: chunks of kErrorChunk (error_step.hpp), each
  // summed in element order, merged in chunk order.
  void add(const float* x, const float* y, size_t n);
  // add() of n elements that `fill` writes a few chunks at a time instead of whole arrays:
  // fill(begin, end, x, y) writes elements [begin, end) of both into x[0, end - begin) and
  // y[0, end - begin), at most kFillElements, on whichever thread asks; the same sums as add(), from
  // buffers that stay in cache.
  static constexpr size_t kFillElements = 4 * static_cast<size_t>(kErrorChunk);
  void add_filled(size_t n, const std::function<void(size_t, size_t, float*, float*)>& fill);
  // The same from sums computed elsewhere (the GPU), one per chunk of kErrorChunk elements in order.
  void add_chunk_sums(const ErrorSums* sums, size_t chunks);
  // Scaled magnitudes |x/s| (finite ones) for saturated_frac; `bound`: see saturation_bound().
  void add_scaled(const float* scaled, size_t n, double bound);
  const ErrorStats& stats() const { return stats_; }

 private:
  int threads_;
  ErrorStats stats_;
};

// ErrorAccumulator::add sums four chunks at once in AVX2 lanes when the CPU has it (the same
// sums: each lane adds its chunk's elements in order). Off, every chunk takes the portable loop;
// the tests compare the two, and FP8SIM_NO_SIMD=1 sets it off at start-up.
void set_error_sums_simd(bool enabled);
bool error_sums_simd();

// One-shot convenience.
ErrorStats compute_error_stats(const float* x, const float* y, size_t n, int threads = 0);

// compute_error_stats(x, x, n): a tensor kept in its stored precision, compared with itself, from
// its stored values (bf16 and fp16 widened exactly, element by element) with no widened copy and
// one light pass. The same bits: for a finite x every term error_terms_split gives is x*x or +0.0,
// so the sums of x^2, y^2 and x y are one sum, added in each chunk's element order as add() adds
// them, the error sum and both maxima stay +0.0, and no element underflows or turns non-finite.
ErrorStats self_error_stats(const void* values, InputDtype type, size_t n, int threads = 0);

}  // namespace fp8sim
