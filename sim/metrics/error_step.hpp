#pragma once
// One element's contribution to the error statistics (sim/metrics/error_stats.hpp), shared bit
// for bit by the CPU accumulator and the GPU's (gpu/analyze/tensor_metrics.cu): the sums are in
// double, in element order within a chunk, so both sides must add in the same order with the
// same operations. nvcc-safe: no exceptions, no library calls.
#include <cstdint>

#include "sim/common/hd.hpp"

namespace fp8sim {

// Elements per chunk: each chunk is summed in element order from zero, and the chunks' sums are
// merged in chunk order (ErrorAccumulator), whatever computes them.
constexpr int64_t kErrorChunk = int64_t{1} << 16;

// The sums and counts of ErrorStats that the elements build (its saturation fields come from the
// quantizer instead).
struct ErrorSums {
  int64_t count = 0, nonzero = 0, nonfinite = 0, nonfinite_out = 0, underflow = 0;
  double sum_sq_ref = 0, sum_sq_approx = 0, sum_sq_err = 0, sum_dot = 0;
  double max_abs_err = 0, max_rel_err = 0;
};

// One element (x reference, y approximation) split for a parallel caller (the GPU's,
// gpu/analyze/tensor_metrics.cu): its counts and maxima go into `s` (merging them does not depend
// on the order: sums of integers, maxima of non-negative values), and the four terms of the sums
// come back in `t`, for the caller to add in element order. A non-finite x is counted and adds
// nothing; a finite x whose y is not finite makes sum_sq_err and the maxima +Inf. A term left out
// is +0.0, which leaves every sum as it is (sums of squares stay >= +0.0, and sum_dot, starting at
// +0.0, is never -0.0 under round-to-nearest).
FP8SIM_HD void error_terms_split(ErrorSums& s, float x, float y, double t[4]) {
  t[0] = t[1] = t[2] = t[3] = 0.0;
  if (!is_finite_bits(f32_bits(x))) {
    ++s.nonfinite;
    return;
  }
  ++s.count;
  const double xv = x, yv = y;
  if (xv != 0.0) ++s.nonzero;
  if (!is_finite_bits(f32_bits(y))) {
    const double inf = static_cast<double>(f32_from_bits(0x7F800000u));
    ++s.nonfinite_out;
    t[2] = inf;
    s.max_abs_err = inf;
    if (xv != 0.0) s.max_rel_err = inf;
    return;
  }
  const double d = xv - yv;
  const double ad = d < 0.0 ? -d : d;
  t[0] = xv * xv;
  t[1] = yv * yv;
  t[2] = d * d;
  t[3] = xv * yv;
  s.max_abs_err = s.max_abs_err < ad ? ad : s.max_abs_err;
  if (xv != 0.0) {
    const double rel = ad / (xv < 0.0 ? -xv : xv);
    s.max_rel_err = s.max_rel_err < rel ? rel : s.max_rel_err;
    if (yv == 0.0) ++s.underflow;
  }
}

// Adds the pair (x reference, y approximation) in element order: the CPU's sequential loop.
FP8SIM_HD void error_sums_add(ErrorSums& s, float x, float y) {
  double t[4];
  error_terms_split(s, x, y, t);
  s.sum_sq_ref += t[0];
  s.sum_sq_approx += t[1];
  s.sum_sq_err += t[2];
  s.sum_dot += t[3];
}

}  // namespace fp8sim
