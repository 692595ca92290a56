#pragma once
// GPU AdamW steps, bit-identical to sim/optim (the kernels call adamw_math.hpp's adamw_element and
// lowp_group.hpp's per-group pieces, which call sim/quant's DE code):
//
//  * adamw_fp32_cuda: fp32 states, one elementwise pass.
//  * adamw_bf16_moments_cuda: BF16 states (DeepSeek-V3), one elementwise pass.
//  * the elementwise-state step (adamw_lowp_cuda takes it when optim::elementwise_step_supported): every
//    moment stored one value per element, as a 16-bit value with or without one per-tensor scale
//    or as an FP8 code with one per-tensor scale (bf16, te-fp8, fp8lm). A pass computing the new
//    moments' amax (only when a moment is scaled; the scale needs the amax of the whole new moment)
//    and one fused pass: decode, update, encode.
//  * adamw_fp8_grouped_cuda: the fused FP8-state step for recipes where
//    optim::grouped_step_supported() holds (the `coat` recipe: E4M3/E5M2 1xG groups with DE),
//    in ONE pass over memory: a team of lanes per group (16 lanes x 8 elements for DE groups of
//    65..128, else up to 32 lanes x 4) holds the group in registers, dequantizes m and v with the
//    old group parameters, updates p, m, v, reduces the new groups' max / min-nonzero with
//    shuffles, computes the new parameters (the m half-team and the v half-team in parallel) and
//    requantizes. DE moments take two exact shortcuts: log2 of |q*s| from a per-group table of
//    the 8 FP8 mantissas (gpu/quant/dmath_gpu.cuh proves it), and requantization from a guarded
//    lg2/ex2 approximation whose code is certain, with the reference pow for the rest
//    (gpu/quant/guarded_encode.cuh proves it).
//  * adamw_lowp_cuda: any state recipe: the elementwise-state step where it applies, else the
//    three phases of optim::lowp_adamw_step (dequantize both moments into fp32 scratch, update,
//    requantize with gpu/quant).
// Device pointers; asynchronous on the given stream; nothing is allocated inside the launchers.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/quant/quantize.hpp"
#include "sim/optim/adamw_math.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/optim/lowp_group.hpp"

namespace fp8sim::gpu {

void adamw_fp32_cuda(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c,
                     cudaStream_t stream);

// BF16 moments (bf16 bit patterns) in one fused pass: bit-identical to optim::lowp_adamw_step with
// a recipe whose moments are both bf16 pass-through specs (the `bf16` preset); `saturate_*` is
// each spec's saturation. Throws UsageError for another recipe.
void adamw_bf16_moments_cuda(float* p, const float* g, uint16_t* m, uint16_t* v, size_t n,
                             const optim::AdamwStepConsts& c, const optim::StateRecipe& recipe, cudaStream_t stream);

// One FP8 moment with per-group DE parameters on the device (QuantizedTensor's layout: one byte
// per element, one float per group).
struct Fp8MomentDev {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  float* k = nullptr;
  float* c = nullptr;
};

// The largest group the fused kernel holds in registers (32 lanes x 4 elements).
constexpr int kFusedMaxGroup = 128;

void adamw_fp8_grouped_cuda(float* p, const float* g, const Fp8MomentDev& m, const Fp8MomentDev& v, size_t n,
                            int group_size, const optim::AdamwStepConsts& c, const optim::GroupMomentConsts& cm,
                            const optim::GroupMomentConsts& cv, cudaStream_t stream);

// The GroupMomentConsts optim's CPU loop uses for a moment spec (lowp_adamw.cpp's moment_consts).
optim::GroupMomentConsts group_moment_consts(const QuantSpec& spec, uint64_t rounding_key);

// A moment of a parameter on the device under any MomentSpec.
struct LowpMomentDev {
  optim::MomentSpec spec;
  float* fp32 = nullptr;  // fp32 moments
  void* codes = nullptr;  // quantized moments (1 or 2 bytes per element)
  float* scales = nullptr;
  float* k = nullptr;
  float* c = nullptr;
};

// Test hook: whether adamw_lowp_cuda may take the elementwise-state step (default true; false runs
// the three phases for every recipe; the results are identical).
void adamw_elementwise_fused(bool on);

// Scratch adamw_lowp_cuda needs: 2 * n floats plus a quantize workspace.
size_t lowp_scratch_bytes(const optim::StateRecipe& r, int64_t n);

// One step of parameter `param_index` (the rounding keys follow optim::state_rounding_key with
// `step`, the step count after this step). Throws UsageError for a moment spec the GPU path does
// not support (delayed scaling). With `new_m` and `new_v` it takes the three phases and points
// them at the new moments before quantization (fp32, n each: in d_scratch, or an fp32 moment's
// own storage), valid until d_scratch is used again: what optim::lowp_adamw_step's new_m / new_v
// receive.
void adamw_lowp_cuda(float* p, const float* g, LowpMomentDev& m, LowpMomentDev& v, int64_t n,
                     const optim::AdamwStepConsts& c, uint64_t param_index, uint64_t step, void* d_scratch,
                     cudaStream_t stream, const float** new_m = nullptr, const float** new_v = nullptr);

// Host convenience (compare, tests): uploads p, g and the state, runs one step on the GPU and
// downloads p and the new state, exactly as optim::lowp_adamw_step would change them. `fused`
// selects adamw_fp8_grouped_cuda (requires grouped_step_supported) over the three phases.
void lowp_adamw_step_on_gpu(float* p, const float* g, optim::ParamOptimState& st, const optim::AdamwStepConsts& c,
                            uint64_t param_index, uint64_t step, bool fused, cudaStream_t stream = nullptr);

}  // namespace fp8sim::gpu
