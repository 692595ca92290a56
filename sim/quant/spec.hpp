#pragma once
// QuantSpec: one value type describing how a tensor is quantized (format, scaling granularity,
// scale mode, dynamic range expansion, delayed scaling, rounding, saturation). It is validated
// once (validate(), also called by parse()) and then passed by value to every quantizer: the
// CPU reference (sim/quant/quantize.hpp), the CUDA kernels (gpu/quant) and the memory model.
//
// Text form (command line, recipe files):   FORMAT:GRANULARITY[:KEY=VALUE...]
//   FORMAT       e4m3 | e5m2 | bf16 | fp16   (bf16/fp16: 16-bit baselines, unscaled by default)
//   GRANULARITY  tensor | row | col | gN | bRxC
//                tensor  one scale for the whole tensor
//                row     one scale per row of the 2-D view (rows = prod(shape[:-1]), cols = shape[-1])
//                col     one scale per column of the 2-D view
//                gN      1xN groups along the last dimension, the last group of a row is short
//                        when N does not divide cols (g128: DeepSeek activations, COAT optimizer
//                        states on a flattened tensor, g32 + e8m0: MXFP8, g16: COAT activations)
//                bRxC    RxC blocks of the 2-D view, short at the bottom and right edges (b128x128)
//   KEYS
//     scale=fp32|pow2|e8m0|bf16|none   how the per-group scale is rounded and stored
//            (default fp32 for e4m3/e5m2, none for bf16/fp16)
//            fp32  s = amax_eps / fmax in fp32                                  (4 B per group)
//            pow2  s = 1/m, m = fmax/amax_eps rounded DOWN to a power of two: TE's power-of-two
//                  current scaling (FLT_MAX for an overflowing m)                  (4 B, fp32)
//            e8m0  as pow2, stored as an OCP E8M0 byte, clamped to [2^-127, 2^127] (1 B)
//            bf16  the fp32 s is used to quantize, the stored (and dequantizing) scale is
//                  bf16(s) rounded to nearest even: what COAT's Triton kernels do   (2 B)
//            none  bf16/fp16 only: plain 16-bit storage, no scale                 (0 B)
//            bf16/fp16 also take scale=fp32|pow2 (s = amax/fmax with fmax 65504 for fp16):
//            FP8-LM / MS-AMP keep the second moment as fp16 with a per-tensor pow2 scale,
//            e.g. fp16:tensor:scale=pow2 (scale=none needs granularity tensor)
//     eps=E          added to the group amax before dividing by fmax (default 0; de=coat: 1e-30)
//     eps_add=fp32|fp64  how eps is added: fp32 (amax + float(eps), COAT's Triton activation
//                    kernels) or fp64 (float(double(amax) + eps), COAT's CUDA optimizer kernels).
//                    Default fp32, except de=coat (fp64, as its kernel).
//     de=none|coat|robust        Dynamic Range Expansion (COAT; see expand.hpp); the 4- and
//                                6-bit formats take de=coat (robust is e4m3 / e5m2 only)
//     de_target=e4m3|e5m2|e2m1|e2m3|e3m2   format whose fmax sets the expansion ratio bound
//                                fmax^2/2 (COAT's formula; default: the storage format)
//     delayed=H[,max|recent][,margin=M]   TransformerEngine delayed scaling with an amax history
//                    of length H (per-tensor only): see DelayedScaler in quantize.hpp
//     round=nearest|stochastic   (default nearest, ties to even)
//     seed=N                     Philox key for stochastic rounding (element i draws word i)
//     sat=finite|none            overflow clamps to +-fmax (default) or becomes NaN/Inf
//     amax_floor=F               amax = max(amax, F) first (DeepSeek-V3 / DeepGEMM: 1e-4)
//     scale_div=ieee|rcp|fdiv    amax/fmax as an IEEE division (default), amax * RN(1/fmax), or
//                                the GPU's div.full.f32 (fp32 / bf16 / e8m0-rceil scales)
//     apply=div|rcp|fdiv|mul     element scaling: x / s (default), x * RN(1/s), div.full(x, s), or
//                                TE's x * m, m = fmax/amax, stored s = RN(1/m) (fp32 / pow2 scales)
//     mx=rceil|floor|ceil|even   E8M0 exponent rounding (scale=e8m0; default rceil)
//     de_min=nonzero|kernel      DE group minimum: exact, or COAT's kernel reduction (g128 only)
//     rht=N                      random Hadamard transform of each row's N-element blocks before
//                                quantizing (N = 4, 16, 64, 256; sim/quant/hadamard.hpp); the
//                                scales see the transformed values, dequantize transforms back
//     rht_seed=S                 Philox key of the RHT's sign vector (default: TE's fixed signs
//                                for N = 16, key 0 otherwise)
//   ALIASES (a whole spec; keys may follow, e.g. "mxfp8:round=stochastic"). A name of a peer
//   means that peer's kernel, bit for bit on finite inputs (docs/numerics.md lists the sources):
//     mxfp8, te-mxfp8, torchao-mxfp8-rceil = e4m3:g32:scale=e8m0:scale_div=rcp  (TE MXFP8 / RCEIL)
//     mxfp8-e5m2       = e5m2:g32:scale=e8m0:scale_div=rcp
//     torchao-mxfp8    = e4m3:g32:scale=e8m0:mx=floor             (torchao to_mx default, FLOOR)
//     coat-opt         = e4m3:g128:de=coat:de_min=kernel          (COAT's FP8 AdamW kernel's DE)
//     coat-opt-noexpand= e4m3:g128:eps=1e-20:eps_add=fp64         (COAT's kernel without expansion)
//     coat-act         = e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv   (COAT Triton)
//     coat-w           = e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv  (COAT fp32 weights)
//     deepseek-act     = e4m3:g128:amax_floor=1e-4:scale_div=rcp:apply=rcp    (DeepGEMM 1x128)
//     deepseek-w       = e4m3:b128x128:amax_floor=1e-4:scale_div=rcp:apply=rcp (DeepGEMM 128x128)
//     deepseek-act-ue8m0 / deepseek-w-ue8m0: the same with scale=e8m0 (power-of-two scales)
//     te-current       = e4m3:tensor:apply=mul        te-current-pow2 = e4m3:tensor:scale=pow2:apply=mul
//     te-delayed       = e4m3:tensor:delayed=1024,max
//     bf16 / fp16      = bf16:tensor / fp16:tensor
//   Examples: e4m3:g128:de=coat   e4m3:g16:scale=bf16   e4m3:tensor   e5m2:b128x128:scale=pow2
//
// Conventions (all modes unless a mode says otherwise):
// * Quantize computes q = fp8(x / s) with s = amax_eps / fmax in fp32 (COAT's convention);
//   dequantize computes q * s. Delayed scaling follows TransformerEngine instead: it multiplies by
//   TE's scale (fmax * 2^-margin)/amax (FLT_MAX where that overflows) and stores s = 1/scale.
// * amax is the maximum |x| over the FINITE elements of a group; NaN and +-Inf never enter a
//   scale. NaN elements give the NaN code; +-Inf saturate to +-fmax (sat=finite) or become the
//   overflow code (sat=none).
// * A group whose amax_eps is 0 (all zeros) gets s = 1, so its codes are exact zeros.
#include <cstdint>
#include <string>
#include <string_view>

