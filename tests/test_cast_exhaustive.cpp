// Exhaustive, bit-exact: every one of the 2^32 fp32 bit patterns, both FP8 formats, both
// overflow modes, against the host path of NVIDIA's cuda_fp8.h (an independent software RNE
// implementation that works in double precision; see docs/numerics.md).
//
// NaN sign: cuda's float path canonicalises NaN inputs to +NaN (0x7F); fp8sim does the same, so
// NaNs compare equal here. ml_dtypes keeps the sign (test_cast_golden pins that difference).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"

#if defined(FP8SIM_HAVE_CUDA_FP8_ORACLE)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace fp8sim {
namespace {

struct Mismatch {
  uint32_t input = 0;
  int ours = -1, oracle = -1;
};

// Runs the bulk path (the one users get) over all 2^32 inputs in chunks and compares each code
// with the oracle. Returns the count of mismatches and the first one.
uint64_t sweep(Format f, Saturation sat, Mismatch& first) {
  constexpr uint64_t kChunk = 1u << 20;
  constexpr uint64_t kChunks = (uint64_t{1} << 32) / kChunk;
  const __nv_fp8_interpretation_t interp = f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  const __nv_saturation_t nvsat = sat == Saturation::Finite ? __NV_SATFINITE : __NV_NOSAT;
  std::atomic<uint64_t> bad{0};
  std::atomic<uint64_t> first_bad_input{~uint64_t{0}};
#pragma omp parallel
  {
    std::vector<float> in(kChunk);
    std::vector<uint8_t> out(kChunk);
    CastOptions o;
    o.format = f;
    o.saturation = sat;
    o.threads = 1;
#pragma omp for schedule(dynamic, 16)
    for (uint64_t c = 0; c < kChunks; ++c) {
      const uint32_t base = static_cast<uint32_t>(c * kChunk);
      for (uint32_t i = 0; i < kChunk; ++i) in[i] = f32_from_bits(base + i);
      cast_f32_to_fp8(in.data(), out.data(), kChunk, o);
      uint64_t local_bad = 0;
      for (uint32_t i = 0; i < kChunk; ++i) {
        const uint8_t ref = __nv_cvt_float_to_fp8(in[i], nvsat, interp);
        if (ref != out[i]) {
          ++local_bad;
          uint64_t prev = first_bad_input.load();
          while (base + i < prev && !first_bad_input.compare_exchange_weak(prev, base + i)) {
          }
        }
      }
      bad += local_bad;
    }
  }
  if (bad) {
    first.input = static_cast<uint32_t>(first_bad_input.load());
    CastOptions o;
    o.format = f;
    o.saturation = sat;
    const float x = f32_from_bits(first.input);
    uint8_t ours = 0;
    cast_f32_to_fp8(&x, &ours, 1, o);
    first.ours = ours;
    first.oracle = __nv_cvt_float_to_fp8(x, nvsat, interp);
  }
  return bad;
}

struct Case {
  Format format;
  Saturation sat;
};

class Exhaustive : public ::testing::TestWithParam<Case> {};

TEST_P(Exhaustive, AllFp32PatternsMatchCudaFp8HostPath) {
  Mismatch m;
  const uint64_t bad = sweep(GetParam().format, GetParam().sat, m);
  EXPECT_EQ(bad, 0u) << "first mismatch: input bits 0x" << std::hex << m.input << " (" << f32_from_bits(m.input)
                     << ") ours 0x" << m.ours << " oracle 0x" << m.oracle;
}

INSTANTIATE_TEST_SUITE_P(Fp8, Exhaustive,
                         ::testing::Values(Case{Format::E4M3, Saturation::Finite}, Case{Format::E4M3, Saturation::None},
                                           Case{Format::E5M2, Saturation::Finite},
                                           Case{Format::E5M2, Saturation::None}),
                         [](const auto& info) {
                           return std::string(format_name(info.param.format)) +
                                  (info.param.sat == Saturation::Finite ? "_satfinite" : "_nosat");
                         });

// Scalar entry points (what the GPU kernels compile) agree with the bulk path on every input.
// Checked on all 2^32 patterns for E4M3 SATFINITE only: the bulk loop instantiates the same
// template, so one sweep shows the dispatch and the vector clone agree.
TEST(ExhaustiveScalar, ScalarEqualsBulkE4M3) {
  std::atomic<uint64_t> bad{0};
#pragma omp parallel
  {
    constexpr uint32_t kChunk = 1u << 20;
    std::vector<float> in(kChunk);
    std::vector<uint8_t> out(kChunk);
    CastOptions o;
    o.threads = 1;
#pragma omp for schedule(dynamic, 16)
    for (uint64_t c = 0; c < (uint64_t{1} << 32) / kChunk; ++c) {
      const uint32_t base = static_cast<uint32_t>(c * kChunk);
      for (uint32_t i = 0; i < kChunk; ++i) in[i] = f32_from_bits(base + i);
      cast_f32_to_fp8(in.data(), out.data(), kChunk, o);
      uint64_t local = 0;
      for (uint32_t i = 0; i < kChunk; ++i) local += encode_fp8(in[i], 0, true) != out[i];
      bad += local;
    }
  }
  EXPECT_EQ(bad.load(), 0u);
}

// All 2^16 bf16 and fp16 inputs: widened exactly, rounded once, as cuda does.
TEST(Exhaustive16, Bf16AndFp16InputsMatchOracle) {
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> out(65536);
  for (Format f : {Format::E4M3, Format::E5M2}) {
    for (Saturation s : {Saturation::Finite, Saturation::None}) {
      CastOptions o;
      o.format = f;
      o.saturation = s;
      const auto interp = f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
      const auto nvsat = s == Saturation::Finite ? __NV_SATFINITE : __NV_NOSAT;
      cast_bf16_to_fp8(in.data(), out.data(), in.size(), o);
      for (uint32_t i = 0; i < 65536; ++i) {
        __nv_bfloat16_raw r;
        r.x = static_cast<unsigned short>(i);
        ASSERT_EQ(out[i], __nv_cvt_bfloat16raw_to_fp8(r, nvsat, interp)) << "bf16 0x" << std::hex << i;
      }
      cast_fp16_to_fp8(in.data(), out.data(), in.size(), o);
      for (uint32_t i = 0; i < 65536; ++i) {
        __half_raw r;
        r.x = static_cast<unsigned short>(i);
        ASSERT_EQ(out[i], __nv_cvt_halfraw_to_fp8(r, nvsat, interp)) << "fp16 0x" << std::hex << i;
      }
    }
  }
}

// All 256 codes decode to the value cuda gives (via its fp8 -> half path, exact for both formats).
TEST(ExhaustiveDecode, All256CodesMatchOracle) {
  for (Format f : {Format::E4M3, Format::E5M2}) {
    const auto interp = f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
    for (int c = 0; c < 256; ++c) {
      const float ours = decode_fp8(static_cast<uint8_t>(c), f == Format::E4M3 ? 0 : 1);
      const __half_raw hr = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), interp);
      const float ref = fp16_to_f32(hr.x);
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(ours)) << "code " << c;
      } else {
        EXPECT_EQ(f32_bits(ours), f32_bits(ref)) << format_name(f) << " code 0x" << std::hex << c;
      }
    }
  }
}

