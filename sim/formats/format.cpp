#include "sim/formats/format.hpp"

#include <cmath>

#include "sim/common/check.hpp"

namespace fp8sim {

namespace {
const FormatInfo kInfos[] = {
    // format, name, bits, ebits, mbits, bias, emax, emin, max, min_normal, min_subnormal, inf, nan, sign
    {Format::E4M3, "e4m3", 8, 4, 3, 7, 8, -6, 448.0, 0x1p-6, 0x1p-9, false, true, true},
    {Format::E5M2, "e5m2", 8, 5, 2, 15, 15, -14, 57344.0, 0x1p-14, 0x1p-16, true, true, true},
    {Format::BF16, "bf16", 16, 8, 7, 127, 127, -126, 0x1.FEp127, 0x1p-126, 0x1p-133, true, true, true},
    {Format::FP16, "fp16", 16, 5, 10, 15, 15, -14, 65504.0, 0x1p-14, 0x1p-24, true, true, true},
    {Format::E8M0, "e8m0", 8, 8, 0, 127, 127, -127, 0x1p127, 0x1p-127, 0.0, false, true, false},
    {Format::FP32, "fp32", 32, 8, 23, 127, 127, -126, 0x1.FFFFFEp127, 0x1p-126, 0x1p-149, true, true, true},
    {Format::E2M1, "e2m1", 4, 2, 1, 1, 2, 0, 6.0, 1.0, 0.5, false, false, true},
    {Format::E2M3, "e2m3", 6, 2, 3, 1, 2, 0, 7.5, 1.0, 0x1p-3, false, false, true},
    {Format::E3M2, "e3m2", 6, 3, 2, 3, 4, -2, 28.0, 0x1p-2, 0x1p-4, false, false, true},
};
}  // namespace

double FormatInfo::dynamic_range_binades() const {
  const double lo = min_subnormal > 0 ? min_subnormal : min_normal;
  return std::log2(max / lo);
}

const FormatInfo& format_info(Format f) { return kInfos[static_cast<int>(f)]; }
std::string_view format_name(Format f) { return format_info(f).name; }

Format parse_format(std::string_view s) {
  if (s == "e4m3" || s == "e4m3fn" || s == "E4M3") return Format::E4M3;
  if (s == "e5m2" || s == "E5M2") return Format::E5M2;
  if (s == "bf16" || s == "bfloat16") return Format::BF16;
  if (s == "fp16" || s == "float16" || s == "half") return Format::FP16;
  if (s == "e8m0") return Format::E8M0;
  if (s == "fp32" || s == "float32") return Format::FP32;
  if (s == "e2m1" || s == "fp4" || s == "E2M1") return Format::E2M1;
  if (s == "e2m3" || s == "E2M3") return Format::E2M3;
  if (s == "e3m2" || s == "E3M2") return Format::E3M2;
  throw UsageError(fmt::format("unknown format '{}' (valid: e4m3, e5m2, bf16, fp16, e8m0, fp32, e2m1, e2m3, e3m2)", s));
}

Saturation parse_saturation(std::string_view s) {
  if (s == "finite" || s == "satfinite" || s == "sat") return Saturation::Finite;
  if (s == "none" || s == "nosat") return Saturation::None;
  throw UsageError(fmt::format("unknown saturation '{}' (valid: finite, none)", s));
}

Rounding parse_rounding(std::string_view s) {
  if (s == "nearest" || s == "rne") return Rounding::Nearest;
  if (s == "stochastic" || s == "sr") return Rounding::Stochastic;
  throw UsageError(fmt::format("unknown rounding '{}' (valid: nearest, stochastic)", s));
}

std::string_view saturation_name(Saturation s) { return s == Saturation::Finite ? "finite" : "none"; }
std::string_view rounding_name(Rounding r) { return r == Rounding::Nearest ? "nearest" : "stochastic"; }

}  // namespace fp8sim
