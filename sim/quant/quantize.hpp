#pragma once
// quantize / dequantize: the CPU reference for every quantizer in fp8sim (per-tensor, per-row,
// per-column, 1xG groups, RxC blocks; fp32 / pow2 / E8M0 / bf16 scales; COAT and robust dynamic
// range expansion; TransformerEngine delayed scaling; nearest or stochastic rounding).
// See spec.hpp for the spec language and the conventions (x / s, finite-only amax, zero groups).
//
// Tensors are row-major N-D arrays; the 2-D view used by every granularity is
// rows = prod(shape[:-1]) x cols = shape[-1] (a 0-D or 1-D tensor is one row). Groups never read
// past the end: edge groups are short. To cut a tensor into contiguous groups of its FLATTENED
// elements (COAT's optimizer states), pass shape {numel}.
//
// Per-tensor scaling is computed "two-stage": the tensor amax is the max of per-chunk maxima
// (what COAT's Group Scaling fuses into the producing kernel). max is exact and associative, so
// this equals the one-pass just-in-time amax bit for bit by construction (tests pin it).
//
// Memory accounting is exact and data-free: quantized_bytes(spec, shape) is what a
// QuantizedTensor of that shape occupies (codes + metadata), for tensors of any size.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {

using Shape = std::vector<int64_t>;

int64_t shape_numel(std::span<const int64_t> shape);  // 1 for a 0-D shape; throws on negatives/overflow
// The group geometry of `spec` over a tensor of `shape` (throws UsageError for a bad shape).
GroupGeometry group_geometry(const QuantSpec& spec, std::span<const int64_t> shape);

// ---- data-free memory accounting (exact; what the memory model calls) --------------------------
struct QuantizedSize {
  int64_t numel = 0;
  int64_t num_groups = 0;
  int64_t code_bytes = 0;    // ceil(numel * bits / 8): packed codes (4, 6, 8 or 16 bits each)
  int64_t scale_bytes = 0;   // num_groups * (4 fp32/pow2, 2 bf16, 1 e8m0/e4m3) (+4: e4m3's tensor scale)
  int64_t expand_bytes = 0;  // num_groups * 8 (fp32 k and c) with DE, else 0
  int64_t metadata_bytes() const { return scale_bytes + expand_bytes; }
  int64_t total_bytes() const { return code_bytes + metadata_bytes(); }
};
QuantizedSize quantized_size(const QuantSpec& spec, std::span<const int64_t> shape);
inline size_t quantized_bytes(const QuantSpec& spec, std::span<const int64_t> shape) {
  return static_cast<size_t>(quantized_size(spec, shape).total_bytes());
}
inline size_t quantized_metadata_bytes(const QuantSpec& spec, std::span<const int64_t> shape) {
  return static_cast<size_t>(quantized_size(spec, shape).metadata_bytes());
}

// ---- the quantized tensor ----------------------------------------------------------------------
struct QuantizedTensor {
  QuantSpec spec;
  Shape shape;
  GroupGeometry geometry;
  // Element codes, row-major: one byte per element (FP8), or two (BF16/FP16, little-endian uint16).
  std::vector<uint8_t> codes;
  // Per group (row-major over the group grid): the dequantizing scale s as stored. The value is
  // exactly representable in the storage (a bf16 value for scale=bf16, a power of two for
  // pow2/e8m0). Empty for pass-through formats.
  std::vector<float> scales;
  // Per group, DE only: exponent k and centre c (x = sign(q*s) * |q*s|^(1/k) * c). k = 1, c = 1
  // marks a robust-mode group that fell back to plain scaling.
  std::vector<float> expand_k;
  std::vector<float> expand_c;
  // max |x| over the finite elements of the whole tensor (the two-stage per-tensor amax).
  float tensor_amax = 0.0f;
  // Delayed scaling only: TransformerEngine's multiplier used for this tensor (scales[0] = 1/it).
  float delayed_scale = 0.0f;
  // scale=e4m3 only (NVFP4): the fp32 per-tensor decode scale; scales[g] = RN(e4m3_g x it).
  float tensor_scale = 0.0f;
  // Counts gathered while quantizing (finite elements only).
  int64_t nonfinite_count = 0;  // NaN / +-Inf inputs
  int64_t saturated_count = 0;  // |x/s| (|x'/s| with DE) beyond saturation_bound(): values that
                                // clamping to fmax (or overflow) changed
  int64_t underflow_count = 0;  // nonzero inputs whose code is +-0

