// GPU casts (gpu/formats/cast.cu) against the CPU reference (sim/formats/cast.hpp): bit for bit,
// for fp32 over a dense sweep of all bit patterns, for bf16 and fp16 over ALL 65536 inputs, for
// stochastic rounding with 4-aligned and unaligned element offsets, for misaligned pointers
// (the scalar path) and awkward lengths, and decode of all 256 codes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/formats/cast.hpp"
#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

using gpu::CastParams;
using gpu::DeviceBuffer;

CastOptions cpu_opts(bool e4m3, bool sat, bool sr, uint64_t seed, uint64_t offset) {
  CastOptions o;
  o.format = e4m3 ? Format::E4M3 : Format::E5M2;
  o.saturation = sat ? Saturation::Finite : Saturation::None;
  o.rounding = sr ? Rounding::Stochastic : Rounding::Nearest;
  o.seed = seed;
  o.index_offset = offset;
  return o;
}

CastParams gpu_params(bool e4m3, bool sat, bool sr, uint64_t seed, uint64_t offset) {
  CastParams p;
  p.e4m3 = e4m3;
  p.saturate = sat;
  p.stochastic = sr;
  p.seed = seed;
  p.offset = offset;
  return p;
}

// Reports the first few mismatches with index, input bits and both codes.
template <class In>
void expect_same_codes(const std::vector<In>& in, const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu,
                       const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  size_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (gpu[i] != cpu[i]) {
      if (bad < 5) {
        uint32_t bits = 0;
        std::memcpy(&bits, &in[i], sizeof(In));
        ADD_FAILURE() << what << ": element " << i << " input bits 0x" << std::hex << bits << " gpu 0x" << int(gpu[i])
                      << " cpu 0x" << int(cpu[i]) << std::dec;
      }
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " codes differ";
}

// Every 251st fp32 bit pattern (a prime stride: all exponents, varied mantissas, both signs,
// NaNs and Infs included) plus the edge vectors of tests/data/golden_fp8_edges.txt.
std::vector<float> fp32_sweep() {
  std::vector<float> v;
  v.reserve((uint64_t{1} << 32) / 251 + 64);
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) {
    const uint32_t b = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  for (float f : {448.0f, 464.0f, 465.0f, 480.0f, 61439.0f, 61440.0f, 57344.0f, 0x1p-10f, 0x1.8p-10f, -0.0f, -0x1p-11f,
                  1.1865234375f, 0x1p-9f, 0x1p-16f, 0x1p-17f, 0x1.8p-17f})
    v.push_back(f);
  return v;
}

TEST(CastGpu, Fp32RneBothFormatsBothSaturations) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<float> x = fp32_sweep();
  DeviceBuffer<float> d_in = gpu::to_device(x);
  DeviceBuffer<uint8_t> d_out(x.size());
  std::vector<uint8_t> ref(x.size());
  for (bool e4m3 : {true, false}) {
    for (bool sat : {true, false}) {
      d_out.fill_bytes(0xAB);  // poison: every element must be written
      gpu::cast_f32_to_fp8_cuda(d_in.get(), d_out.get(), x.size(), gpu_params(e4m3, sat, false, 0, 0), nullptr);
      const auto got = d_out.download();
      cast_f32_to_fp8(x.data(), ref.data(), x.size(), cpu_opts(e4m3, sat, false, 0, 0));
      expect_same_codes(x, got, ref, e4m3 ? (sat ? "e4m3 sat" : "e4m3 nosat") : (sat ? "e5m2 sat" : "e5m2 nosat"));
    }
  }
}

TEST(CastGpu, Fp32StochasticSameStreamAsCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<float> x = test::lognormal_data(1000003, 11, 8.0);
  DeviceBuffer<float> d_in = gpu::to_device(x);
  DeviceBuffer<uint8_t> d_out(x.size());
  std::vector<uint8_t> ref(x.size());
  // offset 0 and 8: one Philox block per 4 elements; offset 3: the per-element path.
  for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{8}}) {
    for (bool e4m3 : {true, false}) {
      d_out.fill_bytes(0xAB);
      gpu::cast_f32_to_fp8_cuda(d_in.get(), d_out.get(), x.size(),
                                gpu_params(e4m3, true, true, 0x1234567890ull, offset), nullptr);
      cast_f32_to_fp8(x.data(), ref.data(), x.size(), cpu_opts(e4m3, true, true, 0x1234567890ull, offset));
      expect_same_codes(x, d_out.download(), ref, "stochastic");
    }
  }
}

