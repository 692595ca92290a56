#pragma once
// The accumulation study of `fp8sim accum`: how far Hopper's tensor-core accumulation
// (tc_gemm.hpp) takes a GEMM from the exact product of its own operands, as K grows, for each
// promotion interval (fp32 every I elements of K; never = fast accumulation), beside an fp32 FMA
// chain (a CUDA-core loop) and the BF16 tensor cores. The operands are quantized per tensor to
// E4M3 (BF16: rounded to bf16) from one of three distributions, so every error is the
// accumulation's alone: quantization error is excluded by comparing with the exact (double) product
// of the dequantized operands.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::gemm {

struct AccumStudyOptions {
  std::vector<int64_t> ks = {128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> intervals = {32, 128, 512, 0};  // 0: never promote (fast accumulation)
  std::vector<std::string> data = {"normal", "positive", "lognormal"};
  int64_t m = 64, n = 64;  // outputs per K: m x n
  uint64_t seed = 1;
};

// The data kinds: normal (N(0,1) both operands), positive (|N(0,1)| both: every product adds in
// the same direction, so truncation's bias accumulates), lognormal (random signs, magnitudes
// 10^N(0,1): a wide exponent spread within each step).
const std::vector<std::string>& accum_data_kinds();

struct AccumSeries {
  std::string config;                // "tc promote 128", "tc fast", "fp32 fma", "bf16 tc"
  std::vector<double> rel_l2;        // ||Y - Y_exact|| / ||Y_exact||, one per K
  std::vector<double> max_over_rms;  // max |Y - Y_exact| / rms(Y_exact), one per K
};

struct AccumStudy {
  AccumStudyOptions options;
  // Per data kind, the series in options' order: tensor-core intervals, then fp32 fma, bf16 tc.
  std::vector<std::pair<std::string, std::vector<AccumSeries>>> results;
  // {"ks", "m", "n", "seed", "data": {kind: [{"config", "rel_l2", "max_over_rms"}]}}
  Json to_json() const;
};

// Throws UsageError for an unknown data kind, K < 1 or an interval that is not 0 or a positive
// multiple of 32.
AccumStudy run_accum_study(const AccumStudyOptions& options);

}  // namespace fp8sim::gemm
