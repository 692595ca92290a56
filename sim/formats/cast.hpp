#pragma once
// Bulk conversions: vectorized (AVX2 clone where the CPU has it) and multi-threaded (OpenMP),
// bit-identical to the scalar FP8SIM_HD routines in fp8.hpp for every input.
#include <cstddef>
#include <cstdint>

#include "sim/formats/format.hpp"

namespace fp8sim {

struct CastOptions {
  Format format = Format::E4M3;  // E4M3, E5M2, or E2M1 / E2M3 / E3M2 (one code per byte, low bits)
  Saturation saturation = Saturation::Finite;
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;          // stochastic rounding: Philox key
  uint64_t index_offset = 0;  // global index of element 0 (for chunked streams)
  int threads = 0;            // 0 = OpenMP default
};

// Throws UsageError if opts.format is not a cast format (is_small_float), or asks a 4- or 6-bit
// format not to saturate (they have no Inf or NaN).
void validate_cast_options(const CastOptions& opts);

// fp32 -> codes (the 4- and 6-bit formats: one code per byte, in its low bits).
void cast_f32_to_fp8(const float* in, uint8_t* out, size_t n, const CastOptions& opts);
// bf16 / fp16 (raw bits) -> fp8 codes, widened exactly to fp32 first: one rounding only.
void cast_bf16_to_fp8(const uint16_t* in, uint8_t* out, size_t n, const CastOptions& opts);
void cast_fp16_to_fp8(const uint16_t* in, uint8_t* out, size_t n, const CastOptions& opts);
// codes -> fp32 (exact; bits above a 4- or 6-bit format's width are ignored).
void cast_fp8_to_f32(const uint8_t* in, float* out, size_t n, Format format, int threads = 0);

// The E4M3 / E5M2 casts from fp32 and bf16 run an explicit AVX2 loop (sim/formats/avx2_fp8.hpp)
// when the CPU has AVX2 and this switch is on (default: on unless the environment variable
// FP8SIM_NO_SIMD is set and not "0", like the quantizer's); off, they run the compiler's clone of
// the scalar loop. Same bits either way (tests/test_cast_golden.cpp compares them).
void set_cast_simd(bool enabled);
bool cast_simd();

// Single-threaded reference loops over the scalar routines (tests and benchmarks compare the
// bulk path against these).
void cast_f32_to_fp8_scalar(const float* in, uint8_t* out, size_t n, const CastOptions& opts);

}  // namespace fp8sim
