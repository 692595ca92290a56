#pragma once
// GPU quantize / dequantize for every QuantSpec of sim/quant (per-tensor, per-row, per-column,
// 1xG groups, RxC blocks; fp32 / pow2 / E8M0 / bf16 scales; COAT and robust dynamic range
// expansion; delayed scaling; nearest or stochastic rounding), bit-identical to the CPU reference
// sim/quant/quantize.hpp: the kernels call the same FP8SIM_HD functions for the statistics, the
// scales, the expansion and the encoding.
//
// Device pointers throughout; launches are asynchronous on the given stream and allocate nothing
// (the caller provides the workspace: quantize_workspace_bytes). Layouts equal QuantizedTensor's:
// codes row-major over the tensor, one float per group row-major over the group grid; but 4- and
// 6-bit codes are packed on the device (sim/quant/packing.hpp: quantized_size's code_bytes), where
// QuantizedTensor holds one per byte. The 4- and 6-bit formats and rht (gpu/quant/quantize_lowbit.cu)
// take tensors whose rows are whole 16-element segments and groups of R x C elements with C a
// multiple of 16 and R * C / 16 <= 32, or per-tensor scaling; other shapes are a UsageError.
//
// Per-tensor scaling is two-stage ("group scaling", COAT section 4.2): stage 1 writes the max
// |x| of every chunk of the tensor while reading it, stage 2 reduces those maxima to the tensor
// amax (tiny), stage 3 encodes. A producer that already emitted chunk maxima passes them in
// QuantGpuOptions::producer_maxima and stage 1 is skipped (one pass over the tensor).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/quant/quantize.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim::gpu {

// An input dtype as the kernels' launchers take it (0 f32, 1 bf16, 2 fp16), and its bytes per element.
int dtype_code(InputDtype d);
size_t dtype_bytes(InputDtype d);

struct QuantGpuOut {
  void* codes = nullptr;  // numel bytes (FP8) or 2 * numel (bf16/fp16 pass-through)
  // Optional, per-tensor FP8 scaling only (plain or delayed): the same codes transposed, (cols x rows)
  // row-major over the 2-D view (rows = the product of the leading dimensions), written by the same
  // pass over the input (TransformerEngine's cast_transpose). numel bytes.
  void* codes_t = nullptr;
  float* scales = nullptr;        // num_groups (not for pass-through)
  float* expand_k = nullptr;      // num_groups, DE only
  float* expand_c = nullptr;      // num_groups, DE only
  float* tensor_amax = nullptr;   // optional: 1 float, max |x| over finite elements
  float* tensor_scale = nullptr;  // scale=e4m3 (NVFP4): 1 float, the per-tensor decode scale
};

struct QuantGpuOptions {
  uint64_t index_offset = 0;  // stochastic rounding: global index of element 0
  // Per-tensor group scaling with maxima from the producer (any chunking; values are max |x| of
  // finite elements of each chunk; the tensor amax is their max).
  const float* producer_maxima = nullptr;
  size_t producer_maxima_count = 0;
  // Delayed scaling: TransformerEngine's multiplier for this step and the stored inverse
  // (DelayedScaler::scale() / scale_inv() on the host).
  float delayed_scale = 1.0f;
  float delayed_scale_inv = 1.0f;
};

// Device workspace bytes quantize_cuda needs for this spec and shape (0 when none).
size_t quantize_workspace_bytes(const QuantSpec& spec, std::span<const int64_t> shape);

// Quantizes d_x (numel elements of `dtype`, row-major `shape`). Throws UsageError for an invalid
// spec / shape (same checks as the CPU), fp8sim::Error for CUDA failures.
void quantize_cuda(const void* d_x, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                   const QuantGpuOut& out, void* d_workspace, const QuantGpuOptions& opts, cudaStream_t stream);

// Whether quantize_cuda runs this spec, shape and input dtype on one of the 4- and 6-bit kernels'
// fast kernels (1xG groups, 16x16 blocks; 16-byte aligned input and codes assumed); false for a
// spec outside those kernels, UsageError for a shape they refuse (as quantize_cuda). Tests use it
// to know which kernel their comparisons cover.
bool lowbit_fast_path(const QuantSpec& spec, std::span<const int64_t> shape, InputDtype dtype);

// Dequantizes into d_out (numel floats). Pass-through specs read 16-bit codes.
void dequantize_cuda(const QuantSpec& spec, std::span<const int64_t> shape, const void* d_codes, const float* d_scales,
                     const float* d_k, const float* d_c, float* d_out, cudaStream_t stream);

// The max |x| over the finite elements of a tensor in one pass (COAT Fig. 4(b) "just-in-time"):
// per-chunk maxima into d_workspace (amax_workspace_bytes(n)), then one tiny reduction into d_amax.
size_t amax_workspace_bytes(size_t n);
void tensor_amax_cuda(const void* d_x, InputDtype dtype, size_t n, float* d_amax, void* d_workspace,
                      cudaStream_t stream);
// Stage 2 of group scaling alone: the max of m chunk maxima.
void reduce_maxima_cuda(const float* d_maxima, size_t m, float* d_amax, cudaStream_t stream);
// Stage 1 alone (what a producing kernel emits as a by-product): max |x| of every `chunk`
// consecutive elements into d_maxima (ceil(n / chunk) floats).
void chunk_maxima_cuda(const void* d_x, InputDtype dtype, size_t n, size_t chunk, float* d_maxima, cudaStream_t stream);

// ---- host conveniences (compare, tests): upload, run, download ------------------------------
// Mirrors fp8sim::quantize(): for delayed specs opts.delayed supplies the scale and is updated
// with the tensor amax afterwards, as the CPU does. The counts (saturated, underflow,
// nonfinite) are not produced on the device and are left 0.
QuantizedTensor quantize_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                const QuantSpec& spec, const QuantizeOptions& opts = {}, cudaStream_t stream = nullptr);
// The same with QuantGpuOut::codes_t (cast-transpose): the transposed codes into codes_t.
QuantizedTensor quantize_transposed_on_gpu(const void* host_x, InputDtype dtype, std::span<const int64_t> shape,
                                           const QuantSpec& spec, std::vector<uint8_t>& codes_t,
                                           const QuantizeOptions& opts = {}, cudaStream_t stream = nullptr);
std::vector<float> dequantize_on_gpu(const QuantizedTensor& q, cudaStream_t stream = nullptr);

}  // namespace fp8sim::gpu
