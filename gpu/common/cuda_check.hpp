#pragma once
// The one family of CUDA checks: every runtime call and every launch goes through these, and a
// failure throws fp8sim::Error with the call, file, line and CUDA's own message. Safe to include
// from .cu files (no fmt here: nvcc cannot compile fmt 9's consteval format strings).
#include <cuda_runtime.h>

namespace fp8sim::gpu {
[[noreturn]] void throw_cuda_error(const char* call, const char* file, int line, int err);
}

#define FP8SIM_CUDA_CHECK(call)                                                                  \
  do {                                                                                           \
    const cudaError_t fp8sim_err_ = (call);                                                      \
    if (fp8sim_err_ != cudaSuccess)                                                              \
      ::fp8sim::gpu::throw_cuda_error(#call, __FILE__, __LINE__, static_cast<int>(fp8sim_err_)); \
  } while (0)

// After a launch: catches bad configurations at once (asynchronous faults surface at the next sync).
#define FP8SIM_CUDA_CHECK_LAUNCH() FP8SIM_CUDA_CHECK(cudaGetLastError())
