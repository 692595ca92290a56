#pragma once
// Launcher of the drift sums kernel (gpu/optim/drift.cu); nvcc-safe (no fmt). Device pointers,
// asynchronous on `stream`; the host driver is gpu/optim/drift.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8sim::gpu::detail {

// The arrays of one recipe at one step (n floats each; optim::drift_terms says what each is).
struct DriftArrays {
  const float *p, *p_prev, *b, *b_prev, *p0, *ms, *vs, *mn, *vn, *mb, *vb;
};

// The fourteen drift sums of every chunk of optim::kDriftChunk elements, each chunk's terms added
// in element order: sums[c * kDriftSums + q].
void launch_drift_sums(const DriftArrays& a, int64_t n, double* sums, cudaStream_t stream);

}  // namespace fp8sim::gpu::detail

namespace fp8sim::gpu::detail {

// Table 1's inputs (optim::DirectionRequest on the device): the fp32 moments and their
// dequantized values in each of F formats, n floats each.
struct DirectionArrays {
  const float* m;
  const float* v;
  const float* mq[8];
  const float* vq[8];
  int F;
  double bc1, bc2, eps;
};

// The K = DirectionLayout(F).K sums of every chunk of optim::kDriftChunk elements, each chunk's
// terms added in element order: sums[c * K + q].
void launch_direction_sums(const DirectionArrays& a, int64_t n, double* sums, cudaStream_t stream);

}  // namespace fp8sim::gpu::detail
