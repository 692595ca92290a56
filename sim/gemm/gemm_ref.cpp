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
// GPU, FP8 tensor cores (measured on the H200, modelled bit for bit in tc_model.hpp and
// docs/numerics.md): each wgmma step adds 32 exact products and the accumulator C in one fused
// sum that truncates every addend below 2^(e_max - 13) (e_max: the largest addend's exponent, so
// each addend loses less than 2^-13 of 2^e_max <= M <= S_step + |C|; a product of subnormal
// codes aligns at the smallest normal exponent, so S must count its operands with at least their
// format's smallest normal magnitude, as fp8sim compare does) and then truncates the
// sum to 13 fraction bits (less than 2^-13 of S_step + |C| again). One step errs by less than
// (32 + 2) 2^-13 (S_step + |C|). cuBLAS's "split" accumulation (FAST_ACCUM = 0) and block scaling
// chain L = 128 elements of K (4 steps) from zero and then promote to fp32; FAST_ACCUM = 1 chains
// all of K: L = K. Within an interval C is the partial sum so far, |C| <= S_interval, so the
// interval errs by less than 34 ceil(L / 32) 2^-13 S. The truncation is toward zero for every
// addend: the errors are biased, and no probabilistic (square-root) bound holds; this worst case
// is what a GPU result may differ by (1.7 % of S at L = 128). Where the algorithm is pinned,
// fp8sim compare checks the exact model instead (0 differing bits) and this bound is the backstop.
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
  const double kd = static_cast<double>(k);
  GemmTolerance t;
  const double cpu = (kd + 2.0) * u;
  double gpu_acc = 0;
  int64_t L = k;
  std::string acc_text;
  if (num.fp8) {
    L = (num.block_scaled || !num.fast_accum) ? std::min<int64_t>(128, k) : k;
    const int64_t steps = (L + 31) / 32;
    gpu_acc = 34.0 * static_cast<double>(steps) * eps_tc;
    acc_text = fmt::format("34 ceil(L={}/32) 2^-13", L);
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
