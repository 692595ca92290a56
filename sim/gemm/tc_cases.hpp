#pragma once
// Test cases for the tensor-core arithmetic model (tc_model.hpp) and the GPU probes
// (gpu/gemm/tc_probe.hpp): batches of independent D (64, 8) = A (64, K) * B (K, 8) + C problems
// in the probes' layouts (A row-major, Bt = B transposed row-major, C row-major; FP8 codes one per
// byte, BF16 bits two bytes little-endian). Each family aims at one feature of the arithmetic;
// every family is a deterministic function of (family, formats, nk, cases, seed).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/formats/format.hpp"
#include "sim/gemm/tc_gemm.hpp"

namespace fp8sim::gemm {

enum class TcFamily : uint8_t {
  Exact,     // small integers: every output exact in any accumulator (checks the layouts)
  Random,    // every finite code equally likely (the format's whole exponent range), C = 0
  RandomC,   // as Random, C a random fp32 of any magnitude near or far from the products'
  Cancel,    // as Random, C = -(the fp32 sum of the products) perturbed: cancellation at the end
  BigSmall,  // one large product per row among small ones, a gap of 0..40 binades: alignment width
  Narrow,    // exponents within 4 binades, random signs: carries and rounding of the fused sum
  Special,   // NaN / Inf operands and C, C near FLT_MAX (overflow), tiny and subnormal C
};
inline constexpr TcFamily kTcFamilies[] = {TcFamily::Exact,    TcFamily::Random, TcFamily::RandomC, TcFamily::Cancel,
                                           TcFamily::BigSmall, TcFamily::Narrow, TcFamily::Special};
std::string_view tc_family_name(TcFamily f);

struct TcCases {
  Format a_format = Format::E4M3, b_format = Format::E4M3;  // E4M3/E5M2 each, or both BF16
  int nk = 1;                                               // instructions chained along K
  int64_t cases = 0;
  int64_t k() const { return int64_t{nk} * (a_format == Format::BF16 ? 16 : 32); }
  int element_bytes() const { return a_format == Format::BF16 ? 2 : 1; }
  std::vector<uint8_t> a;   // cases x 64 x K elements
  std::vector<uint8_t> bt;  // cases x 8 x K elements
  std::vector<float> c;     // cases x 64 x 8
};

TcCases make_tc_cases(TcFamily family, Format a_format, Format b_format, int nk, int64_t cases, uint64_t seed);

// The random and adversarial GEMM suite of `fp8sim compare --gemm-suite` and
// tests/test_gemm_tc_gpu.cpp: every configuration of cuBLASLt that tc_gemm models (E4M3 x E4M3 and
// E5M2 x E4M3 per-tensor fast and promoted, row-wise fast and promoted, both block scalings, BF16)
// at K = 16 .. 16384, each on the Random, Narrow and BigSmall families (C = 0): about 1.2 x 10^7
// outputs in all.
struct TcGemmCase {
  TcGemmConfig config;
  int64_t m = 0, n = 0, k = 0;
  TcFamily family = TcFamily::Random;
  uint64_t seed = 0;
  std::string name() const;  // "e4m3 x e4m3 tensor fast K=4096 random"
};
std::vector<TcGemmCase> tc_gemm_suite();

// A case's operands in GemmRequest's layouts (codes, or BF16 bits as byte pairs; row-major scale
// tables, scales in [0.5, 2) and not powers of two), and their dequantized fp32 values.
struct TcGemmOperands {
  std::vector<uint8_t> x, w;
  std::vector<float> x_scales, w_scales;
  std::vector<float> x_f32, w_f32;
};
TcGemmOperands make_tc_gemm_operands(const TcGemmCase& c);

// Element (row, k) of an operand as fp32 (exact: every FP8 and BF16 value is an fp32 value).
float tc_element(const std::vector<uint8_t>& m, Format f, int64_t index);

}  // namespace fp8sim::gemm