// fp32 -> bf16 / fp16 rounding over a dense stride of all patterns (every 3rd; 1.4e9 inputs)
// against cuda_bf16.h / cuda_fp16.h host paths.
TEST(Exhaustive16, F32ToBf16AndFp16MatchOracle) {
  uint64_t bad_bf = 0, bad_h = 0;
#pragma omp parallel for schedule(dynamic, 1 << 20) reduction(+ : bad_bf, bad_h)
  for (int64_t i = 0; i < (int64_t{1} << 32); i += 3) {
    const float x = f32_from_bits(static_cast<uint32_t>(i));
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    __nv_bfloat16_raw braw = b;
    const uint16_t bref = braw.x;
    const uint16_t bours = f32_to_bf16_rne(x);
    if (bours != bref && !(std::isnan(x) && (bours & 0x7FFF) > 0x7F80 && (bref & 0x7FFF) > 0x7F80)) ++bad_bf;
    const __half h = __float2half_rn(x);
    __half_raw hraw = h;
    const uint16_t href = hraw.x;
    const uint16_t hours = f32_to_fp16_rne(x);
    if (hours != href && !(std::isnan(x) && (hours & 0x7FFF) > 0x7C00 && (href & 0x7FFF) > 0x7C00)) ++bad_h;
  }
  EXPECT_EQ(bad_bf, 0u);
  EXPECT_EQ(bad_h, 0u);
}

}  // namespace
}  // namespace fp8sim

#else
TEST(Exhaustive, AllFp32PatternsMatchCudaFp8HostPath) {
  GTEST_SKIP() << "cuda_fp8.h not found: install the CUDA toolkit headers to run the exhaustive oracle test";
}
#endif