TEST(CastGpu, MisalignedPointersAndAwkwardLengths) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<float> x = test::lognormal_data(4099, 5, 10.0);
  DeviceBuffer<float> d_in = gpu::to_device(x);
  DeviceBuffer<uint8_t> d_out(x.size() + 16);
  for (size_t n : {size_t{1}, size_t{5}, size_t{217}, size_t{4096 + 3}}) {
    for (size_t shift : {size_t{0}, size_t{1}}) {
      if (shift + n > x.size()) continue;
      d_out.fill_bytes(0xAB);
      gpu::cast_f32_to_fp8_cuda(d_in.get() + shift, d_out.get() + shift, n, gpu_params(true, true, true, 9, 1),
                                nullptr);
      std::vector<uint8_t> got(x.size() + 16);
      d_out.download(got.data(), got.size());
      std::vector<uint8_t> ref(n);
      cast_f32_to_fp8(x.data() + shift, ref.data(), n, cpu_opts(true, true, true, 9, 1));
      std::vector<uint8_t> got_n(got.begin() + static_cast<long>(shift), got.begin() + static_cast<long>(shift + n));
      std::vector<float> in_n(x.begin() + static_cast<long>(shift), x.begin() + static_cast<long>(shift + n));
      expect_same_codes(in_n, got_n, ref, "misaligned/awkward");
      // Nothing written past the end.
      EXPECT_EQ(got[shift + n], 0xAB) << "wrote past n=" << n;
    }
  }
}

TEST(CastGpu, Bf16AndFp16AllInputs) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  DeviceBuffer<uint16_t> d_in = gpu::to_device(all);
  DeviceBuffer<uint8_t> d_out(all.size());
  std::vector<uint8_t> ref(all.size());
  for (bool bf16 : {true, false}) {
    for (bool e4m3 : {true, false}) {
      for (bool sr : {false, true}) {
        d_out.fill_bytes(0xAB);
        gpu::cast_16_to_fp8_cuda(d_in.get(), bf16, d_out.get(), all.size(), gpu_params(e4m3, true, sr, 77, 0), nullptr);
        const auto o = cpu_opts(e4m3, true, sr, 77, 0);
        if (bf16) cast_bf16_to_fp8(all.data(), ref.data(), all.size(), o);
        else cast_fp16_to_fp8(all.data(), ref.data(), all.size(), o);
        expect_same_codes(all, d_out.download(), ref, bf16 ? "bf16" : "fp16");
      }
    }
  }
}

TEST(CastGpu, DecodeAllCodes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  std::vector<uint8_t> codes(256 * 3 + 1);  // not a multiple of 4: exercises the tail
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  DeviceBuffer<uint8_t> d_in = gpu::to_device(codes);
  DeviceBuffer<float> d_out(codes.size());
  for (bool e4m3 : {true, false}) {
    d_out.fill_bytes(0xFF);
    gpu::cast_fp8_to_f32_cuda(d_in.get(), d_out.get(), codes.size(), e4m3, nullptr);
    const auto got = d_out.download();
    std::vector<float> ref(codes.size());
    cast_fp8_to_f32(codes.data(), ref.data(), codes.size(), e4m3 ? Format::E4M3 : Format::E5M2);
    for (size_t i = 0; i < codes.size(); ++i)
      EXPECT_EQ(f32_bits(got[i]), f32_bits(ref[i])) << "code 0x" << std::hex << int(codes[i]);
    // Misaligned input and output (3 elements in): the element-wise path.
    d_out.fill_bytes(0xFF);
    gpu::cast_fp8_to_f32_cuda(d_in.get() + 3, d_out.get() + 3, codes.size() - 3, e4m3, nullptr);
    const auto off = d_out.download();
    for (size_t i = 3; i < codes.size(); ++i)
      EXPECT_EQ(f32_bits(off[i]), f32_bits(ref[i])) << "misaligned, code 0x" << std::hex << int(codes[i]);
  }
}

}  // namespace
}  // namespace fp8sim
