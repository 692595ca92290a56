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
// The GPU side is an interface (GpuOps) implemented in gpu/compare/gpu_ops.cpp; a CPU-only build
// has none, and compare_trace() then throws an Error saying so.
//
// JSON (reports/h200/compare.json): command, date, machine, trace, step, summary{...},
// ops: [{op, spec | recipe | config, tensor, role, shape, elements, differing_codes, ..., passed}]
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/formats/cast.hpp"
#include "sim/optim/adamw_math.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::compare {

struct GemmRequest {
  int64_t m = 0, n = 0, k = 0;                              // Y (m, n) = X (m, k) * W (n, k)^T
  Format x_format = Format::E4M3, w_format = Format::E4M3;  // E4M3 / E5M2 codes, or BF16 bits
  int scaling = 1;                                          // 0 none (bf16), 1 tensor, 2 row, 3 block (1x128 x 128x128)
  bool fast_accum = false;
  int search = 0;  // > 0: time the heuristic's candidates and up to `search` more configurations (bench's selection)
  std::vector<uint8_t> x_codes, w_codes;  // FP8: row-major codes
  std::vector<uint16_t> x_bf16, w_bf16;   // BF16: row-major bits
  std::vector<float> x_scales,
      w_scales;  // tensor: 1 + 1; row: m + n; block: (m, ceil(k/128)) + (ceil(n/128), ceil(k/128)), row-major
};

struct GemmOutcome {
  bool supported = false;
  std::string status;    // cuBLASLt's verdict when unsupported
  bool padded = false;   // dimensions were padded with zero codes to the 16-element alignment FP8 needs
  Json plan;             // the chosen algorithm
  std::vector<float> y;  // (m, n) fp32
};

// The GPU half. Host pointers in and out; the implementation uploads, runs and downloads.
class GpuOps {
 public:
  virtual ~GpuOps() = default;
  virtual Json machine() = 0;
  virtual void cast_f32(const float* x, size_t n, const CastOptions& o, uint8_t* out) = 0;
  virtual void cast_bf16(const uint16_t* x, size_t n, const CastOptions& o, uint8_t* out) = 0;
  virtual QuantizedTensor quantize(const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                   const QuantSpec& spec, const QuantizeOptions& opts) = 0;
  virtual std::vector<float> dequantize(const QuantizedTensor& q) = 0;
  virtual void adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c) = 0;
  virtual void adamw_lowp(float* p, const float* g, optim::ParamOptimState& st, const optim::AdamwStepConsts& c,
                          uint64_t param_index, uint64_t step, bool fused) = 0;
  virtual GemmOutcome gemm(const GemmRequest& r) = 0;
};

struct CompareOptions {
  std::string trace_path;
  std::vector<std::string> ops;  // subset of known_ops(); empty = all
  int64_t step = -1;             // trace step to use; -1: the step with the most tensors
  int max_tensors = 0;           // per op family; 0 = all
  std::string command_line;
};

const std::vector<std::string>& known_ops();  // cast, quantize, adamw, gemm
void validate_ops(const std::vector<std::string>& ops);

// Runs the comparison. gpu == nullptr: throws Error ("this build has no CUDA" / no device).
Json compare_trace(const CompareOptions& opts, GpuOps* gpu);

std::string render_markdown(const Json& doc);
// One row per (op, spec/recipe/config): header + rows, for the terminal.
const std::vector<std::string>& summary_header();
std::vector<std::vector<std::string>> summary_rows(const Json& doc);

// Distance in units in the last place between two floats (0 for equal bits, and for two NaNs);
// +0 and -0 are 1 apart.
uint64_t ulp_distance(float a, float b);

}  // namespace fp8sim::compare
