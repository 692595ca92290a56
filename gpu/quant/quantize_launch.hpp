#pragma once
// The thin interface between gpu/quant/quantize.cpp (g++: validation, geometry, workspace,
// errors) and gpu/quant/quantize.cu (kernels). Plain data only; no fmt, no exceptions here.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/formats/format_code.hpp"
#include "sim/quant/hadamard.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::detail {

// Everything a kernel needs to know about a spec resolved against a shape.
struct QuantKernelParams {
  int64_t rows = 0, cols = 0;              // the 2-D view
  int64_t group_rows = 0, group_cols = 0;  // nominal group extent
  int64_t grid_rows = 0, grid_cols = 0;    // groups down / across
  int format = 0;                          // gpu_format_code (gpu/formats/format_code.hpp); BF16 and FP16 pass through
  bool saturate = true;
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t index_offset = 0;
  ScaleConsts scale{};             // plain scaling (sim/quant/scale.hpp)
  float fmax = 0;                  // storage format's largest finite value
  float fmax_target = 0;           // DE: the ratio bound's format
  double eps = 0;                  // DE coat: epsilon
  bool eps_add_fp64 = true;        // DE coat: how the epsilon is added
  float delayed_scale = 1.0f;      // delayed: TE's multiplier
  float delayed_scale_inv = 1.0f;  // delayed: the stored scale
  // de_min=kernel (coat-opt): each group's minimum as COAT's kernel reduces it, written by a
  // pass before the coat kernels, which take it in place of the nonzero minimum (null: de_min=nonzero).
  float* group_min = nullptr;
};

bool hw_cvt_verified();   // gpu/quant/quantize_fast.cu (declared with its contract in quantize_kernels.cuh)
bool hw_fp16_verified();  // likewise
// Round-to-nearest with the converter proven on this device: the condition every quantize launcher
// puts first before letting cvt2_hw stand in for the reference encoder.
inline bool rne_hw_ok(const QuantKernelParams& P) { return !P.stochastic && hw_cvt_verified(); }

// 1xG groups a team of lanes (16 or 32 elements each) can own whole: G a power of two in [16, 512] along the
// rows, every row a whole number of groups (the fast plain and coat kernels).
inline bool whole_1xg_groups(const QuantKernelParams& P) {
  const int64_t G = P.group_cols;
  return P.group_rows == 1 && G >= 16 && G <= 512 && (G & (G - 1)) == 0 && P.cols % G == 0;
}

// Words of QuantLaunch::slot; the workspace holds the inf flag and these right after the maxima.
constexpr int kSlotWords = 5;

struct QuantLaunch {
  enum class Kind { Team, Block, Tensor, Passthrough, Scaled16 };
  Kind kind = Kind::Block;
  int mode = 0;   // 0 plain, 1 delayed, 2 coat, 3 robust
  int team = 1;   // Team: lanes per group
  int dtype = 0;  // 0 f32, 1 bf16, 2 fp16 (InDt)
  QuantKernelParams params;
  const void* x = nullptr;
  void* codes = nullptr;
  void* codes_t = nullptr;  // Kind::Tensor FP8 only: the codes transposed as well (cast-transpose)
  float* scales = nullptr;
  float* k = nullptr;
  float* c = nullptr;
  float* tensor_amax = nullptr;               // optional output
  uint32_t* chunk_maxima = nullptr;           // workspace: chunk / block maxima (bits)
  uint32_t* inf_flag = nullptr;               // workspace: 1 word, zeroed by the caller
  uint32_t* slot = nullptr;                   // workspace: kSlotWords (s_quant, s_stored, stage-2 max, counter, flag)
  const uint32_t* producer_maxima = nullptr;  // per-tensor group scaling (float bits, >= 0)
  size_t producer_maxima_count = 0;
};

// ---- gpu/quant/quantize_lowbit.cu: 4- and 6-bit formats, and any format under rht -------------
// Modes: group statistics with plain scales or COAT's expansion; NVFP4's two-level scales (group
// amax and the tensor amax); per-tensor plain scaling (the tensor amax only).
constexpr int kLowbitPlain = 0, kLowbitCoat = 2, kLowbitNvfp4 = 4, kLowbitTensor = 5;
struct LowbitParams {
  int mode = kLowbitPlain;
  int bits = 8;  // code width in the packed buffer (4, 6 or 8)
  int rht = 0;   // Hadamard block (0: none)
  RhtSigns signs{};
  int lanes = 1;                  // 16-element segments per group (R * C / 16)
  int lanes_c = 1;                // ... per group row (C / 16)
  int team = 1;                   // lanes rounded up to a power of two (<= 32)
  int team_shift = 0;             // log2(team)
  bool narrow = false;            // every index fits in 31 bits: 32-bit division
  bool pow2_div = false;          // apply=div with power-of-two scales (E8M0, pow2): divide by multiplying
  bool row_major = false;         // thread t owns segment t (dequantize; per-tensor quantize)
  bool vec = false;               // input 16-byte aligned: 16-byte loads
  bool codes_aligned = false;     // packed codes aligned for the segment's word stores
  bool out_aligned = false;       // dequantize output 16-byte aligned
  int64_t slots = 0;              // threads: groups * team, or segments (row_major / per tensor)
  float* tensor_scale = nullptr;  // NVFP4: S_dec out (one float)
};
// amax_word: one workspace word (the tensor amax of the two-pass modes).
void launch_quantize_lowbit(const QuantLaunch& launch, const LowbitParams& lp, uint32_t* amax_word,
                            cudaStream_t stream);
