#pragma once
// The GPU as every command sees it: one interface, gpu::Backend, for what compare, bench, speed
// and report run on a device.
//
// The CUDA implementation lives in the GPU module (gpu/backend/cuda_backend.cpp, packaged into
// libfp8sim_gpu.so); the fp8sim binary obtains the one backend object from it in one place,
// sim/app/gpu_api.cpp, which hands out a backend without a GPU (no_gpu_backend) when this build
// has no CUDA, the module cannot be loaded or the machine has no usable device. Library callers
// and tests pass a backend of their own.
//
// Every operation takes and returns host memory; the implementation uploads, runs and downloads.
// On a backend whose device() is not available, every operation throws Error naming why.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/bench/bench.hpp"
#include "sim/common/json.hpp"
#include "sim/formats/cast.hpp"
#include "sim/optim/adamw_math.hpp"
#include "sim/optim/direction.hpp"
#include "sim/optim/drift.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::gpu {

// One GEMM for compare: Y (m, n) = X (m, k) * W (n, k)^T from codes (or BF16 bits) and scales.
struct GemmRequest {
  int64_t m = 0, n = 0, k = 0;
  Format x_format = Format::E4M3, w_format = Format::E4M3;  // E4M3 / E5M2 codes, or BF16 bits
  int scaling = 1;  // 0 none (bf16), 1 tensor, 2 row, 3 block (1x128 x 128x128), 4 block (1x128 x 1x128)
  bool fast_accum = false;
  bool y_bf16 = false;  // bf16 output (GemmOutcome::y holds it widened to fp32); default fp32
  int search = 0;  // > 0: time the heuristic's candidates and up to `search` more configurations (bench's selection)
  // The heuristic's first candidate that does not split K, else the search's first (the tensor-core
  // model reproduces those bit for bit, sim/gemm/tc_gemm.hpp), instead of the heuristic's first;
  // ignored with search > 0.
  bool no_split_k = false;
  std::vector<uint8_t> x_codes, w_codes;  // FP8: row-major codes
  std::vector<uint16_t> x_bf16, w_bf16;   // BF16: row-major bits
  std::vector<float> x_scales,
      w_scales;  // tensor: 1 + 1; row: m + n; block: (m, ceil(k/128)) + (ceil(n/128), ceil(k/128)), row-major;
                 // 1x128 x 1x128: (m, ceil(k/128)) + (n, ceil(k/128))
};

// What device() says: the usable GPU, or why there is none.
struct DeviceStatus {
  bool available = false;
  std::string name{};                // available: the device's name
  std::string compute_capability{};  // available: "9.0"
  int64_t sm_count = 0;              // available
  double memory_gib = 0;             // available
  std::string why_not{};             // unavailable: the reason, in one line
  // Unavailable: why_not, or "no GPU was found" when the backend gave no reason.
  std::string reason() const { return why_not.empty() ? std::string("no GPU was found") : why_not; }
  // {available: true, name, compute_capability, sm_count, memory_gib} or {available: false, why_not}.
  Json to_json() const;
};

struct GemmOutcome {
  bool supported = false;
  std::string status;    // cuBLASLt's verdict when unsupported
  bool padded = false;   // dimensions were padded with zero codes to the 16-element alignment FP8 needs
  Json plan;             // the chosen algorithm
  std::vector<float> y;  // (m, n) fp32
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- the device
  virtual DeviceStatus device() = 0;
  // The machine a result document records (device, driver, runtime, libraries): free-form
  // {key: value} that the documents keep and render verbatim, never read by key.
  virtual Json machine() = 0;
  // device()'s `available`.
  bool available();
  // device()'s `why_not` ("" when available; "no GPU was found" when it gives no reason).
  std::string why_not();
  // Throws Error "<why_not> (<needs>)" unless available(); `needs` says what wanted the GPU.
  void require(std::string_view needs);

  // ---- compare: each op of sim/ run on the device
  virtual void cast_f32(const float* x, size_t n, const CastOptions& o, uint8_t* out) = 0;
  virtual void cast_bf16(const uint16_t* x, size_t n, const CastOptions& o, uint8_t* out) = 0;
  virtual QuantizedTensor quantize(const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                   const QuantSpec& spec, const QuantizeOptions& opts) = 0;
  virtual std::vector<float> dequantize(const QuantizedTensor& q) = 0;
  // quantize() of a per-tensor FP8 spec by the cast-transpose kernel: the codes also transposed
  // ((cols x rows) row-major over the 2-D view) into codes_t.
  virtual QuantizedTensor quantize_transposed(const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                              const QuantSpec& spec, const QuantizeOptions& opts,
                                              std::vector<uint8_t>& codes_t);
  virtual void adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c) = 0;
  virtual void adamw_lowp(float* p, const float* g, optim::ParamOptimState& st, const optim::AdamwStepConsts& c,
                          uint64_t param_index, uint64_t step, bool fused) = 0;
  virtual GemmOutcome gemm(const GemmRequest& r) = 0;
  // The tensor-core model of that GEMM (sim/gemm/tc_gemm.hpp) run on the GPU's CUDA cores, bit for
  // bit the CPU's tc_gemm: Y (m, n) in fp32 (a bf16 output widened). Scales as GemmRequest holds
  // them; no padding, any shape. Backends without it throw Error.
  virtual std::vector<float> tensor_core_model(const GemmRequest& r);

  // ---- analyze --device cuda: one tensor's numbers on the device (gpu/analyze/tensor_metrics.hpp),
  // the bits the CPU gives. Throws UsageError for a tensor the device does not take (the caller
  // computes it on the CPU); backends without it throw Error.
  virtual TensorMetrics tensor_metrics(const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                       const QuantSpec* spec);

  // ---- optim --device cuda: one parameter's drift runs on the device (gpu/optim/drift.hpp), the
  // sums the CPU gives. Throws UsageError for a parameter the device does not take (the caller runs
  // the CPU); backends without it throw Error.
  virtual optim::DriftResult optim_drift(const optim::DriftRequest& rq);
  // Table 1's sums of one captured moment pair on the device, likewise.
  virtual std::vector<double> optim_direction(const optim::DirectionRequest& rq);

  // ---- bench: fp8sim bench's whole document
  virtual bench::BenchDoc run_bench(const bench::BenchOptions& opts) = 0;

  // ---- speed: times every distinct kernel of `ops` (attention and the fp32 AdamW baseline
  // excepted: PyTorch times them) and returns the measurements with the device description.
  // progress(done, total) after each kernel.
  virtual speed::Calibration measure_kernels(const std::vector<speed::KernelOp>& ops,
                                             const speed::MeasureSettings& settings,
                                             const std::function<void(double, double)>& progress) = 0;
};

// The backend of a build or machine without a usable GPU: device() is unavailable with
// `why_not`, machine() its JSON, and every operation throws Error(why_not).
std::unique_ptr<Backend> no_gpu_backend(std::string why_not);

}  // namespace fp8sim::gpu