#include "sim/formats/format.hpp"

namespace fp8sim {

enum class Granularity : uint8_t { Tensor, Row, Col, Group, Block };
// None: unscaled bf16/fp16 storage. E4M3: NVFP4's two levels, an E4M3 scale per group under one fp32
// scale per tensor (4- and 6-bit elements only).
enum class ScaleMode : uint8_t { Fp32, Pow2, E8M0, Bf16, None, E4M3 };
enum class ExpandMode : uint8_t { None, Coat, Robust };
enum class AmaxAlgo : uint8_t { Max, MostRecent };
enum class EpsAdd : uint8_t { Fp32, Fp64 };
// How the scale's quotient amax / fmax is formed: the IEEE division; a product with the fp32
// reciprocal RN(1/fmax) (what PyTorch's CUDA `tensor / scalar` computes, and TE's MXFP8 kernel);
// or the GPU's approximate division PTX div.full.f32 (Triton's `/` and tl.fdiv on fp32).
enum class ScaleDiv : uint8_t { Ieee, Rcp, Fdiv };
// How an element meets its group's scale s: x / s (IEEE); x * RN(1/s); div.full(x, s); or
// TransformerEngine's form, x * m with the multiplier m = fmax / amax and the stored s = RN(1/m).
enum class Apply : uint8_t { Div, Rcp, Fdiv, Mul };
// E8M0 exponent rounding (OCP MX; torchao's ScaleCalculationMode names): rceil rounds amax/fmax
// up to a power of two (TE's MXFP8, torchao RCEIL); floor / ceil take amax's own exponent (down
// / up) minus the element format's largest exponent; even first rounds amax to the element
// format's mantissa width.
enum class MxRound : uint8_t { Rceil, Floor, Ceil, Even };
// DE group minimum: the minimum nonzero magnitude, or COAT's kernel reduction (a lane's own zero
// hides the lanes merged into it, and a 1e9 sentinel caps the result).
enum class DeMin : uint8_t { Nonzero, Kernel };

std::string_view granularity_name(Granularity g);
std::string_view scale_mode_name(ScaleMode m);
std::string_view expand_mode_name(ExpandMode m);
std::string_view scale_div_name(ScaleDiv d);
std::string_view apply_name(Apply a);
std::string_view mx_round_name(MxRound m);
std::string_view de_min_name(DeMin m);

// TransformerEngine DelayedScaling parameters. history == 0 means just-in-time (current) scaling.
struct DelayedSpec {
  int history = 0;                // amax history length (TE default 1024)
  AmaxAlgo algo = AmaxAlgo::Max;  // max over the history, or the most recent entry
  int margin = 0;                 // scale = (fmax * 2^-margin) / amax
  bool enabled() const { return history > 0; }
  bool operator==(const DelayedSpec&) const = default;
};

struct QuantSpec {
  Format format = Format::E4M3;  // storage format: E4M3, E5M2, or BF16/FP16 pass-through
  Granularity granularity = Granularity::Tensor;
  int64_t group_size = 0;                  // Group: G (elements per 1xG group)
  int64_t block_rows = 0, block_cols = 0;  // Block: R x C
  ScaleMode scale = ScaleMode::Fp32;
  double eps = 0.0;  // added to amax (see EpsAdd); coat DE: added to max and min
  EpsAdd eps_add = EpsAdd::Fp32;
  ExpandMode expand = ExpandMode::None;
  Format expand_target = Format::E4M3;  // DE ratio bound fmax(target)^2 / 2 (parse sets it = format)
  DelayedSpec delayed;
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
  Saturation saturation = Saturation::Finite;
  float amax_floor = 0.0f;  // amax = max(amax, amax_floor) before eps and the scale
  ScaleDiv scale_div = ScaleDiv::Ieee;
  Apply apply = Apply::Div;
  MxRound mx = MxRound::Rceil;    // scale=e8m0 only
  DeMin de_min = DeMin::Nonzero;  // de=coat only
  int rht = 0;                    // random Hadamard block size (0: none; 4, 16, 64 or 256)
  bool rht_seeded = false;        // rht_seed given: the signs come from Philox(rht_seed)
  uint64_t rht_seed = 0;

