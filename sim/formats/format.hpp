#pragma once
// The number formats fp8sim knows, with their limits. Values here are facts of the formats
// (OCP OFP8 rev 1.0 for E4M3/E5M2, OCP MX v1.0 for E8M0 and the 4- and 6-bit element formats
// E2M1, E2M3, E3M2, IEEE 754 for FP16, bfloat16).
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8sim {

enum class Format : uint8_t { E4M3, E5M2, BF16, FP16, E8M0, FP32, E2M1, E2M3, E3M2 };

// How an input tensor is stored: fp32 values, or bf16 / fp16 bit patterns (widened exactly).
enum class InputDtype : uint8_t { F32, BF16, FP16 };

// What happens to finite values that round above the largest finite value, and to +-Inf.
enum class Saturation : uint8_t {
  Finite,  // SATFINITE: clamp to +-max (cuda's __NV_SATFINITE; the hardware cvt.rn.satfinite)
  None,    // NOSAT: overflow to NaN (E4M3) or Inf (E5M2, FP16, BF16) like ml_dtypes' astype
};

enum class Rounding : uint8_t { Nearest, Stochastic };

struct FormatInfo {
  Format format;
  const char* name;
  int bits;
  int exponent_bits;
  int mantissa_bits;  // explicit (stored) mantissa bits
  int bias;
  int emax;    // exponent of the largest finite value
  int emin;    // exponent of the smallest normal value
  double max;  // largest finite value
  double min_normal;
  double min_subnormal;  // 0 when the format has no subnormals (E8M0)
  bool has_inf;
  bool has_nan;
  bool has_sign;
  // log2(max / min_subnormal): the binades a tensor can span without flushing or clamping.
  double dynamic_range_binades() const;
};

const FormatInfo& format_info(Format f);
std::string_view format_name(Format f);
// Parses e4m3 (alias e4m3fn), e5m2, bf16, fp16, e8m0, fp32, e2m1 (alias fp4), e2m3, e3m2; throws
// UsageError listing the choices.
Format parse_format(std::string_view s);
Saturation parse_saturation(std::string_view s);  // finite|none
Rounding parse_rounding(std::string_view s);      // nearest|stochastic
std::string_view saturation_name(Saturation s);
std::string_view rounding_name(Rounding r);

inline bool is_fp8(Format f) { return f == Format::E4M3 || f == Format::E5M2; }
// The OCP MX 4- and 6-bit element formats: no Inf, no NaN, one code per byte in its low bits.
inline bool is_fp4_fp6(Format f) { return f == Format::E2M1 || f == Format::E2M3 || f == Format::E3M2; }
// The formats `fp8sim cast` converts to and from (codes of at most 8 bits).
inline bool is_small_float(Format f) { return is_fp8(f) || is_fp4_fp6(f); }

}  // namespace fp8sim
