#include "sim/backend/backend.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"

namespace fp8sim::gpu {

Json DeviceStatus::to_json() const {
  Json j = Json::object();
  j["available"] = available;
  if (available) {
    j["name"] = name;
    j["compute_capability"] = compute_capability;
    j["sm_count"] = sm_count;
    j["memory_gib"] = memory_gib;
  } else {
    j["why_not"] = why_not;
  }
  return j;
}

bool Backend::available() { return device().available; }

std::string Backend::why_not() {
  const DeviceStatus d = device();
  return d.available ? std::string() : d.reason();
}

void Backend::require(std::string_view needs) {
  if (!available()) throw Error(fmt::format("{} ({})", why_not(), needs));
}

namespace {

class NoGpu final : public Backend {
 public:
  explicit NoGpu(std::string why) : why_(std::move(why)) {}

  DeviceStatus device() override { return {.available = false, .why_not = why_}; }
  Json machine() override { return device().to_json(); }
  void cast_f32(const float*, size_t, const CastOptions&, uint8_t*) override { refuse(); }
  void cast_bf16(const uint16_t*, size_t, const CastOptions&, uint8_t*) override { refuse(); }
  QuantizedTensor quantize(const void*, InputDtype, std::span<const int64_t>, const QuantSpec&,
                           const QuantizeOptions&) override {
    refuse();
  }
  std::vector<float> dequantize(const QuantizedTensor&) override { refuse(); }
  void adamw_fp32(float*, const float*, float*, float*, size_t, const optim::AdamwStepConsts&) override { refuse(); }
  void adamw_lowp(float*, const float*, optim::ParamOptimState&, const optim::AdamwStepConsts&, uint64_t, uint64_t,
                  bool) override {
    refuse();
  }
  GemmOutcome gemm(const GemmRequest&) override { refuse(); }
  bench::BenchDoc run_bench(const bench::BenchOptions&) override { refuse(); }
  speed::Calibration measure_kernels(const std::vector<speed::KernelOp>&, const speed::MeasureSettings&,
                                     const std::function<void(double, double)>&) override {
    refuse();
  }

 private:
  std::string why_;
  [[noreturn]] void refuse() const { throw Error(why_); }
};

}  // namespace

QuantizedTensor Backend::quantize_transposed(const void*, InputDtype, std::span<const int64_t>, const QuantSpec&,
                                             const QuantizeOptions&, std::vector<uint8_t>&) {
  throw Error("this backend cannot run the cast-transpose kernel (it needs the CUDA backend)");
}

std::vector<float> Backend::tensor_core_model(const GemmRequest&) {
  throw Error("this backend cannot run the tensor-core model (it needs the CUDA backend)");
}

TensorMetrics Backend::tensor_metrics(const void*, InputDtype, std::span<const int64_t>, const QuantSpec*) {
  throw Error("this backend cannot compute tensor metrics (it needs the CUDA backend)");
}

optim::DriftResult Backend::optim_drift(const optim::DriftRequest&) {
  throw Error("this backend cannot run the optimizer's drift (it needs the CUDA backend)");
}

std::vector<double> Backend::optim_direction(const optim::DirectionRequest&) {
  throw Error("this backend cannot run Table 1's sums (it needs the CUDA backend)");
}

std::unique_ptr<Backend> no_gpu_backend(std::string why_not) { return std::make_unique<NoGpu>(std::move(why_not)); }

}  // namespace fp8sim::gpu
