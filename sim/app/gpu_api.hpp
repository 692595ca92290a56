#pragma once
// The GPU side of the fp8sim binary, loaded on demand.
//
// The CUDA code (gpu/**, the CUDA runtime, cuBLASLt) is built into a shared module,
// libfp8sim_gpu.so, beside the binary. The binary never links it: a command or report section
// that needs a GPU calls gpu_api::load(), which opens the module with dlopen the first time, so
// the CPU subcommands (memory, cast, quantize, info, analyze, optim, speed from a calibration)
// start without the CUDA libraries (cuBLASLt alone maps several hundred MB) and run where they
// are missing or where a memory limit (ulimit -v) forbids loading them. The module finds the
// CPU code it calls (sim/**, traces/) in the binary, which exports its symbols.
//
// The module is looked for at $FP8SIM_GPU_MODULE, then beside the binary, then in lib/ beside it
// (the layout of scripts/package_gpu.sh's bundle). A CPU-only build has no module.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/bench/bench.hpp"
#include "sim/common/json.hpp"
#include "sim/compare/compare.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim::gpu_api {

// Bumped whenever Api or a type it passes (SpeedOptions, ...) changes: a module of another version
// is refused, not called.
inline constexpr int kAbiVersion = 2;

struct Api {
  int abi_version;
  // {available, name, compute_capability, sm_count, memory_gib} or {available: false, why_not}.
  Json (*device)();
  std::unique_ptr<compare::GpuOps> (*make_gpu_ops)();
  Json (*run_bench)(const bench::BenchOptions& opts);
  speed::Calibration (*measure_ops)(const std::vector<speed::KernelOp>& ops, int warmup, int reps,
                                    const std::function<void(double, double)>& progress);
  Json (*speed_measured)(const speed::SpeedOptions& opts);
};

// The module's entry point: extern "C" const Api* fp8sim_gpu_api().
inline constexpr const char* kEntryPoint = "fp8sim_gpu_api";

// The module's functions, or nullptr with the reason in `why_not` (no module in this build, or
// it cannot be loaded). Loads once; later calls return the same answer.
const Api* load(std::string* why_not);

// The device description: `device()` of the module, or {available: false, why_not} without one.
Json device();

}  // namespace fp8sim::gpu_api