  int64_t numel() const { return geometry.numel(); }
  int64_t num_groups() const { return geometry.num_groups(); }
  const uint16_t* codes16() const { return reinterpret_cast<const uint16_t*>(codes.data()); }
  // Exact storage: equals quantized_size(spec, shape). The codes are packed there (two FP4 codes
  // per byte, four FP6 codes per three bytes); `codes` holds one 4- or 6-bit code per byte.
  size_t code_bytes() const;
  size_t metadata_bytes() const;
  size_t total_bytes() const { return code_bytes() + metadata_bytes(); }
  // The per-group scales serialised in their storage format (fp32 LE, bf16 LE, E8M0 bytes, or E4M3
  // bytes followed by the fp32 LE tensor scale).
  std::vector<uint8_t> stored_scale_bytes() const;
};

class DelayedScaler;

struct QuantizeOptions {
  // Per-tensor granularity, plain (non-DE, non-delayed) scaling, or NVFP4's two-level scales (scale=e4m3): use this
  // amax (e.g. the max of per-group maxima that a producing kernel computed, COAT's two-stage Group Scaling, or the
  // whole tensor's when a slab of it is quantized) instead of scanning the tensor. It must be max |x| over the finite
  // elements for the result to equal just-in-time scaling (max is exact, so the two-stage value is bit-identical).
  std::optional<float> tensor_amax;
  // Required when spec.delayed.enabled(): supplies the scale for this step and records this
  // tensor's amax afterwards (TransformerEngine's order).
  DelayedScaler* delayed = nullptr;
  uint64_t index_offset = 0;  // stochastic rounding: global index of element 0
  int threads = 0;            // 0 = OpenMP default
};

// The element loops run as AVX2 code when the CPU has it (sim/quant/avx2_kernels.hpp: lane-wise
// transcriptions of the scalar functions, same bits). Turning this off forces the portable scalar
// loops everywhere (quantize, dequantize, and the optimizer replay's Table 1 sums, which run four
// chunks at a time in AVX2 lanes when it is on): the tests compare the two, and it is the fallback
// a user can select (FP8SIM_NO_SIMD=1 in the environment sets it off at start-up).
void set_quant_simd(bool enabled);
bool quant_simd();
// Within the SIMD path, the AVX-512 loops where the CPU has AVX-512: on unless FP8SIM_NO_AVX512
// is set (they are measured faster on Zen 4; a CPU that slows its clock for 512-bit work may
// prefer AVX2); tests turn it off to check the AVX2 loops on such a CPU too. Same bits either way.
void set_quant_avx512(bool enabled);
bool quant_avx512();

// x: numel(shape) values, row-major. Throws UsageError for an invalid spec or shape (with rht=N:
// a last dimension that is not a multiple of N). With rht=N the transformed tensor is quantized:
// codes, scales and tensor_amax are the transformed values'.
QuantizedTensor quantize(const float* x, std::span<const int64_t> shape, const QuantSpec& spec,
                         const QuantizeOptions& opts = {});
// bf16 input as raw bits, widened exactly to fp32 (one rounding only, never bf16 -> fp32 -> ...).
QuantizedTensor quantize(const uint16_t* bf16_bits, std::span<const int64_t> shape, const QuantSpec& spec,
                         const QuantizeOptions& opts = {});
QuantizedTensor quantize_fp16(const uint16_t* fp16_bits, std::span<const int64_t> shape, const QuantSpec& spec,
                              const QuantizeOptions& opts = {});
// As quantize(), into `out`, reusing its buffers (no allocation once out has held a tensor of
// this size and spec; internal scratch is O(groups)). For per-step optimizer states.
void quantize_into(const float* x, std::span<const int64_t> shape, const QuantSpec& spec, QuantizedTensor& out,
                   const QuantizeOptions& opts = {});
QuantizedTensor quantize_any(const void* data, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                             const QuantizeOptions& opts = {});

// Whether input of `dtype` is already in the 16-bit `format` (bf16 input with BF16 storage, fp16 with
// FP16): unscaled, each finite element's code is its own bits.
inline bool input_in_format(InputDtype dtype, Format format) {
  return (dtype == InputDtype::BF16 && format == Format::BF16) || (dtype == InputDtype::FP16 && format == Format::FP16);
}

