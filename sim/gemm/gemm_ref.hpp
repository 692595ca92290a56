#pragma once
// The CPU reference for the GPU GEMMs: Y (M, N) = X (M, K) * W (N, K)^T (the nn.Linear layout),
// computed with Eigen in fp32 from DEQUANTIZED inputs (code * scale, fp32), plus the tolerance
// a GPU result must meet, derived from K and the formats (gemm_tolerance; the derivation is in
// gemm_ref.cpp), and the comparison that applies it element by element.
#include <cstdint>
#include <string>

#include "sim/common/json.hpp"
#include "sim/formats/format.hpp"

namespace fp8sim::gemm {

// Y = X * W^T in fp32 (Eigen; multi-threaded through OpenMP when Eigen is built with it).
void gemm_ref_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k);
// S = |X| * |W|^T in fp32: S_ij = sum_k |x_ik| |w_jk|, the scale every rounding-error bound of a
// dot product is proportional to (an upper bound on |Y_ij| too).
void gemm_abs_f32(const float* x, const float* w, float* s, int64_t m, int64_t n, int64_t k);

// How the GPU GEMM accumulated (what the tolerance depends on besides K and the formats).
struct GemmNumerics {
  Format x_format = Format::E4M3;  // E4M3, E5M2 or BF16
  Format w_format = Format::E4M3;
  Format y_format = Format::FP32;  // the GPU output format (BF16 adds one rounding)
  bool fp8 = true;                 // FP8 tensor-core path (limited internal accumulation)
  bool fast_accum = false;         // FP8: no periodic promotion to fp32
  bool block_scaled = false;       // 1x128 / 128x128 scales: promotion at every 128 of K regardless
};

// |Y_gpu - Y_ref| <= rel_sum_abs * S_ij + rel_y * |Y_ref_ij| + abs_floor, element by element.
struct GemmTolerance {
  double rel_sum_abs = 0;        // times S_ij = sum_k |x_ik w_jk|
  double rel_y = 0;              // times |Y_ref_ij| (output rounding)
  double abs_floor = 0;          // absolute slack for results that underflow fp32 (min subnormal scale)
  int64_t promote_interval = 0;  // L: elements of K accumulated in the tensor core between fp32 promotions
  std::string derivation;        // one line: the formula with the numbers plugged in
  Json to_json() const;
};
GemmTolerance gemm_tolerance(int64_t k, const GemmNumerics& num);

struct GemmCheck {
  int64_t elements = 0;
  int64_t over_tolerance = 0;      // elements outside the tolerance (0 to pass)
  int64_t nonfinite_mismatch = 0;  // NaN/Inf in one result and not in the other at the same place
  double max_abs_err = 0;
  double max_err_over_tol = 0;  // max |err| / tol: <= 1 passes; how much margin is left
  int64_t worst_row = -1, worst_col = -1;
  float worst_gpu = 0, worst_ref = 0;
  double rel_fro_err = 0;  // ||Y_gpu - Y_ref||_F / ||Y_ref||_F
  bool passed() const { return over_tolerance == 0 && nonfinite_mismatch == 0; }
  Json to_json() const;
};

// y_test, y_ref, s_abs: (M, N) row-major.
GemmCheck check_gemm(const float* y_test, const float* y_ref, const float* s_abs, int64_t m, int64_t n,
                     const GemmTolerance& tol);

}  // namespace fp8sim::gemm