// Whether launch_quantize_lowbit takes a fast kernel (1xG groups: one thread per group; 16x16
// blocks: a thread block per tile of 16 x 16 blocks) over the generic one: E2M1, E2M3 or E3M2 codes; NVFP4 1x16
// (also under rht=16) and 16x16, or power-of-two plain scales (E8M0, pow2) on 1x16 / 1x32 groups
// along whole rows or 16x16 blocks, without rht; round to nearest; fp32 or bf16 input, 16-byte
// aligned, aligned code stores. dtype as QuantLaunch::dtype.
bool lowbit_fast_applies(const QuantKernelParams& params, const LowbitParams& lp, int dtype);
// Test hook: fp32 inputs (all 2^32) whose table-encoded code differs from encode_fp8_rne (format
// code 0, 1, 4, 5 or 6).
uint64_t lowbit_lut_mismatches(int format, bool saturate);
void launch_dequantize_lowbit(const QuantKernelParams& params, const LowbitParams& lp, bool expand, const void* codes,
                              const float* scales, const float* k, const float* c, float* out, cudaStream_t stream);

// Elements per stage-1 chunk of the per-tensor kernels, and the most per-block maxima the
// delayed-scaling encode emits (its grid cap).
int64_t tensor_chunk_elements();
int64_t max_encode_blocks();

void launch_quantize(const QuantLaunch& launch, cudaStream_t stream);
// quantize_fast.cu: plain-scaled 1xG (G a power of two in [16, 512], whole groups) and
// staged groups (rows, RxC blocks, long 1xG); false when the launch does not fit them.
bool launch_quant_fast(const QuantLaunch& launch, cudaStream_t stream);
// Test hooks: finite fp32 inputs (all 2^32 patterns) whose hardware FP8 code differs from the
// reference encoder; non-NaN inputs and codes where the hardware fp16 conversions differ from the
// reference (f32_to_fp16_hw, fp16_to_f32_hw); random (a, b) pairs where div_by differs from div_rn.
uint64_t hw_cvt_mismatches(bool e4m3);
uint64_t hw_fp16_mismatches();
uint64_t div_by_mismatches(uint64_t n, uint64_t seed);
// x (random, every class) and y (DE exponents, special values) where pow_det_y != pow_det.
uint64_t pow_y_mismatches(uint64_t n, uint64_t seed);
// The per-lane test "vec && clamp(raw, 0, 16) == 16" as this build runs it on the device, for every
// raw in [lo, hi]: how many raw values take the other branch than raw >= 16 does (the smallest
// such raw in *first_bad). Information about the toolchain: no kernel branches on this form.
uint64_t clamp_guard_mismatches(int lo, int hi, int* first_bad);
// Positive finite fp32 values (all of them) where log2_parts_fast != dmath::log2_parts.
uint64_t log2_fast_mismatches();
// For divisor s over every finite fp32 x with |x/s| <= 2^17: FP8 codes (RNE, SAT) of div_by + the
// hardware converter that differ from div_rn + encode_fp8_rne, and quotients with |x/s| >= 2^-20
// that differ in any bit.
void div_code_mismatches(float s, bool e4m3, uint64_t& codes, uint64_t& quotients);
// sixteen_bit: bf16/fp16 storage (params.format 2/3), scaled by scales[0] when scales != nullptr.
void launch_dequantize(const QuantKernelParams& params, bool sixteen_bit, bool expand, const void* codes,
                       const float* scales, const float* k, const float* c, float* out, cudaStream_t stream);
void launch_chunk_maxima(int dtype, const void* x, int64_t n, int64_t chunk, uint32_t* out, cudaStream_t stream);
void launch_reduce_maxima(const uint32_t* maxima, int64_t m, float* amax, cudaStream_t stream);

}  // namespace fp8sim::gpu::detail
