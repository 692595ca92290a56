#pragma once
// AdamW with low-precision moments (COAT, Xi et al., ICLR 2025, section 4; docs/optimizer.md): every step
//   1. dequantize m and v (the stored codes and their scales / DE k, c),
//   2. update p, m, v in fp32 with adamw_element (adamw_math.hpp); the parameter update uses
//      the NEW, UNQUANTIZED m and v, so this step's quantization error reaches p next step,
//   3. requantize the new m and v under their specs (groups of the FLATTENED parameter:
//      shape {numel}, so g128 = contiguous groups of 128 with a short last group).
// The quantizer is sim/quant's (quantize / dequantize); nothing here rounds to FP8 by itself.
//
// Two implementations give identical bits (tests/test_optim_lowp.cpp pins it):
// * lowp_adamw_step: the three phases above over the whole tensor (any spec, including
//   per-tensor scaling, whose scale needs the amax of the whole new moment before encoding).
// * lowp_adamw_step_grouped (lowp_group.hpp): the fused per-group loop a GPU kernel runs,
//   for specs whose groups are independent.
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/optim/adamw.hpp"
#include "sim/optim/lowp_group.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::optim {

// One stored moment of one parameter.
struct MomentState {
  MomentSpec spec;
  std::vector<float> fp32;  // when spec.is_fp32()
  QuantizedTensor q;        // otherwise (shape {numel})
  int64_t numel = 0;
  size_t bytes() const { return spec.is_fp32() ? fp32.size() * 4 : q.total_bytes(); }
};

// The optimizer state of one parameter under a recipe.
struct ParamOptimState {
  int64_t numel = 0;
  MomentState m, v;
  size_t bytes() const { return m.bytes() + v.bytes(); }
};

// The key of the Philox stream for one quantization: stochastic rounding must draw fresh bits
// at every step, for every parameter and for each moment, or the same element would round the
// same way at every step. Element i of that quantization draws philox_word(key, i).
uint64_t state_rounding_key(uint64_t user_seed, uint64_t param_index, uint64_t step, int moment /*0 m, 1 v*/);

// Stores (quantizes) fp32 moments m0, v0 of n elements under `r`. `step` names the rounding
// stream of this initial quantization (the step count the moments belong to).
ParamOptimState make_param_state(const StateRecipe& r, const float* m0, const float* v0, int64_t n,
                                 uint64_t param_index, uint64_t step, int threads = 0);

// Stores fp32 values x (n elements) into a moment (quantizing under its spec). A shard of a larger
// moment (sharded.hpp) passes its first element's index in the whole (stochastic rounding's
// element index) and, for a per-tensor spec, the whole moment's amax.
void store_moment(MomentState& ms, const float* x, int64_t n, uint64_t rounding_key, int threads = 0,
                  uint64_t index_offset = 0, std::optional<float> tensor_amax = std::nullopt);
// The moment's values as fp32 (dequantized), n = ms.numel elements.
void load_moment(const MomentState& ms, float* out, int threads = 0);

// Scratch buffers reused across steps (sized on first use).
struct LowpScratch {
  std::vector<float> m, v;
};

// One AdamW step of parameter `param_index` (dequantize -> update -> requantize). `c` carries
// the step's constants (make_step_consts); `step` is the step count after this step (the
// rounding stream). If new_m / new_v are non-null they receive the unquantized new moments.
void lowp_adamw_step(float* p, const float* g, ParamOptimState& st, const AdamwStepConsts& c, uint64_t param_index,
                     uint64_t step, LowpScratch& scratch, int threads = 0, float* new_m = nullptr,
                     float* new_v = nullptr);

// True when both moments can run the fused per-group loop of lowp_group.hpp: FP8, 1xG groups
// (the same G) over the flattened parameter, plain scaling or DE coat mode (the `coat` and
// `coat-noexpand` recipes and their E5M2 / other-G / stochastic variants).
bool grouped_step_supported(const StateRecipe& r);

// Whether both moments are stored one value per element with at most one per-tensor scale: 16-bit
// (bf16 / fp16) with or without a per-tensor scale, or FP8 with a per-tensor scale; no delayed
// scaling, no expansion (bf16, te-fp8, fp8lm). The GPU runs such recipes as one fused step, after
// a pass for the new moments' amax where a moment is scaled (gpu/optim/adamw.hpp).
bool elementwise_step_supported(const StateRecipe& r);

// The launch constants of one moment for the fused loop (lowp_group.hpp) from its spec; `key` is
// state_rounding_key(spec.seed, param_index, step, moment) (used only for stochastic rounding).
GroupMomentConsts group_moment_consts(const QuantSpec& spec, uint64_t key);

// The same step as lowp_adamw_step, as the fused per-group loop (fp8_adamw_group_step) over
// groups of the flattened parameter, OpenMP over groups. Bit-identical to lowp_adamw_step.
// Throws if !grouped_step_supported(recipe of st).
void lowp_adamw_step_grouped(float* p, const float* g, ParamOptimState& st, const AdamwStepConsts& c,
                             uint64_t param_index, uint64_t step, int threads = 0);

}  // namespace fp8sim::optim
