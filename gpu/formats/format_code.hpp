#pragma once
// The integer a GPU kernel takes for a storage format: QuantKernelParams::format,
// CastParams::small_format and the first index of the 4-/6-bit encoder tables all use these codes.
// This is the only map from Format to them.
#include "sim/formats/format.hpp"

namespace fp8sim::gpu {

inline constexpr int kGpuFormatCount = 7;

// -1: no GPU kernel stores this format.
constexpr int gpu_format_code(Format f) {
  switch (f) {
    case Format::E4M3:
      return 0;
    case Format::E5M2:
      return 1;
    case Format::BF16:
      return 2;
    case Format::FP16:
      return 3;
    case Format::E2M1:
      return 4;
    case Format::E2M3:
      return 5;
    case Format::E3M2:
      return 6;
    default:
      return -1;
  }
}

// The 4- and 6-bit formats, which the table-encoder kernels (quantize_lowbit.cu) store.
constexpr bool is_small_gpu_format(int code) { return code >= gpu_format_code(Format::E2M1) && code < kGpuFormatCount; }

}  // namespace fp8sim::gpu
