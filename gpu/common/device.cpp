#include "gpu/common/device.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>

#include "gpu/common/cuda_check.hpp"
#include "sim/common/check.hpp"

namespace fp8sim::gpu {

void throw_cuda_error(const char* call, const char* file, int line, int err) {
  throw_check_failure(call, file, line,
                      fmt::format("CUDA error: {}", cudaGetErrorString(static_cast<cudaError_t>(err))));
}

namespace {

// The GPU of this process: under an MPI or Slurm launcher, the node-local rank modulo the number
// of GPUs (one GPU per rank where there are enough); otherwise the first.
int chosen_device(int count) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0) return static_cast<int>(r % count);
  }
  return 0;
}

}  // namespace

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      d.why_not = e != cudaSuccess ? fmt::format("no usable CUDA device ({})", cudaGetErrorString(e))
                                   : std::string("no CUDA device found");
      cudaGetLastError();  // clear the sticky error
      return d;
    }
    const int dev = chosen_device(n);
    cudaDeviceProp p{};
    if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
      d.why_not = "cudaGetDeviceProperties failed";
      return d;
    }
    d.available = true;
    d.name = p.name;
    d.sm_count = p.multiProcessorCount;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_mem = p.totalGlobalMem;
    d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
    return d;
  }();
  return info;
}

}  // namespace fp8sim::gpu
