#pragma once
// analyze --device cuda: one tensor's quantization and error statistics on the device, the
// numbers run_quantize gives on the CPU (sim/quant/quantize_report.hpp) bit for bit. The tensor is
// uploaded once; quantize_cuda and dequantize_cuda (gpu/quant) run on it, the error sums are added
// per chunk in the CPU's element order (sim/metrics/error_step.hpp) and merged on the host in the
// CPU's chunk order, and the saturated count rescales every element as the encoder did (the
// values sim/quant's scaled_magnitudes recomputes; tests/test_quant_saturation.cpp pins that
// equality on the CPU). What comes back is small: one record per 64K elements, the scales.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "gpu/common/buffer.hpp"
#include "sim/metrics/error_step.hpp"
#include "sim/quant/quantize_report.hpp"

namespace fp8sim::gpu {

// Device buffers kept between tensors (grown, never shrunk), so a trace's tensors allocate once.
struct MetricsScratch {
  DeviceBuffer<unsigned char> x, codes, workspace;
  DeviceBuffer<float> dequantized, scales, k, c, amax, tensor_scale, mult;
  DeviceBuffer<uint32_t> group_amax;
  DeviceBuffer<ErrorSums> sums;
  DeviceBuffer<unsigned long long> counters;  // NaN, Inf, saturated
};

// The numbers of one tensor (host values of `dtype`, row-major `shape`) under `spec` (null: kept,
// compared with itself). Delayed scaling's history holds the tensor's own amax, as analyze does on
// one captured step. Throws UsageError for what the device does not take (rht, and the shapes
// gpu/quant refuses); the caller then runs the CPU.
TensorMetrics tensor_metrics_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                    const QuantSpec* spec, MetricsScratch& scratch, cudaStream_t stream);

// Page-locks the pooled host block `host` lies in (sim/common/buffer.hpp) before its upload, once
// per block (unlocked when the pool returns it; FP8SIM_PIN=0: never); memory outside the pool is
// left alone. Call it on the thread that frees the block's Buffer (the one that chose the device).
void page_lock_for_upload(const void* host);

// Host blocks page-locked for uploads now: a tensor in a pooled Buffer (sim/common/buffer.hpp) is
// uploaded from its block, locked on first use and unlocked when the pool returns it (tests).
size_t pinned_blocks();
// Whether the system refused a page-lock (the process then uploads from pageable memory).
bool pinning_refused();

}  // namespace fp8sim::gpu
