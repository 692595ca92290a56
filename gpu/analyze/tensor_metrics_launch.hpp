#pragma once
// Launchers of the kernels behind analyze --device cuda (gpu/analyze/tensor_metrics.cu); nvcc-safe
// (no fmt). Device pointers, asynchronous on `stream`; the host driver is tensor_metrics.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "sim/metrics/error_step.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

// The group grid of a quantized tensor (sim/quant/spec.hpp's GroupGeometry).
struct MetricsGeometry {
  int64_t rows = 0, cols = 0, group_rows = 1, group_cols = 1, grid_cols = 1;
};

// Error sums of x (dtype 0 f32, 1 bf16, 2 fp16) against y (n floats; null: x against itself), one
// ErrorSums per chunk of kErrorChunk elements into `sums`; counters[0] += NaN values of x,
// counters[1] += infinite ones.
void launch_error_sums(const void* x, int dtype, const float* y, int64_t n, ErrorSums* sums,
                       unsigned long long* counters, cudaStream_t stream);

// How the encoder scaled each element (what scaled_magnitudes recomputes on the CPU).
enum class ScaledBy : int {
  Plain = 0,     // apply_scale(x, divisor of the group's amax, consts)
  Multiply = 1,  // x * multiplier[group] (delayed scaling: one multiplier; NVFP4: per group)
  Expand = 2,    // expand_value(x, {k, c, s} of the group)
  None = 3,      // pass-through storage: |x|
};

// The max |x| over the finite elements of every group (fp32 bits) into amax_bits (zeroed first).
void launch_group_amax(const void* x, int dtype, const MetricsGeometry& g, uint32_t* amax_bits, cudaStream_t stream);

// Counts, into *count, the finite x whose scaled value exceeds `bound`. Plain: `amax_bits` per
// group (or *tensor_amax for one per-tensor group) through plain_scales with `consts`; Multiply:
// `mult` per group (count 1: shared); Expand: k, c, s per group.
struct SaturationArgs {
  ScaledBy by = ScaledBy::Plain;
  ScaleConsts consts{};
  float bound = 0;
  const uint32_t* amax_bits = nullptr;
  const float* tensor_amax = nullptr;
  const float* mult = nullptr;
  int64_t mult_count = 0;
  const float* k = nullptr;
  const float* c = nullptr;
  const float* s = nullptr;
};
void launch_saturated_count(const void* x, int dtype, const MetricsGeometry& g, const SaturationArgs& a,
                            unsigned long long* count, cudaStream_t stream);

}  // namespace fp8sim::gpu::detail
