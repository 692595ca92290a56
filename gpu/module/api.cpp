// The entry point of libfp8sim_gpu.so, the module the fp8sim binary opens when a command needs
// a GPU (sim/app/gpu_api.hpp). It adapts the GPU library's functions to the Api table.
#include <fmt/format.h>

#include "gpu/bench/bench_gpu.hpp"
#include "gpu/common/device.hpp"
#include "gpu/compare/gpu_ops.hpp"
#include "gpu/speed/replay.hpp"
#include "sim/app/gpu_api.hpp"

namespace fp8sim::gpu_api {
namespace {

Json device_json() {
  const auto& d = gpu::device_info();
  Json j = Json::object();
  j["available"] = d.available;
  if (d.available) {
    j["name"] = d.name;
    j["compute_capability"] = fmt::format("{}.{}", d.cc_major, d.cc_minor);
    j["sm_count"] = d.sm_count;
    j["memory_gib"] = static_cast<double>(d.total_mem) / double(1ull << 30);
  } else {
    j["why_not"] = d.why_not;
  }
  return j;
}

speed::Calibration measure_ops(const std::vector<speed::KernelOp>& ops, int warmup, int reps,
                               const std::function<void(double, double)>& progress) {
  gpu::speed::ReplaySettings rs;
  rs.warmup = warmup;
  rs.reps = reps;
  return gpu::speed::measure_ops(ops, rs, progress);
}

Json speed_measured(const speed::SpeedOptions& o) { return gpu::speed::speed_measured(o); }

const Api kApi = {kAbiVersion, device_json, gpu::make_gpu_ops, gpu::run_bench, measure_ops, speed_measured};

}  // namespace
}  // namespace fp8sim::gpu_api

extern "C" __attribute__((visibility("default"))) const fp8sim::gpu_api::Api* fp8sim_gpu_api() {
  return &fp8sim::gpu_api::kApi;
}