  // Parses the text form above. Throws UsageError naming the offending token and listing the
  // valid choices. The result is validated.
  static QuantSpec parse(std::string_view text);
  // Canonical text form; parse(to_string()) == *this for every valid spec.
  std::string to_string() const;
  // Throws UsageError when the combination is meaningless (e.g. de=coat with scale=e8m0,
  // delayed scaling with a granularity other than tensor, g0, bf16 with a scale mode).
  void validate() const;

  // 16-bit storage (bf16 / fp16), scaled or not.
  bool is_16bit() const { return format == Format::BF16 || format == Format::FP16; }
  // Unscaled 16-bit storage: no per-group metadata at all.
  bool is_passthrough() const { return is_16bit() && scale == ScaleMode::None; }
  bool has_expand() const { return expand != ExpandMode::None; }
  // One FP8 scale for the whole tensor, plain or delayed (no DE, no rht): what a cast-transpose
  // writes in both layouts (gpu/quant/quantize.hpp, QuantGpuOut::codes_t).
  bool fp8_per_tensor() const {
    return is_fp8(format) && granularity == Granularity::Tensor && !has_expand() && rht == 0;
  }
  // Bytes of one stored element code (1 for FP8, 2 for BF16/FP16).
  int code_bytes_per_element() const { return is_16bit() ? 2 : 1; }  // in `codes` (unpacked)
  int bits_per_code() const;                                         // in storage (packed)
  // Bytes of metadata per group: the stored scale (4/2/1/0 B) plus 8 B (fp32 k and c) with DE.
  int metadata_bytes_per_group() const;
  // Largest finite value of the storage format (448, 57344, 65504, bf16's 3.39e38).
  float fmax() const;

  bool operator==(const QuantSpec&) const = default;
};

// The one rule for a Philox seed, in a spec (seed=N) and on the command line (--seed N): a
// non-negative integer below 2^64, decimal or 0x-prefixed hexadecimal. Throws UsageError naming
// `what` (e.g. "--seed") otherwise; a leading '-' or '+' is refused, never wrapped.
uint64_t parse_seed(std::string_view text, std::string_view what);

// The one rule for eps (spec key eps=E): a finite number in [0, kMaxEps]. Larger values would
// overflow amax + eps in fp32 and turn every scale into Inf.
constexpr double kMaxEps = 1e30;

// A granularity resolved against a tensor: every group is a (rows x cols) block of the 2-D view
// (tensor: the whole view; row: 1 x cols; col: rows x 1; gN: 1 x N; bRxC: R x C), so one
// geometry serves all of them. Groups are numbered row-major over the grid of groups.
struct GroupGeometry {
  int64_t rows = 0, cols = 0;              // the 2-D view of the tensor
  int64_t group_rows = 0, group_cols = 0;  // nominal group extent (edge groups may be shorter)
  int64_t grid_rows = 0, grid_cols = 0;    // number of groups down / across
  int64_t num_groups() const { return grid_rows * grid_cols; }
  int64_t numel() const { return rows * cols; }
  // Element range of group g = (gi, gj): rows [r0, r1) x cols [c0, c1).
  void group_bounds(int64_t g, int64_t& r0, int64_t& r1, int64_t& c0, int64_t& c1) const;
  // For one-row groups (group_rows == 1): flat index of group g's first element and its length.
  void row_group_span(int64_t g, int64_t& base, int64_t& n) const {
    const int64_t r = g / grid_cols, c0 = (g % grid_cols) * group_cols;
    n = c0 + group_cols < cols ? group_cols : cols - c0;
    base = r * cols + c0;
  }
};

}  // namespace fp8sim
