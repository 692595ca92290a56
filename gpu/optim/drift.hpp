#pragma once
// optim --device cuda: one parameter's drift runs (sim/optim/drift.hpp) and Table 1's sums of one
// captured moment pair (sim/optim/direction.hpp) on the device, the sums the CPU's replay gives bit
// for bit. Per recipe, the window start's moments are quantized with
// gpu/quant (the CPU's make_param_state keys), then every step runs the fp32 AdamW of the baseline
// and the recipe's three-phase step (gpu/optim/adamw.hpp: dequantize, update, requantize; its fp32
// scratch holds the new moments before quantization), dequantizes the stored moments, and adds
// the fourteen sums per chunk in the CPU's element order (drift.cu); the host adds the chunks in
// order. What comes back is one record of 14 doubles per 4096 elements and step.
#include <cuda_runtime.h>

#include <vector>

#include "gpu/common/buffer.hpp"
#include "sim/optim/direction.hpp"
#include "sim/optim/drift.hpp"

namespace fp8sim::gpu {

// Device buffers kept between parameters (grown, never shrunk).
struct DriftScratch {
  DeviceBuffer<float> p0, m0, v0, grads, p, p_prev, b, b_prev, mb, vb, ms, vs, m_fp32, v_fp32, m_scales, v_scales, m_k,
      m_c, v_k, v_c;
  DeviceBuffer<unsigned char> m_codes, v_codes, step_scratch;
  DeviceBuffer<double> sums;
  std::vector<double> host_sums;
  std::vector<DeviceBuffer<float>> quantized;  // Table 1: each format's dequantized m and v
};

// Throws UsageError, before any work, for what the device does not take: a moment spec other than
// fp32, FP8 or 16-bit storage (the 4- and 6-bit formats), delayed scaling, rht or E4M3 scales, or a
// parameter whose buffers exceed the device's free memory. The caller then runs the CPU.
optim::DriftResult drift_on_gpu(const optim::DriftRequest& rq, DriftScratch& scratch, cudaStream_t stream);

// Table 1's sums: each format quantizes and dequantizes m and v with gpu/quant, then one warp per
// chunk adds the terms (drift.cu). Throws UsageError, before any work, for a format gpu/quant does
// not run (the caller runs the CPU) or buffers beyond the free memory.
std::vector<double> direction_on_gpu(const optim::DirectionRequest& rq, DriftScratch& scratch, cudaStream_t stream);

}  // namespace fp8sim::gpu
