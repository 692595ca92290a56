// The drift and Table 1 sums kernels: one warp per chunk of optim::kDriftChunk elements. Each lane computes one
// of 32 consecutive elements' terms with the CPU's own optim::drift_terms and parks them in shared
// memory; lane q < kDriftSums then adds the 32 elements' term q in element order, so the chunk's
// sums are the ones the CPU's sequential loop computes.
#include <cuda_runtime.h>

#include "gpu/common/cuda_check.hpp"
#include "gpu/common/launch.cuh"
#include "gpu/optim/drift_launch.hpp"
#include "sim/optim/direction.hpp"
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

constexpr int kDirWarps = 4;  // a block's rows of shared memory: 4 x 32 elements x 35 doubles

// Table 1's sums: per 32-element tile, lane i computes element i's quantities (r, the quantized
// moments, numerators and denominators: optim::direction_element) into shared memory; then, element
// after element in order, lane l adds terms l, l + 32, ... (optim::direction_term) to its sums.
__global__ void __launch_bounds__(kDirWarps * 32)
    direction_sums_kernel(DirectionArrays a, int64_t n, double* __restrict__ sums) {
  constexpr int kMaxK = static_cast<int>(optim::DirectionLayout(optim::kMaxDirectionFormats).K);
  constexpr int kPerLane = (kMaxK + 31) / 32;
  __shared__ optim::DirectionElement elems[kDirWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const size_t F = static_cast<size_t>(a.F);
  const int K = static_cast<int>(optim::DirectionLayout(F).K);
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kDirWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kDirWarps + warp; c < chunks; c += stride) {
    const int64_t b = c * optim::kDriftChunk, e = b + optim::kDriftChunk < n ? b + optim::kDriftChunk : n;
    double acc[kPerLane];
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) acc[s] = 0.0;
    for (int64_t i0 = b; i0 < e; i0 += 32) {
      const int64_t i = i0 + lane;
      if (i < e) {
        float mq[optim::kMaxDirectionFormats], vq[optim::kMaxDirectionFormats];
        for (size_t f = 0; f < F; ++f) {
          mq[f] = a.mq[f][i];
          vq[f] = a.vq[f][i];
        }
        optim::direction_element(a.m[i], a.v[i], mq, vq, F, a.bc1, a.bc2, a.eps, elems[warp][lane]);
      }
      __syncwarp(kFull);
      const int m = e - i0 < 32 ? static_cast<int>(e - i0) : 32;
      for (int j = 0; j < m; ++j) {
        const optim::DirectionElement& el = elems[warp][j];
#pragma unroll
        for (int s = 0; s < kPerLane; ++s) {
          const int q = lane + 32 * s;
          if (q < K) acc[s] += optim::direction_term(el, F, static_cast<size_t>(q));
        }
      }
      __syncwarp(kFull);
    }
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      const int q = lane + 32 * s;
      if (q < K) sums[c * K + q] = acc[s];
    }
  }
}

}  // namespace

void launch_direction_sums(const DirectionArrays& a, int64_t n, double* sums, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  static const int per_sm = [] {
    int b = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, direction_sums_kernel, kDirWarps * 32, 0);
    return b < 1 ? 1 : b;
  }();
  direction_sums_kernel<<<grid_cap((chunks + kDirWarps - 1) / kDirWarps, per_sm), kDirWarps * 32, 0, stream>>>(a, n,
                                                                                                               sums);
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

void launch_drift_sums(const DriftArrays& a, int64_t n, double* sums, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t chunks = (n + optim::kDriftChunk - 1) / optim::kDriftChunk;
  static const int per_sm = resident_blocks(drift_sums_kernel);
  drift_sums_kernel<<<grid_cap((chunks + kWarps - 1) / kWarps, per_sm), kThreads, 0, stream>>>(a, n, sums);
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8sim::gpu::detail
