#include "sim/gemm/gemm_ref.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>

#include "sim/common/check.hpp"

namespace fp8sim::gemm {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

void check_shape(int64_t m, int64_t n, int64_t k) {
  FP8SIM_REQUIRE(m > 0 && n > 0 && k > 0, "GEMM shape must be positive, got M={} N={} K={}", m, n, k);
}
}  // namespace

void gemm_ref_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) {
  check_shape(m, n, k);
  ConstMap X(x, m, k), W(w, n, k);
  Map Y(y, m, n);
  Y.noalias() = X * W.transpose();
}

void gemm_abs_f32(const float* x, const float* w, float* s, int64_t m, int64_t n, int64_t k) {
  check_shape(m, n, k);
  ConstMap X(x, m, k), W(w, n, k);
  Map S(s, m, n);
  const RowMat ax = X.cwiseAbs(), aw = W.cwiseAbs();
  S.noalias() = ax * aw.transpose();
}

// ---- the tolerance -------------------------------------------------------------------------------
//
// Let T_k = x_k * w_k be the exact products of the dequantized operands of one output element,
// Y = sum_k T_k its exact value and S = sum_k |T_k|. u = 2^-24 is the fp32 unit roundoff.
//
// CPU reference (this file): each operand is dequantized in fp32 (code * scale: one rounding,
// |delta| <= u), each product rounds once, and the K-term fp32 sum, in whatever order Eigen's
// blocked kernel adds, errs by at most gamma_{K-1} * S (Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., eq. 3.4). First order: |Y_ref - Y| <= (K + 2) u S.
//
// GPU, BF16 tensor cores: bf16 x bf16 products are exact in fp32 (8 + 8 significand bits) and are
// accumulated in fp32. We allow a truncating fp32 accumulator (2u per addition): 2 K u S.
//
// GPU, FP8 tensor cores: E4M3/E5M2 products are exact (4 + 4 significand bits). The tensor core
// accumulates them with limited precision: DeepSeek-V3 (arXiv 2412.19437, section 3.3.2) measured
// that FP8 GEMM on Hopper keeps about 14 bits, i.e. each accumulation step errs by up to
// eps_tc = 2^-13 relative to the running sum. cuBLAS's "split" accumulation (FAST_ACCUM = 0)
// promotes the partial sum to fp32 every L elements of K; we take L = 128 (the interval DeepSeek
// uses and the one block scaling forces, since the scale changes every 128 of K). FAST_ACCUM = 1
// never promotes: L = K. The worst case over one interval, L * eps_tc * S (1.6 % of S for
// L = 128), exceeds |Y| ~ S / sqrt(K) of a random-sign dot product, so it could not tell a wrong
// scale from rounding. We use the probabilistic bound of Higham & Mary (SIAM J. Sci. Comput. 41(5),
// 2019, Theorem 3.1): with independent mean-zero errors, |error| <= lambda sqrt(L) eps_tc S with
// probability >= 1 - 2 exp(-lambda^2 / 2); lambda = 7 makes that 4.6e-11 per element, so a
// 10^8-element comparison expects no false failure. (If the hardware truncates rather than rounds,
// the errors are biased and only the worst case holds; an element over this bound is then
// reported as a finding about the hardware, never hidden by widening the bound.)
// Then ceil(K / L) fp32 promotions and the scale multiplications (at most 3 roundings):
// (ceil(K / L) + 3) u S.
//
// Output: an fp32 result rounds once more (u |Y|); a bf16 result rounds to 8 significand bits,
// |error| <= 2^-9 |Y_gpu| <= 2^-9 (|Y_ref| + err); we allow 2 * 2^-9 |Y_ref|, covering the
// second-order term. An absolute floor of 2^-126 (the smallest fp32 normal) covers results that
// underflow.
//
// Total: |Y_gpu - Y_ref| <= [ (K + 2) u + gpu_acc + (ceil(K / L) + 3) u ] S + out |Y_ref| + 2^-126.
GemmTolerance gemm_tolerance(int64_t k, const GemmNumerics& num) {
  FP8SIM_REQUIRE(k > 0, "GEMM K must be positive, got {}", k);
  constexpr double u = 0x1p-24;
  constexpr double eps_tc = 0x1p-13;
  constexpr double lambda = 7.0;
  const double kd = static_cast<double>(k);
  GemmTolerance t;
  const double cpu = (kd + 2.0) * u;
  double gpu_acc = 0;
  int64_t L = k;
  std::string acc_text;
  if (num.fp8) {
    L = (num.block_scaled || !num.fast_accum) ? std::min<int64_t>(128, k) : k;
    gpu_acc = lambda * std::sqrt(static_cast<double>(L)) * eps_tc;
    acc_text = fmt::format("{} sqrt(L={}) 2^-13", lambda, L);
  } else {
    gpu_acc = 2.0 * kd * u;
    acc_text = fmt::format("2 K u");
  }
  const double promotions = (std::ceil(kd / static_cast<double>(L)) + 3.0) * u;
  t.promote_interval = L;
  t.rel_sum_abs = cpu + gpu_acc + promotions;
  t.rel_y = num.y_format == Format::BF16 ? 2.0 * 0x1p-9 : u;
  t.abs_floor = 0x1p-126;
  t.derivation = fmt::format(
      "|err| <= [(K+2)u + {} + (ceil(K/L)+3)u] * sum|x*w| + {} * |y| + 2^-126 with K={}, u=2^-24 "
      "= {:.3e} * sum|x*w| + {:.3e} * |y|",
      acc_text, num.y_format == Format::BF16 ? "2*2^-9 (bf16 output)" : "u (fp32 output)", k, t.rel_sum_abs, t.rel_y);
  return t;
}

