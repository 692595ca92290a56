#pragma once
// `fp8sim compare TRACE`: every op run by the CPU reference and by the GPU kernels over the real
// tensors of a trace, compared element by element:
//   cast      fp32/bf16 -> e4m3/e5m2 (RNE SAT, NOSAT, stochastic)        0 differing codes
//   quantize  every granularity and scale mode, DE coat/robust, delayed  0 differing codes, scales,
//             scaling, stochastic; each also dequantized on both sides  k, c; 0 ulp after dequantize
//   adamw     one optimizer step per parameter for every state recipe    0 differing p bits / codes /
//             (fp32; bf16, te-fp8, fp8lm: elementwise states; coat      scales / k / c
//             fused + three-phase, coat-noexpand)
//   gemm      each linear layer's input x weight through cuBLASLt (BF16; within the tolerance of
//             FP8 per-tensor fast/split, row-wise, 1x128 x 128x128 block;  sim/gemm/gemm_ref.hpp
//             E5M2 x E4M3 dgrad) vs. the Eigen fp32 reference
// The GPU side is the gpu::Backend (sim/backend/backend.hpp); the caller makes sure it has a GPU
// (Backend::require), and an operation on a backend without one throws an Error saying why.
//
// JSON (reports/h200/compare.json, CompareResult::to_json): command, date, machine, trace, step,
// summary{...}, ops: [{op, spec | recipe | config, tensor, role, shape, elements, differing_codes,
// ..., passed}]
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sim/backend/backend.hpp"
#include "sim/common/json.hpp"
#include "sim/gemm/gemm_ref.hpp"
#include "sim/gemm/tc_cases.hpp"

