#pragma once
// `fp8sim compare TRACE`: every op run by the CPU reference and by the GPU kernels over the real
// tensors of a trace, compared element by element:
//   cast      fp32/bf16 -> e4m3/e5m2 (RNE SAT, NOSAT, stochastic)        0 differing codes
//   quantize  every granularity and scale mode, DE coat/robust, delayed  0 differing codes, scales,
//             scaling, stochastic; each also dequantized on both sides  k, c; 0 ulp after dequantize
//   adamw     one optimizer step per parameter for every state recipe    0 differing p bits / codes /
//             (fp32, bf16, coat fused + three-phase, coat-noexpand,      scales / k / c
//             te-fp8, fp8lm)
//   gemm      each linear layer's input x weight through cuBLASLt (BF16; within the tolerance of
//             FP8 per-tensor fast/split, row-wise, 1x128 x 128x128 block;  sim/gemm/gemm_ref.hpp
//             E5M2 x E4M3 dgrad) vs. the Eigen fp32 reference
// The GPU side is the gpu::Backend (sim/backend/backend.hpp); the caller makes sure it has a GPU
// (Backend::require), and an operation on a backend without one throws an Error saying why.
//
// JSON (reports/h200/compare.json): command, date, machine, trace, step, summary{...},
// ops: [{op, spec | recipe | config, tensor, role, shape, elements, differing_codes, ..., passed}]
#include <cstdint>
#include <string>
#include <vector>

#include "sim/backend/backend.hpp"
#include "sim/common/json.hpp"

namespace fp8sim::compare {

struct CompareOptions {
  std::string trace_path;
  std::vector<std::string> ops;  // subset of known_ops(); empty = all
  int64_t step = -1;             // trace step to use; -1: the step with the most tensors
  int max_tensors = 0;           // per op family; 0 = all
  std::string command_line;
};

const std::vector<std::string>& known_ops();  // cast, quantize, adamw, gemm
void validate_ops(const std::vector<std::string>& ops);

// Runs the comparison, each op on the CPU reference and on `gpu`.
Json compare_trace(const CompareOptions& opts, gpu::Backend& gpu);

std::string render_markdown(const Json& doc);
// One row per (op, spec/recipe/config): header + rows, for the terminal.
const std::vector<std::string>& summary_header();
std::vector<std::vector<std::string>> summary_rows(const Json& doc);

// Distance in units in the last place between two floats (0 for equal bits, and for two NaNs);
// +0 and -0 are 1 apart.
uint64_t ulp_distance(float a, float b);

}  // namespace fp8sim::compare