// A row-major tensor whose last dimension is `cols`, transposed over that 2-D view: (cols x rows),
// row-major.
template <class T>
std::vector<T> transpose_rows(std::span<const T> a, int64_t cols) {
  const int64_t n = static_cast<int64_t>(a.size());
  FP8SIM_CHECK(cols > 0 ? n % cols == 0 : n == 0, "{} elements are not rows of {} columns", n, cols);
  const int64_t rows = cols > 0 ? n / cols : 0;
  std::vector<T> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  return t;
}
// One-byte-per-element codes so transposed: the second layout the cast-transpose kernel writes.
inline std::vector<uint8_t> transpose_codes(std::span<const uint8_t> codes, int64_t cols) {
  return transpose_rows(codes, cols);
}

// max |x| over the finite elements of every group of `spec` over `shape` (0 for a group without
// finite elements), row-major over the group grid; with rht=N, of the transformed tensor.
std::vector<float> group_absmax(const float* x, std::span<const int64_t> shape, const QuantSpec& spec, int threads = 0);

// out: numel values. NaN codes give NaN; all other codes give finite values (or +-Inf for the
// E5M2 Inf code with sat=none).
// With rht=N the decoded values are transformed back (sim/quant/hadamard.hpp), so `out` is in the
// input's domain, with the inverse transform's fp32 roundings; a NaN or infinite input then makes
// its whole N-element block NaN or infinite (nonfinite_count counts the transformed elements).
void dequantize(const QuantizedTensor& q, float* out, int threads = 0);
std::vector<float> dequantize(const QuantizedTensor& q, int threads = 0);
// Elements [begin, end) of dequantize(q) into out[0, end - begin), on the calling thread; the same
// values. Error for an rht spec (its inverse transform needs whole blocks) or a range outside q.
void dequantize_range(const QuantizedTensor& q, int64_t begin, int64_t end, float* out);

// The largest scaled magnitude that round-to-nearest still maps to a finite value without
// clamping: E4M3 464 (the tie with 480 rounds to 448), just below 61440 for E5M2 (the tie rounds
// up to 2^16), just below 65520 for FP16. |x/s| above it counts as saturated.
float saturation_bound(Format f);

// The magnitudes handed to the FP8 encoder before rounding, per element: |x / s| (|x' / s| with
// DE). With `expanded=false` and DE, the magnitudes plain absmax scaling would give instead
// (COAT Figure 3's "before expansion"): |x| / (amax / fmax). Non-finite inputs give NaN.
void scaled_magnitudes(const float* x, const QuantizedTensor& q, float* out, bool expanded = true, int threads = 0);

// ---- delayed scaling (TransformerEngine DelayedScaling) -----------------------------------------
// The amax history holds the amaxes of the last H steps. At each step the tensor is quantized
// with the current scale (initially 1), its amax is recorded, and the scale for the next step is
//   amax_h = max(history) (algo max) or the amax just recorded (algo most_recent)
//   scale  = (fmax * 2^-margin) / amax_h         in fp32
//   FLT_MAX when that overflows (amax_h below about fmax / FLT_MAX, e.g. 1.3e-36 for E4M3)
//   kept unchanged when amax_h is 0, Inf or NaN
// Quantization multiplies: q = fp8(x * scale); the stored dequantizing scale is s = 1/scale.
class DelayedScaler {
 public:
  explicit DelayedScaler(const QuantSpec& spec);  // spec.delayed.enabled() must hold
  float scale() const { return scale_; }          // TE's multiplier for the next quantization
  float scale_inv() const;                        // 1/scale in fp32: the stored s
  // Records the amax of the tensor just quantized and computes the next scale.
  void update(float amax);
  // The history, most recent first (at most H entries).
  std::vector<float> history() const;
  int64_t steps() const { return steps_; }
  // Bytes of state kept per tensor: H fp32 amaxes + fp32 scale + fp32 scale_inv.
  size_t state_bytes() const;
  const DelayedSpec& params() const { return params_; }

 private:
  DelayedSpec params_;
  float fmax_;
  float scale_ = 1.0f;
  std::vector<float> ring_;  // circular buffer of the last H amaxes
  int64_t steps_ = 0;
};

}  // namespace fp8sim
