#pragma once
// The GPU side of the fp8sim binary, loaded on demand: the one place where the commands get their
// gpu::Backend (sim/backend/backend.hpp).
//
// The CUDA code (gpu/**, the CUDA runtime, cuBLASLt) is built into a shared module,
// libfp8sim_gpu.so, beside the binary. The binary never links it: a command or report section
// that needs a GPU calls gpu_api::backend(), which opens the module with dlopen the first time, so
// the CPU subcommands (memory, cast, quantize, info, analyze, optim, speed from a calibration)
// start without the CUDA libraries (cuBLASLt alone maps several hundred MB) and run where they
// are missing or where a memory limit (ulimit -v) forbids loading them. The module finds the
// CPU code it calls (sim/**, traces/) in the binary, which exports its symbols.
//
// The module is looked for at $FP8SIM_GPU_MODULE, then beside the binary, then in lib/ beside it
// (the layout of scripts/package_gpu.sh's bundle). A CPU-only build has no module.
#include "sim/backend/backend.hpp"

namespace fp8sim::gpu_api {

// Bumped whenever Api or a type it passes (gpu::Backend, the option and result types of its
// operations) changes: a module of another version is refused, not called.
inline constexpr int kAbiVersion = 5;

struct Api {
  int abi_version;
  // The module's one CUDA backend (it owns it; it lives until the process ends).
  gpu::Backend* (*backend)();
};

// The module's entry point: extern "C" const Api* fp8sim_gpu_api().
inline constexpr const char* kEntryPoint = "fp8sim_gpu_api";

// The backend every command uses: the module's, or, when this build has no CUDA or the module
// cannot be loaded, one whose device() says why and whose operations throw that reason. Loads
// once; later calls return the same object. Whether a GPU is usable is the backend's available().
gpu::Backend& backend();

}  // namespace fp8sim::gpu_api
