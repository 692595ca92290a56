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
//           vec128_scales_for_cublas / blk128_scales_for_cublas below. Both tables start 16-byte
//           aligned and M and N are multiples of 4 ("cuBLAS Library", section "Scaling factors
//           layouts" of the 128-element 1D and 128x128 2D block scaling): plan() checks both.
//   Block1D: x_scale and w_scale -> 1x128 groups along K of X and of W, both in VEC128_32F layout
//           (vec128_scales_for_cublas for each; DeepSeek-V3's wgrad, whose operands are both
//           activation-like); the same alignment and multiple-of-4 rules.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/formats/format.hpp"

namespace fp8sim::gpu {

enum class GemmScaling : uint8_t {
  None,     // BF16 inputs, no scales
  Tensor,   // one fp32 scale per operand (SCALAR_32F)
  Row,      // one fp32 scale per row of X and per row of W (OUTER_VEC_32F)
  Block,    // X in 1x128 groups (VEC128_32F), W in 128x128 blocks (BLK128x128_32F)
  Block1D,  // X and W in 1x128 groups along K (VEC128_32F both)
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

// One cuBLASLt configuration: what the heuristic offered, what the search enumerated, what
// timing chose.
struct GemmAlgoInfo {
  int algo_id = -1, tile_id = -1, splitk = -1, stages_id = -1, cluster_id = -1, swizzle = -1;
  // The plan's chosen algorithm: a configuration the search found beat the heuristic's candidates.
  // A candidate (CublasLt::enumerate, GemmPlan::rejected): it comes from the search, not the
  // heuristic.
  bool from_search = false;
  size_t workspace = 0;
  float median_ms = 0;  // from the candidate timing (no L2 flush; selection only)
  // cublasLtMatmulTile_t as "rows x columns" of the output tile in cuBLAS's terms (rows run along
  // W's N, columns along X's M: D is N x M), e.g. "32x64"; "undefined" or "id N" when unknown.
  std::string tile() const;
  // algo_id ... cta_swizzling, from_search, workspace_bytes, selection_median_ms, tile.
  Json to_json() const;
};

// A configuration the plan's validation refused: its output on the plan's shape disagreed with the
// reference algorithm's (CublasLt::plan), and why.
struct GemmRejection {
  GemmAlgoInfo algo;
  std::string reason;
};

// One configuration CublasLt::enumerate lists, runnable through CublasLt::plan_for.
struct GemmCandidate {
  GemmAlgoInfo info;
  int heuristic_rank = -1;  // 0 = the heuristic's first (the validation's reference); -1 = from the search
  // Non-empty for a search configuration cublasLtMatmulAlgoCheck accepts but the search leaves
  // out: why (search_exclusion in cublaslt.cpp gives the rule and its grounds). Never set for the
  // heuristic's candidates.
  std::string excluded;
  std::array<uint64_t, 8> algo{};  // the opaque cublasLtMatmulAlgo_t
};

// How closely two cuBLASLt algorithms' results of the same GEMM (same shape, config and operands)
// must agree: the criterion of CublasLt::plan's validation. Derivation in cublaslt.cpp.
// Elementwise: |test - ref| <= rel_elem * (P_ij + |ref_ij|) + rel_out * |ref_ij| + abs_floor, where
// P_ij = rms(ref row i) * rms(ref column j) / rms(ref) is the output's scale at (i, j) (what
// |ref_ij| would be without cancellation). Whole: ||test - ref||_F <= rel_fro * ||ref||_F.
// Non-finite values must match place by place.
struct GemmAgreementTolerance {
  double rel_fro = 0;
  double rel_elem = 0;
  double rel_out = 0;  // the output rounding of the two results
  double abs_floor = 0;
  std::string derivation;  // one line, the numbers plugged in
  Json to_json() const;
};
GemmAgreementTolerance gemm_agreement_tolerance(int64_t k, const GemmConfig& config);

struct GemmAgreement {
  int64_t elements = 0;
  int64_t over_tolerance = 0;      // elements over the elementwise bound
  int64_t nonfinite_mismatch = 0;  // NaN/Inf in one result and not the same in the other
  double rel_fro = 0;              // ||test - ref||_F / ||ref||_F (0 when both are 0)
  double rel_fro_bound = 0;        // the tolerance's rel_fro
  double max_err_over_bound = 0;   // worst |test - ref| / elementwise bound
  int64_t worst_row = -1, worst_col = -1;
  float worst_test = 0, worst_ref = 0;
  bool fro_ok = true;
  bool agrees() const { return fro_ok && over_tolerance == 0 && nonfinite_mismatch == 0; }
  std::string describe() const;  // one line: the numbers a rejection reports
};
// test, ref: (m, n) row-major.
GemmAgreement check_gemm_agreement(const float* test, const float* ref, int64_t m, int64_t n,
                                   const GemmAgreementTolerance& tol);

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
  // Configurations cublasLtMatmulAlgoCheck accepted and the search did not exclude, up to the
  // `search` limit of CublasLt::plan (searched() of them were validated and timed within the time
  // budget).
  int search_accepted() const { return search_found_; }
  // Configurations cublasLtMatmulAlgoCheck accepted that the search leaves out (GemmCandidate::excluded).
  int search_excluded() const { return search_excluded_; }
  // Empty, or why the search found no configuration to time (SearchStats::note: what
  // cublasLtMatmulAlgoCheck returned, and whether it rejects the heuristic's own choice too).
  const std::string& search_note() const { return search_note_; }
  // Candidates whose output was compared with the reference algorithm's before timing (the
  // reference itself not counted), and those the comparison refused, each with its reason.
  int validated() const { return validated_; }
  const std::vector<GemmRejection>& rejected() const { return rejected_; }
  // JSON summary (config, status, chosen algorithm, candidate count, validation).
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
  int search_excluded_ = 0;
  std::string search_note_;
  int validated_ = 0;
  std::vector<GemmRejection> rejected_;
  bool validation_ = false;            // the candidates were validated (see CublasLt::plan)
  GemmAlgoInfo validation_reference_;  // the algorithm whose output the others had to match
  GemmAgreementTolerance validation_tolerance_;
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
  // passes, no split-K, less those GemmCandidate::excluded names), times up to `search` of them
  // once each, and re-times the fastest few against the heuristic's best: the heuristic's choice
  // is only a prediction.
  // Validation: when there is a choice (timing_reps > 0, and the heuristic returned more than one
  // candidate or search > 0), every candidate other than the reference (the heuristic's first that
  // runs) is run once on this shape before it is timed, on X and W of `args` with scale tables of
  // the plan's own (different per row and block, so that a kernel applying the wrong scale shows),
  // and its output is compared with the reference's on the same operands (check_gemm_agreement);
  // one that disagrees is never timed or chosen and is listed in rejected(). The cuBLAS
  // documentation says cublasLtMatmulAlgoCheck's success "doesn't fully guarantee that the algo
  // will run" ("cuBLAS Library", cublasLtMatmulAlgoCheck()); a configuration it accepts can also
  // compute a wrong result.
  // Writes args.y. Never throws for a configuration the library refuses: returns a plan with
  // supported() == false. Throws fp8sim::Error for invalid arguments (shapes, formats, the scale
  // layout requirements of block scaling) and CUDA failures.
  GemmPlan plan(const GemmShape& shape, const GemmConfig& config, const GemmArgs& args, cudaStream_t stream,
                int max_candidates = 8, int timing_reps = 5, int search = 0);

  // Every configuration plan() may consider for these arguments, without running any: the
  // heuristic's up to `max_candidates` (in its order; those whose state is not success or whose
  // workspace exceeds ours left out), then every configuration the search enumerates, in the
  // search's order, including those it excludes (GemmCandidate::excluded says why) and with no
  // time budget or `search` limit: plan()'s search considers a subset of the non-excluded ones
  // (those its limit and time budget reach), in the same order. Empty when the heuristic refuses
  // the configuration. Same argument checks as plan(). `search_note`, when given, receives
  // GemmPlan::search_note's sentence for this enumeration.
  std::vector<GemmCandidate> enumerate(const GemmShape& shape, const GemmConfig& config, const GemmArgs& args,
                                       int max_candidates = 8, std::string* search_note = nullptr);
  // A plan that runs exactly this candidate (from enumerate with the same shape, config and
  // operand alignments): no heuristic, timing or validation. supported() == false when
  // cublasLtMatmulAlgoCheck refuses it.
  GemmPlan plan_for(const GemmShape& shape, const GemmConfig& config, const GemmArgs& args,
                    const GemmCandidate& candidate);

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