Json GemmTolerance::to_json() const {
  Json j = Json::object();
  j["rel_sum_abs"] = rel_sum_abs;
  j["rel_y"] = rel_y;
  j["abs_floor"] = abs_floor;
  j["promote_interval"] = promote_interval;
  j["derivation"] = derivation;
  return j;
}

GemmCheck check_gemm(const float* y_test, const float* y_ref, const float* s_abs, int64_t m, int64_t n,
                     const GemmTolerance& tol) {
  GemmCheck c;
  c.elements = m * n;
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const size_t idx = static_cast<size_t>(i * n + j);
      const float a = y_test[idx], b = y_ref[idx];
      const bool fa = std::isfinite(a), fb = std::isfinite(b);
      if (!fa || !fb) {
        // Same non-finite value at the same place agrees (NaN with NaN, +Inf with +Inf).
        const bool same = (std::isnan(a) && std::isnan(b)) || (!fa && !fb && a == b);
        if (!same) {
          if (c.nonfinite_mismatch == 0) {  // report the first one as the worst
            c.worst_row = i;
            c.worst_col = j;
            c.worst_gpu = a;
            c.worst_ref = b;
          }
          ++c.nonfinite_mismatch;
          c.max_err_over_tol = INFINITY;
        }
        continue;
      }
      const double err = std::fabs(static_cast<double>(a) - static_cast<double>(b));
      const double bound = tol.rel_sum_abs * static_cast<double>(s_abs[idx]) +
                           tol.rel_y * std::fabs(static_cast<double>(b)) + tol.abs_floor;
      const double ratio = err / bound;
      if (ratio > 1.0) ++c.over_tolerance;
      if (ratio > c.max_err_over_tol || (c.worst_row < 0 && c.nonfinite_mismatch == 0)) {
        c.max_err_over_tol = ratio;
        c.worst_row = i;
        c.worst_col = j;
        c.worst_gpu = a;
        c.worst_ref = b;
      }
      c.max_abs_err = std::max(c.max_abs_err, err);
      err2 += err * err;
      ref2 += static_cast<double>(b) * static_cast<double>(b);
    }
  }
  c.rel_fro_err = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
  return c;
}

Json GemmCheck::to_json() const {
  Json j = Json::object();
  j["elements"] = elements;
  j["over_tolerance"] = over_tolerance;
  j["nonfinite_mismatch"] = nonfinite_mismatch;
  j["max_abs_err"] = max_abs_err;
  j["max_err_over_tol"] = max_err_over_tol;
  j["rel_fro_err"] = rel_fro_err;
  if (worst_row >= 0) {
    Json w = Json::object();
    w["row"] = worst_row;
    w["col"] = worst_col;
    w["gpu"] = worst_gpu;
    w["ref"] = worst_ref;
    j["worst"] = std::move(w);
  }
  j["passed"] = passed();
  return j;
}

}  // namespace fp8sim::gemm
