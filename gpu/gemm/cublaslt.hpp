#pragma once
// cuBLASLt GEMMs: BF16, and FP8 (E4M3/E5M2) with per-tensor, row-wise (outer-vector) and
// DeepSeek-style block scales (1x128 activations x 128x128 weights). This header exposes no
// cuBLAS type: gpu/gemm/cublaslt.cpp is the ONLY file that includes cublasLt.h.
//
// Convention (nn.Linear): Y (M, N) = X (M, K) * W (N, K)^T, all three row-major. Scales are
// DEQUANTIZATION scales (value = code * scale), the QuantSpec convention (s = amax / fmax).
// In cuBLAS's column-major terms that is D (N x M) = op(A) * B with A = W (TRANSA = T, stored
// K x N, ld K), B = X (TRANSB = N, stored K x M, ld K), D ld N: the "TN" layout, the only one
// FP8 supports on sm_90. So cuBLAS's A scale is the weight's and its B scale the activation's.
//
// Scale layouts on the device:
//   Tensor: x_scale, w_scale -> one float each.
//   Row:    x_scale -> M floats (one per row of X), w_scale -> N floats (one per row of W).
//   Block:  x_scale -> 1x128 groups of X in cuBLAS's VEC128_32F layout, w_scale -> 128x128
//           blocks of W in BLK128x128_32F layout; build both from row-major tables with
//           vec128_scales_for_cublas / blk128_scales_for_cublas below.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/formats/format.hpp"

namespace fp8sim::gpu {

enum class GemmScaling : uint8_t {
  None,    // BF16 inputs, no scales
  Tensor,  // one fp32 scale per operand (SCALAR_32F)
  Row,     // one fp32 scale per row of X and per row of W (OUTER_VEC_32F)
  Block,   // X in 1x128 groups (VEC128_32F), W in 128x128 blocks (BLK128x128_32F)
};
std::string_view gemm_scaling_name(GemmScaling s);

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

struct GemmConfig {
  Format x_format = Format::E4M3;  // E4M3, E5M2 or BF16
  Format w_format = Format::E4M3;
  Format y_format = Format::BF16;  // BF16 or FP32
  GemmScaling scaling = GemmScaling::Tensor;
  bool fast_accum = false;  // FP8 only: true skips the periodic fp32 promotion (changes numerics)
  // BF16 layouts of nn.Linear's backward GEMMs without transposed copies (FP8 on sm_90 supports
  // only the TN layout: cuBLASLt refuses these flags there and the plan says so):
  bool x_transposed = false;  // X stored (K, M) row-major instead of (M, K): cuBLAS TRANSB = T, ldb = M
  bool w_transposed = false;  // W stored (K, N) row-major instead of (N, K): cuBLAS TRANSA = N, lda = N
  std::string describe() const;
};

struct GemmArgs {
  const void* x = nullptr;  // (M, K) codes or bf16
  const void* w = nullptr;  // (N, K)
  void* y = nullptr;        // (M, N)
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
};

// What the heuristic offered and what timing chose.
struct GemmAlgoInfo {
  int algo_id = -1, tile_id = -1, splitk = -1, stages_id = -1, cluster_id = -1, swizzle = -1;
  bool from_search = false;  // a configuration the search found beat the heuristic's candidates
  size_t workspace = 0;
  float median_ms = 0;  // from the candidate timing (no L2 flush; selection only)
};

// A planned GEMM: descriptors + the chosen algorithm. Obtain from CublasLt::plan.
class GemmPlan {
 public:
  GemmPlan();
  ~GemmPlan();
  GemmPlan(GemmPlan&&) noexcept;
  GemmPlan& operator=(GemmPlan&&) noexcept;

  // false when cuBLASLt refused the configuration on this device (e.g. CUBLAS_STATUS_NOT_SUPPORTED
  // or no heuristic result); `status` then says which call refused and why, verbatim.
  bool supported() const { return supported_; }
  const std::string& status() const { return status_; }
  const GemmShape& shape() const { return shape_; }
  const GemmConfig& config() const { return config_; }
  const GemmAlgoInfo& chosen() const { return chosen_; }
  int candidates() const { return candidates_; }
  // Configurations beyond the heuristic's that the search (CublasLt::plan's `search`) timed.
  int searched() const { return searched_; }
  // Configurations cublasLtMatmulAlgoCheck accepted, up to the `search` limit of CublasLt::plan
  // (searched() of them were timed within the time budget).
  int search_accepted() const { return search_found_; }
  // JSON summary (config, status, chosen algorithm, candidate count).
  Json to_json() const;

  struct Impl;

 private:
  friend class CublasLt;
  std::unique_ptr<Impl> impl_;
  bool supported_ = false;
  std::string status_;
  GemmShape shape_;
  GemmConfig config_;
  GemmAlgoInfo chosen_;
  int candidates_ = 0;
  int searched_ = 0;
  int search_found_ = 0;
};

class CublasLt {
 public:
  explicit CublasLt(size_t workspace_bytes = size_t{64} << 20);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // cuBLASLt's run-time version (e.g. 130100) and the CUDA runtime it was built for.
  static size_t version();
  static std::string version_string();

  // Builds every descriptor with every attribute set explicitly, asks the heuristic for up to
  // `max_candidates` algorithms and, when timing_reps > 0, runs each candidate on `args`
  // (warm-up + timing_reps timed launches, CUDA events) and keeps the fastest. With search > 0
  // (and timing), also enumerates the configurations cuBLASLt accepts for these descriptors
  // (every algorithm id x tile x stages x cluster shape x CTA swizzle that cublasLtMatmulAlgoCheck
  // passes, no split-K), times up to `search` of them once each, and re-times the fastest few
  // against the heuristic's best: the heuristic's choice is only a prediction. Never throws
  // for a configuration the library refuses: returns a plan with supported() == false.
  // Throws fp8sim::Error for invalid arguments (shapes, formats) and CUDA failures.
  GemmPlan plan(const GemmShape& shape, const GemmConfig& config, const GemmArgs& args, cudaStream_t stream,
                int max_candidates = 8, int timing_reps = 5, int search = 0);

  // Enqueues the planned GEMM on `stream` with these operands (same shape and config).
  void run(const GemmPlan& plan, const GemmArgs& args, cudaStream_t stream);

 private:
  struct Handle;
  std::unique_ptr<Handle> h_;
};

// Scale-table relayouts for GemmScaling::Block (host side; upload the result).
// x_scales: row-major (M, ceil(K/128)) -> cuBLAS VEC128_32F for operand B: element (m, kb) at
// m + kb * M (the outer dimension contiguous).
std::vector<float> vec128_scales_for_cublas(const float* x_scales, int64_t m, int64_t k_blocks);
// w_scales: row-major (ceil(N/128), ceil(K/128)) -> cuBLAS BLK128x128_32F for operand A: element
// (nb, kb) at kb + nb * round_up(ceil(K/128), 4) (the K-block index contiguous, padded to 4).
std::vector<float> blk128_scales_for_cublas(const float* w_scales, int64_t n_blocks, int64_t k_blocks);

}  // namespace fp8sim::gpu
