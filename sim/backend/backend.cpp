#include "sim/backend/backend.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"

namespace fp8sim::gpu {

bool Backend::available() {
  const Json d = device();
  const Json* a = d.find("available");
  return a && a->is_bool() && a->as_bool();
}

std::string Backend::why_not() {
  if (available()) return {};
  const Json d = device();
  const Json* w = d.find("why_not");
  return w && w->is_string() && !w->as_string().empty() ? w->as_string() : std::string("no GPU was found");
}

void Backend::require(std::string_view needs) {
  if (!available()) throw Error(fmt::format("{} ({})", why_not(), needs));
}

namespace {

class NoGpu final : public Backend {
 public:
  explicit NoGpu(std::string why) : why_(std::move(why)) {}

  Json device() override {
    Json d = Json::object();
    d["available"] = false;
    d["why_not"] = why_;
    return d;
  }
  Json machine() override { return device(); }
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
  Json run_bench(const bench::BenchOptions&) override { refuse(); }
  speed::Calibration measure_kernels(const std::vector<speed::KernelOp>&, const speed::MeasureSettings&,
                                     const std::function<void(double, double)>&) override {
    refuse();
  }

 private:
  std::string why_;
  [[noreturn]] void refuse() const { throw Error(why_); }
};

}  // namespace

std::unique_ptr<Backend> no_gpu_backend(std::string why_not) { return std::make_unique<NoGpu>(std::move(why_not)); }

}  // namespace fp8sim::gpu
