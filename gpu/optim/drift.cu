// The drift sums kernel: one warp per chunk of optim::kDriftChunk elements. Each lane computes one
// of 32 consecutive elements' terms with the CPU's own optim::drift_terms and parks them in shared
// memory; lane q < kDriftSums then adds the 32 elements' term q in element order, so the chunk's
// sums are the ones the CPU's sequential loop computes.
#include <cuda_runtime.h>

#include "gpu/common/cuda_check.hpp"
#include "gpu/common/launch.cuh"
#include "gpu/optim/drift_launch.hpp"
#include "sim/optim/drift.hpp"

namespace fp8sim::gpu::detail {

namespace {

constexpr int kThreads = 256;  // resident_blocks counts blocks of 256
constexpr int kWarps = kThreads / 32;
constexpr int kTerms = optim::kDriftSums;
constexpr unsigned kFull = 0xFFFFFFFFu;

__global__ void __launch_bounds__(kThreads) drift_sums_kernel(DriftArrays a, int64_t n, double* __restrict__ sums) {
  // [warp][element of the 32][term]; the odd row length keeps lane q's column reads apart.
  __shared__ double terms[kWarps][32][kTerms + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + warp; c < chunks; c += stride) {
    const int64_t b = c * optim::kDriftChunk, e = b + optim::kDriftChunk < n ? b + optim::kDriftChunk : n;
    double acc = 0.0;  // lane q < kTerms: sum q of this chunk
    for (int64_t i0 = b; i0 < e; i0 += 32) {
      const int64_t i = i0 + lane;
      if (i < e) {
        double t[kTerms];
        optim::drift_terms(a.p[i], a.p_prev[i], a.b[i], a.b_prev[i], a.p0[i], a.ms[i], a.vs[i], a.mn[i], a.vn[i],
                           a.mb[i], a.vb[i], t);
#pragma unroll
        for (int q = 0; q < kTerms; ++q) terms[warp][lane][q] = t[q];
      }
      __syncwarp(kFull);
      const int m = e - i0 < 32 ? static_cast<int>(e - i0) : 32;
      if (lane < kTerms) {
        if (m == 32) {
#pragma unroll 8
          for (int j = 0; j < 32; ++j) acc += terms[warp][j][lane];
        } else {
          for (int j = 0; j < m; ++j) acc += terms[warp][j][lane];
        }
      }
      __syncwarp(kFull);
    }
    if (lane < kTerms) sums[c * kTerms + lane] = acc;
  }
}

}  // namespace

void launch_drift_sums(const DriftArrays& a, int64_t n, double* sums, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  static const int per_sm = resident_blocks(drift_sums_kernel);
  drift_sums_kernel<<<grid_cap((chunks + kWarps - 1) / kWarps, per_sm), kThreads, 0, stream>>>(a, n, sums);
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8sim::gpu::detail
