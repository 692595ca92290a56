#pragma once
// Launch-geometry helpers shared by the quantize and optimizer launchers (nvcc-safe: no fmt).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fp8sim::gpu {

// An attribute of the current device, queried once per process (fp8sim runs on one device);
// `fallback` if the query fails (the launches that follow report the real error).
template <cudaDeviceAttr A>
int device_attr_cached(int fallback) {
  static const int v = [fallback] {
    int dev = 0, r = fallback;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&r, A, dev) != cudaSuccess) r = fallback;
    return r;
  }();
  return v;
}

// The multiprocessor count (132, an H100/H200's, if the query fails).
inline int sm_count_cached() { return device_attr_cached<cudaDevAttrMultiProcessorCount>(132); }

// A grid of want_blocks blocks, at least 1 and at most per_sm per multiprocessor (the kernels are
// grid-stride loops, so a capped grid still covers every block of work).
inline int grid_cap(int64_t want_blocks, int per_sm) {
  const int64_t cap = static_cast<int64_t>(sm_count_cached()) * per_sm;
  return static_cast<int>(want_blocks < 1 ? 1 : (want_blocks < cap ? want_blocks : cap));
}

// How many 256-thread blocks of `kernel` (with `smem` bytes of dynamic shared memory) fit on one
// multiprocessor at once, at least 1. Callers cache it per kernel (a static per instantiation).
template <class Kernel>
int resident_blocks(Kernel kernel, size_t smem = 0) {
  int b = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, 256, smem);
  return b < 1 ? 1 : b;
}

}  // namespace fp8sim::gpu
