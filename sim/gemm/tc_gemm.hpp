#pragma once
// cuBLASLt's FP8 and BF16 GEMMs on sm_90 as the tensor cores compute them: Y (M, N) = X (M, K) *
// W (N, K)^T (the nn.Linear layout, gemm_ref.hpp's convention) from the codes and scales, bit for
// bit with cuBLASLt's fp32 output for every algorithm that does not split K (tests/
// test_gemm_tc_gpu.cpp; docs/numerics.md, "Tensor-core accumulation"). The schedule:
//  * blocks of `promote_interval` elements of K (the whole K with fast accumulation) are each
//    summed by chained tensor-core steps (tc_model.hpp) starting from +0;
//  * per-tensor and row-wise scaling: each block is added to an fp32 accumulator (fadd, nearest
//    even), then the epilogue multiplies: tensor acc * (sx * sw); row (acc * sw_j) * sx_i;
//  * 1x128 x 128x128 block scaling: acc = fma(block, sx * sw, acc) per 128 of K;
//  * 1x128 x 1x128 block scaling: acc = fma(block * sx, sw, acc) per 128 of K;
//  * BF16: chained steps over the whole K (no scales);
//  * a bf16 output is the fp32 result rounded to nearest even.
// Scales are dequantization scales in GemmRequest's row-major tables (backend.hpp).
#include <cstdint>
#include <string>

#include "sim/formats/format.hpp"

namespace fp8sim::gemm {

struct TcGemmConfig {
  Format x_format = Format::E4M3;  // E4M3 / E5M2 (any pairing), or both BF16
  Format w_format = Format::E4M3;
  int scaling = 1;                 // 0 none (BF16), 1 tensor, 2 row, 3 1x128 x 128x128, 4 1x128 x 1x128
  bool fast_accum = false;         // tensor / row: no promotion (the whole K in the tensor core)
  int promote_interval = 128;      // elements of K per block (a multiple of 32); cuBLASLt's is 128
  Format y_format = Format::FP32;  // FP32, or BF16 (returned widened to fp32)
  std::string describe() const;
};

// How many scales tc_gemm reads for an operand of `rows` rows (X: m, W: n) under `scaling`.
int64_t tc_scale_count(int scaling, bool is_w, int64_t rows, int64_t k);

// Throws fp8sim::Error for a configuration tc_gemm does not model (formats, scaling, interval, output).
void tc_gemm_check(const TcGemmConfig& config);

// x: M x K codes (BF16: bits, little-endian pairs of bytes), w: N x K, y: M x N fp32.
// x_scales / w_scales: tensor 1 + 1; row M + N; block (M, ceil(K/128)) + (ceil(N/128), ceil(K/128));
// 1x128 x 1x128 (M, ceil(K/128)) + (N, ceil(K/128)). Multi-threaded over rows (OpenMP).
void tc_gemm(const uint8_t* x, const uint8_t* w, const float* x_scales, const float* w_scales, float* y, int64_t m,
             int64_t n, int64_t k, const TcGemmConfig& config);

// Whether tc_gemm's BF16 and FP8 steps run as AVX2 code (same bits): on when the CPU has AVX2, unless
// FP8SIM_NO_SIMD is set or set_tc_gemm_simd(false) turned it off.
void set_tc_gemm_simd(bool enabled);
bool tc_gemm_simd();

}  // namespace fp8sim::gemm