namespace fp8sim::compare {

struct CompareOptions {
  std::string trace_path;
  std::vector<std::string> ops;  // subset of known_ops(); empty = all
  int64_t step = -1;             // trace step to use; -1: the step with the most tensors
  int max_tensors = 0;           // per op family; 0 = all
  bool gemm_suite = false;       // also the random and adversarial GEMM suite (sim/gemm/tc_cases.hpp)
  std::string command_line;
};

const std::vector<std::string>& known_ops();  // cast, quantize, adamw, gemm
void validate_ops(const std::vector<std::string>& ops);

// The first element where the two sides differ.
struct FirstDifference {
  int64_t index = 0;
  std::optional<std::string> input_bits{};  // cast: the fp32 input's bits, "0x3F800000"
  int cpu = 0, gpu = 0;                     // the codes
  Json to_json() const;
};

// One cast of a tensor: {op: "cast", spec, tensor, role, shape, elements, differing_codes,
// first_difference?, passed}.
struct CastEntry {
  std::string spec;  // e.g. "e4m3 rne sat"
  std::string tensor, role;
  std::vector<int64_t> shape;
  int64_t elements = 0, differing_codes = 0;
  std::optional<FirstDifference> first_difference;
  bool passed = false;
  Json to_json() const;
};

// One quantization of a tensor, both sides dequantized too: {elements, differing_codes,
// first_difference?, groups, differing_scales, differing_k, differing_c, max_ulp_dequantized,
// max_ulp_dequantize_kernel, passed, op: "quantize", spec, tensor, role, shape, scaler_state_equal?}.
struct QuantizeEntry {
  int64_t elements = 0;
  int64_t differing_codes = 0;  // code bytes; for 16-bit formats a differing element may count twice
  std::optional<FirstDifference> first_difference;
  int64_t groups = 0, differing_scales = 0, differing_k = 0, differing_c = 0;
  uint64_t max_ulp_dequantized = 0;        // the CPU's dequantized values vs the GPU's
  uint64_t max_ulp_dequantize_kernel = 0;  // vs the GPU's dequantize kernel on the CPU's codes
  bool passed = false;
  std::string spec;  // QuantSpec text
  std::string tensor, role;
  std::vector<int64_t> shape;
  std::optional<bool> scaler_state_equal;  // delayed scaling: the two scalers' state after the tensor
  // Per-tensor FP8 specs also run the cast-transpose kernel: its codes that differ from the CPU's,
  // row-major and transposed (against the transpose of the CPU's codes); the summary's code count
  // includes them.
  std::optional<int64_t> differing_transposed_codes;
  Json to_json() const;
};

// One moment of an AdamW step: fp32 values, or a quantized moment's codes, scales, k and c.
struct MomentComparison {
  bool fp32 = false;
  int64_t differing_values = 0;                                                         // fp32
  int64_t differing_codes = 0, differing_scales = 0, differing_k = 0, differing_c = 0;  // quantized
};

// One AdamW step of a parameter: {op: "adamw", recipe, rule, kernel, tensor, shape, elements,
// m_differing_values | m_differing_codes, m_differing_scales, m_differing_k, m_differing_c, the
// same for v, differing_params, max_ulp_params, differing_codes, passed}.
struct AdamwEntry {
  std::string recipe;  // optimizer-state recipe
  std::string rule;    // update rule
  std::string kernel;  // "fp32 elementwise", "fused one-pass", "elementwise states" or "three phases"
  std::string tensor;
  std::vector<int64_t> shape;
  int64_t elements = 0;
  MomentComparison m, v;
  int64_t differing_params = 0;
  uint64_t max_ulp_params = 0;
  int64_t differing_codes = 0;  // both moments' (quantized moments; 0 for fp32)
  bool passed = false;
  Json to_json() const;
};

// One linear layer's GEMM through cuBLASLt against the Eigen reference: {op: "gemm", config,
// tensor, m, n, k, elements, differing_codes, plan, then status, passed, supported (refused) or
// supported, padded, tolerance, check, max_err_over_tol, rel_fro_err, passed}.
struct GemmEntry {
  std::string config;  // e.g. "e4m3 tensor split"
  std::string tensor;  // the layer
  int64_t m = 0, n = 0, k = 0, elements = 0;
  int64_t differing_codes = 0;  // inputs are the CPU's codes; only the product is compared
  Json plan;                    // the backend's chosen algorithm (GemmOutcome::plan), kept verbatim
  // The tensor-core model (sim/gemm/tc_gemm.hpp) against the GPU, output bit by output bit: compared
  // when the algorithm keeps K in one piece (the backend asks for such an algorithm first); then
  // every output must match. model_note says why it was not compared otherwise.
  bool model_compared = false;
  int64_t model_differing = 0;
  std::string model_note;
  bool supported = false;
  std::string status;  // refused: "unsupported on this device: <cuBLASLt's verdict>"
  bool padded = false;
  gemm::GemmTolerance tolerance;  // supported only
  gemm::GemmCheck check;          // supported only
  bool passed = false;            // a refused mode passes: reported, not a mismatch
  Json to_json() const;
};

using CompareEntry = std::variant<CastEntry, QuantizeEntry, AdamwEntry, GemmEntry>;
Json entry_json(const CompareEntry& e);
const char* entry_op(const CompareEntry& e);  // cast, quantize, adamw, gemm
bool entry_passed(const CompareEntry& e);

struct OpCount {
  int64_t entries = 0, failed = 0;
};

struct CompareSummary {
  std::map<std::string, OpCount> ops;  // per op family
  int64_t entries = 0, failed = 0;
  bool passed = true;
  Json to_json() const;  // {<op>: {entries, failed}, ..., entries, failed, passed}
};

struct CompareResult {
  std::string command, date;
  Json machine;  // Backend::machine(), kept verbatim
  std::string trace;
  int64_t step = 0;
  CompareSummary summary;
  std::vector<CompareEntry> ops;
  Json to_json() const;
};

// Runs the comparison, each op on the CPU reference and on `gpu`.
CompareResult compare_trace(const CompareOptions& opts, gpu::Backend& gpu);

std::string render_markdown(const CompareResult& r);
// One row per (op, spec/recipe/config): header + rows, for the terminal.
const std::vector<std::string>& summary_header();
std::vector<std::vector<std::string>> summary_rows(const CompareResult& r);

// Distance in units in the last place between two floats (0 for equal bits, and for two NaNs);
// +0 and -0 are 1 apart.
uint64_t ulp_distance(float a, float b);

// The backend request of one case of the GEMM suite (tc_gemm_suite), pinned to an algorithm that
// keeps K in one piece.
gpu::GemmRequest gemm_suite_request(const gemm::TcGemmCase& c, const gemm::TcGemmOperands& o);

}  // namespace fp8sim::compare
